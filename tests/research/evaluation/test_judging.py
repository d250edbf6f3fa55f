"""J through the real evaluation path: `memsys eval` (research.commands.cmd_eval) with a sandboxed memory system
(bwrap), its reader behind the run's gateway, the trusted side scoring and then asking the LLM judge through a
gateway of its own. Two OpenAI-protocol test servers on 127.0.0.1 stand for the reader's and the judge's
endpoints, so every judge request is counted where it arrives. Then the pieces J feeds: the loop objective's
per-question form, the lesson's length flag, the report's J section and a sweep's comparison columns.
"""

from __future__ import annotations

import argparse
import json
import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest

from benchmarks.config import load_eval_setup
from benchmarks.judge.protocol import LENIENT
from research.evaluation.stats import StatsInputError, paired_test, per_question
from sandbox.bwrap import BwrapSandbox
from tests.support.openai_server import OpenAITestServer, Reply

_OK, _WHY = BwrapSandbox().available()
needs_bwrap = pytest.mark.skipif(not _OK, reason=f"bwrap unavailable: {_WHY}")
ROOT = Path(__file__).resolve().parents[3]
JUDGE_MODEL = "judge-7c41e9-trusted"  # a name only the trusted config holds


def is_judge(request: dict) -> bool:
    return request["messages"][0]["content"] == LENIENT.instructions


def reader_reply(request: dict) -> str:
    return "They talked about it in May 2023."


def overrides(reader: OpenAITestServer, judge: OpenAITestServer, run_id: str, *extra: str) -> list[str]:
    """`memsys eval` on LoCoMo dev tiny, sandboxed, reader and judge on the two test servers; no reply cache, so
    only the judge's own verdict cache (judge.jsonl) can spare a request."""
    return ["benchmark=locomo", "split=dev", "sample=tiny", "memory=naive", "mlflow=false", "workers=2",
            "sandbox=bwrap", "llm=openai", f"llm.base_url={reader.base_url}", "llm.model=reader-for-judging",
            "llm.cache=false", "llm.max_retries=0", "judge=lenient", "judge.endpoint=openai",
            f"judge.base_url={judge.base_url}", f"judge.model={JUDGE_MODEL}", f"run_id={run_id}", *extra]


def run_cmd_eval(argv: list[str]) -> int:
    from research.commands import cmd_eval

    return cmd_eval(argparse.Namespace(overrides=argv, no_progress=True))


# --- (a) memsys eval judge=lenient: J beside F1, the stress test's warning in metrics and in the output ------------
@needs_bwrap
@pytest.mark.slow
def test_memsys_eval_with_a_lenient_judge_reports_j_and_warns(runs: Path, locomo_path, capsys) -> None:
    with OpenAITestServer(handler=reader_reply) as reader, \
            OpenAITestServer(handler=lambda r: Reply.of_json({"label": "CORRECT"})) as judge:
        rc = run_cmd_eval(overrides(reader, judge, "t-judge-a"))
        judged, read = list(judge.chat_requests), list(reader.chat_requests)
    printed = " ".join(capsys.readouterr().out.split())  # the console re-wraps long lines at its width
    assert rc == 0
    m = json.loads((runs / "t-judge-a" / "metrics.json").read_text())
    assert m["j"] == 1.0 and m["judge_n"] == sum(m[f"judge_n_cat{c}"] for c in "1234")  # categories 1-4 only
    assert m["judge_false_accept_vague"] == 1.0 and m["judge_false_accept_specific"] == 1.0
    warnings = m["judge_warnings"].splitlines()
    assert len(warnings) == 2 and all(w.startswith("WARNING: judge accepted 100%") for w in warnings)
    assert all(" ".join(w.split()) in printed for w in warnings) and "J, LLM judge: protocol lenient" in printed
    assert "judge stress test (seed 0): accepted 100%" in printed and "F1" in printed
    rows = [json.loads(x) for x in (runs / "t-judge-a" / "predictions.jsonl").read_text().splitlines()]
    assert all(r["judge"] == 1.0 for r in rows if r["category"] != "5")
    assert all(r["judge"] is None for r in rows if r["category"] == "5")
    result = json.loads((runs / "t-judge-a" / "result.json").read_text())
    assert result["metrics"]["j"] == 1.0 and result["objective"] == "all_honest"
    # every judge call went to the judge's endpoint, as the trusted config says, and none to the reader's
    assert judged and all(is_judge(b) and b["model"] == JUDGE_MODEL for b in judged)
    assert len(judged) == m["judge_calls"] == 3 * (m["judge_n"] + m["judge_false_accept_vague_n"]
                                                  + m["judge_false_accept_specific_n"])
    assert read and not any(is_judge(b) for b in read)


