"""A run folder as a report reads it: every file read leniently (a missing or broken one becomes a
warning, never an exception), and the replay's steps lined up with the experiments they repeat.

Why apart from the HTML: ``memsys report`` must draw something for a run killed at any moment, and benches
(research/perf/bench_proposers.py) load runs the same way without rendering them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from research.journal.taxonomy import (
    number,
)
from research.journal.trajectory import TRAJECTORY_FILE, ExperimentRecord, TrajectoryError, read_trajectory

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
REPLAY_FILE = "replay.json"
CONFIG_FILE = "config.json"  # written by research/loop/research_loop.py: {"config": <composed eval config>, "overrides": [...]}


# --- loading -------------------------------------------------------------------
@dataclass
class RunData:
    run_dir: Path
    records: list[ExperimentRecord]
    warnings: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)  # config.json's "config" (the composed eval config)

    @property
    def run_id(self) -> str:
        return str(self.state.get("run_id") or next((r.run_id for r in self.records if r.run_id), self.run_dir.name))


def _read_json(path: Path, warnings: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        warnings.append(f"{path}: unreadable ({exc}); ignored")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{path}: not a JSON object; ignored")
        return None
    return data


def _read_records_leniently(run_dir: Path, warnings: list[str]) -> list[ExperimentRecord]:
    """Every line that parses; the others become warnings (read_trajectory stops at the first bad one)."""
    records = []
    lines = (run_dir / TRAJECTORY_FILE).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(ExperimentRecord.from_dict(json.loads(line), where=f"{run_dir / TRAJECTORY_FILE}:{n}"))
        except (json.JSONDecodeError, TrajectoryError) as exc:
            warnings.append(f"{run_dir / TRAJECTORY_FILE}:{n}: skipped ({exc})")
    return records


def _fill_nulls(rec: ExperimentRecord) -> None:
    """Explicit nulls in optional list / dict / text fields become empty values (hand-edited or foreign files)."""
    for name, f in ExperimentRecord.__dataclass_fields__.items():
        if getattr(rec, name) is None and f.default_factory in (list, dict):
            setattr(rec, name, f.default_factory())
        elif getattr(rec, name) is None and f.default == "":
            setattr(rec, name, "")


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    warnings: list[str] = []
    state = _read_json(run_dir / STATE_FILE, warnings) or {}
    replay = _read_json(run_dir / REPLAY_FILE, warnings)
    config = (_read_json(run_dir / CONFIG_FILE, warnings) or {}).get("config")
    config = config if isinstance(config, dict) else {}
    if not (run_dir / TRAJECTORY_FILE).exists():
        if replay is None and not state:
            raise TrajectoryError(f"no trajectory at {run_dir / TRAJECTORY_FILE}")
        warnings.append(f"no {TRAJECTORY_FILE} in {run_dir} yet")
        return RunData(run_dir, [], warnings, state, replay, config)
    try:
        records, read_warnings = read_trajectory(run_dir)
        warnings.extend(read_warnings)
    except TrajectoryError:
        records = _read_records_leniently(run_dir, warnings)
    for rec in records:
        _fill_nulls(rec)
        if number(rec.objective_value) is None and rec.decision not in ("failed", "rejected"):
            warnings.append(f"{rec.experiment_id}: decision {rec.decision!r} without an objective value")
    warnings.extend(length_warnings(records))
    return RunData(run_dir, records, warnings, state, replay, config)


# --- J, the LLM judge's accuracy -----------------------------------------------------
@dataclass(frozen=True)
class JudgeRow:
    """One evaluated experiment's J beside its F1, with what J must be read with (benchmarks.judge.run's metrics)."""

    experiment_id: str
    decision: str
    f1: float | None
    j: float | None
    false_accept_vague: float | None
    false_accept_specific: float | None
    length_ratio: float | None
    flag: str  # research.proposers.lessons.length_flag: J raised with answers too long ("" when not)


PROXY_BENCH = "proxy.json"  # research/perf/bench_proxy.py's output under runs/bench/


def load_proxy_validity(bench_dir: Path | None = None) -> dict[str, Any] | None:
    """The latest proxy-validity measurement on this machine (runs/bench/proxy.json), None when there is none
    or it cannot be read (the report then names the command that measures it)."""
    from harness.paths import runs_dir

    path = (bench_dir or runs_dir() / "bench") / PROXY_BENCH
    found = _read_json(path, []) if path.is_file() else None
    return found if found and isinstance(found.get("agreement"), dict) else None


def run_budget(run: RunData) -> Any:
    """The scorer's context budget the run was measured at (its composed config)."""
    return run.config.get("context_budget_tokens")


