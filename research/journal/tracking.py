"""MLflow records of an optimization run: one parent run per session, one child per experiment.

The evaluation sandbox cannot write the run's MLflow database, so the loop logs each child
itself from the experiment record and the evaluation's files. Tracking never stops research:
every failure here is a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the paired test's numbers logged as child-run metrics (``test_<key>``) when the record has them
TEST_METRICS = ("n", "mean_delta", "ci_low", "ci_high", "p_better", "p_worse")
#: MLflow's tag-value limit in the oldest version we meet (5000; newer servers take 8000)
TAG_VALUE_LIMIT = 5000


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def tag_value(text: str, limit: int = TAG_VALUE_LIMIT) -> str:
    """``text`` cut to fit an MLflow tag value."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def experiment_tags(rec: Any) -> dict[str, str]:
    """Tags of an experiment's child run: the classified discovery type beside the researcher's own label."""
    from research.journal.taxonomy import rejection_kind

    tags = {"discovery_type": rec.discovery_type or "none", "proposed_type": rec.proposed_type or "none",
            "decision": rec.decision, "commit": rec.commit or "", "branch": rec.branch or "",
            "experiment": rec.experiment_id, "proposer": rec.proposer, "failure": (rec.failure or {}).get("cls", "")}
    kind = rejection_kind(rec)
    if kind:
        tags["rejection"] = kind
    if rec.lesson:
        tags["lesson"] = tag_value(rec.lesson)
    return tags


def experiment_metrics(rec: Any) -> dict[str, float]:
    """The evaluation's numeric metrics (MLflow-safe names), the delta and the paired test's numbers."""
    out = {k.replace("@", "_at_"): v for k, v in numeric(rec.metrics or {}).items()}
    if rec.delta is not None:
        out["delta"] = float(rec.delta)
    test = numeric({k: (rec.test or {}).get(k) for k in TEST_METRICS})
    out.update({f"test_{k}": v for k, v in test.items()})
    return out


def start_parent_run(setup: Any, run_id: str, base_commit: str) -> str | None:
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import setup_mlflow, tracking_uri

        exp = setup_mlflow(setup.eval.options.mlflow_experiment)
        run = MlflowClient(tracking_uri()).create_run(exp, run_name=run_id, tags={
            "kind": "optimization", "run_id": run_id, "proposer": setup.research.proposer,
            "benchmark": setup.eval.benchmark.name, "split": setup.eval.options.split,
            "base_commit": base_commit, "llm_model": setup.eval.llm.model})
        return run.info.run_id
    except Exception as exc:
        log.warning("MLflow parent run not created: %s", exc)
        return None


def log_experiment(state: Any, rec: Any, run_dir: Path, run_id: str) -> None:
    """A nested child run tagged with discovery type (classified and proposed), decision, commit, branch and lesson;
    the metrics, delta and paired test as metrics; diff and proposal as artifacts."""
    pid = state.mlflow_parent_run_id
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import tracking_uri

        c = MlflowClient(tracking_uri())
        if rec.best_before is not None or rec.decision == "baseline":
            c.log_metric(pid, "best_objective", float(state.best_value or 0.0), step=rec.index)
        exp = c.get_run(pid).info.experiment_id
        child = c.create_run(exp, run_name=f"{run_id}-{rec.experiment_id}",
                             tags={"mlflow.parentRunId": pid}).info.run_id
        for k, v in experiment_metrics(rec).items():
            c.log_metric(child, k, v)
        if rec.eval_run_id:
            eval_dir = Path(run_dir) / "evals" / rec.experiment_id / rec.eval_run_id
            for name in ("predictions.jsonl", "metrics.json", "table.txt"):
                if (eval_dir / name).exists():
                    c.log_artifact(child, str(eval_dir / name))
        for k, v in experiment_tags(rec).items():
            c.set_tag(child, k, v)
        c.log_text(child, rec.diff or "(no diff)", "diff.patch")
        c.log_text(child, json.dumps({"hypothesis": rec.hypothesis, "discovery_type": rec.discovery_type,
                                      "proposed_type": rec.proposed_type, "edits": rec.edits,
                                      "config_overrides": rec.config_overrides, "test": rec.test,
                                      "lesson": rec.lesson}, indent=2, default=str), "proposal.json")
        c.set_terminated(child, status="FAILED" if rec.decision in ("failed", "rejected") else "FINISHED")
        rec.mlflow_run_id = child
    except Exception as exc:
        log.warning("MLflow child logging failed for %s: %s", rec.experiment_id, exc)


def finish_parent_run(state: Any, records: list) -> None:
    """The discovery-taxonomy summary on the parent run, then close it."""
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import tracking_uri
        from research.journal.frames import taxonomy_table

        c = MlflowClient(tracking_uri())
        rows = [asdict(r) for r in taxonomy_table(records)]
        c.log_text(state.mlflow_parent_run_id, json.dumps(rows, indent=2, default=str), "taxonomy.json")
        if state.status != "running":
            c.set_terminated(state.mlflow_parent_run_id,
                             status="FINISHED" if state.status == "finished" else "KILLED")
    except Exception as exc:
        log.warning("MLflow summary not logged: %s", exc)
