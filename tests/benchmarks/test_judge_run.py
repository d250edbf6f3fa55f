"""J for a scored evaluation (benchmarks.judge.run) on a real run folder: LoCoMo dev tiny scored by the real scorer,
the judge asked through the real OpenAI SDK against the OpenAI-protocol test server on 127.0.0.1; and the judge
in the eval config (configs/judge/, benchmarks.config)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from benchmarks.config import load_eval_setup
from benchmarks.datasets import load_benchmark
from benchmarks.judge.config import JudgeConfig, judge_metric_key
from benchmarks.judge.protocol import LENIENT, STRICT
from benchmarks.judge.run import JUDGE_CACHE, JUDGE_FILE, PREDICTIONS, judge_scored_run, read_rows, with_objective
from benchmarks.runner import aggregate
from benchmarks.scoring import score_answers
from benchmarks.splits import select
from harness.errors import ConfigError
from harness.views import Answer
from tests.support.openai_server import OpenAITestServer, Reply


@pytest.fixture(scope="module")
def tiny(locomo_path):
    return select(load_benchmark("locomo"), "dev", "tiny")


def scored_run(bench, run_dir: Path, objective: str = "all_honest") -> tuple[dict, str]:
    """A run folder as the scorer leaves it: predictions.jsonl and the metrics (answers: half the gold, half words)."""
    answers = {q.id: Answer(q.id, answer=q.answer if i % 2 else "something else entirely")
               for i, q in enumerate(bench.questions)}
    rows = score_answers(bench, answers, with_reader=True, context_budget_tokens=6000)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = aggregate(bench.name, rows, True) | {"objective": objective, "objective_value": None}
    return metrics, "scorer's table"


def verdict_by_answer(request: dict) -> Reply:
    """CORRECT when the graded answer is not the filler: a judge that agrees with F1 on this run."""
    graded = request["messages"][-1]["content"].split("Answer to grade: <answer>")[1].removesuffix("</answer>")
    return Reply.of_json({"label": "WRONG" if graded == "something else entirely" else "CORRECT"})


def test_a_scored_run_gains_j_per_question_and_overall(tiny, tmp_path):
    metrics, table = scored_run(tiny, tmp_path / "run", objective="judge_accuracy")
    with OpenAITestServer(handler=verdict_by_answer) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        judged = judge_scored_run(client, JudgeConfig(runs=2), tiny, tmp_path / "run", metrics, table)
        asked = len(server.chat_requests)
    rows = read_rows(tmp_path / "run")
    judged_rows = [r for r in rows if r["category"] != "5"]
    assert all(r["judge"] == (0.0 if r["prediction"] == "something else entirely" else 1.0) for r in judged_rows)
    assert all(len(r["judge_verdicts"]) == 2 for r in judged_rows)
    assert all(r["judge"] is None and r["judge_rule"] in (0.0, 1.0) for r in rows if r["category"] == "5")
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m == judged.metrics and m["j"] == pytest.approx(sum(r["judge"] for r in judged_rows) / len(judged_rows))
    assert m["objective_value"] == m["j"]  # the objective the scorer could not fill
    assert {f"j_cat{c}" for c in ("1", "2", "3", "4")} <= set(m) and "judge_rule_cat5" in m
    assert m["judge_f1_agreement"] == 1.0 and m["length_ratio"] > 0 and m["judge_max_length_ratio"] == 3.0
    assert m["judge_calls"] == asked and m["judge_prompt_tokens"] > 0
    # the stress test ran with its seed: this judge accepts every known-wrong answer, so it warns
    assert m["judge_false_accept_vague_n"] > 0 and m["judge_false_accept_vague"] == 1.0
    assert m["judge_false_accept_vague_low"] < 1.0 == m["judge_false_accept_vague_high"]
    assert "of vague-but-topical wrong answers; J from this judge is lenient" in m["judge_warnings"]
    text = (tmp_path / "run" / "table.txt").read_text()
    assert text.startswith("scorer's table") and "J, LLM judge" in text and "judge stress test (seed 0)" in text
    assert all(line in text for line in m["judge_warnings"].splitlines())
    detail = json.loads((tmp_path / "run" / JUDGE_FILE).read_text())
    assert detail["config"]["runs"] == 2 and all(i["score"] == 1.0 for i in detail["stress"]["items"])


def test_judging_again_asks_nothing_and_writes_the_same_files(tiny, tmp_path):
    metrics, table = scored_run(tiny, tmp_path / "run")
    with OpenAITestServer(handler=verdict_by_answer) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        first = judge_scored_run(client, JudgeConfig(runs=1), tiny, tmp_path / "run", metrics, table)
        rows_first = (tmp_path / "run" / PREDICTIONS).read_text()
        sent = len(server.chat_requests)
        again = judge_scored_run(client, JudgeConfig(runs=1), tiny, tmp_path / "run", metrics, table)
        assert len(server.chat_requests) == sent
    assert again.metrics == first.metrics and again.table == first.table
    assert (tmp_path / "run" / PREDICTIONS).read_text() == rows_first  # rows gain "judge" once, not twice
    assert len((tmp_path / "run" / JUDGE_CACHE).read_text().splitlines()) == sent
    assert first.metrics["objective_value"] is None  # all_honest is the scorer's to fill, not the judge's


def test_the_protocol_must_grade_the_benchmark(tiny, tmp_path):
    metrics, table = scored_run(tiny, tmp_path / "run")
    with pytest.raises(ConfigError, match="grades memgallery, not locomo"):
        judge_scored_run(None, JudgeConfig(protocol="memgallery"), tiny, tmp_path / "run", metrics, table)


def test_the_strict_protocol_sends_its_own_rule(tiny, tmp_path):
    metrics, table = scored_run(tiny, tmp_path / "run")
    with OpenAITestServer(handler=verdict_by_answer) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        judge_scored_run(client, JudgeConfig(protocol="strict", runs=1), tiny, tmp_path / "run", metrics, table)
        systems = {b["messages"][0]["content"] for b in server.chat_requests}
    assert systems == {STRICT.instructions} and LENIENT.instructions not in systems


def test_with_objective_fills_only_judge_objectives():
    assert with_objective({"objective": "judge_accuracy", "j": 0.7})["objective_value"] == 0.7
    assert with_objective({"objective": "j_cat2", "j_cat2": 0.5})["objective_value"] == 0.5
    assert "objective_value" not in with_objective({"objective": "all_honest", "j": 0.7})
    assert judge_metric_key("judge_accuracy") == "j" and judge_metric_key("j_cat") is None
    assert judge_metric_key("f1") is None


# --- the judge in the eval config ---------------------------------------------------------------------
def test_no_judge_by_default_and_judge_none_is_off():
    assert load_eval_setup([]).judge is None
    assert load_eval_setup(["judge=none"]).judge is None
    assert "judge" not in load_eval_setup([]).raw


def test_a_judge_group_is_validated_and_kept_in_the_composed_config():
    setup = load_eval_setup(["judge=lenient", "judge.runs=5", "judge.model=some-judge"])
    assert setup.judge == JudgeConfig(protocol="lenient", runs=5, model="some-judge")
    assert setup.raw["judge"]["runs"] == 5  # recorded with the run (run.json, MLflow params)
    assert load_eval_setup(["benchmark=memgallery", "judge=memgallery"]).judge.protocol == "memgallery"


@pytest.mark.parametrize("overrides, message", [
    (["objective=judge_accuracy"], "needs a judge"),
    (["judge=lenient", "reader=none"], "needs reader=llm"),
    (["judge=memgallery"], "does not grade locomo"),
    (["benchmark=memgallery", "judge=strict"], "does not grade memgallery"),
    (["judge=lenient", "judge.runs=0"], "runs must be >= 1"),
])
def test_judge_configs_that_cannot_mean_j_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_eval_setup(overrides)


def test_the_loop_composes_a_judge_objective():
    from research.config import load_run_setup

    run = load_run_setup(["judge=strict", "objective=judge_accuracy", "reader=llm"])
    assert run.eval.objective == "judge_accuracy" and run.eval.judge.protocol == "strict"
