"""A run's results as pandas DataFrames: what the report's tables and users' notebooks start from.

One row per experiment (``experiments_frame``), its per-category metrics (``category_frame``), the
discovery taxonomy (``taxonomy_frame``, a groupby over the experiments) and the run-vs-run summary
(``compare_frame``). Pure: records in, frames out; ``write_csv`` is the one edge that writes files.
The conventions (what counts as accepted, which delta) are research.journal.taxonomy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from research.journal.taxonomy import (
    ACCEPTED_DECISIONS,
    UNTAGGED,
    category_keys,
    cost_time_row,
    delta_of,
    failure_class,
    number,
    rejection_kind,
    run_summary,
    start_value,
)
from research.journal.trajectory import DISCOVERY_TYPES, ExperimentRecord, read_trajectory

#: CSV files ``memsys report --csv`` writes beside report.html
TRAJECTORY_CSV = "trajectory.csv"
CATEGORIES_CSV = "categories.csv"
TAXONOMY_CSV = "taxonomy.csv"
COMPARE_CSV = "compare.csv"

TAXONOMY_COLUMNS = ["discovery_type", "count", "accepted", "cumulative_delta", "mean_delta", "cumulative_delta_rel",
                    "experiments"]


_EMPTY = ExperimentRecord(run_id="", index=0, experiment_id="", proposer="", parent_commit="")  # gives the columns


def _experiment_row(rec: ExperimentRecord) -> dict[str, Any]:
    cost = cost_time_row(rec)
    return {
        "index": rec.index, "experiment_id": rec.experiment_id, "proposer": rec.proposer, "decision": rec.decision,
        "discovery_type": rec.discovery_type or None, "proposed_type": rec.proposed_type or None,
        "objective": rec.objective, "objective_value": number(rec.objective_value),
        "best_before": number(rec.best_before), "delta": delta_of(rec), "delta_rel": number(rec.delta_rel),
        "rejection": rejection_kind(rec), "failure_class": failure_class(rec),
        "propose_s": cost.propose_s, "eval_s": cost.eval_s, "overhead_s": cost.overhead_s, "total_s": cost.total_s,
        "tokens": cost.tokens, "cost_usd": cost.cost_usd, "node": (rec.sandbox or {}).get("node") or None,
        "commit": rec.commit, "parent_commit": rec.parent_commit, "branch": rec.branch,
        "hypothesis": rec.hypothesis, "lesson": rec.lesson, "eval_run_id": rec.eval_run_id,
        "mlflow_run_id": rec.mlflow_run_id, "started": rec.started, "finished": rec.finished,
    }


def experiments_frame(records: Sequence[ExperimentRecord]) -> pd.DataFrame:
    """One row per experiment in journal order, with the running best of accepted experiments."""
    df = pd.DataFrame([_experiment_row(r) for r in records], columns=list(_experiment_row(_EMPTY)))
    accepted_values = df["objective_value"].where(df["decision"].isin(ACCEPTED_DECISIONS))
    df["best_so_far"] = accepted_values.astype(float).cummax().ffill()  # cummax leaves NaN where a row has none
    return df


def category_frame(records: Sequence[ExperimentRecord]) -> pd.DataFrame:
    """Per-category metrics, one row per experiment (NaN where an experiment has no such metric)."""
    keys = category_keys(records)
    rows = [{"experiment_id": r.experiment_id, "decision": r.decision,
             **{k: number((r.metrics or {}).get(k)) for k in keys}} for r in records]
    return pd.DataFrame(rows, columns=["experiment_id", "decision", *keys])


def _taxonomy_order(types: Sequence[str]) -> list[str]:
    extra = sorted(t for t in types if t not in DISCOVERY_TYPES and t != UNTAGGED)
    return list(DISCOVERY_TYPES) + extra + ([UNTAGGED] if UNTAGGED in types else [])


def taxonomy_frame(records: Sequence[ExperimentRecord]) -> pd.DataFrame:
    """One row per discovery type (all six, then unknown types, then untagged): experiments of the type
    (baseline excluded), accepted (``proceed``), the sum and mean of the accepted deltas and the sum as
    a share of the start value. Means are over accepted deltas that are known; None when there are none."""
    df = experiments_frame(records)
    df = df[df["decision"] != "baseline"].assign(
        discovery_type=lambda d: d["discovery_type"].fillna(UNTAGGED),
        is_accepted=lambda d: d["decision"] == "proceed")
    df = df.assign(accepted_delta=df["delta"].where(df["is_accepted"]))
    grouped = df.groupby("discovery_type", sort=False)
    out = pd.DataFrame({
        "count": grouped.size(), "accepted": grouped["is_accepted"].sum(),
        "cumulative_delta": grouped["accepted_delta"].sum(), "known": grouped["accepted_delta"].count(),
        "experiments": grouped["experiment_id"].agg(list)})
    out = out.reindex(_taxonomy_order(list(out.index)))
    out["experiments"] = [e if isinstance(e, list) else [] for e in out["experiments"]]
    out = out.fillna({"count": 0, "accepted": 0, "cumulative_delta": 0.0, "known": 0})
    out = out.astype({"count": int, "accepted": int, "known": int, "cumulative_delta": float})
    out["mean_delta"] = (out["cumulative_delta"] / out["known"]).where(out["known"] > 0)
    start = start_value(records)
    out["cumulative_delta_rel"] = out["cumulative_delta"] / abs(start) if start else math.nan
    return out.rename_axis("discovery_type").reset_index()[TAXONOMY_COLUMNS]


def node_frame(records: Sequence[ExperimentRecord]) -> pd.DataFrame:
    """Per executor node (research.executor=ray): experiments whose evaluation it ran, and their seconds."""
    df = experiments_frame(records).dropna(subset=["node"])
    grouped = df.groupby("node", sort=True)
    out = pd.DataFrame({"experiments": grouped.size(), "eval_s": grouped["eval_s"].sum(),
                        "mean_eval_s": grouped["eval_s"].mean(), "total_s": grouped["total_s"].sum()})
    return out.rename_axis("node").reset_index()


def summary_series(records: Sequence[ExperimentRecord]) -> pd.Series:
    """A run's headline numbers (research.journal.taxonomy.RunSummary) as one column."""
    s = run_summary(records)
    return pd.Series({
        "objective": s.objective or "?", "experiments": s.experiments, "proceeds": s.decisions.get("proceed", 0),
        "rejected before evaluation": sum(s.rejections.values()), "start": s.start, "best": s.best,
        "improvement": s.improvement, "improvement (rel)": s.improvement_rel, "total time": s.total_s,
        "cost": s.cost_usd, "tokens": s.tokens}, dtype=object)


