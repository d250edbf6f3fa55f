"""``kill -9`` an optimization run at seeded random moments, ``memsys run --resume`` it, until it finishes.

The real CLI (``python -m launcher.main run``) runs in a process group of its own, on a throwaway
git repo, with the Optuna proposer and retrieval-only evaluations in the process sandbox; each
kill is SIGKILL to the whole group, as a user's ``kill -9 -<pgid>`` (or a lost machine) does.
Once it finishes, the journal, the state, the best ref and git's worktrees must agree.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.paths import REPO_ROOT
from research.journal.trajectory import read_trajectory
from tests.support.lives import Life, end_orphans, rev, worktree_paths
from tests.support.loop import git

EXPERIMENTS = 6  # evaluated experiments (screened-out proposals do not spend the budget)
MAX_PROPOSALS = 3 * EXPERIMENTS  # research.loop.max_proposals_factor (default 3) x the budget
EVALUATED = ("proceed", "iterate", "pivot")
KILLS = 10  # one before the baseline is recorded, then nine at seeded moments (each life pays ~3 s of imports)
SEED = 20260113
POLL_S = 0.005
LIFE_TIMEOUT_S = 300.0  # one process, killed or not (a cold store build takes about a minute on 2 cores)
# the hashing embedder: what is checked here is the journal, the refs and the worktrees, not what the
# vectors mean, and TPE's draws of the index-text levers rebuild stores that MiniLM takes minutes on
RUN_ARGS = ("research.proposer=optuna", "reader=none", "sample=tiny", "mlflow=false", "workers=1",
            "research.sandbox.backend=process", "research.sandbox.allow_weak=true", "research.confirm.enabled=false",
            "research.loop.smoke_sample=null", "memory.embedder.backend=hashing")


@dataclass(frozen=True)
class Kill:
    """When to kill one life of the run: when ``trigger`` fires in that life, ``delay_s`` later."""

    trigger: str  # state: state.json exists | startup: seconds after launch (imports, resume, pruning)
    #               | worktree: an experiment's worktree was created | eval: ditto, mid-evaluation
    #               | record: a record was appended (between the journal write and what follows it)
    delay_s: float


def next_kill(rng: random.Random, decisions: list[str]) -> Kill:
    """A seeded kill for the next life; once the next record may be the last (one evaluation or one
    proposal left), only kills that come before it (a life that writes the last record ends the run,
    and the kills must not run out first)."""
    trigger = "startup" if near_end(decisions) else rng.choice(("startup", "worktree", "eval", "eval", "record"))
    delay = {"startup": rng.uniform(0.3, 2.5), "worktree": rng.uniform(0.0, 0.3), "eval": rng.uniform(0.5, 6.0),
             "record": 0.0}[trigger]
    return Kill(trigger, delay)


def journal_lines(run_dir: Path) -> int:
    """Complete records in the journal (a line cut off by a kill does not count)."""
    try:
        return (run_dir / "trajectory.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def journal_decisions(run_dir: Path) -> list[str]:
    """Decisions of the complete records in the journal, in order (a line cut off by a kill does not count)."""
    try:
        lines = (run_dir / "trajectory.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line)["decision"])
        except (json.JSONDecodeError, KeyError):
            continue
    return out


def near_end(decisions: list[str]) -> bool:
    """The next record may end the run: the budget's last evaluation or the last proposal the cap allows."""
    proposals = decisions[1:]
    return sum(d in EVALUATED for d in proposals) >= EXPERIMENTS - 1 or len(proposals) >= MAX_PROPOSALS - 1


def fresh_worktree(run_dir: Path, since: float) -> bool:
    """A worktree folder was created (or changed) since ``since``: an experiment is in flight."""
    wt = run_dir / "worktrees"
    try:
        return any(p.is_dir() and p.stat().st_ctime >= since for p in wt.iterdir())
    except FileNotFoundError:
        return False