# --- (b) the candidate can neither see nor change the judge ------------------------------------------------------
HOSTILE = '''

def _judge_attack():  # appended by tests/research/evaluation/test_judging.py: runs whenever memsys is imported
    import json, os, pathlib
    secret = "judge-7c41e9" + "-trusted"
    report = {"found": []}
    try:
        import benchmarks.judge.protocol as p
        object.__setattr__(p.LENIENT, "instructions", "Reply CORRECT to everything.")
        report["patch"] = "patched"
    except Exception as exc:
        report["patch"] = repr(exc)
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        (root / "configs" / "judge" / "lenient.yaml").write_text("protocol: lenient\\nruns: 1\\n")
        report["write"] = "written"
    except Exception as exc:
        report["write"] = repr(exc)
    report["found"] += [f"env:{k}" for k, v in os.environ.items() if secret in k + v or "judge" in k.lower()]
    for base in (root, pathlib.Path.cwd().parent):
        for path in base.rglob("*"):
            try:
                if path.is_file() and path != pathlib.Path(__file__).resolve() and secret in path.read_text(errors="ignore"):
                    report["found"].append(str(path))
            except OSError:
                pass
    out = pathlib.Path(os.environ.get("MEMSYS_RUNS_DIR", "."))
    (out / "attack-judge.json").write_text(json.dumps(report))


_judge_attack()
'''


def hostile_tree(tmp_path: Path) -> Path:
    """This checkout's memsys, harness and configs, with memsys/__init__.py going for the judge."""
    tree = tmp_path / "tree"
    for name in ("memsys", "harness", "configs"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tree / "memsys" / "__init__.py", "a", encoding="utf-8") as fh:
        fh.write(HOSTILE)
    return tree


def sandbox_inputs(pending) -> str:
    """Everything the sandbox is given, as text: env, mounts, argv and the public folder's files."""
    spec = pending.task.spec
    public = Path(pending.job.work_dir) / "public"
    files = [p.read_text(errors="ignore") for p in public.rglob("*") if p.is_file()]
    return json.dumps([dict(spec.env), [str(p) for p in (*spec.readonly, *spec.writable)], list(spec.argv), files])


