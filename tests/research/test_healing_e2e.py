"""Self-healing end to end: injected faults through the real research loop.

One loop run (module fixture) on a throwaway git repo: baseline, then four experiments whose
scripted proposals inject a fault into ``memsys/retrieve/merge.py`` or whose reader endpoint
fails. Real pieces: git worktrees and commits, the process sandbox running ``benchmarks.cli
eval`` (LoCoMo tiny, reader=llm against :class:`OpenAITestServer`, objective recall@10), the
openai SDK over HTTP. The server's handler plays both roles, told apart by the system message:
the researcher (proposals in order; the inverse edit when asked for a repair) and the reader.

exp-001  RuntimeError in merge_set_union     -> repair_edit (scripted repair) -> healed; the repair restores
                                                the parent's code, so the reader-free screen rejects it (no effect)
exp-002  import of a missing module          -> revert_import_edit            -> healed, evaluated
exp-003  sleeps forever, 6 s wall timeout    -> smaller_sample, give_up       -> failed
exp-004  reader endpoint answers 403         -> auth, infrastructure          -> failed, not a degradation

Only exp-002 is evaluated, and only evaluated experiments spend the budget: the run ends at the proposal
cap (research.loop.max_proposals_factor=1 x 4 experiments).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from research.config import load_run_setup
from research.journal.trajectory import ExperimentRecord, read_trajectory
from research.loop.research_loop import ResearchLoop
from research.loop.state import LoopState
from research.proposers.llm import PROMPTS
from research.workspace.repo import make_scratch_repo
from tests.support.loop import git
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("healing")]  # one recorded run per module

MERGE = "memsys/retrieve/merge.py"
TOP = "from __future__ import annotations\n"
SEARCH_PATH = "    order = [pos for pos, _ in dense]\n"  # inside merge_set_union (naive: dense_only calls it)
RESEARCHER_SYSTEM = (PROMPTS / "researcher_system.txt").read_text(encoding="utf-8").strip().splitlines()[0]
WALL_TIMEOUT_S = 300.0  # normal evaluations (about 20 s each)
SHORT_TIMEOUT_S = 6.0  # exp-003 only

RUNTIME_FAULT = '    raise RuntimeError("injected fault")\n' + SEARCH_PATH
IMPORT_FAULT = TOP + "\nimport injected_missing_module_xyz\n"
SLEEP_FAULT = TOP + "\nimport time\ntime.sleep(10**6)\n"
MORE_CANDIDATES = ["retrieval.top_k=10", "retrieval.dense_k=10"]


def proposal(hyp: str, edits: list[tuple[str, str]], overrides: list[str] | None = None) -> dict[str, Any]:
    return {"hypothesis": hyp, "discovery_type": "architectural_change", "expected_effect": "recall@10 up",
            "config_overrides": overrides or [],
            "edits": [{"path": MERGE, "search": s, "replace": r} for s, r in edits]}


RUNTIME = proposal("guard the merge", [(SEARCH_PATH, RUNTIME_FAULT)])
RUNTIME_REPAIR = proposal("guard the merge", [(RUNTIME_FAULT, SEARCH_PATH)])
DEPENDENCY = proposal("more candidates, merged with a faster library", [(TOP, IMPORT_FAULT)], MORE_CANDIDATES)
TIMEOUT = proposal("wait for the index to warm up", [(TOP, SLEEP_FAULT)])
AUTH = proposal("a slightly deeper context", [], ["retrieval.top_k=12", "retrieval.dense_k=12"])


@dataclass
class Script:
    """Rule-based replies: researcher proposals in order, the repair for exp-001, reader answers."""

    proposals: list[dict[str, Any]]
    served: int = 0
    reader_status: dict[int, int] = field(default_factory=lambda: {4: 403})  # experiment index -> HTTP status
    repair_prompts: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    reader_calls: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        msgs = body.get("messages") or []
        system = msgs[0]["content"] if msgs and msgs[0].get("role") == "system" else ""
        user = msgs[-1].get("content", "") if msgs else ""
        with self.lock:
            if system.startswith(RESEARCHER_SYSTEM):
                if "That proposal was not evaluated" in user:  # the static screen's re-ask: every proposal here is new
                    self.unexpected.append(f"duplicate re-ask during experiment {self.served}")
                    return Reply.ok("UNSCRIPTED")
                if "Your last change failed" in user:
                    self.repair_prompts.append(user)
                    if self.served == 1:
                        return Reply.of_json(RUNTIME_REPAIR)
                    self.unexpected.append(f"repair request during experiment {self.served}")
                    return Reply.ok("UNSCRIPTED")
                if self.served >= len(self.proposals):
                    self.unexpected.append("proposal request past the script")
                    return Reply.ok("UNSCRIPTED")
                self.served += 1
                return Reply.of_json(self.proposals[self.served - 1])
            # the reader (memsys.answer's system prompt), inside the sandboxed evaluation
            self.reader_calls[self.served] = self.reader_calls.get(self.served, 0) + 1
            status = self.reader_status.get(self.served)
            if status:
                return Reply.error(status, "the key has expired")
            return Reply.ok("I do not know.")


@dataclass
class Run:
    loop: ResearchLoop
    repo: Path
    run_dir: Path
    state: LoopState
    records: list[ExperimentRecord]
    script: Script
    before: dict[str, tuple[int, int]]  # experiment -> (consecutive degradations, pivots) when proposed
    after: dict[str, tuple[int, int]]  # ... when journaled
    wall_timeouts: dict[str, float]  # experiment -> wall timeout its evaluations ran under

    def rec(self, index: int) -> ExperimentRecord:
        return self.records[index]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("healing")
    repo = make_scratch_repo(tmp / "repo")
    script = Script([RUNTIME, DEPENDENCY, TIMEOUT, AUTH])
    with pytest.MonkeyPatch.context() as mp, OpenAITestServer(script) as server:
        # MEMSYS_CACHE_DIR stays the session cache of tests/conftest.py (stores built once)
        mp.setenv("MEMSYS_RUNS_DIR", str(tmp / "runs"))
        setup = load_run_setup([
            "reader=llm", "objective=recall_at_10", "sample=tiny", "mlflow=false", "workers=2",
            "llm=openai", f"llm.base_url={server.base_url}", "llm.model=scripted", "++llm.cache=false",
            "++llm.max_retries=0", "research.proposer=llm", f"research.repo={repo}",
            "research.budget.experiments=4", "research.loop.max_proposals_factor=1", "research.loop.smoke_sample=null",
            "research.loop.local_fallback=false",  # the real local model would take minutes here
            "research.sandbox.backend=process", "research.sandbox.allow_weak=true", "research.confirm.enabled=false",
            f"research.sandbox.wall_timeout_s={WALL_TIMEOUT_S}",
        ])
        before: dict[str, tuple[int, int]] = {}
        after: dict[str, tuple[int, int]] = {}
        timeouts: dict[str, float] = {}
        holder: list[ResearchLoop] = []

        def on_event(kind: str, data: dict[str, Any]) -> None:
            loop = holder[0]
            st, sc = loop.state, loop.setup.research.sandbox
            if kind == "stage" and data["stage"] == "propose":
                exp = data["experiment"]
                before[exp] = (st.consecutive_degradations, st.pivots)
                sc.wall_timeout_s = SHORT_TIMEOUT_S if exp == "exp-003" else WALL_TIMEOUT_S
                timeouts[exp] = sc.wall_timeout_s
            elif kind == "experiment":
                after[data["record"].experiment_id] = (st.consecutive_degradations, st.pivots)

        loop = ResearchLoop(setup, "heal", on_event=on_event)
        holder.append(loop)
        state = loop.run()
        run_dir = tmp / "runs" / "heal"
        records, warnings = read_trajectory(run_dir, strict=True)
        assert warnings == []
        yield Run(loop, repo, run_dir, state, records, script, before, after, timeouts)


# ---------------------------------------------------------------------------------------------
def evals_of(run: Run, experiment_id: str) -> list[str]:
    """Names of one experiment's evaluation folders (``evals/<exp-id><tag>-<key>``)."""
    return sorted(p.name for p in (run.run_dir / "evals").glob(f"{experiment_id}-*"))


