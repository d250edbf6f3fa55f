"""The early stop through Optuna's WilcoxonPruner, on paired per-question scores."""

from __future__ import annotations

from research.loop.pruning import prune_verdict, wilcoxon_stops

BEST = {f"q{i:02d}": 1.0 if i % 4 else 0.0 for i in range(40)}  # 0.75 over the full sample


def test_a_candidate_that_loses_question_after_question_is_stopped_on_the_first_batch():
    worse = {q: 0.0 for q in sorted(BEST)[:12]}
    assert wilcoxon_stops(worse, BEST, p_threshold=0.1, n_startup_steps=2)


def test_an_equal_or_better_candidate_is_never_stopped_and_nor_is_a_slightly_worse_one_on_few_questions():
    first = sorted(BEST)[:12]
    assert not wilcoxon_stops({q: BEST[q] for q in first}, BEST, p_threshold=0.1, n_startup_steps=2)
    assert not wilcoxon_stops({q: 1.0 for q in first}, BEST, p_threshold=0.1, n_startup_steps=2)
    one_loss = {q: BEST[q] for q in first} | {first[1]: 0.0}
    assert not wilcoxon_stops(one_loss, BEST, p_threshold=0.1, n_startup_steps=2)


def test_the_verdict_records_the_batch_and_pairs_only_shared_questions():
    cand = {q: 0.0 for q in sorted(BEST)[:12]} | {"not-in-best": 1.0}
    v = prune_verdict(cand, BEST, sample="tiny", of=40, p_threshold=0.1, n_startup_steps=2)
    assert v["stopped"] and v["questions"] == 12 and v["of"] == 40 and v["rule"] == "wilcoxon"
    assert v["delta"] == -sum(BEST[q] for q in sorted(BEST)[:12]) / 12
