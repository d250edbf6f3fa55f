"""Loop state: a fold over the journal, saved atomically after every step (JSON, never pickle).

The journal (trajectory.jsonl) is the single source of truth. Everything an experiment changes
(best, counters, mode, the attempt to iterate from, tokens, the local-LLM switch) is a pure
function of its record (``LoopState.apply``), so a resumed run and a replay rebuild the same state
by folding the records; state.json only adds what no record holds (status, elapsed time, MLflow
parent, sandbox, confirmation).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.atomic import atomic_write_json
from research.errors import RunStateError

STATE_FILE = "state.json"
STATE_VERSION = 1

#: fields a fold over the journal rebuilds (reset before re-folding on resume)
FOLDED = ("best_value", "best_metrics", "best_eval_dir", "next_index", "consecutive_degradations",
          "iterations_on_hypothesis", "pivots", "mode", "current_hypothesis", "tokens", "cost_usd",
          "parent_commit", "parent_eval_dir", "last_rule", "evaluated", "proposals", "local_switched")


@dataclass
class LoopState:
    run_id: str
    repo: str
    base_commit: str
    best_commit: str
    best_value: float | None = None
    best_metrics: dict = field(default_factory=dict)
    best_eval_dir: str | None = None
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
    reader_check: dict = field(default_factory=dict)  # `memsys confirm --reader`: the reader's F1 on held-out questions
    parent_commit: str | None = None  # where the next experiment starts: an attempt being refined, else best
    parent_eval_dir: str | None = None
    last_rule: str = ""  # the decision rule that fired last (shown to the researcher)
    evaluated: int = 0  # experiments that reached a decision on a measured value (the budget counts these)
    proposals: int = 0  # every experiment record after the baseline, rejected ones included
    local_switched: bool = False  # reader and researcher moved to the embedded model (the 403 heal)
    version: int = STATE_VERSION

    @property
    def start_commit(self) -> str:
        return self.parent_commit or self.best_commit

    @property
    def start_eval_dir(self) -> str | None:
        return self.parent_eval_dir or self.best_eval_dir

    def reset_folded(self) -> None:
        fresh = LoopState(self.run_id, self.repo, self.base_commit, self.base_commit)
        for name in FOLDED:
            setattr(self, name, getattr(fresh, name))
        self.best_commit = self.base_commit

    def apply(self, rec: Any, *, degradations_to_pivot: int, eval_dir: str | None = None,
              refine_from_attempt: bool = True) -> None:
        """Fold one journal record into the state (after recording, on resume, in a replay)."""
        self.next_index = rec.index + 1
        self.proposals += rec.index > 0
        reader = rec.reader or {}
        self.tokens += rec.tokens + reader.get("billed_tokens", 0)  # reader cache hits cost nothing
        self.cost_usd += rec.cost_usd + reader.get("cost_usd", 0.0)
        if any(h.get("action") == "switch_local_llm" and str(h.get("result", "")).startswith("switched")
               for h in rec.healing):
            self.local_switched = True
        if rec.index > 0 and rec.decision in ("proceed", "iterate", "pivot", "not_taken"):
            self.evaluated += 1
        if rec.decision == "not_taken":  # a round's other candidate: measured and spent, the round decided elsewhere
            return
        if rec.notes:
            self.last_rule = rec.notes.split("; ")[-1]
        handler = {"baseline": self._best, "proceed": self._best, "pivot": self._pivot, "iterate": self._iterate}
        if rec.decision in handler:
            handler[rec.decision](rec, eval_dir)
            if not refine_from_attempt:
                self.parent_commit = self.parent_eval_dir = None
        elif not (rec.failure or {}).get("is_infrastructure"):  # our side failing says nothing of the change
            self._failed(rec, degradations_to_pivot)

    def _best(self, rec: Any, eval_dir: str | None) -> None:
        self.best_value, self.best_commit, self.best_metrics = rec.objective_value, rec.commit, rec.metrics
        self.best_eval_dir = eval_dir
        self._new_direction("new")

    def _new_direction(self, mode: str) -> None:
        self.consecutive_degradations = self.iterations_on_hypothesis = 0
        self.mode, self.current_hypothesis = mode, None
        self.parent_commit = self.parent_eval_dir = None

    def _pivot(self, rec: Any, eval_dir: str | None) -> None:
        self.pivots += 1
        self._new_direction("pivot")

    def _iterate(self, rec: Any, eval_dir: str | None) -> None:
        self.iterations_on_hypothesis += 1
        self.consecutive_degradations = self.consecutive_degradations + 1 if rec.degraded else 0
        self.mode, self.current_hypothesis = "iterate", rec.hypothesis
        # refine from the attempt itself when it was not worse (AIDE's "improve" step), else from best
        keep = not rec.degraded and rec.commit and eval_dir
        self.parent_commit, self.parent_eval_dir = (rec.commit, eval_dir) if keep else (None, None)

    def _failed(self, rec: Any, degradations_to_pivot: int) -> None:
        """An agent-side failure or a rejected proposal counts as a degradation of its hypothesis."""
        self.consecutive_degradations += 1
        self.iterations_on_hypothesis += 1
        self.last_rule = f"{rec.decision}: {(rec.failure or {}).get('cls', '?')}"
        if rec.decision == "rejected" and self.mode == "iterate":
            self.current_hypothesis = rec.hypothesis or self.current_hypothesis
        if self.consecutive_degradations >= degradations_to_pivot:
            self.pivots += 1
            self._new_direction("pivot")
            self.last_rule = f"pivot: {degradations_to_pivot} failed or rejected attempts in a row"

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
