"""The folder of one optimization run, ``<runs dir>/<run id>/``, and the name of everything in it.

Every file name the run writes is here, so no module spells ``"state.json"`` or ``"evals"`` on
its own. Pure path logic: nothing is created or read, except by ``exists``, ``known`` and
``failed_baseline_journal``.

    config.json          composed config and overrides (written once, read on resume)
    state.json           loop state (written atomically after every step)
    trajectory.jsonl     the journal: one record per experiment
    trajectory.failed-baseline-<n>.jsonl   the journal of a baseline that failed, kept when a resume retries it
    optuna.db            the Optuna study (SQLite)
    confirmation.json    held-out confirmation of baseline and best
    replay.json          a replay's steps (replay runs only)
    report/              ``memsys report`` output (``report-vs-<other>/`` when comparing)
    evals/<exp><tag>-<key>/   one evaluation, keyed by commit and request: ``untrusted/`` (the sandbox's
                         output, picked up by a resumed evaluation) and ``<eval run id>/``
    worktrees/<exp>/     git worktrees of experiments in flight
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.paths import runs_dir
from research.errors import RunStateError

CONFIG_FILE = "config.json"
STATE_FILE = "state.json"
TRAJECTORY_FILE = "trajectory.jsonl"
OPTUNA_FILE = "optuna.db"
CONFIRMATION_FILE = "confirmation.json"
REPLAY_FILE = "replay.json"
REPORT_DIR = "report"
EVALS_DIR = "evals"
WORKTREES_DIR = "worktrees"
#: files whose presence means a run was started in the folder
RUN_MARKERS = (CONFIG_FILE, STATE_FILE, TRAJECTORY_FILE)

# one path component each: no separator, no "." / "..", nothing a shell or a file system reads specially
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class RunDir:
    root: Path

    @classmethod
    def of(cls, run_id: str, runs_root: Path | None = None) -> "RunDir":
        """The folder of ``run_id`` under ``runs_root`` (default: ``harness.paths.runs_dir()``)."""
        return cls(Path(runs_root if runs_root is not None else runs_dir()) / _component(run_id, "run id"))

    @property
    def run_id(self) -> str:
        return self.root.name

    # ------------------------------------------------------------ files
    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    @property
    def trajectory(self) -> Path:
        return self.root / TRAJECTORY_FILE

    def failed_baseline_journal(self) -> Path:
        """Where a resume that measures a failed baseline again keeps the old journal (numbered: it may fail again)."""
        n = 1 + sum(1 for _ in self.root.glob("trajectory.failed-baseline-*.jsonl"))
        return self.root / f"trajectory.failed-baseline-{n}.jsonl"

    @property
    def optuna_db(self) -> Path:
        return self.root / OPTUNA_FILE

    @property
    def confirmation(self) -> Path:
        return self.root / CONFIRMATION_FILE

    @property
    def replay(self) -> Path:
        return self.root / REPLAY_FILE

    # ------------------------------------------------------------ folders
    def report_dir(self, compared_with: str | None = None) -> Path:
        """``report/``, or ``report-vs-<other run>/`` for a side-by-side report."""
        if compared_with is None:
            return self.root / REPORT_DIR
        return self.root / f"{REPORT_DIR}-vs-{re.sub(r'[^A-Za-z0-9_.-]+', '_', compared_with)[:80]}"

    @property
    def evals_root(self) -> Path:
        return self.root / EVALS_DIR

    def evals(self, experiment_id: str, tag: str = "") -> Path:
        """One evaluation of an experiment: ``evals/exp-003``, ``evals/exp-003-h1``, ``evals/exp-000-r1``."""
        return self.evals_root / _component(f"{experiment_id}{tag}", "evaluation folder")

    def eval_run(self, experiment_id: str, eval_run_id: str, tag: str = "") -> Path:
        """The trusted scorer's run folder inside an evaluation (``result.json``, predictions, metrics)."""
        return self.evals(experiment_id, tag) / _component(eval_run_id, "evaluation run id")

    @property
    def worktrees(self) -> Path:
        return self.root / WORKTREES_DIR

    # ------------------------------------------------------------ on disk
    def exists(self) -> bool:
        """A run was started here: its config, state or journal is on disk (a run killed before
        its first record still counts: it is resumed, not started over)."""
        return any((self.root / name).is_file() for name in RUN_MARKERS)

    @staticmethod
    def known(runs_root: Path | None = None) -> list[str]:
        """Ids of the runs under ``runs_root`` (for "no run 'x'; known: ..." messages)."""
        root = Path(runs_root if runs_root is not None else runs_dir())
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if p.is_dir() and RunDir(p).exists())


def _component(name: str, what: str) -> str:
    if not _NAME_RE.match(name or ""):
        raise RunStateError(f"{what} {name!r} is not a plain file name (letters, digits, _ . + -)")
    return name
