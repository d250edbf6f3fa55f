"""Held-out confirmation: runs optimize on dev only; baseline and best are scored once on test at the end.

Real pieces: git worktrees, the process sandbox (weak, allowed explicitly), LoCoMo tiny samples with
reader=none, the scripted researcher over the OpenAI test server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.datasets import load_benchmark
from benchmarks.splits import select
from harness.errors import ConfigError
from research.config import load_run_setup
from research.loop.research_loop import ResearchLoop
from research.report.build import write_report
from tests.support.loop import DEGRADE, IMPROVE, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow


def test_memsys_run_refuses_the_test_split(repo: Path) -> None:
    for split in ("test", "all"):
        with pytest.raises(ConfigError, match="dev split only"):
            load_run_setup([f"split={split}", f"research.repo={repo}"])
    # a replay of a finished run may evaluate on test
    assert load_run_setup(["split=test", f"research.repo={repo}"], optimizing=False).eval.options.split == "test"


def hashing_embedder(repo: Path) -> None:
    """The test split's conversations are new to every cache: the hashing embedder keeps these tests about the
    protocol, not about MiniLM's speed."""
    preset = repo / "configs" / "memory" / "naive.yaml"
    preset.write_text(preset.read_text() + "embedder:\n  backend: hashing\n  cache: false\n")
    git(repo, "commit", "-qam", "hashing embedder for the test")


def one_experiment(server: OpenAITestServer, repo: Path, proposal: dict, run_id: str) -> tuple[ResearchLoop, Any]:
    """A run of one scripted proposal with the held-out confirmation on; the server stays the caller's."""
    server.enqueue(Reply.of_json(proposal))
    loop = ResearchLoop(scripted_setup(repo, 1, "research.confirm.enabled=true"), run_id,
                        llm_opener=scripted_opener(server))
    return loop, loop.run()


def test_run_end_confirms_baseline_and_best_on_test(repo: Path, runs: Path, locomo_path) -> None:
    hashing_embedder(repo)
    with OpenAITestServer() as server:
        server.enqueue(Reply.of_json(IMPROVE))
        setup = scripted_setup(repo, 1, "research.confirm.enabled=true")
        loop = ResearchLoop(setup, "conf", llm_opener=scripted_opener(server))
        st = loop.run()
    c = st.confirmation
    assert c["split"] == "test" and c["sample"] == "tiny" and c["objective"] == "context_recall"
    assert c["runs"]["baseline"]["ok"] and c["runs"]["best"]["ok"]
    assert c["runs"]["best"]["commit"] == st.best_commit != st.base_commit
    assert c["dev"] == {"baseline": loop.records[0].objective_value, "best": st.best_value}
    # the test figures are the test split's questions, scored by the trusted side
    test_ids = {q.id for q in select(load_benchmark("locomo"), "test", "tiny").questions}
    folders = sorted((runs / "conf" / "evals").glob("confirm-best-*"))  # evals/<exp-id>-<key>/<eval-run-id>/
    assert len(folders) == 1 and len(list((runs / "conf" / "evals").glob("confirm-baseline-*"))) == 1
    rows = [json.loads(line) for line in
            (folders[0] / c["runs"]["best"]["eval_run_id"] / "predictions.jsonl").read_text().splitlines()]
    assert {r["question_id"] for r in rows} == test_ids
    dev_ids = {q.id for q in select(load_benchmark("locomo"), "dev", "tiny").questions}
    assert not test_ids & dev_ids
    assert json.loads((runs / "conf" / "confirmation.json").read_text()) == c
    # never shown to the researcher: its context holds no test figure and no confirm run
    ctx = loop.context()
    text = json.dumps(ctx.__dict__, default=str)
    assert "confirm" not in text and c["runs"]["best"]["eval_run_id"] not in text
    assert all(not r.experiment_id.startswith("confirm") for r in loop.records)
    page = write_report(runs / "conf").read_text()
    assert "Held-out confirmation" in page and "(held out)" in page


