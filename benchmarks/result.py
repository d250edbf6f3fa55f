"""The record a fixed-config evaluation ends with: where its run folder is and what it measured.

Why a module of its own: the runner writes it and MLflow tracking (benchmarks/tracking.py) logs it;
kept apart, neither module imports the other to name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class EvalResult:
    run_id: str
    run_dir: Path
    metrics: dict[str, Any]
    objective: str
    objective_value: float | None
    n_questions: int
    n_errors: int
    wall_s: float
    mlflow_run_id: str | None = None
    table: str = ""