def judge_rows(records: list[ExperimentRecord]) -> list[JudgeRow]:
    """The experiments whose evaluation carried a judge, in order."""
    from research.proposers.lessons import length_flag

    rows = []
    for rec in records:
        m = rec.metrics or {}
        if "judge_protocol" not in m:
            continue
        f1 = number(m.get("f1_cat1_4")) if m.get("f1_cat1_4") is not None else number(m.get("f1"))
        rows.append(JudgeRow(rec.experiment_id, rec.decision, f1, number(m.get("j")),
                             number(m.get("judge_false_accept_vague")), number(m.get("judge_false_accept_specific")),
                             number(m.get("length_ratio")), length_flag(rec).strip(" ()")))
    return rows


def length_warnings(records: list[ExperimentRecord]) -> list[str]:
    """One warning per experiment that raised J with answers longer than the judge's length limit."""
    return [f"{r.experiment_id}: {r.flag}" for r in judge_rows(records) if r.flag]


# --- replay --------------------------------------------------------------------
@dataclass
class ReplayStep:
    step: int
    experiment_id: str
    recorded: float | None
    replayed: float | None
    decision: str
    replayed_decision: str
    holds: bool | None
    status: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.recorded is None or self.replayed is None else self.replayed - self.recorded


def _first(d: dict[str, Any], *keys: str) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def replay_steps(run: RunData) -> list[ReplayStep]:
    """replay.json's steps (research/replay.py); what a step leaves out is taken from the original run
    when it sits next to the replay, and from the replay's own trajectory."""
    replay = run.replay or {}
    raw = replay.get("steps") or replay.get("per_step") or []
    original: list[ExperimentRecord] = []
    orig_dir = run.run_dir.parent / str(replay.get("original_run_id", ""))
    if replay.get("original_run_id") and (orig_dir / TRAJECTORY_FILE).exists():
        try:
            original = read_trajectory(orig_dir)[0]
        except TrajectoryError as exc:
            run.warnings.append(f"original run {orig_dir}: {exc}")
    by_id = {r.experiment_id: r for r in [*run.records, *original]}  # the original's wins
    by_index = {r.index: r for r in original}
    steps = []
    for n, s in enumerate(x for x in raw if isinstance(x, dict)):
        idx = _first(s, "step", "index")
        known = by_id.get(str(s.get("experiment_id")))
        idx = idx if isinstance(idx, int) else known.index if known else n
        orig = by_index.get(idx) if original else None
        recorded = number(_first(s, "recorded", "recorded_value", "original"))
        if recorded is None and orig is not None:
            recorded = number(orig.objective_value)
        decision = str(_first(s, "decision", "recorded_decision") or (orig.decision if orig else ""))
        replayed_decision = str(_first(s, "replayed_decision", "replay_decision") or "")
        holds = _first(s, "decision_holds", "still_holds", "holds")
        if not isinstance(holds, bool):
            holds = (replayed_decision == decision) if replayed_decision and decision else None
        exp_id = str(_first(s, "experiment_id") or (orig.experiment_id if orig else f"step-{idx}"))
        steps.append(ReplayStep(idx, exp_id, recorded, number(_first(s, "replayed", "replayed_value", "replay")),
                                decision, replayed_decision, holds, str(s.get("status") or "")))
    return steps