def test_a_run_that_accepted_nothing_evaluates_nothing_on_test(repo: Path, runs: Path, locomo_path) -> None:
    """The best commit is the baseline: the verdict is "no gain" whatever test says, so nothing is evaluated
    there (on a reader run that evaluation cost as long as a candidate's)."""
    hashing_embedder(repo)
    with OpenAITestServer() as server:
        loop, st = one_experiment(server, repo, DEGRADE, "none")
    assert st.best_commit == st.base_commit and len(loop.records) == 2
    c = st.confirmation
    assert c["verdict"]["status"] == "no_gain" and c["test"] == {"baseline": None, "best": None}
    assert c["runs"]["baseline"]["skipped"] == "nothing accepted"
    assert not list((runs / "none" / "evals").glob("confirm-*"))
    assert json.loads((runs / "none" / "confirmation.json").read_text()) == c
    assert "(not evaluated: nothing accepted)" in write_report(runs / "none").read_text()


def test_the_reader_check_answers_base_and_best_on_held_out_questions_beside_the_confirmation(
        repo: Path, runs: Path, locomo_path) -> None:
    """``memsys confirm <run> --reader`` (research.loop.confirm.reader_check): a reader-free run's base and best
    answered by the reader through the gateway, paired, saved beside the confirmation, which stays as it was."""
    from contextlib import ExitStack

    from research.loop.confirm import reader_check
    from research.loop.state import LoopState

    hashing_embedder(repo)
    with OpenAITestServer() as server:
        loop, st = one_experiment(server, repo, IMPROVE, "rc")
        before = dict(st.confirmation)
        server.handler = lambda body: Reply.ok("7 May 2023")  # the reader: one answer to every question
        loop.setup.eval.options.reader, loop.setup.eval.options.objective = "llm", "auto"
        with ExitStack() as stack:
            loop.llms.open(stack)
            record = reader_check(loop.run_context(), "tiny")
    assert record["objective"] == "all_honest" and record["split"] == "test" and record["sample"] == "tiny"
    assert record["runs"]["baseline"]["ok"] and record["runs"]["best"]["ok"]
    assert record["test_paired"]["n"] == 12 and record["test_paired"]["mean_delta"] == 0.0  # same answers
    assert all(v and v > 0 for v in record["prompt_tokens"].values())
    assert record["line"].startswith("with the reader (all_honest on test tiny, 12 questions): baseline ")
    saved = LoopState.load(runs / "rc")
    assert saved.reader_check == record and saved.confirmation == before
    from research.report.html import esc

    assert f"<b>End to end:</b> {esc(record['line'])}" in write_report(runs / "rc").read_text()


def test_the_verdict_is_a_tag_of_the_mlflow_parent_run(tmp_path, monkeypatch) -> None:
    """A dev gain that test does not confirm is said on the MLflow parent run too (issue #49): its status and
    line as tags beside the dev and test metrics."""
    from mlflow.tracking import MlflowClient

    from research.loop.confirm import _log_mlflow, confirmation_verdict
    from research.loop.state import LoopState

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(tracking_uri=uri)
    parent = client.create_run(client.create_experiment("memsys-research")).info.run_id
    record = {"split": "test", "dev": {"baseline": 0.159, "best": 0.993}, "test": {"baseline": 0.173, "best": 0.220},
              "test_paired": {"ci_low": -0.01, "ci_high": 0.11}, "runs": {"best": {}}}
    record["verdict"] = confirmation_verdict(record, min_kept=0.5)
    st = LoopState("run-x", str(tmp_path), "a" * 40, "b" * 40)
    st.mlflow_parent_run_id = parent
    _log_mlflow(st, record)
    run = client.get_run(parent)
    assert run.data.tags["confirmation"] == "not_confirmed"
    assert run.data.tags["confirmation_line"].startswith("NOT CONFIRMED on test: the test gain +0.0470 is not supported")
    assert run.data.metrics["dev_best"] == 0.993 and run.data.metrics["test_best"] == 0.220