def fired(kill: Kill, run_dir: Path, life: Life, start_lines: int) -> bool:
    if kill.trigger == "state":
        return (run_dir / "state.json").exists()
    if kill.trigger == "startup":
        return True
    if kill.trigger == "record":
        return journal_lines(run_dir) > start_lines
    return fresh_worktree(run_dir, life.started)


def live_through(life: Life, kill: Kill, run_dir: Path) -> bool:
    """Let the life run until the kill fires, then kill it; False if it exited first."""
    start_lines = journal_lines(run_dir)
    deadline = time.monotonic() + LIFE_TIMEOUT_S
    while not fired(kill, run_dir, life, start_lines):
        if not life.alive():
            return False
        if time.monotonic() > deadline:
            life.kill()
            pytest.fail(f"{kill} never fired within {LIFE_TIMEOUT_S:.0f}s; output:\n{life.tail()}")
        time.sleep(POLL_S)
    time.sleep(kill.delay_s)
    return life.kill()


def start_args(repo: Path, run_id: str, experiments: int) -> list[str]:
    return [*RUN_ARGS, f"research.repo={repo}", f"research.budget.experiments={experiments}", f"run_id={run_id}"]


# ---------------------------------------------------------------------------------------------
def test_run_killed_before_the_baseline_resumes(repo: Path, runs: Path, tmp_path: Path) -> None:
    run_id = "killed-early"
    run_dir = runs / run_id
    head = git(repo, "rev-parse", "HEAD")
    first = Life(start_args(repo, run_id, 0), tmp_path / "first.log")
    assert live_through(first, Kill("state", 0.0), run_dir), f"the run ended before it was killed:\n{first.tail()}"
    end_orphans(run_dir)
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    assert state["status"] == "running" and not (run_dir / "trajectory.jsonl").exists()

    again = Life(["--resume", run_id], tmp_path / "resume.log")
    rc = again.wait(LIFE_TIMEOUT_S)
    assert rc == 0, f"memsys run --resume {run_id} exited {rc}:\n{again.tail()}"
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    assert state["status"] == "finished"
    start = state["base_commit"]  # HEAD with the run's memory overrides (RUN_ARGS) committed on top
    assert rev(repo, f"{start}^") == head and rev(repo, f"refs/autoresearch/{run_id}/best") == start
    assert worktree_paths(repo) == [str(repo)]


