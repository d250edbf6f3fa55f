"""bench_pruning's replay of the early-stop rules on the same (best, candidate) pairs."""

from __future__ import annotations

from research.perf.bench_pruning import full_accepts, simulate

QS = [f"q{i:02d}" for i in range(60)]
BATCHES = [QS[:12], QS[:30], QS]


def config(right: int) -> dict[str, float]:
    return {q: 1.0 if i < right else 0.0 for i, q in enumerate(QS)}


def test_a_much_better_candidate_is_accepted_in_full_and_no_rule_stops_it():
    strong, weak = config(50), config(5)
    assert full_accepts(strong, weak, min_rel_improvement=0.005, alpha=0.05)
    sim = simulate({"strong": strong, "weak": weak}, BATCHES, min_rel_improvement=0.005, alpha=0.05)
    assert sim["pairs"] == 2 and sim["winners"] == 1 and sim["questions_full"] == 60
    for name, r in sim["rules"].items():
        assert r["winners_stopped"] == 0, name
        assert r["stopped"] == 1, name  # weak as the candidate against strong
        assert r["candidates_per_hour_x"] > 1.0, name
        assert r["candidates_per_hour_x"] <= sim["ceiling_x"], name
    assert sim["ceiling_x"] == round(2 * 60 / (60 + 12), 3)  # strong in full, weak stopped on the first batch


def test_the_paired_probe_looks_once_at_the_largest_batch_and_wilcoxon_at_every_batch():
    best = config(40)
    late = {q: (best[q] if i < 12 else 0.0) for i, q in enumerate(QS)}  # as good on the first batch, worse after
    sim = simulate({"best": best, "late": late}, BATCHES, min_rel_improvement=0.005, alpha=0.05)
    probe, wil = sim["rules"]["paired_probe"], sim["rules"]["wilcoxon@0.1"]
    assert probe["stopped_at"] == {"30": 1} and wil["stopped_at"] == {"30": 1}
    none = {q: 0.0 for q in QS}  # worse from the first question: Wilcoxon stops it on the first batch
    sim = simulate({"best": best, "none": none}, BATCHES, min_rel_improvement=0.005, alpha=0.05)
    probe, wil = sim["rules"]["paired_probe"], sim["rules"]["wilcoxon@0.1"]
    assert probe["stopped_at"] == {"30": 1} and wil["stopped_at"] == {"12": 1}
    assert probe["questions"] == 60 + 30 and wil["questions"] == 60 + 12