def compare_frame(runs: Sequence[tuple[str, Sequence[ExperimentRecord]]]) -> pd.DataFrame:
    """Runs side by side: one column per run (the run id; two runs may share one), one row per headline number."""
    return pd.concat([summary_series(records) for _, records in runs], axis=1, keys=[run_id for run_id, _ in runs])


def load_frame(run: str | Path) -> pd.DataFrame:
    """A run's experiments as a DataFrame, from a run folder or a run id under the runs folder."""
    from harness.paths import runs_dir

    run_dir = Path(run)
    if not run_dir.is_dir():
        run_dir = runs_dir() / str(run)
    records, _warnings = read_trajectory(run_dir)
    return experiments_frame(records)


def write_csv(records: Sequence[ExperimentRecord], out_dir: Path) -> list[Path]:
    """trajectory.csv, categories.csv and taxonomy.csv in ``out_dir`` (atomic writes)."""
    from harness.atomic import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    frames = {TRAJECTORY_CSV: experiments_frame(records), CATEGORIES_CSV: category_frame(records),
              TAXONOMY_CSV: taxonomy_frame(records).assign(experiments=lambda d: d["experiments"].str.join(" "))}
    paths = []
    for name, frame in frames.items():
        atomic_write_text(out_dir / name, frame.to_csv(index=False))
        paths.append(out_dir / name)
    return paths


@dataclass
class TaxonomyRow:
    discovery_type: str
    count: int = 0  # experiments of this type (baseline excluded, failed included)
    accepted: int = 0  # decision == "proceed"
    cumulative_delta: float = 0.0  # sum of accepted deltas
    mean_delta: float | None = None  # cumulative_delta / accepted deltas known
    cumulative_delta_rel: float | None = None  # cumulative_delta / start value
    experiments: list[str] = field(default_factory=list)


def taxonomy_table(records: Sequence[ExperimentRecord]) -> list[TaxonomyRow]:
    """One row per discovery type (all six, in DISCOVERY_TYPES order), then unknown types and untagged:
    research.journal.frames.taxonomy_frame (a groupby) as typed rows."""
    frame = taxonomy_frame(records).astype(object)
    rows = frame.where(frame.notna(), None).to_dict("records")
    return [TaxonomyRow(**row) for row in rows]