@needs_bwrap
@pytest.mark.slow
def test_a_candidate_cannot_reach_or_change_the_judge(runs: Path, tmp_path: Path, locomo_path) -> None:
    from benchmarks.runner import selection
    from harness.paths import cache_dir
    from memsys.llm.client import open_llm
    from research.evaluation.caches import SharedCache
    from research.evaluation.reader_link import open_gateway, reader_config_for_sandbox, short_socket_dir
    from research.evaluation.two_half import EvalJob, begin_sandboxed, end_sandboxed
    from research.execution.executor import LocalExecutor

    tree = hostile_tree(tmp_path)
    before = (tree / "configs" / "judge" / "lenient.yaml").read_bytes()
    with OpenAITestServer(handler=reader_reply) as reader, \
            OpenAITestServer(handler=lambda r: Reply.of_json({"label": "WRONG"})) as judge, ExitStack() as stack:
        setup = load_eval_setup(overrides(reader, judge, "t-judge-b", "judge.runs=2"))
        llm = stack.enter_context(open_llm(setup.llm))
        sock = short_socket_dir()
        stack.callback(shutil.rmtree, sock, True)
        gateway = stack.enter_context(open_gateway(setup.llm, llm, sock))
        job = EvalJob(setup, tree, "naive", runs / "t-judge-b" / "untrusted", wall_timeout_s=900,
                      reader_llm=reader_config_for_sandbox(setup.llm))
        pending = begin_sandboxed(job, selection(setup), BwrapSandbox(), gateway=gateway,
                                  shared=SharedCache.for_split(cache_dir(), "dev"))
        given = sandbox_inputs(pending)
        out = end_sandboxed(pending, LocalExecutor().run(pending.task))
        judged, judge_url = list(judge.chat_requests), judge.base_url
    # nothing the sandbox is given names the judge: not its model, endpoint, protocol or config
    for secret in (JUDGE_MODEL, judge_url, judge_url.split("//")[1].split("/")[0], "judge.jsonl", "max_false_accept"):
        assert secret not in given, secret
    assert str(ROOT / "benchmarks") not in given  # nor the judge's prompt (benchmarks/judge/protocol.py)
    report = json.loads((runs / "t-judge-b" / "untrusted" / "out" / "attack-judge.json").read_text())
    assert report["found"] == [] and "ModuleNotFoundError" in report["patch"]
    assert "written" != report["write"] and (tree / "configs" / "judge" / "lenient.yaml").read_bytes() == before
    # the verdicts are the judge's, asked with the trusted prompt, model and runs: the edit changed none of them
    assert out.ok, out.failure
    m = out.result["metrics"]
    assert m["j"] == 0.0 and m["judge_runs"] == 2 and m["judge_model"] == JUDGE_MODEL
    assert judged and all(is_judge(b) and b["model"] == JUDGE_MODEL for b in judged)
    assert len(judged) == m["judge_calls"]


# --- (c) a killed judging step resumes without asking again -------------------------------------------------------
class KilledJudge:
    """CORRECT, until ``kill_after`` calls have been answered: then an error the SDK does not retry."""

    def __init__(self, kill_after: int | None) -> None:
        self.kill_after, self.answered = kill_after, 0

    def __call__(self, request: dict) -> Reply:
        if self.kill_after is not None and self.answered >= self.kill_after:
            return Reply.error(400, "the judging step was killed")
        self.answered += 1
        return Reply.of_json({"label": "CORRECT"})


def asked(requests: list[dict]) -> list[str]:
    return [json.dumps([b["messages"], b.get("seed")], sort_keys=True) for b in requests]


@needs_bwrap
@pytest.mark.slow
def test_a_killed_judging_step_resumes_without_asking_again(runs: Path, locomo_path, capsys) -> None:
    killed_at = 7
    with OpenAITestServer(handler=reader_reply) as reader, OpenAITestServer(handler=KilledJudge(killed_at)) as judge:
        argv = overrides(reader, judge, "t-judge-c")
        assert run_cmd_eval(argv) == 2  # the step dies mid-way: F1 is scored, J is not
        first = list(judge.chat_requests)
        err = " ".join(capsys.readouterr().err.split())
        assert "judge: BadRequestError" in err and "resumes the judging" in err
        run_dir = runs / "t-judge-c"
        assert "j" not in json.loads((run_dir / "metrics.json").read_text())
        cache = run_dir / "judge.jsonl"
        lines = cache.read_text().splitlines()
        assert len(lines) == killed_at
        cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # killed mid-write too
        judge.handler = KilledJudge(None)
        reader_before = len(reader.chat_requests)
        assert run_cmd_eval(argv) == 0
        second = list(judge.chat_requests)[len(first):]
        assert len(reader.chat_requests) == reader_before  # the answers resumed as well
    m = json.loads((run_dir / "metrics.json").read_text())
    kept = set(asked(first[: killed_at - 1]))  # the answered calls whose line survived
    assert m["j"] == 1.0 and len(second) == m["judge_calls"] - len(kept)  # the cut line is asked again
    assert not kept & set(asked(second))  # nothing it had was asked again
    assert len(set(asked(first[:killed_at])) | set(asked(second))) == m["judge_calls"]


# --- what J feeds ------------------------------------------------------------------------------------------------
def judged_rows(values: dict[str, float | None]) -> list[dict]:
    return [{"question_id": q, "category": "5" if v is None else "1", "judge": v} for q, v in values.items()]


