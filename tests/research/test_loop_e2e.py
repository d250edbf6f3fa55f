"""End to end: the research loop on a throwaway git repo, proposals from a scripted OpenAI server.

Real pieces: git worktrees and refs, the process sandbox running ``benchmarks.cli eval`` on the
LoCoMo tiny sample (reader=none: no LLM reader, objective context_recall), the openai SDK over
HTTP to :class:`OpenAITestServer`. Only the researcher's replies are scripted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from research.journal.trajectory import read_trajectory
from research.loop.research_loop import ResearchLoop
from research.loop.state import LoopState
from tests.support.loop import DEGRADE, FORBIDDEN, IMPROVE, SCORER, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as srv:
        # an unscripted chat request would be a test bug: answer it with non-JSON so it fails loudly
        srv.handler = lambda body: Reply.ok("UNSCRIPTED")
        yield srv


opener_for = scripted_opener


def load_state(run_dir: Path) -> LoopState:
    return LoopState.load(run_dir)


def assert_clean(repo: Path, run_dir: Path) -> None:
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    wt = run_dir / "worktrees"
    assert not wt.exists() or not any(wt.iterdir())
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# ---------------------------------------------------------------------------------------------
def test_loop_proceed_iterate_pivot_failed_rejected(repo: Path, runs: Path, server: OpenAITestServer) -> None:
    run_id = "e2e"
    head = git(repo, "rev-parse", "HEAD")
    scorer_before = (repo / SCORER).read_text(encoding="utf-8")
    # the second degradation must differ from the first: an identical proposal is sent back as a duplicate
    DEGRADE_AGAIN = {**DEGRADE, "config_overrides": ["retrieval.merge=dense_only", "retrieval.top_k=3", "retrieval.dense_k=3"]}
    DEGRADE_MORE = {**DEGRADE, "hypothesis": "a mid-sized dense list is precise enough",
                    "config_overrides": ["retrieval.merge=dense_only", "retrieval.top_k=4", "retrieval.dense_k=4"]}
    # failed and rejected experiments do not spend the budget (4 evaluations): a sixth proposal is asked for
    server.enqueue(Reply.of_json(IMPROVE), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE_AGAIN),
                   Reply.ok("I think we should raise top_k. {not json"), Reply.ok("{still not json"),
                   Reply.of_json(FORBIDDEN),
                   Reply.of_json(DEGRADE_MORE))
    events: list[tuple[str, dict[str, Any]]] = []
    loop = ResearchLoop(scripted_setup(repo, 4), run_id, llm_opener=opener_for(server),
                        on_event=lambda k, d: events.append((k, d)))
    st = loop.run()
    run_dir = runs / run_id

    # --- journal
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    assert [r.experiment_id for r in records] == [f"exp-{i:03d}" for i in range(7)]
    assert [r.decision for r in records] == ["baseline", "proceed", "iterate", "pivot", "failed", "rejected", "iterate"]
    assert [r.proposer for r in records] == ["baseline"] + ["llm"] * 6
    base, imp, deg1, deg2, bad, forb, more = records
    assert base.commit == head and base.objective == "context_recall"
    assert 0.0 <= base.objective_value < 1.0
    assert imp.objective_value > base.objective_value * 1.005
    assert imp.best_before == base.objective_value and imp.delta == pytest.approx(imp.objective_value - base.objective_value)
    assert imp.config_overrides == IMPROVE["config_overrides"] and imp.parent_commit == head
    assert "configs/memory/naive.yaml" in imp.diff and imp.diff_stats["files"] == 1
    # proceed: a significant paired gain that held on the disjoint dev slice
    assert imp.test["p_better"] < 0.05 and imp.test["mean_delta"] == pytest.approx(imp.delta)
    assert imp.check["passed"] is True and (run_dir / imp.check["eval_dir"] / "result.json").is_file()
    for r in (deg1, deg2):
        assert r.parent_commit == imp.commit  # deg1 degraded: the iteration starts from the best commit again
        assert r.objective_value < imp.objective_value and r.delta < 0 and r.degraded
        assert r.failure is None and r.test["p_worse"] < 0.05 and r.check == {}
    assert "2 consecutive significant degradations" in deg2.notes
    assert bad.failure["stage"] == "propose" and bad.objective_value is None and bad.commit is None
    assert bad.failure["cls"] == "format_mismatch" and bad.durations.get("eval_s") is None
    # a malformed reply is sampled once more (another seed); the second slip fails the experiment
    assert [(h["action"], h["result"]) for h in bad.healing] == [("resample", "failed again")]
    assert "not valid JSON" in bad.healing[0]["reason"]
    assert forb.failure["cls"] == "forbidden_edit" and forb.failure["stage"] == "apply"
    assert forb.objective_value is None and forb.eval_run_id is None and forb.eval_dir == "" and forb.screen == {}
    assert more.parent_commit == imp.commit and more.config_overrides == DEGRADE_MORE["config_overrides"]
    assert all(r.tokens > 0 for r in records[1:] if r.decision != "failed")
    # reader=none: the reader-free screen is the evaluation; every evaluated change reached the context
    for r in (imp, deg1, deg2, more):
        assert r.screen["verdict"] == "changed" and r.screen["changed"] > 0 and r.screen["comparable"] is True
        assert r.screen["context_recall"] == r.objective_value
        assert r.eval_dir.startswith(f"evals/{r.experiment_id}-screen-") and r.eval_run_id == f"{run_id}-{r.experiment_id}-screen"
        assert (run_dir / r.eval_dir / "result.json").is_file()
    assert (run_dir / base.eval_dir / "result.json").is_file() and base.eval_dir.startswith("evals/exp-000-")
    # nothing was evaluated for the failed and the refused experiment
    assert not list((run_dir / "evals").glob("exp-004*")) and not list((run_dir / "evals").glob("exp-005*"))

    # --- the researcher saw the loop's modes
    requests = server.chat_requests
    assert requests[4]["seed"] != requests[3]["seed"] and requests[4]["messages"] == requests[3]["messages"]
    prompts = [b["messages"][-1]["content"] for i, b in enumerate(requests) if i != 4]  # 4: the resample
    assert len(prompts) == 6 and server.pending == 0
    assert "Propose a new hypothesis" in prompts[0] and "Propose a new hypothesis" in prompts[1]
    assert "Refine the current hypothesis" in prompts[2] and DEGRADE["hypothesis"] in prompts[2]
    assert "exp-002 [iterate " in prompts[2]
    for p in prompts[3:]:
        assert "Change direction" in p and "exp-001 [proceed " in p
    assert "2 consecutive significant degradations" in prompts[3]
    assert "exp-004 [failed] " in prompts[4] and "failed at propose (format_mismatch" in prompts[4]
    assert "exp-005 [rejected] " in prompts[5] and "2 failed or rejected attempts in a row" in prompts[5]

    # --- state and refs
    assert st.status == "finished" and st.stop_reason == "experiment budget spent (4/4 evaluated)"
    saved = load_state(run_dir)
    assert saved.best_value == pytest.approx(imp.objective_value)
    assert saved.best_commit == imp.commit and saved.base_commit == head
    assert saved.next_index == 7 and saved.evaluated == 4 and saved.proposals == 6
    assert saved.pivots == 2  # the pivot decision, then failed + rejected in a row
    assert git(repo, "rev-parse", f"refs/autoresearch/{run_id}/best") == imp.commit
    assert git(repo, "rev-parse", f"refs/autoresearch/{run_id}/base") == head
    branches = git(repo, "branch", "--list", f"autoresearch/{run_id}/*", "--format=%(refname:short)").split()
    # exp-004 never got a worktree; the check slice's scratch checkout of the best leaves no branch
    assert branches == [f"autoresearch/{run_id}/exp-{i:03d}" for i in (0, 1, 2, 3, 5, 6)]
    for r in (imp, deg1, deg2, forb, more):
        assert git(repo, "rev-parse", r.branch) == r.commit
    assert git(repo, "show", f"{imp.commit}:configs/memory/naive.yaml").count("set_union") == 1

    # --- forbidden edit: refused before anything was written; the attempt is still a (empty) commit
    assert forb.hypothesis == FORBIDDEN["hypothesis"] and forb.edits[0]["path"] == SCORER
    assert forb.parent_commit == imp.commit and forb.diff == ""
    assert git(repo, "show", f"{forb.commit}:{SCORER}") == scorer_before.strip()
    assert (repo / SCORER).read_text(encoding="utf-8") == scorer_before
    assert git(repo, "show", f"refs/autoresearch/{run_id}/best:{SCORER}") == scorer_before.strip()

    # --- hygiene
    assert_clean(repo, run_dir)
    assert git(repo, "rev-parse", "HEAD") == head
    assert [d["record"].experiment_id for k, d in events if k == "experiment"] == [r.experiment_id for r in records]


def test_resume_after_kill_repairs_journal_and_continues(repo: Path, runs: Path, server: OpenAITestServer) -> None:
    run_id = "resume"
    run_dir = runs / run_id
    head = git(repo, "rev-parse", "HEAD")
    server.enqueue(Reply.of_json(IMPROVE))
    st = ResearchLoop(scripted_setup(repo, 1), run_id, llm_opener=opener_for(server)).run()
    assert st.stop_reason == "experiment budget spent (1/1 evaluated)"
    records, _ = read_trajectory(run_dir)
    assert [r.decision for r in records] == ["baseline", "proceed"]
    proceed_commit = records[1].commit

    # a fresh run with the same id refuses to start over
    from research.errors import RunStateError

    with pytest.raises(RunStateError, match="--resume"):
        ResearchLoop(scripted_setup(repo, 1), run_id, llm_opener=opener_for(server)).run()

    # --- simulate a kill: exp-001 journaled but its state write lost, the best ref not moved,
    # a worktree left behind, and the next record cut off mid-line
    state = json.loads((run_dir / "state.json").read_text())
    state.update(next_index=1, best_value=records[0].objective_value, best_commit=head,
                 best_metrics=records[0].metrics, status="running")
    (run_dir / "state.json").write_text(json.dumps(state))
    git(repo, "update-ref", f"refs/autoresearch/{run_id}/best", head)
    git(repo, "worktree", "add", "-q", "-b", f"autoresearch/{run_id}/exp-002", str(run_dir / "worktrees" / "exp-002"), head)
    with open(run_dir / "trajectory.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"run_id": "resume", "index": 2, "experiment_id": "exp-002", "decis')
    assert len(read_trajectory(run_dir)[1]) == 1  # the warning about the cut line

    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["config"]["research"]["budget"]["experiments"] = 2
    (run_dir / "config.json").write_text(json.dumps(cfg))

    # exp-002: a reply that is not JSON (failed, no evaluation); exp-003: a forbidden edit (rejected);
    # neither spends the budget, so exp-004 (evaluated) is the second experiment the budget counts
    server.enqueue(Reply.ok("not json at all"), Reply.ok("nor this"), Reply.of_json(FORBIDDEN),
                   Reply.of_json(DEGRADE))  # a slip and its resample fail one experiment
    loop = ResearchLoop.from_run(run_id, llm_opener=opener_for(server))
    assert loop.resume and loop.setup.research.budget.experiments == 2
    st = loop.run()

    records, warnings = read_trajectory(run_dir, strict=True)  # strict: the cut line is gone
    assert warnings == []
    ids = [r.experiment_id for r in records]
    assert ids == ["exp-000", "exp-001", "exp-002", "exp-003", "exp-004"] and len(set(ids)) == len(ids)
    assert [r.decision for r in records] == ["baseline", "proceed", "failed", "rejected", "iterate"]
    assert all(r.parent_commit == proceed_commit for r in records[2:])
    assert records[4].config_overrides == DEGRADE["config_overrides"] and records[4].objective_value is not None
    assert st.status == "finished" and "(2/2 evaluated)" in st.stop_reason
    saved = load_state(run_dir)
    assert saved.next_index == 5 and saved.evaluated == 2 and saved.proposals == 4
    assert saved.pivots == 1  # the failed + rejected pair, folded again from the journal
    assert saved.best_commit == proceed_commit  # reconciled from the journal
    assert saved.best_value == pytest.approx(records[1].objective_value)
    assert git(repo, "rev-parse", f"refs/autoresearch/{run_id}/best") == proceed_commit
    assert server.pending == 0 and len(server.chat_requests) == 5  # exp-002 asked twice (resample)
    assert_clean(repo, run_dir)


def test_a_runs_memory_overrides_are_its_starting_point(repo: Path, runs: Path, server: OpenAITestServer) -> None:
    """``memsys run memory=naive memory.retrieval.top_k=7``: the baseline and every experiment start from
    the preset with top_k 7 (a commit the run's refs keep), not from the preset alone; the checkout is untouched."""
    head = git(repo, "rev-parse", "HEAD")
    preset = "configs/memory/naive.yaml"
    before = (repo / preset).read_text(encoding="utf-8")
    server.enqueue(Reply.of_json(IMPROVE))
    fast = "memory.embedder.backend=hashing"  # any memory field, not only levers; here it also saves the minute MiniLM takes
    loop = ResearchLoop(scripted_setup(repo, 1, fast, "memory.retrieval.top_k=7", "++memory.retrieval.dense_k=7"), "start",
                        llm_opener=opener_for(server))
    loop.run()
    base, exp = loop.records[0], loop.records[1]
    assert base.decision == "baseline" and base.commit != head
    assert git(repo, "rev-parse", f"{base.commit}^") == head
    started = git(repo, "show", f"{base.commit}:{preset}")
    assert "top_k: 7" in started and "dense_k: 7" in started
    assert git(repo, "rev-parse", f"{exp.commit}^") == base.commit  # the experiment builds on the start
    assert (repo / preset).read_text(encoding="utf-8") == before and git(repo, "rev-parse", "HEAD") == head
    assert_clean(repo, runs / "start")
    assert "autoresearch/start/start" not in git(repo, "branch", "--list")  # the scratch branch is gone, the refs keep it
    assert "backend: hashing" in started
    assert base.metrics["context_tokens"] != _baseline_tokens(repo, runs, server, fast)


def _baseline_tokens(repo: Path, runs: Path, server: OpenAITestServer, *extra: str) -> float:
    """The same baseline without the retrieval overrides (top_k 5): another context, so they reached it."""
    server.enqueue(Reply.of_json(IMPROVE))
    loop = ResearchLoop(scripted_setup(repo, 1, *extra), "plain", llm_opener=opener_for(server))
    loop.run()
    return loop.records[0].metrics["context_tokens"]


def test_a_memory_override_that_does_not_validate_stops_the_run_in_one_line(repo: Path, runs: Path,
                                                                           server: OpenAITestServer) -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="top_k"):
        ResearchLoop(scripted_setup(repo, 1, "memory.retrieval.top_k=many"), "bad-start",
                     llm_opener=opener_for(server)).run()
    assert git(repo, "status", "--porcelain") == "" and not git(repo, "branch", "--list", "*bad-start*")
