"""The trajectory: one JSON record per experiment, appended to runs/<run-id>/trajectory.jsonl.

Versioned (``TRAJECTORY_VERSION``; schema in research/journal/trajectory.schema.json) so a
replay can refuse what it does not understand. Every attempt is journaled, not only
winners: failed and rejected experiments are what the researcher learns from.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from harness.errors import MemsysError

TRAJECTORY_VERSION = 1
TRAJECTORY_FILE = "trajectory.jsonl"

DISCOVERY_TYPES = (
    "bug_fix",
    "architectural_change",
    "prompt_engineering",
    "data_pipeline_repair",
    "evaluation_format_alignment",
    "hyperparameter_tuning",
)
# rejected: refused or no effect, never evaluated; not_taken: evaluated in a round of research.parallel=K
# candidates beside a better one that took the round's decision
DECISIONS = ("baseline", "proceed", "iterate", "pivot", "failed", "rejected", "not_taken")


class TrajectoryError(MemsysError):
    kind = "trajectory"


@dataclass
class Edit:
    """A SEARCH/REPLACE block: replace the first exact occurrence of ``search`` in ``path``."""

    path: str
    search: str
    replace: str


@dataclass
class ExperimentRecord:
    run_id: str
    index: int  # 0 = baseline
    experiment_id: str  # "exp-000"
    proposer: str  # baseline | llm | optuna
    parent_commit: str
    commit: str | None = None
    branch: str | None = None
    hypothesis: str = ""
    discovery_type: str | None = None  # classified from what the change touched (research.journal.discovery)
    proposed_type: str | None = None  # the proposer's own label, kept beside the classified one
    expected_effect: str = ""
    edits: list[dict[str, str]] = field(default_factory=list)
    config_overrides: list[str] = field(default_factory=list)
    diff: str = ""
    diff_stats: dict[str, int] = field(default_factory=dict)  # files, insertions, deletions
    metrics: dict[str, Any] = field(default_factory=dict)
    objective: str = ""
    objective_value: float | None = None
    best_before: float | None = None
    delta: float | None = None  # objective_value - best_before
    delta_rel: float | None = None
    decision: str = "failed"
    failure: dict[str, Any] | None = None  # class, severity, message, file, line, infrastructure
    healing: list[dict[str, Any]] = field(default_factory=list)
    eval_run_id: str | None = None
    mlflow_run_id: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    durations: dict[str, float] = field(default_factory=dict)  # propose_s, apply_s, eval_s, overhead_s, total_s
    started: str = ""
    finished: str = ""
    notes: str = ""
    sandbox: dict[str, Any] = field(default_factory=dict)  # backend and the guarantees it gave
    reader: dict[str, Any] = field(default_factory=dict)  # reader usage counted by the gateway
    cache: dict[str, Any] = field(default_factory=dict)  # what the trusted cache merge shared or refused
    screen: dict[str, Any] = field(default_factory=dict)  # reader-free screen: questions, changed inputs, verdict
    test: dict[str, Any] = field(default_factory=dict)  # paired test against the best (research.evaluation.stats.PairedTest)
    check: dict[str, Any] = field(default_factory=dict)  # the disjoint dev slice checked before the best ref moves
    # the early stop (reader objectives; research/loop/pruning.py): the candidate on nested smaller samples against
    # the best; when "stopped", objective_value is the best's value plus the paired delta there, and metrics are
    # that sample's
    probe: dict[str, Any] = field(default_factory=dict)
    # the leakage screen of the committed diff (benchmarks/leakage): refused, hits with their snippets, seconds
    leakage: dict[str, Any] = field(default_factory=dict)
    # ids of the questions whose gold the researcher's context showed when it proposed this experiment
    shown_questions: list[str] = field(default_factory=list)
    # the paired test on the run's questions whose gold the researcher never saw (a proceed needs it supported)
    never_shown: dict[str, Any] = field(default_factory=dict)
    lesson: str = ""  # one line the loop learned from this experiment (shown to the researcher)
    effective_key: str = ""  # hash of the live part of the resolved config plus the code diff (repeat detection)
    eval_dir: str = ""  # the scored evaluation this record's value comes from, relative to the run folder
    degraded: bool = False  # the decision's one definition of "worse" (research.loop.decide); the state folds it
    seed: int | None = None  # sampling seed of the proposal
    subspace: list[str] = field(default_factory=list)  # hybrid: the levers the LLM handed to TPE
    round_of: int | None = None  # research.parallel: index of the round's first candidate (replay regroups by it)
    version: int = TRAJECTORY_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> "ExperimentRecord":
        v = d.get("version")
        if v != TRAJECTORY_VERSION:
            raise TrajectoryError(f"{where}: trajectory version {v!r} is not supported (this version reads {TRAJECTORY_VERSION})")
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        try:
            return cls(**known)
        except TypeError as exc:
            raise TrajectoryError(f"{where}: malformed experiment record: {exc}") from exc


def append_record(run_dir: Path, rec: ExperimentRecord) -> None:
    """Append one line and fsync: the journal survives a kill right after."""
    path = Path(run_dir) / TRAJECTORY_FILE
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(rec.to_json() + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_trajectory(run_dir: Path, *, strict: bool = False) -> tuple[list[ExperimentRecord], list[str]]:
    """Records in order, plus warnings (e.g. a last line cut off by a kill, which is skipped)."""
    path = Path(run_dir) / TRAJECTORY_FILE
    if not path.exists():
        raise TrajectoryError(f"no trajectory at {path}")
    records, warnings = [], []
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            msg = f"{path}:{n}: incomplete record (cut off mid-line, killed run?); skipped"
            if strict or n != len(lines):
                if strict:
                    raise TrajectoryError(msg)
            warnings.append(msg)
            continue
        records.append(ExperimentRecord.from_dict(d, where=f"{path}:{n}"))
    return records, warnings


def repair_trajectory(run_dir: Path) -> list[str]:
    """Rewrite the file without cut-off lines (atomic), before appending to it again."""
    from harness.atomic import atomic_write_text

    records, warnings = read_trajectory(run_dir)
    if warnings:
        atomic_write_text(Path(run_dir) / TRAJECTORY_FILE, "".join(r.to_json() + "\n" for r in records))
    return warnings


def resume_journal(run_dir: Path) -> tuple[list[ExperimentRecord], list[str]]:
    """The records a resumed run folds, after cutting off a killed run's partial last line (the warnings
    say so); a run killed before its first record has none, which is not an error."""
    if not (Path(run_dir) / TRAJECTORY_FILE).exists():
        return [], []
    warnings = repair_trajectory(run_dir)
    return read_trajectory(run_dir)[0], warnings


def measured_with_key(records: list[ExperimentRecord], key: str) -> ExperimentRecord | None:
    """An earlier record with this effective key that was measured (or is the baseline): asking for it
    again would measure the same code and config twice."""
    for r in records:
        if r.effective_key == key and r.objective_value is not None and r.decision != "failed":
            return r
    return None


def iter_accepted(records: list[ExperimentRecord]) -> Iterator[ExperimentRecord]:
    return (r for r in records if r.decision in ("baseline", "proceed"))
