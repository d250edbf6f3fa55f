"""The objective at a fixed context budget: the trusted scorer counts only the evidence inside the first B
context tokens, recounted from the dataset's own turn texts, so tokens past B can never raise it.

Three answer sets per LoCoMo question of the ``tiny`` sample, each scored by the real scorer into a real run
folder (benchmarks.runner.finish_eval, as the two-half evaluation does):
- ``base``: one evidence turn first, then other turns of the conversation until the context overflows B;
- ``padded``: the same, with the question's other evidence turns and more turns inserted *after* the point
  where B runs out (and a claimed token count of 0, which the scorer never reads);
- ``moved``: every evidence turn first, the same filler after.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.config import load_eval_setup
from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Benchmark, Conversation, Question
from benchmarks.metrics.retrieval import budgeted_key
from benchmarks.runner import aggregate, finish_eval, prepare_run
from benchmarks.scoring import TurnCosts, score_answers, within_budget
from benchmarks.splits import select
from harness.errors import InputError
from harness.views import Answer

BUDGET = 1000


@pytest.fixture(scope="module")
def tiny(locomo_path) -> Benchmark:
    return select(load_benchmark("locomo"), "dev", "tiny")


def _overflowing(first: list[str], filler: list[str], costs: TurnCosts) -> list[str]:
    """``first`` then filler turns up to and including the one that takes the context past BUDGET."""
    out, total = list(first), sum(costs.cost(i) for i in first)
    for turn in filler:
        out.append(turn)
        total += costs.cost(turn)
        if total > BUDGET:
            return out
    raise AssertionError("the conversation is shorter than the budget")


def _contexts(conv: Conversation, q: Question, costs: TurnCosts) -> dict[str, tuple[str, ...]]:
    evidence = [e for e in dict.fromkeys(q.evidence) if costs.known(e)]
    turns = [t.id for s in conv.sessions for t in s.turns]
    filler = [t for t in turns if t not in set(evidence)]
    base = _overflowing(evidence[:1], filler, costs)
    cut = len(within_budget(base, costs, BUDGET)[0])
    assert cut < len(base)  # the last id of base is the first one past the budget
    late = evidence[1:] + filler[len(base):len(base) + 20]  # evidence and more turns, all past the budget
    return {"base": tuple(base), "padded": tuple(base[:cut + 1] + late + base[cut + 1:]),
            "moved": tuple(_overflowing(evidence, filler, costs))}


def _answers(bench: Benchmark) -> dict[str, dict[str, Answer]]:
    out: dict[str, dict[str, Answer]] = {"base": {}, "padded": {}, "moved": {}}
    for conv in bench.conversations:
        costs = TurnCosts(conv)
        for q in conv.questions:
            for name, ids in _contexts(conv, q, costs).items():
                claimed = 0 if name == "padded" else sum(costs.cost(i) for i in ids)  # a lie the scorer ignores
                out[name][q.id] = Answer(q.id, retrieved_ids=ids, context_ids=ids, context_tokens=claimed)
    return out


@pytest.fixture(scope="module")
def scored(tiny: Benchmark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each answer set through the trusted scorer into its own run folder: metrics.json and the rows."""
    setup = load_eval_setup(["reader=none", "sample=tiny", "mlflow=false", f"context_budget_tokens={BUDGET}"])
    root = tmp_path_factory.mktemp("budget-runs")
    out = {}
    for name, answers in _answers(tiny).items():
        setup.options.run_id = f"budget-{name}"
        run_id, run_dir = prepare_run(setup, tiny, root)
        result = finish_eval(setup, tiny, run_id, run_dir, answers, wall_s=0.0)
        rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
        out[name] = {"result": result, "metrics": json.loads((run_dir / "metrics.json").read_text()), "rows": rows}
    return out


def test_tokens_past_the_budget_leave_the_objective_exactly_as_it_was(scored) -> None:
    base, padded = scored["base"], scored["padded"]
    assert base["result"].objective == padded["result"].objective == "context_recall"
    assert padded["result"].objective_value == base["result"].objective_value
    assert padded["metrics"]["context_tokens"] == base["metrics"]["context_tokens"]
    # the two answer sets did differ: more ids and all the evidence claimed, a lie about their cost
    assert all(p["context_ids_claimed"] > b["context_ids_claimed"] for p, b in zip(padded["rows"], base["rows"]))
    assert all(p["context_tokens_claimed"] == 0 for p in padded["rows"])
    assert [p["context_ids"] for p in padded["rows"]] == [b["context_ids"] for b in base["rows"]]


def test_moving_evidence_inside_the_budget_changes_the_objective(scored) -> None:
    base, moved = scored["base"]["result"].objective_value, scored["moved"]["result"].objective_value
    assert 0.0 < base < moved <= 1.0


def test_metrics_record_the_budget_the_objective_was_counted_at(scored) -> None:
    for run in scored.values():
        m = run["metrics"]
        assert m["context_budget_tokens"] == BUDGET
        assert m[budgeted_key("context_recall", BUDGET)] == m["context_recall"] == m["objective_value"]
        assert m["context_tokens"] <= BUDGET
        assert all(r["context_budget_tokens"] == BUDGET and r["context_tokens"] <= BUDGET for r in run["rows"])


def test_rows_cut_at_different_budgets_are_not_averaged(tiny: Benchmark) -> None:
    answers = _answers(tiny)["base"]
    tight = score_answers(tiny, answers, with_reader=False, context_budget_tokens=BUDGET)
    wide = score_answers(tiny, answers, with_reader=False, context_budget_tokens=6000)
    assert aggregate("locomo", wide, False)["context_recall@6000"] >= aggregate("locomo", tight, False)["context_recall"]
    with pytest.raises(InputError, match="different context budgets"):
        aggregate("locomo", tight[:1] + wide[1:], False)
    uncut = score_answers(tiny, answers, with_reader=False, context_budget_tokens=None)
    m = aggregate("locomo", uncut, False)
    assert m["context_budget_tokens"] is None and not [k for k in m if "@" in k]
    old = [{k: v for k, v in r.items() if k != "context_budget_tokens"} for r in tight]  # rows of older runs
    assert "context_budget_tokens" not in aggregate("locomo", old, False)


def test_a_budget_below_one_token_is_refused() -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="context_budget_tokens must be >= 1"):
        load_eval_setup(["reader=none", "context_budget_tokens=0"])