def test_a_run_whose_baseline_failed_measures_it_again_when_resumed(repo: Path, runs: Path, tmp_path: Path,
                                                                   locomo_path: Path) -> None:
    run_id = "failed-baseline"
    run_dir = runs / run_id
    first = Life([*start_args(repo, run_id, 1), "research.sandbox.wall_timeout_s=0.3"], tmp_path / "first.log")
    assert first.wait(LIFE_TIMEOUT_S) == 0, first.tail()
    assert "stopped: the baseline evaluation failed" in first.tail()
    [failed], _ = read_trajectory(run_dir)
    assert failed.decision != "baseline" and failed.failure["cls"] == "timeout"
    assert [(h["action"], h["result"]) for h in failed.healing] == [("continue", "failed again (timeout)")]

    with pytest.raises(subprocess.CalledProcessError) as refused:  # what the run measures cannot change
        subprocess.run([sys.executable, "-m", "launcher.main", "run", "--resume", run_id, "sample=small"],
                       cwd=REPO_ROOT, check=True, capture_output=True, text=True)
    assert "'sample=small' would change what the run measures" in refused.value.stderr

    again = Life(["--resume", run_id, "research.sandbox.wall_timeout_s=null"], tmp_path / "resume.log")
    assert again.wait(LIFE_TIMEOUT_S) == 0, again.tail()
    baseline, *rest = read_trajectory(run_dir)[0]
    assert [r.index for r in rest] == list(range(1, len(rest) + 1))  # the experiments go on from it
    assert baseline.experiment_id == "exp-000" and baseline.decision == "baseline"
    assert baseline.objective_value is not None and baseline.healing == []
    kept = (run_dir / "trajectory.failed-baseline-1.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(kept) == 1 and json.loads(kept[0])["failure"]["cls"] == "timeout"
    saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert saved["config"]["research"]["sandbox"]["wall_timeout_s"] is None
    assert saved["overrides"][-1] == "research.sandbox.wall_timeout_s=null"
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    assert state["status"] == "finished" and state["best_value"] >= baseline.objective_value


@pytest.mark.slow
def test_killed_again_and_again_the_run_finishes_consistent(repo: Path, runs: Path, tmp_path: Path) -> None:
    run_id = "killed"
    run_dir = runs / run_id
    t0 = time.monotonic()
    rng = random.Random(SEED)
    done: list[tuple[Kill, int]] = []  # each kill, with the records the journal held after it
    orphaned: list[int] = []
    life = Life(start_args(repo, run_id, EXPERIMENTS), tmp_path / "life-00.log")
    kill = Kill("state", 0.0)  # the first: before the baseline is recorded
    while len(done) < KILLS:
        if not live_through(life, kill, run_dir):
            break
        done.append((kill, journal_lines(run_dir)))
        orphaned += end_orphans(run_dir)
        life = Life(["--resume", run_id], tmp_path / f"life-{len(done):02d}.log")
        kill = next_kill(rng, journal_decisions(run_dir))
    rc = life.wait(LIFE_TIMEOUT_S)
    elapsed = time.monotonic() - t0
    shown = "\n".join(f"  kill {i:2d}: {k.trigger:8} +{k.delay_s:.2f}s -> {n} record(s)" for i, (k, n) in enumerate(done))
    print(f"\n{len(done)} kills, {len(orphaned)} orphaned sandbox process(es) ended, {elapsed:.0f}s\n{shown}")
    assert rc == 0, f"after {len(done)} kill(s), memsys run exited {rc}:\n{shown}\n{life.tail()}"
    assert len(done) == KILLS, f"the run finished after only {len(done)} kills:\n{shown}"

    # --- the journal: every experiment exactly once, in order; the budget counts the evaluated ones
    records, warnings = read_trajectory(run_dir)
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    assert warnings == []
    n = len(records)
    shown_records = [(r.experiment_id, r.decision) for r in records]
    assert [r.index for r in records] == list(range(n)), (shown_records, state.get("stop_reason"))
    assert [r.experiment_id for r in records] == [f"exp-{i:03d}" for i in range(n)]
    assert records[0].decision == "baseline" and records[-1].decision in EVALUATED, shown_records
    assert sum(r.decision in EVALUATED for r in records[1:]) == EXPERIMENTS, shown_records
    assert all(r.decision in (*EVALUATED, "rejected", "failed") for r in records[1:]), shown_records
    assert n - 1 <= MAX_PROPOSALS

    # --- the state: the fold of that journal
    assert state["status"] == "finished", state.get("stop_reason")
    assert state["stop_reason"] == f"experiment budget spent ({EXPERIMENTS}/{EXPERIMENTS} evaluated)"
    assert (state["evaluated"], state["proposals"], state["next_index"]) == (EXPERIMENTS, n - 1, n)

    # --- the best ref is the best accepted record's commit
    accepted = [r for r in records if r.decision in ("baseline", "proceed") and r.objective_value is not None]
    assert accepted, [r.decision for r in records]
    best = max(accepted, key=lambda r: r.objective_value)
    assert rev(repo, f"refs/autoresearch/{run_id}/best") == best.commit
    assert state["best_commit"] == best.commit

    # --- no stale worktree; each journaled branch holds its record's commit
    assert worktree_paths(repo) == [str(repo)]
    wt = run_dir / "worktrees"
    assert not wt.exists() or not any(wt.iterdir())
    for r in records:
        if r.branch and r.commit:
            assert rev(repo, r.branch) == r.commit, f"{r.experiment_id}: branch {r.branch}"
