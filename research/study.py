"""One Optuna study that learns from every evaluated experiment, whoever proposed it.

The study lives in memory and is rebuilt from the journal (trajectory.jsonl) whenever a run
starts or resumes: every evaluated record is added with ``study.add_trial`` as the lever
values of its effective config. So the LLM's trials teach TPE, TPE's trials are in the same
journal the LLM reads, and a killed run cannot leave the study and the journal disagreeing.
Asked trials are only a source of suggestions; they are closed as FAIL at once (TPE ignores
them) and the evaluated config is added when its record is written.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from memsys.config import MemoryConfig
from research.levers import Lever, catalogue, optuna_distribution, params_of

log = logging.getLogger(__name__)


def field_levers(levers: Sequence[Lever] | None = None) -> list[Lever]:
    """Levers that set exactly one field: the study's parameters (macros are combinations of them)."""
    return [lv for lv in (levers if levers is not None else catalogue()) if tuple(lv.sets) == (lv.id,)]


def _within(dist: Any, v: Any) -> bool:
    if hasattr(dist, "choices"):
        return v in dist.choices
    try:
        return dist.low <= v <= dist.high and not isinstance(v, bool)
    except TypeError:
        return False


def format_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class SharedStudy:
    def __init__(self, seed: int = 0, n_startup_trials: int = 5):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.seed, self.n_startup_trials = seed, n_startup_trials
        self.levers = field_levers()
        self.distributions = {lv.id: optuna_distribution(lv) for lv in self.levers}
        self.study = optuna.create_study(direction="maximize", sampler=self._sampler(seed))
        self.n_added = 0

    def _sampler(self, seed: int) -> Any:
        return self._optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)

    def add(self, cfg: MemoryConfig, value: float) -> None:
        """One evaluated config (any proposer) with its objective value."""
        params = {}
        for k, v in params_of(cfg, self.levers).items():
            if _within(self.distributions[k], v):  # outside the lever's range: the study cannot hold it
                params[k] = v
        trial = self._optuna.trial.create_trial(params=params, distributions={k: self.distributions[k] for k in params},
                                                value=float(value))
        self.study.add_trial(trial)
        self.n_added += 1

    def suggest(self, lever_ids: Sequence[str] | None, step_seed: int) -> dict[str, Any]:
        """TPE values for ``lever_ids`` (all field levers when None), seeded per step so that a
        resumed run asks the same question of the same history."""
        self.study.sampler = self._sampler(step_seed)
        trial = self.study.ask()
        chosen = [lv for lv in self.levers if lever_ids is None or lv.id in lever_ids]
        values = {}
        for lv in chosen:
            d = self.distributions[lv.id]
            if isinstance(d, self._optuna.distributions.CategoricalDistribution):
                values[lv.id] = trial.suggest_categorical(lv.id, d.choices)
            elif isinstance(d, self._optuna.distributions.IntDistribution):
                values[lv.id] = trial.suggest_int(lv.id, d.low, d.high, step=d.step, log=d.log)
            else:
                values[lv.id] = round(trial.suggest_float(lv.id, d.low, d.high, log=d.log), 3)
        self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)  # the record adds the real trial
        return values


def overrides_of(values: dict[str, Any]) -> list[str]:
    return [f"{k}={format_value(v)}" for k, v in values.items()]
