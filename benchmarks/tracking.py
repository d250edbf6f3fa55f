"""MLflow logging of evaluations (SQLite backend under runs/, explicit artifact root).

The ``file:`` store is refused by MLflow 3.17, so the backend is SQLite. Keys must
be valid MLflow names: per-category metrics ``f1_cat2`` / ``recall_at_10/2`` are.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.paths import REPO_ROOT, runs_dir

if TYPE_CHECKING:
    from benchmarks.config import EvalSetup
    from benchmarks.datasets.schema import Benchmark
    from benchmarks.result import EvalResult

log = logging.getLogger(__name__)
_KEY_RE = re.compile(r"[^A-Za-z0-9_\-. /]")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{runs_dir() / 'mlflow.db'}"


def artifact_root() -> str:
    return (runs_dir() / "mlartifacts").as_uri()


def ui_command() -> str:
    return f"mlflow ui --backend-store-uri {tracking_uri()} --host 127.0.0.1 --port 5000"


def setup_mlflow(experiment: str):
    """Point MLflow at our store and return the experiment id (created on first use)."""
    import mlflow

    runs_dir().mkdir(parents=True, exist_ok=True)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri())
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return mlflow.create_experiment(experiment, artifact_location=f"{artifact_root()}/{experiment}")
    return exp.experiment_id


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[_KEY_RE.sub("_", key)[:250]] = str(v)[:500]
    return out


def git_state(repo: Path = REPO_ROOT) -> tuple[str, bool]:
    """(commit, dirty) of the code being evaluated; ("unknown", True) outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", True


def log_eval(setup: "EvalSetup", bench: "Benchmark", result: "EvalResult") -> str:
    import mlflow

    exp_id = setup_mlflow(setup.options.mlflow_experiment)
    commit, dirty = git_state(Path(__import__("memsys").__file__).resolve().parents[1])
    tags = {
        "benchmark": bench.name, "split": bench.split, "sample": str(bench.sample),
        "split_version": str(bench.split_version), "git_commit": commit, "git_dirty": str(dirty),
        "llm_model": setup.llm.model if setup.options.reader == "llm" else "none",
        "memory": setup.memory.name, "system": setup.options.system, "run_id": result.run_id,
    }
    if setup.options.parent_run_id:
        tags["mlflow.parentRunId"] = setup.options.parent_run_id
    params = flatten({k: v for k, v in setup.raw.items() if k not in ("parent_run_id",)})
    with mlflow.start_run(experiment_id=exp_id, run_name=result.run_id, tags=tags) as run:
        items = list(params.items())
        for i in range(0, len(items), 90):
            mlflow.log_params(dict(items[i : i + 90]))
        metrics = {_KEY_RE.sub("_", k): float(v) for k, v in result.metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        mlflow.log_metrics(metrics)
        for name in ("predictions.jsonl", "metrics.json", "table.txt", "config.json"):
            p = result.run_dir / name
            if p.exists():
                mlflow.log_artifact(str(p))
        return run.info.run_id
