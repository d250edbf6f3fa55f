"""Loop state, persisted atomically after every step (JSON, never pickle)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.atomic import atomic_write_json
from research.errors import RunStateError

STATE_FILE = "state.json"
STATE_VERSION = 1


@dataclass
class LoopState:
    run_id: str
    repo: str
    base_commit: str
    best_commit: str
    best_value: float | None = None
    best_metrics: dict = field(default_factory=dict)
    best_eval_dir: str | None = None
    noise_floor: float = 0.0
    next_index: int = 0
    consecutive_degradations: int = 0
    iterations_on_hypothesis: int = 0
    pivots: int = 0
    mode: str = "new"
    current_hypothesis: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    mlflow_parent_run_id: str | None = None
    status: str = "running"  # running | finished | stopped
    stop_reason: str | None = None
    sandbox: dict = field(default_factory=dict)  # backend, guarantees, weak (set at start)
    confirmation: dict = field(default_factory=dict)  # held-out test results (never shown to the researcher)
    version: int = STATE_VERSION

    def save(self, run_dir: Path) -> None:
        atomic_write_json(Path(run_dir) / STATE_FILE, asdict(self))

    @classmethod
    def load(cls, run_dir: Path) -> "LoopState":
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            raise RunStateError(f"no loop state at {path}: is '{Path(run_dir).name}' an optimization run?")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunStateError(f"corrupt loop state {path}: {exc.msg}") from exc
        if data.get("version") != STATE_VERSION:
            raise RunStateError(f"{path}: state version {data.get('version')} not supported")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
