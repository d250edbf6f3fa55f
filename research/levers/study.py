"""One Optuna study that learns from every evaluated experiment, whoever proposed it.

The study lives in memory and is rebuilt from the journal (trajectory.jsonl) whenever a run
starts or resumes: every evaluated record is added with ``study.add_trial`` as the lever
values of its effective config. So the LLM's trials teach TPE, TPE's trials are in the same
journal the LLM reads, and a killed run cannot leave the study and the journal disagreeing.
Asked trials are only a source of suggestions; they are closed as FAIL at once (TPE ignores
them) and the evaluated config is added when its record is written.

A config that failed on its own account (``add_infeasible``: the candidate's error, a change to the config
alone) enters as a PRUNED trial that violates the constraint ``INFEASIBLE``. Optuna's TPE ranks every
constraint-violating trial below every feasible one, where a FAIL trial teaches TPE nothing: session 38's reader
run drew confidence abstention (which needs log-probabilities the server did not keep) in five failed experiments.
Replayed from that run's journal (research/perf/bench_infeasible.py, docs/results.md), TPE's next 40 draws
needing log-probabilities went from 30 to 24 with one to three such trials and from 30 to 0 with four. It is a
nudge, not a ban, so an option the endpoint cannot serve is best held (``research.fixed_levers``).
The trial carries no objective value, so nothing reads it as a score.

With ``research.study.storage`` set, the evaluated trials are also written to a persistent Optuna
storage (a journal file on a shared filesystem, or a database) under the study's name, each tagged
with its run and experiment, and trials other drivers wrote there are pulled in before every
suggestion. So several drivers (one per machine) search together, the suggestions still come from
an in-memory study (asked-and-failed trials never reach the shared one), and a resumed run never
writes a trial twice.

With ``research.objectives=[quality, context_tokens]`` the study is multi-objective: each trial holds the
run's objective (maximized) and the mean context tokens the scorer counted (minimized), both read from the
journal record, so a resumed run rebuilds the same front; Optuna's TPE samples it as a multi-objective
sampler and ``study.best_trials`` is the Pareto front. Acceptance never reads the study: it stays the
paired test on quality (research/loop/decide.py).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from harness.errors import ConfigError
from memsys.config import MemoryConfig
from research.levers.catalogue import Lever, catalogue

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
#: what ``research.objectives`` may name, with the direction the study optimizes it in: ``quality`` is the run's
#: objective (``objective``, what acceptance tests), ``context_tokens`` the mean context tokens the scorer counted
OBJECTIVE_DIRECTIONS = {"quality": "maximize", "context_tokens": "minimize"}
#: the constraint a config that failed on its own account violates (Optuna: a value above 0 is infeasible)
INFEASIBLE = "config_failed"
#: the metrics.json key each cost objective reads (quality is the record's objective value)
COST_METRICS = {"context_tokens": "context_tokens"}


def check_objectives(objectives: Sequence[str]) -> None:
    """quality first (acceptance and the study's first value are the run's objective), then known costs, once each."""
    names = list(objectives)
    unknown = [o for o in names if o not in OBJECTIVE_DIRECTIONS]
    if not names or names[0] != "quality" or unknown or len(set(names)) != len(names):
        raise ConfigError(f"research.objectives must start with quality and name each of "
                          f"{' | '.join(OBJECTIVE_DIRECTIONS)} at most once, got {names}")


def trial_values(objective_value: Any, metrics: Mapping[str, Any] | None,
                 objectives: Sequence[str]) -> tuple[float, ...] | None:
    """The study's values of one evaluated record, in ``objectives`` order: quality is its objective value, a
    cost the metric the scorer recorded. None when one is missing or not finite: a point the study cannot rank
    must not enter it as a guess."""
    values = []
    for name in objectives:
        raw = objective_value if name == "quality" else (metrics or {}).get(COST_METRICS[name])
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            return None
        values.append(float(raw))
    return tuple(values)


def pareto_indices(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Positions in ``points`` of the non-dominated ones under ``directions``, as Optuna's ``best_trials``
    sees them (one definition of the front for the study and the report)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=list(directions))
    for values in points:
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, values=list(values)))
    return sorted(t.number for t in study.best_trials)


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
                 name: str = "memsys", run_id: str = "", objectives: Sequence[str] = ("quality",)):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        check_objectives(objectives)
        self._optuna = optuna
        self.seed, self.n_startup_trials, self.run_id = seed, n_startup_trials, run_id
        self.objectives = tuple(objectives)
        self.directions = [OBJECTIVE_DIRECTIONS[o] for o in self.objectives]
        self.levers = field_levers()
        self.distributions = {lv.id: optuna_distribution(lv) for lv in self.levers}
        self.study = optuna.create_study(directions=self.directions, sampler=self._sampler(seed))
        self.n_added = 0
        self.shared = None if storage is None else self._open_shared(storage, name)
        self._seen: set[str] = set()  # origins already in the in-memory study

    def _open_shared(self, storage: str, name: str) -> Any:
        """The shared study ``name``; ConfigError when it exists with other directions (Optuna would load it
        silently, and every trial added later would carry the wrong number of values)."""
        shared = self._optuna.create_study(storage=open_storage(storage), study_name=name,
                                           directions=self.directions, load_if_exists=True)
        found = [d.name.lower() for d in shared.directions]
        if found != self.directions:
            raise ConfigError(f"research.study.storage: study {name!r} optimizes {found}, this run "
                              f"{self.directions} (research.objectives={list(self.objectives)}): name another study")
        return shared

    def values_of(self, objective_value: Any, metrics: Mapping[str, Any] | None) -> tuple[float, ...] | None:
        """This study's values of one evaluated record (``trial_values`` in its objectives' order)."""
        return trial_values(objective_value, metrics, self.objectives)

    def _values(self, value: float | Sequence[float]) -> list[float]:
        """One value per objective (a bare number for a single-objective study, as callers always passed);
        a count that does not match is a caller's bug, never a trial to store with a value missing."""
        values = [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]
        if len(values) != len(self.objectives):
            raise ValueError(f"{len(values)} values for objectives {list(self.objectives)}")
        return values

    def _sampler(self, seed: int) -> Any:
        return self._optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)

    def _params(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values the study can hold: field levers it knows, inside their ranges."""
        return {k: v for k, v in values.items() if k in self.distributions and _within(self.distributions[k], v)}

    def _trial(self, params: dict[str, Any], values: Sequence[float] | None, origin: str) -> Any:
        """A finished trial: COMPLETE with its values, or (values None) PRUNED and infeasible."""
        state = self._optuna.trial.TrialState
        trial = self._optuna.trial.create_trial(
            params=params, distributions={k: self.distributions[k] for k in params},
            values=None if values is None else list(values), user_attrs={ORIGIN: origin},
            state=state.COMPLETE if values is not None else state.PRUNED)
        if values is None:
            trial.set_constraint(INFEASIBLE, 1.0)
        return trial

    def _add_local(self, params: dict[str, Any], values: Sequence[float] | None, origin: str) -> None:
        self.study.add_trial(self._trial(params, values, origin))
        self._seen.add(origin)
        self.n_added += 1

    def add(self, cfg: MemoryConfig, value: float | Sequence[float], index: int | None = None) -> None:
        """One evaluated config (any proposer) with its objective value (one per objective: ``values_of``);
        experiment ``index`` of this run names it in a shared storage, where it is written once however
        often the run resumes."""
        self._add(cfg, self._values(value), index)

    def add_infeasible(self, cfg: MemoryConfig, index: int | None = None) -> None:
        """A config that failed on its own account: TPE draws its region less from now on (module docstring).
        The caller decides what counts (research.failures.infeasible_config)."""
        self._add(cfg, None, index)

    def _add(self, cfg: MemoryConfig, values: list[float] | None, index: int | None) -> None:
        origin = f"{self.run_id}/{index}" if index is not None else f"{self.run_id}/added-{self.n_added}"
        if origin in self._seen:
            return
        params = self._params(params_of(cfg, self.levers))  # outside a lever's range: the study cannot hold it
        self._add_local(params, values, origin)
        if self.shared is not None and origin not in self._shared_origins():
            self.shared.add_trial(self._trial(params, values, origin))

    def _shared_origins(self) -> set[str]:
        return {str(t.user_attrs.get(ORIGIN)) for t in self.shared.get_trials(deepcopy=False)} if self.shared else set()

    def pull(self) -> int:
        """Add the shared storage's evaluated and infeasible trials this study has not seen (other drivers');
        how many."""
        if self.shared is None:
            return 0
        state = self._optuna.trial.TrialState
        new = 0
        for t in self.shared.get_trials(deepcopy=False, states=(state.COMPLETE, state.PRUNED)):
            origin = str(t.user_attrs.get(ORIGIN) or f"foreign/{t.number}")
            infeasible = t.state == state.PRUNED and t.constraints.get(INFEASIBLE, 0.0) > 0
            if origin in self._seen or (t.values is None and not infeasible):
                continue
            self._add_local(self._params(t.params), None if infeasible else t.values, origin)
            new += 1
        return new

    def untried(self, points: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, dict[str, Any]] | None:
        """The first of ``points`` (a name and lever values: ``research.study.warm_start``) that no trial of
        the study holds yet; None when every one is tried. A point is tried when a trial has each of its
        values the study can hold: evaluated (so a resumed run, whose study is rebuilt from the journal, does
        not ask it again), infeasible, or asked in this process."""
        trials = self.study.get_trials(deepcopy=False)
        for name, values in points:
            params = self._params(dict(values))
            if params and not any(_holds(t, params) for t in trials):
                return name, dict(values)
        return None

    def suggest(self, lever_ids: Sequence[str] | None, step_seed: int, absent: Collection[str] = (),
                enqueue: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """TPE values for ``lever_ids`` (all field levers when None, but those the evaluated memsys lacks:
        ``absent``), seeded per step so that a resumed run asks the same question of the same history (a
        shared storage adds other drivers' trials to that history first). ``enqueue``: values this trial
        takes as they are (Optuna's ``enqueue_trial``, its way to start a study from known points); a lever
        it leaves out, or whose value is outside the lever's range, is sampled."""
        self.pull()
        self.study.sampler = self._sampler(step_seed)
        if enqueue:
            self.study.enqueue_trial(self._params(dict(enqueue)))
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


def _holds(trial: Any, params: Mapping[str, Any]) -> bool:
    """``trial`` has every value of ``params`` (as suggested, or as enqueued and not yet asked)."""
    have = trial.params or trial.system_attrs.get("fixed_params", {})
    return all(k in have and have[k] == v for k, v in params.items())


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