def test_loop_ran_every_experiment(run: Run) -> None:
    assert [r.experiment_id for r in run.records] == [f"exp-{i:03d}" for i in range(5)]
    assert run.records[0].decision == "baseline" and run.records[0].objective_value is not None
    assert run.state.status == "finished"
    assert run.state.stop_reason == "proposal cap reached (4 proposals, 1 evaluated)"
    assert (run.state.evaluated, run.state.proposals) == (1, 4)
    assert run.script.unexpected == []
    assert run.script.served == 4 and len(run.script.repair_prompts) == 1  # only exp-001 asked for a repair
    # hygiene: every worktree removed, the user's checkout untouched
    assert git(run.repo, "status", "--porcelain") == ""
    assert git(run.repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_runtime_error_repaired_by_the_researcher(run: Run) -> None:
    rec = run.rec(1)
    # the failed attempt is classified and sent back; the repair was committed and ran
    assert rec.healing == [{"attempt": 1, "failure": "runtime_error", "action": "repair_edit",
                            "reason": rec.healing[0]["reason"], "result": "retrying"}]
    # the researcher got the error, where it happened, and the diff of the attempt
    prompt = run.script.repair_prompts[0]
    assert "RuntimeError: injected fault" in prompt and f"at {MERGE}:" in prompt
    assert '+    raise RuntimeError("injected fault")' in prompt
    # the repair is its own commit on the experiment branch, on top of the failed attempt
    assert git(run.repo, "log", "-1", "--format=%s", rec.commit) == "exp-001: repair 1"
    assert git(run.repo, "rev-parse", rec.branch) == rec.commit
    attempt = git(run.repo, "rev-parse", f"{rec.commit}^")
    assert "injected fault" in git(run.repo, "show", f"{attempt}:{MERGE}")
    assert "injected fault" not in git(run.repo, "show", f"{rec.commit}:{MERGE}")
    assert git(run.repo, "rev-parse", f"{attempt}^") == rec.parent_commit
    assert [e["replace"] for e in rec.edits] == [RUNTIME_FAULT, SEARCH_PATH]  # proposal + repair
    # the repaired code is the parent's: the experiment's net change is empty, and the reader-free screen
    # (re-run on the repaired code) finds every reader input identical: rejected, the reader never asked
    assert rec.diff == "" and rec.effective_key == run.records[0].effective_key
    assert rec.decision == "rejected" and rec.failure["cls"] == "no_effect" and rec.failure["stage"] == "screen"
    assert rec.screen["verdict"] == "no effect" and rec.screen["changed"] == 0 and rec.screen["questions"] > 0
    assert rec.objective_value is None and rec.eval_run_id is None and rec.eval_dir == ""
    assert rec.notes == f"known value {run.records[0].objective_value:.4f}"
    screens = evals_of(run, "exp-001")
    assert len(screens) == 2 and screens[0].startswith("exp-001-screen-") and screens[1].startswith("exp-001-screen1-")
    assert not (run.run_dir / "evals" / screens[0] / "result.json").exists()  # the failed attempt
    assert (run.run_dir / "evals" / screens[1] / "result.json").is_file()  # the repaired code
    assert run.script.reader_calls.get(1, 0) == 0
    assert "eval_s" not in rec.durations and rec.durations["screen_s"] > 0
    # rejected: not a budgeted experiment, but a degradation of its hypothesis
    assert run.before["exp-001"] == (0, 0) and run.after["exp-001"] == (1, 0)


def test_dependency_healed_by_reverting_the_import_edit(run: Run) -> None:
    rec = run.rec(2)
    assert rec.failure["cls"] == "dependency" and "injected_missing_module_xyz" in rec.failure["message"]
    assert [(h["failure"], h["action"], h["result"]) for h in rec.healing] == [
        ("dependency", "revert_import_edit", "retrying")]
    assert rec.decision in ("proceed", "iterate", "pivot") and rec.objective_value is not None
    # the import edit is gone; the rest of the proposal (the config overrides) survived
    assert rec.edits == [] and rec.config_overrides == MORE_CANDIDATES
    assert git(run.repo, "log", "-1", "--format=%s", rec.commit) == "exp-002: revert import edit"
    assert "injected_missing_module_xyz" not in git(run.repo, "show", f"{rec.commit}:{MERGE}")
    assert "injected_missing_module_xyz" not in rec.diff
    preset = git(run.repo, "show", f"{rec.commit}:configs/memory/naive.yaml")
    assert "top_k: 10" in preset and "dense_k: 10" in preset
    assert len(run.script.repair_prompts) == 1  # no researcher call: the healer reverted it alone
    # the reverted code was screened again (its inputs changed), then evaluated with the reader
    assert rec.screen["verdict"] == "changed" and rec.screen["changed"] > 0
    assert rec.eval_run_id == "heal-exp-002-h1" and rec.eval_dir.startswith("evals/exp-002-h1-")
    assert (run.run_dir / rec.eval_dir / "result.json").is_file()
    assert run.script.reader_calls.get(2, 0) > 0
    # the key the loop judges repeats on is the evaluated commit's, not the failed attempt's
    assert rec.effective_key == run.loop.commits.effective_key_at(rec.commit) != run.records[0].effective_key


def test_timeout_smaller_sample_then_give_up_and_the_loop_continues(run: Run) -> None:
    rec = run.rec(3)
    assert run.wall_timeouts["exp-003"] == SHORT_TIMEOUT_S
    assert rec.failure["cls"] == "timeout" and "wall-clock timeout" in rec.failure["message"]
    assert not rec.failure["is_infrastructure"]  # the edit hangs, not the endpoint
    assert rec.failure["stage"] == "screen"  # the reader-free screen is where it hung: the reader never ran
    assert [(h["failure"], h["action"]) for h in rec.healing] == [("timeout", "smaller_sample"),
                                                                  ("timeout", "give_up")]
    assert rec.healing[1]["reason"] == "still failing on the smaller sample"
    assert rec.decision == "failed" and rec.objective_value is None and rec.eval_run_id is None
    screens = evals_of(run, "exp-003")
    assert len(screens) == 2 and screens[0].startswith("exp-003-screen-") and screens[1].startswith("exp-003-screen1-")
    assert run.script.reader_calls.get(3, 0) == 0
    assert "eval_s" not in rec.durations and rec.durations["screen_s"] < 6 * SHORT_TIMEOUT_S
    # an agent failure: it counts as a degradation
    (deg0, piv0), (deg1, piv1) = run.before["exp-003"], run.after["exp-003"]
    assert deg1 == deg0 + 1 and piv1 == piv0
    # ... and the loop went on with the next experiment under the normal timeout, from where exp-003 started:
    # exp-002 iterated without a significant fall, so the attempts refining it start from its commit
    dep, nxt = run.rec(2), run.rec(4)
    assert dep.decision == "iterate" and not dep.degraded and dep.commit != run.state.best_commit
    assert nxt.experiment_id == "exp-004" and nxt.parent_commit == rec.parent_commit == dep.commit
    assert run.wall_timeouts["exp-004"] == WALL_TIMEOUT_S
    assert run.script.reader_calls.get(4, 0) > 0  # exp-004 was evaluated (its reader was called)


def test_auth_failure_is_infrastructure_not_a_degradation(run: Run) -> None:
    rec = run.rec(4)
    assert rec.failure["cls"] == "auth" and rec.failure["is_infrastructure"] is True
    assert "403" in rec.failure["message"] and rec.failure["stage"] == "evaluate"
    assert [(h["failure"], h["action"]) for h in rec.healing] == [("auth", "switch_local_llm")]
    assert "restart with llm=local" in rec.healing[0]["result"]
    assert rec.decision == "failed" and rec.objective_value is None
    assert rec.screen["verdict"] == "changed"  # the reader-free screen passed; the reader's endpoint refused
    # not charged to the agent: consecutive degradations (1, from exp-003) and pivots unchanged
    assert run.before["exp-004"] == run.after["exp-004"]
    assert run.before["exp-004"][0] == 1
    assert run.state.consecutive_degradations == 1
