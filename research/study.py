"""One Optuna study that learns from every evaluated experiment, whoever proposed it.

The study lives in memory and is rebuilt from the journal (trajectory.jsonl) whenever a run
starts or resumes: every evaluated record is added with ``study.add_trial`` as the lever
values of its effective config. So the LLM's trials teach TPE, TPE's trials are in the same
journal the LLM reads, and a killed run cannot leave the study and the journal disagreeing.
Asked trials are only a source of suggestions; they are closed as FAIL at once (TPE ignores
them) and the evaluated config is added when its record is written.

With ``research.study.storage`` set, the evaluated trials are also written to a persistent Optuna
storage (a journal file on a shared filesystem, or a database) under the study's name, each tagged
with its run and experiment, and trials other drivers wrote there are pulled in before every
suggestion. So several drivers (one per machine) search together, the suggestions still come from
an in-memory study (asked-and-failed trials never reach the shared one), and a resumed run never
writes a trial twice.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Collection, Sequence

from memsys.config import MemoryConfig
from research.levers import Lever, catalogue

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


#: the user attribute that names a trial's origin (``<run id>/<experiment index>``) in a shared storage
ORIGIN = "memsys_origin"


def open_storage(spec: str) -> Any:
    """An Optuna storage from ``research.study.storage``: a database URL, else a journal file path."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    from harness.errors import ConfigError

    if "://" in spec:
        try:
            return RDBStorage(spec)
        except Exception as exc:
            raise ConfigError(f"research.study.storage {spec!r}: cannot open the database ({exc})") from None
    path = Path(spec).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    except OSError as exc:
        raise ConfigError(f"research.study.storage {spec!r}: cannot open the journal file ({exc})") from None


class SharedStudy:
    def __init__(self, seed: int = 0, n_startup_trials: int = 5, *, storage: str | None = None,
                 name: str = "memsys", run_id: str = ""):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.seed, self.n_startup_trials, self.run_id = seed, n_startup_trials, run_id
        self.levers = field_levers()
        self.distributions = {lv.id: optuna_distribution(lv) for lv in self.levers}
        self.study = optuna.create_study(direction="maximize", sampler=self._sampler(seed))
        self.n_added = 0
        self.shared = None if storage is None else optuna.create_study(
            storage=open_storage(storage), study_name=name, direction="maximize", load_if_exists=True)
        self._seen: set[str] = set()  # origins already in the in-memory study

    def _sampler(self, seed: int) -> Any:
        return self._optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)

    def _params(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values the study can hold: field levers it knows, inside their ranges."""
        return {k: v for k, v in values.items() if k in self.distributions and _within(self.distributions[k], v)}

    def _add_local(self, params: dict[str, Any], value: float, origin: str) -> None:
        trial = self._optuna.trial.create_trial(params=params, distributions={k: self.distributions[k] for k in params},
                                                value=float(value), user_attrs={ORIGIN: origin})
        self.study.add_trial(trial)
        self._seen.add(origin)
        self.n_added += 1

    def add(self, cfg: MemoryConfig, value: float, index: int | None = None) -> None:
        """One evaluated config (any proposer) with its objective value; experiment ``index`` of this
        run names it in a shared storage, where it is written once however often the run resumes."""
        origin = f"{self.run_id}/{index}" if index is not None else f"{self.run_id}/added-{self.n_added}"
        if origin in self._seen:
            return
        params = self._params(params_of(cfg, self.levers))  # outside a lever's range: the study cannot hold it
        self._add_local(params, value, origin)
        if self.shared is not None and origin not in self._shared_origins():
            trial = self._optuna.trial.create_trial(
                params=params, distributions={k: self.distributions[k] for k in params}, value=float(value),
                user_attrs={ORIGIN: origin})
            self.shared.add_trial(trial)

    def _shared_origins(self) -> set[str]:
        return {str(t.user_attrs.get(ORIGIN)) for t in self.shared.get_trials(deepcopy=False)} if self.shared else set()

    def pull(self) -> int:
        """Add the shared storage's evaluated trials this study has not seen (other drivers'); how many."""
        if self.shared is None:
            return 0
        done = self._optuna.trial.TrialState.COMPLETE
        new = 0
        for t in self.shared.get_trials(deepcopy=False, states=(done,)):
            origin = str(t.user_attrs.get(ORIGIN) or f"foreign/{t.number}")
            if origin in self._seen or t.value is None:
                continue
            self._add_local(self._params(t.params), t.value, origin)
            new += 1
        return new

    def suggest(self, lever_ids: Sequence[str] | None, step_seed: int, absent: Collection[str] = ()) -> dict[str, Any]:
        """TPE values for ``lever_ids`` (all field levers when None, but those the evaluated memsys lacks:
        ``absent``), seeded per step so that a resumed run asks the same question of the same history (a
        shared storage adds other drivers' trials to that history first)."""
        self.pull()
        self.study.sampler = self._sampler(step_seed)
        trial = self.study.ask()
        chosen = [lv for lv in self.levers if (lever_ids is None or lv.id in lever_ids) and lv.id not in absent]
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


def optuna_distribution(lever: Lever) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if lever.kind == "bool":
        return CategoricalDistribution((True, False))
    if lever.kind == "choice":
        return CategoricalDistribution(tuple(lever.choices))
    if lever.kind == "int":
        return IntDistribution(int(lever.low), int(lever.high))
    return FloatDistribution(float(lever.low), float(lever.high))


def params_of(cfg: MemoryConfig, levers: Sequence[Lever]) -> dict[str, Any]:
    """Current value of each lever (macros not in their shape left out), for ``study.add_trial``."""
    out = {}
    for lv in levers:
        value = lv.current(cfg)
        if value is not None:
            out[lv.id] = value
    return out