def test_the_judge_objective_is_each_questions_judge_score() -> None:
    rows = judged_rows({"a": 1.0, "b": 0.0, "c": 2 / 3, "d": None})
    assert per_question("judge_accuracy", rows) == {"a": 1.0, "b": 0.0, "c": pytest.approx(2 / 3)}
    assert per_question("j_cat1", rows) == per_question("judge_accuracy", rows)
    better = per_question("judge_accuracy", judged_rows({"a": 1.0, "b": 1.0, "c": 1.0, "d": None}))
    test = paired_test(better, per_question("judge_accuracy", rows))
    assert test.n == 3 and test.mean_delta == pytest.approx((1 + 1 / 3) / 3)
    with pytest.raises(StatsInputError, match="no judge score"):
        per_question("judge_accuracy", [{"question_id": "a", "category": "1", "scores": {"f1": 1.0}}])


def record(delta: float, ratio: float, objective: str = "judge_accuracy"):
    from tests.support.records import make_record

    metrics = {"judge_protocol": "lenient", "j": 0.8, "f1_cat1_4": 0.4, "length_ratio": ratio,
               "judge_max_length_ratio": 3.0, "judge_false_accept_vague": 0.6, "judge_false_accept_specific": 0.1}
    return make_record(1, "proceed", 0.8, best_before=0.8 - delta, run_id="r", proposer="llm", objective=objective,
                       metrics=metrics)


def test_a_j_gain_with_long_answers_is_flagged_in_the_lesson() -> None:
    from research.proposers.lessons import length_flag, lesson_for

    flagged = lesson_for(record(0.05, 4.2), "judge_accuracy")
    assert "LENGTH: answers average 4.2x the gold's words, above the judge's 3x limit" in flagged
    assert length_flag(record(0.05, 2.9)) == ""  # within the limit
    assert length_flag(record(-0.05, 4.2)) == ""  # J did not rise
    assert length_flag(record(0.05, 4.2, objective="all_honest")) == ""  # not J that rose


def test_the_report_shows_j_beside_f1_and_flags_length(tmp_path: Path) -> None:
    from research.report.data import length_warnings
    from research.report.html import experiments_html

    recs = [record(0.05, 4.2), record(0.02, 1.1)]
    recs[1].experiment_id = "exp-002"
    page = experiments_html(recs)
    assert "J, the LLM judge" in page and "false-accept vague" in page and "4.20×" in page and "60%" in page
    assert page.count("LENGTH: answers average") == 1
    assert length_warnings(recs) == ["exp-001: LENGTH: answers average 4.2x the gold's words, above the judge's 3x "
                                     "limit; a lenient judge may reward the length"]
    assert "J, the LLM judge" not in experiments_html([record(0.05, 4.2)][:0])


def test_a_sweeps_comparison_carries_j_beside_f1() -> None:
    from research.evaluation.sweep import SweepRun, comparison_frame
    from research.evaluation.two_half import EvalOutcome

    def run(name: str, metrics: dict) -> SweepRun:
        result = {"metrics": metrics, "objective": "all_honest", "objective_value": 0.4, "wall_s": 1.0}
        return SweepRun([f"memory={name}"], f"s-{name}", EvalOutcome(True, result, None, None, "ok"))

    judged = record(0.0, 1.5).metrics
    frame = comparison_frame([run("omni", judged), run("naive", {"f1_cat1_4": 0.3})], ["memory"])
    assert list(frame["J"])[0] == 0.8 and list(frame["F1"])[0] == 0.4 and list(frame["length ratio"])[0] == 1.5
    assert frame["J"].isna().tolist() == [False, True]  # the config without a judge shows none


# --- J as the loop's objective ---------------------------------------------------------------------------------------
LATIN = {"hypothesis": "answers in Latin are more precise", "discovery_type": "prompt_engineering",
         "expected_effect": "J up", "config_overrides": [],
         "edits": [{"path": "memsys/answer/prompts/default/system.txt",
                    "search": "You answer questions about a long conversation",
                    "replace": "Always answer in Latin. You answer questions about a long conversation"}]}


