"""Schema of ``memsys run`` configs (configs/run.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from omegaconf import OmegaConf

from benchmarks.config import EvalSetup, load_eval_setup
from memsys.config import compose, validate
from memsys.errors import ConfigError


@dataclass
class BudgetConfig:
    experiments: int = 8
    wall_time_s: float = 7200.0
    tokens: int = 2_000_000
    usd: float = 5.0


@dataclass
class LoopConfig:
    min_rel_improvement: float = 0.005
    degradations_to_pivot: int = 2
    max_iterations_per_hypothesis: int = 3
    max_pivots: int = 5
    baseline_repeats: int = 1
    ceiling_window: int = 4
    ceiling_band: float = 0.002
    smoke_sample: str | None = "tiny"
    max_repairs: int = 3
    local_fallback: bool = True  # heal auth failures of a remote endpoint by switching to the embedded model
    # a proposal that repeats an evaluated change is sent back this many times, sampled at this
    # temperature (a deterministic small model returns the same reply to the same question)
    duplicate_reasks: int = 2
    duplicate_temperature: float = 0.8
    failed_questions_shown: int = 5
    context_budget_tokens: int = 2500


@dataclass
class SandboxConfig:
    backend: str = "auto"
    wall_timeout_s: float = 1800.0
    memory_gb: float = 8.0


@dataclass
class ResearchConfig:
    proposer: str = "llm"
    repo: str | None = None
    surface: list[str] = field(default_factory=lambda: ["memsys/", "configs/memory/"])
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


@dataclass
class RunSetup:
    eval: EvalSetup
    research: ResearchConfig
    overrides: list[str]


def load_run_setup(overrides: Sequence[str] = ()) -> RunSetup:
    ev = load_eval_setup(overrides, config_name="run")
    cfg = compose("run", overrides)
    rc = validate(ResearchConfig, cfg.research, where="research config")
    if rc.proposer not in ("llm", "optuna", "alternate"):
        raise ConfigError(f"research.proposer must be llm | optuna | alternate, got {rc.proposer!r}")
    return RunSetup(ev, rc, list(overrides))


def run_setup_from_dict(raw: dict, overrides: Sequence[str] = ()) -> RunSetup:
    """Rebuild a setup from the resolved config saved in a run folder (for resume)."""
    from benchmarks.config import EvalConfig
    from benchmarks.splits import benchmark_config
    from memsys.config import LLMConfig, MemoryConfig

    top = {k: v for k, v in raw.items() if k in EvalConfig.__dataclass_fields__}
    ev = EvalSetup(validate(EvalConfig, top), benchmark_config(raw["benchmark"]),
                   validate(MemoryConfig, raw["memory"]), validate(LLMConfig, raw["llm"]), raw)
    return RunSetup(ev, validate(ResearchConfig, raw["research"]), list(overrides))
