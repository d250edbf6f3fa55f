"""Schema of ``memsys run`` configs (configs/run.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from benchmarks.config import EvalSetup, load_eval_setup
from harness.errors import ConfigError
from memsys.config import compose, validate

PROPOSERS = ("llm", "hybrid", "optuna", "random", "alternate")
EXECUTORS = ("local", "ray")
RAY_MODES = ("auto", "always", "never")  # research.ray.ship and .gateway_relay


@dataclass
class BudgetConfig:
    experiments: int = 8
    wall_time_s: float = 7200.0
    tokens: int = 2_000_000
    usd: float = 5.0


@dataclass
class LoopConfig:
    min_rel_improvement: float = 0.005
    # a gain proceeds only when the paired per-question test against the best says p_better < alpha;
    # a fall is a degradation only when p_worse < alpha (research.loop.decide)
    alpha: float = 0.05
    degradations_to_pivot: int = 2
    max_iterations_per_hypothesis: int = 3
    max_pivots: int = 5
    ceiling_window: int = 4
    ceiling_band: float = 0.002
    smoke_sample: str | None = "tiny"  # the smaller sample a timed-out or OOM-killed evaluation is retried on
    refine_from_attempt: bool = True  # iterate continues from the attempt being refined when it was not worse (else best)
    screen: bool = True  # reject a candidate whose objective-visible inputs equal its parent's, before the reader runs
    check: bool = True  # before the best ref moves, the gain must hold on a disjoint dev slice (complement of sample)
    # the committed diff is screened against the benchmark's dev and test data before evaluation (benchmarks/leakage)
    leakage_screen: bool = True
    # a gain must also be supported on the run's questions whose gold the researcher was never shown
    never_shown_check: bool = True
    # at most this share of the run's sample is ever shown with its gold (diagnosis examples draw from the
    # questions shown before once it is reached), so never-shown questions are left to decide
    max_shown_fraction: float = 0.25
    max_proposals_factor: int = 3  # proposals (rejected ones included) stop at this multiple of the experiment budget
    max_repairs: int = 3
    local_fallback: bool = True  # heal auth failures of a remote endpoint by switching to the embedded model
    # a proposal that repeats an evaluated change is sent back this many times, sampled at this
    # temperature (a deterministic small model returns the same reply to the same question)
    duplicate_reasks: int = 2
    duplicate_temperature: float = 0.8
    failed_questions_shown: int = 5
    # the researcher's context in tokens (research/proposers/context.py): a number for any model, or auto to
    # follow the model (research.researcher.local_context_tokens / hosted_context_tokens; research.proposers.factory)
    context_budget_tokens: int | str = "auto"
    # early stop (reader objectives only; research/loop/pruning.py): a candidate is first answered on these nested
    # named samples, smallest first (those not smaller than the run's own sample are skipped); after each, Optuna's
    # WilcoxonPruner compares its per-question scores with the best's and stops a clearly worse one (p < probe_p, at
    # least probe_min_questions paired). Otherwise the full evaluation follows, and the answers so far come back
    # from the reply cache. []: every candidate is answered in full. Chosen over the paired-CI probe it replaced by
    # research/perf/bench_pruning.py (docs/results.md, "Multi-fidelity")
    probe_samples: list[str] = field(default_factory=lambda: ["tiny", "small"])
    probe_p: float = 0.1
    probe_min_questions: int = 10

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"research.loop.alpha must be in (0, 1), got {self.alpha}")
        if not 0.0 < self.probe_p < 1.0:
            raise ConfigError(f"research.loop.probe_p must be in (0, 1), got {self.probe_p}")
        if self.probe_min_questions < 2:
            raise ConfigError(f"research.loop.probe_min_questions must be >= 2, got {self.probe_min_questions}")
        budget = self.context_budget_tokens
        if budget != "auto" and (isinstance(budget, str) or budget < 1):
            raise ConfigError(f"research.loop.context_budget_tokens must be a number of tokens or auto, got {budget!r}")


@dataclass
class SandboxConfig:
    backend: str = "auto"  # auto picks the strongest backend that works here
    # None: as `memsys eval` scales it (research.evaluation.two_half.eval_wall_timeout: 1800 s, plus 90 s a question
    # with the reader); a fixed 1800 s killed a 152-question reader baseline on a busy 2-core machine
    wall_timeout_s: float | None = None
    memory_gb: float = 8.0
    # a backend without filesystem and network isolation (process) lets the evaluated code
    # reach the scorer, the run folder and the network: refused unless the user says so
    allow_weak: bool = False


@dataclass
class ConfirmConfig:
    """Held-out confirmation when a run ends: baseline and best on the test split, scored once,
    never shown to the researcher."""

    enabled: bool = True
    split: str = "test"
    sample: str | None = None  # None: the run's own sample name (tiny, small, full) on the test split
    # the dev gain counts as confirmed when the paired test on the held-out questions supports it (its CI above
    # 0) and keeps at least this share of the dev gain; else every place that prints the result says NOT CONFIRMED
    min_kept: float = 0.5


@dataclass
class ResearcherConfig:
    """How the LLM researcher replies (research.proposers.llm)."""

    mode: str = "auto"  # menu (schema-constrained lever choice) | code (SEARCH/REPLACE edits) | auto (by model)
    temperature: float = 0.7  # > 0 so runs explore; each step's seed is recorded and replies are cached
    max_tokens: int = 0  # reply cap; 0: 384 for the menu, 1024 for code
    max_changes: int = 2  # lever changes per menu reply
    hybrid_trials: int = 3  # TPE trials per LLM hypothesis under research.proposer=hybrid
    hybrid_coupled: int = 0  # levers TPE also tunes beside the LLM's: those its levers wake or un-cap; 0 = none
    hybrid_explore_first: int = 2  # the run's first experiments are TPE draws over the whole space (hybrid)
    hybrid_explore_on_pivot: bool = True  # and one such draw after each pivot, before the next hypothesis
    batch: bool = True  # research.parallel=K: one request for K different hypotheses; false: K single requests
    # research.loop.context_budget_tokens=auto: the embedded model's budget (its prompt and reply must fit
    # llm.local.n_ctx), and any other backend's (room for the retriever, the pyramid and the answer code at once;
    # held within llm.context_window when that is set)
    local_context_tokens: int = 2500
    hosted_context_tokens: int = 16000


@dataclass
class RayConfig:
    """Where ``research.executor=ray`` runs evaluations (research.executor.RayExecutor)."""

    address: str | None = None  # a running cluster (ray://host:10001 or host:6379); None: a local instance
    num_cpus: int | None = None  # size of the local instance; None: this machine's cores
    cpus_per_eval: float = 1.0  # CPUs Ray reserves per evaluation (at most cores / this run at once)
    max_retries: int = 2  # re-runs of an evaluation whose worker or node died (on another node when one is left)
    # the candidate tree and public view a node lacks (or holds different, by digest) come from the driver
    # through Ray's object store: auto (when missing or different) | always | never (fail instead)
    ship: str = "auto"
    # the reader reaches the driver's gateway (and its one budget) through a relay socket on the node:
    # auto (on nodes other than the driver's) | always | never (every node must see the gateway's socket)
    gateway_relay: str = "auto"
    node_cache: str | None = None  # where a node keeps shipped content; None: <tmp>/memsys-node-cache on the node
    node_cache_keep: int = 32  # shipped trees a node keeps besides those in use; older ones are removed
    # with the embedded model (llm.backend=local): auto = each node's readers use that node's own server
    # (research.execution.node_llm; cache and budget stay at the driver's gateway) | driver = all use the driver's
    node_llm: str = "auto"
    connect_attempts: int = 3  # tries at joining ``address`` when the connection itself fails

    def __post_init__(self) -> None:
        if self.cpus_per_eval <= 0 or self.max_retries < 0 or (self.num_cpus is not None and self.num_cpus < 1) \
                or self.node_cache_keep < 0 or self.connect_attempts < 1:
            raise ConfigError("research.ray: cpus_per_eval must be > 0, max_retries >= 0, num_cpus >= 1, "
                              "node_cache_keep >= 0, connect_attempts >= 1")
        for name, value in (("ship", self.ship), ("gateway_relay", self.gateway_relay)):
            if value not in RAY_MODES:
                raise ConfigError(f"research.ray.{name} must be {' | '.join(RAY_MODES)}, got {value!r}")
        if self.node_llm not in ("auto", "driver"):
            raise ConfigError(f"research.ray.node_llm must be auto | driver, got {self.node_llm!r}")


@dataclass
class StudyConfig:
    """Where the Optuna study that every proposer learns from is kept (research/levers/study.py).

    ``storage`` null: in memory, rebuilt from the run's journal. Else an Optuna journal file on a
    filesystem the drivers share (file-locked; the choice for NFS) or a database URL
    (``sqlite:///...``, ``postgresql://...``): several ``memsys run`` drivers with the same study
    ``name`` then learn from each other's evaluated trials.
    """

    storage: str | None = None
    name: str | None = None  # null: <benchmark>-<split>-<sample>-<objective> (trials are comparable only then)
    # presets of the run's repo (configs/memory/<name>.yaml) whose lever values TPE's first whole-space draws
    # take, in order, through Optuna's enqueue_trial; levers the run holds keep the run's values
    warm_start: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        import re

        bad = [n for n in self.warm_start if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_\-]*", str(n))]
        if bad:
            raise ConfigError(f"research.study.warm_start: {bad[0]!r} is not a preset name (configs/memory/<name>.yaml)")


@dataclass
class ExecutionConfig:
    """Where evaluations run: the part of ``research.*`` that ``memsys eval`` reads too (configs/eval.yaml)."""

    executor: str = "local"  # local (this process, one after another) | ray (research.ray)
    ray: RayConfig = field(default_factory=RayConfig)

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigError(f"research.executor must be {' | '.join(EXECUTORS)}, got {self.executor!r}")


@dataclass
class ResearchConfig:
    proposer: str = "llm"  # llm | hybrid | optuna | random | alternate
    seed: int = 0  # seeds the samplers and the researcher's sampling (recorded; replay uses the reply cache)
    repo: str | None = None
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    confirm: ConfirmConfig = field(default_factory=ConfirmConfig)
    researcher: ResearcherConfig = field(default_factory=ResearcherConfig)
    executor: str = "local"  # local | ray: where evaluations run (proposing, deciding, scoring stay here)
    ray: RayConfig = field(default_factory=RayConfig)
    parallel: int = 1  # candidates per round, evaluated at once (research.loop.round); 1: one experiment at a time
    study: StudyConfig = field(default_factory=StudyConfig)
    # levers (ids, or memory keys such as pyramid.budget_tokens) the run keeps at its own values: never
    # offered, sampled or accepted (research.levers.scope.held_levers)
    fixed_levers: list[str] = field(default_factory=list)
    # what the shared study optimizes: [quality] (one objective), or [quality, context_tokens] (multi-objective
    # TPE: the Pareto front of quality against context cost). Acceptance is the paired test on quality either way
    objectives: list[str] = field(default_factory=lambda: ["quality"])

    def __post_init__(self) -> None:
        ExecutionConfig(self.executor, self.ray)  # one check of the choice
        if self.parallel < 1:
            raise ConfigError(f"research.parallel must be >= 1, got {self.parallel}")
        from research.levers.study import check_objectives  # the names and directions live with the study

        check_objectives(self.objectives)

    @property
    def execution(self) -> ExecutionConfig:
        return ExecutionConfig(self.executor, self.ray)


@dataclass
class RunSetup:
    eval: EvalSetup
    research: ResearchConfig
    overrides: list[str]


def study_name(setup: RunSetup) -> str:
    """``research.study.name``, else ``<benchmark>-<split>-<sample>-<objective>@<context budget>`` plus the cost
    objectives: trials are comparable only when measured on the same questions, metric and budget, and a
    multi-objective study cannot share a storage entry with a single-objective one (research/levers/study.py)."""
    ev, rc = setup.eval, setup.research
    if rc.study.name:
        return rc.study.name
    costs = "".join(f"+{o}" for o in rc.objectives if o != "quality")
    capped = "-reader" if ev.options.reader_at_budget else ""  # the reader's prompt held to the budget too
    return (f"{ev.benchmark.name}-{ev.options.split}-{ev.options.sample}-{ev.objective}"
            f"@{ev.options.context_budget_tokens}{capped}{costs}")


def user_memory_overrides(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """The ``memory.<field>=value`` overrides of a command line (not ``memory=<preset>``), without
    Hydra's ``+``/``++`` prefixes, in the form the preset editor takes."""
    out = []
    for ov in overrides:
        key, sep, value = ov.lstrip("+").partition("=")
        if sep and key.startswith("memory."):
            out.append(f"{key.removeprefix('memory.')}={value}")
    return out


def load_run_setup(overrides: Sequence[str] = (), *, optimizing: bool = True) -> RunSetup:
    """``optimizing``: the setup of a run the researcher steers, which may only see dev (a replay
    of a finished run may evaluate on test)."""
    ev = load_eval_setup(overrides, config_name="run")
    cfg = compose("run", overrides)
    rc = validate(ResearchConfig, cfg.research, where="research config")
    if optimizing and ev.options.split != "dev":
        raise ConfigError(f"memsys run optimizes on the dev split only (got split={ev.options.split}): the test split "
                          "is held out for the confirmation at the end of the run (memsys confirm <run>)")
    if rc.proposer not in PROPOSERS:
        raise ConfigError(f"research.proposer must be {' | '.join(PROPOSERS)}, got {rc.proposer!r}")
    from research.levers.scope import held_levers

    held_levers(rc.fixed_levers)  # an unknown entry is named here, not after the baseline
    unknown = [s for s in rc.loop.probe_samples if s not in ev.benchmark.samples]
    if unknown:
        raise ConfigError(f"research.loop.probe_samples: {unknown[0]!r} is not a sample of {ev.benchmark.name} "
                          f"(known: {', '.join(sorted(ev.benchmark.samples))}); [] turns the early stop off")
    return RunSetup(ev, rc, list(overrides))


#: what ``memsys run --resume <run> key=value`` may change: how long, where and how thriftily the run goes on, not
#: what it measures (memory, benchmark, sample, objective, reader or proposer would make its records incomparable)
# research.loop.probe_*: how cheaply a clearly worse candidate is stopped, not how a full evaluation measures;
# research.fixed_levers and research.study.warm_start: where the search may go next, not how anything is measured
RESUMABLE_KEYS = ("research.budget.", "research.sandbox.", "research.ray.", "research.executor", "workers",
                  "research.loop.probe_", "research.fixed_levers", "research.study.warm_start")


def resume_overrides(raw: dict, overrides: Sequence[str]) -> dict:
    """The saved resolved config with ``overrides`` applied; ConfigError naming one that is not resumable."""
    from omegaconf import OmegaConf

    if not overrides:
        return raw
    cfg = OmegaConf.create(raw)
    for item in overrides:
        key, eq, _ = item.lstrip("+").partition("=")
        if not eq or not any(key == k.rstrip(".") or key.startswith(k) for k in RESUMABLE_KEYS):
            raise ConfigError(f"--resume takes only {', '.join(k.rstrip('.') + ('*' if k.endswith(('.', '_')) else '') for k in RESUMABLE_KEYS)} "
                              f"overrides; {item!r} would change what the run measures: start a new run for it")
        dotted = OmegaConf.from_dotlist([item.lstrip("+")])
        OmegaConf.update(cfg, key, OmegaConf.select(dotted, key), merge=True)
    return OmegaConf.to_container(cfg)  # type: ignore[return-value]


def run_setup_from_dict(raw: dict, overrides: Sequence[str] = ()) -> RunSetup:
    """Rebuild a setup from the resolved config saved in a run folder (for resume)."""
    from benchmarks.config import EvalConfig
    from benchmarks.splits import benchmark_config
    from memsys.config import LLMConfig, MemoryConfig

    top = {k: v for k, v in raw.items() if k in EvalConfig.__dataclass_fields__}
    ev = EvalSetup(validate(EvalConfig, top), benchmark_config(raw["benchmark"]),
                   validate(MemoryConfig, raw["memory"]), validate(LLMConfig, raw["llm"]), raw)
    research = dict(raw["research"])
    if isinstance(research.get("loop"), dict):  # keys retired since the run started (e.g. baseline_repeats)
        research["loop"] = {k: v for k, v in research["loop"].items() if k in LoopConfig.__dataclass_fields__}
    return RunSetup(ev, validate(ResearchConfig, research), list(overrides))