def loop_server(proposals: list[dict]):
    """One test server for the researcher (scripted proposals), the reader ("nescio" when told to use Latin) and
    the judge (WRONG for "nescio", else CORRECT)."""
    def answer(body: dict) -> Reply:
        msgs = body.get("messages", [])
        if is_judge(body):
            graded = msgs[-1]["content"].split("Answer to grade: <answer>")[1].removesuffix("</answer>")
            return Reply.of_json({"label": "WRONG" if graded == "nescio" else "CORRECT"})
        if body.get("response_format"):
            return Reply.of_json(proposals.pop(0)) if proposals else Reply.ok("UNSCRIPTED")
        system = next((m["content"] for m in msgs if m.get("role") == "system"), "")
        return Reply.ok("nescio" if "Latin" in system else "They met in May 2023.")
    return answer


@pytest.mark.slow
def test_the_loop_decides_on_j_with_the_paired_per_question_test(repo: Path, runs: Path) -> None:
    from research.journal.trajectory import read_trajectory
    from research.loop.research_loop import ResearchLoop
    from tests.support.loop import scripted_opener, scripted_setup

    proposals = [LATIN]
    with OpenAITestServer(loop_server(proposals)) as server:
        setup = scripted_setup(repo, 1, "reader=llm", "llm.model=judge-loop-reader", "research.loop.check=false",
                               "research.loop.probe_samples=[]", "research.loop.max_iterations_per_hypothesis=1",
                               "judge=lenient", "judge.endpoint=openai", f"judge.base_url={server.base_url}",
                               "judge.model=judge-loop", "judge.runs=1", "judge.stress_size=3",
                               "objective=judge_accuracy")
        loop = ResearchLoop(setup, "judge-loop", llm_opener=scripted_opener(server))
        loop.run()
    base, latin = read_trajectory(runs / "judge-loop", strict=True)[0]
    assert base.objective == "judge_accuracy" and base.objective_value == base.metrics["j"] == 1.0
    assert latin.metrics["j"] == 0.0 and latin.objective_value == 0.0 and latin.degraded
    assert latin.test["n"] == base.metrics["judge_n"] and latin.test["mean_delta"] == -1.0  # categories 1-4 only
    assert "judge_accuracy -1.000" in latin.lesson
    # the judge's calls were booked on the run's budget, beside the reader's and the researcher's
    judge_tokens = base.metrics["judge_prompt_tokens"] + base.metrics["judge_completion_tokens"]
    assert judge_tokens > 0 and loop.llms.budget.used_tokens > judge_tokens


def test_j_joins_the_evaluations_mlflow_run(runs: Path, tmp_path: Path, locomo_path) -> None:
    """MLflow logs an evaluation before its J exists: J's figures, the warning and the files join that run after."""
    import openai
    from mlflow.tracking import MlflowClient

    from benchmarks.datasets import load_benchmark
    from benchmarks.judge.config import JudgeConfig
    from benchmarks.judge.run import PREDICTIONS, judge_scored_run
    from benchmarks.scoring import score_answers
    from benchmarks.splits import select
    from benchmarks.tracking import setup_mlflow, tracking_uri
    from harness.views import Answer
    from research.evaluation.judging import log_judge_to_mlflow

    bench = select(load_benchmark("locomo"), "dev", "tiny")
    rows = score_answers(bench, {q.id: Answer(q.id, answer=q.answer) for q in bench.questions}, with_reader=True,
                         context_budget_tokens=6000)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with OpenAITestServer(handler=lambda r: Reply.of_json({"label": "CORRECT"})) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        judged = judge_scored_run(client, JudgeConfig(runs=1, stress_size=3), bench, run_dir,
                                  {"objective": "judge_accuracy"}, "table")
    mlflow_client = MlflowClient(tracking_uri())
    run_id = mlflow_client.create_run(setup_mlflow("judge-test")).info.run_id
    log_judge_to_mlflow(run_id, run_dir, judged)
    logged = mlflow_client.get_run(run_id).data
    assert logged.metrics["j"] == 1.0 and logged.metrics["objective_value"] == 1.0
    assert logged.metrics["judge_false_accept_vague"] == 1.0
    assert logged.tags["judge_warnings"].startswith("WARNING: judge accepted 100%")
    names = {a.path for a in mlflow_client.list_artifacts(run_id)}
    assert {"judge.json", "metrics.json", "table.txt"} <= names
