"""The early stop, end to end: a reader run stops a clearly worse candidate on a nested sample (Optuna's WilcoxonPruner).

Real pieces as in test_screens_e2e: git worktrees, the process sandbox, LoCoMo dev (run sample ``small``,
50 questions; probe sample ``tiny``, 12 of them), the trusted scorer, the gateway's reply cache, the openai
SDK over HTTP to :class:`OpenAITestServer`. The server plays both the researcher (scripted code edits) and a
reader that answers from the gold answers, unless its system prompt asks for Latin:

exp-001  the system prompt asks for answers in Latin    probe: every answer wrong -> stopped, a degradation
exp-002  the system prompt asks for brief answers       probe: no difference -> the full 50 questions, of
                                                        which the probe's 12 come from the reply cache
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from benchmarks.datasets import load_benchmark
from harness.paths import data_dir
from research.journal.trajectory import read_trajectory
from research.loop.research_loop import ResearchLoop
from research.report.terminal import trajectory_lines
from tests.support.loop import git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

SYSTEM = "memsys/answer/prompts/default/system.txt"
FIRST = "You answer questions about a long conversation"


def edit(hypothesis: str, words: str) -> dict[str, Any]:
    return {"hypothesis": hypothesis, "discovery_type": "prompt_engineering", "expected_effect": "all_honest up",
            "config_overrides": [], "edits": [{"path": SYSTEM, "search": FIRST, "replace": f"{words} {FIRST}"}]}


LATIN = edit("answers in Latin are more precise", "Always answer in Latin.")
BRIEF = edit("brief answers score higher", "Be brief.")


def gold_reader(proposals: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """The researcher's ``proposals`` in turn, and a reader that knows the gold answers (abstains on
    category 5), except when told to use Latin."""
    bench = load_benchmark("locomo", data_dir() / "locomo")
    gold = {q.question: ("Not mentioned in the conversation" if q.category == "5" else q.answer)
            for c in bench.conversations for q in c.questions}
    asked: list[str] = []

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("response_format"):  # the researcher (structured output)
            return Reply.of_json(proposals.pop(0)) if proposals else Reply.ok("UNSCRIPTED")
        msgs = body.get("messages", [])
        user = next((m["content"] for m in msgs if m.get("role") == "user"), "")
        question = user.split("Question:", 1)[-1].strip().splitlines()[0].strip() if "Question:" in user else ""
        asked.append(question)
        if "Latin" in next((m["content"] for m in msgs if m.get("role") == "system"), ""):
            return Reply.ok("nescio")
        return Reply.ok(gold.get(question, "unknown"))
    return answer, asked


def test_a_clearly_worse_candidate_stops_at_the_probe_and_a_passing_one_reuses_its_replies(repo: Path, runs: Path) -> None:
    proposals = [LATIN, BRIEF]
    handler, asked = gold_reader(proposals)
    with OpenAITestServer(handler) as server:
        # a model name of its own: the reply cache is the test session's, and other tests' scripted readers
        # answer the same baseline messages differently
        setup = scripted_setup(repo, 2, "reader=llm", "++llm.cache=true", "llm.model=gold-reader", "sample=small",
                               "research.loop.check=false", "research.loop.probe_samples=[tiny]",
                               "research.loop.max_iterations_per_hypothesis=1")
        st = ResearchLoop(setup, "probe", llm_opener=scripted_opener(server)).run()
    assert proposals == []
    records, warnings = read_trajectory(runs / "probe", strict=True)
    assert warnings == []
    base, latin, brief = records
    assert base.decision == "baseline" and base.objective == "all_honest" and base.objective_value > 0.5

    # exp-001: answered on the probe's 12 questions only, every answer worse: stopped there, a degradation
    p = latin.probe
    assert p["stopped"] is True and p["sample"] == "tiny" and p["questions"] == 12 and p["of"] == 50
    assert p["rule"] == "wilcoxon" and p["looks"] == [{"sample": "tiny", "questions": 12, "stopped": True}]
    assert p["ci_high"] < 0 and p["p_worse"] < 0.01 and latin.degraded and latin.decision == "pivot"
    assert latin.test["n"] == 12 and latin.delta == pytest.approx(latin.test["mean_delta"])
    assert latin.objective_value == pytest.approx(base.objective_value + latin.test["mean_delta"])
    assert "stopped after the probe: 12 of 50 questions (tiny)" in latin.notes
    assert latin.metrics["n"] == 12 and "probe_s" in latin.durations and "eval_s" not in latin.durations
    d = latin.durations  # the probe's time is its own, not "overhead"
    assert d["overhead_s"] == pytest.approx(max(0.0, d["total_s"] - d["propose_s"] - d["screen_s"] - d["probe_s"]))
    folders = sorted(q.name.split("-")[2] for q in (runs / "probe" / "evals").glob("exp-001-*"))
    assert folders == ["probe", "screen"]  # no full evaluation was run

    # exp-002: the probe finds no difference, so the full sample is answered; the probe's 12 were cached
    assert brief.probe["stopped"] is False and brief.probe["questions"] == 12 and brief.probe["delta"] == 0.0
    assert brief.metrics["n"] == 50 and brief.test["n"] == 50 and "eval_s" in brief.durations
    assert brief.decision == "pivot" and brief.delta == pytest.approx(0.0) and not brief.degraded
    assert len(asked) == 50 + 12 + 12 + 38  # baseline, probe 1, probe 2, the rest of exp-002
    assert st.status == "finished" and st.best_commit == git(repo, "rev-parse", "HEAD")

    # the closing table marks the estimate and says where it stopped
    table = "\n".join(t.plain for t in trajectory_lines(Console(width=80), records))
    assert f"~{latin.objective_value:.4f}" in table and f"~{brief.objective_value:.4f}" not in table
    assert "stopped after the probe: 12 of 50 questions (tiny), Δ -1.0000" in table


def test_a_run_killed_during_the_probe_resumes_and_reuses_the_replies_it_had(repo: Path, runs: Path,
                                                                              tmp_path: Path) -> None:
    """The real CLI killed (``kill -9`` of its process group) while the probe is being answered, then
    ``memsys run --resume``: the experiment is recorded once, still stopped at the probe, and the reader is
    not asked again what the killed life had already asked (the gateway's reply cache outlives the kill)."""
    import threading

    from research.loop.state import LoopState
    from tests.support.lives import Life, end_orphans, rev, worktree_paths

    handler, asked = gold_reader([])
    latin_asked = threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("response_format"):  # every proposal is the Latin one (the resumed life proposes it again)
            return Reply.of_json(LATIN)
        reply = handler(body)
        if reply.text == "nescio" and len(asked) >= 50 + 4:
            latin_asked.set()  # the probe is under way: 4 of its 12 questions answered
        return reply

    run_id = "probe-killed"
    with OpenAITestServer(answer) as server:
        args = ["reader=llm", "sample=small", "mlflow=false", "workers=1", "llm=openai",
                f"llm.base_url={server.base_url}", "llm.model=gold-reader-kill", "++llm.cache=true",
                "research.sandbox.backend=process", "research.sandbox.allow_weak=true",
                "research.confirm.enabled=false", "research.loop.smoke_sample=null", "research.loop.check=false",
                "research.loop.probe_samples=[tiny]", "research.proposer=llm", "research.researcher.mode=code",
                f"research.repo={repo}", "research.budget.experiments=1", "research.loop.max_proposals_factor=1",
                f"run_id={run_id}"]
        first = Life(args, tmp_path / "first.log")
        assert latin_asked.wait(600), f"the probe never started:\n{first.tail()}"
        assert first.kill(), "the run ended before it was killed"
        end_orphans(runs / run_id)
        assert not (runs / run_id / "trajectory.jsonl").read_text(encoding="utf-8").count("exp-001")
        before = len(asked)

        again = Life(["--resume", run_id], tmp_path / "resume.log")
        assert again.wait(600) == 0, again.tail()
    records, warnings = read_trajectory(runs / run_id, strict=True)
    assert warnings == []
    assert [r.experiment_id for r in records] == ["exp-000", "exp-001"]
    base, latin = records
    assert latin.probe["stopped"] is True and latin.probe["questions"] == 12 and latin.degraded
    # the baseline's 50 answers were not asked again; of the probe's 12, only the one in flight at the kill
    # may have been (its reply never reached the cache)
    assert len(set(asked[:50])) == 50 and 12 <= len(asked) - 50 <= 13 and before >= 54
    state = LoopState.load(runs / run_id)
    assert state.status == "finished" and state.best_commit == base.commit
    assert rev(repo, f"refs/autoresearch/{run_id}/best") == base.commit and worktree_paths(repo) == [str(repo)]
    assert "stopped after the probe: 12 of 50 questions (tiny)" in again.tail(60)
