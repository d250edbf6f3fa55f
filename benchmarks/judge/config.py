"""The trusted configuration of the LLM judge.

Why one dataclass: every threshold that decides what a judge verdict means (how many runs, when a
mean verdict counts as "accepted", when the stress test warns) must be fixed by the scorer, not by
code the research loop writes, and must be recorded with each run. Nothing in ``benchmarks.judge``
hard-codes such a number; it takes it from here.

Groups in ``configs/judge/`` (``lenient.yaml``, ``strict.yaml``) are validated into this schema by
:func:`judge_config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.config import validate
from harness.errors import ConfigError

#: the judge protocols (benchmarks.judge.protocol.PROTOCOLS holds their rules)
PROTOCOL_NAMES = ("lenient", "strict", "memgallery")
#: objectives that are judge figures: name -> the metrics.json key holding the value (benchmarks.judge.run
#: writes it; research.evaluation.stats gives its per-question form, a scored row's ``judge``)
JUDGE_OBJECTIVES = {"judge_accuracy": "j"}
#: per-category J objectives ("j_cat2", "j_catAR") are their own metrics.json keys
JUDGE_CATEGORY_PREFIX = "j_cat"


def judge_metric_key(objective: str) -> str | None:
    """The metrics.json key of a judge objective, or None when ``objective`` is not a judge figure."""
    if objective in JUDGE_OBJECTIVES:
        return JUDGE_OBJECTIVES[objective]
    return objective if objective.startswith(JUDGE_CATEGORY_PREFIX) and len(objective) > len(JUDGE_CATEGORY_PREFIX) else None


@dataclass(frozen=True)
class JudgeConfig:
    """How the judge is asked and how its verdicts are read."""

    # the model that judges, and where: ``endpoint`` names the llm config group that serves it
    # (configs/llm/<endpoint>.yaml: "local" is the embedded llama.cpp server); ``base_url`` overrides it
    model: str = "qwen2.5-coder-1.5b-instruct"
    endpoint: str = "local"
    base_url: str | None = None
    protocol: str = "lenient"  # lenient | strict (LoCoMo) | memgallery (0 / 0.5 / 1)
    runs: int = 3  # judge calls per question; a question's score is their mean
    temperature: float = 0.0
    seed: int | None = 0  # run r is sent seed + r, so runs at temperature > 0 differ reproducibly
    max_tokens: int = 16  # '{"label": "CORRECT"}' is about 8 tokens; the 1.5B judge decodes on CPU
    json_mode: bool = True  # also send response_format={"type": "json_object"} (the prompt asks for JSON anyway)
    # a question (or stress item) counts as accepted when its mean verdict over runs reaches this
    pass_score: float = 0.5
    # the F1 at which an answer counts as right, for the judge's agreement with F1
    f1_pass: float = 0.5
    # the stress test: stratified sample size and seed, and the false-accept rate that triggers a warning
    stress_size: int = 40
    stress_seed: int = 0
    max_false_accept: float = 0.2
    ci_level: float = 0.95  # Wilson interval of a false-accept rate
    # answers this many times longer than the gold answers (mean words) are flagged: lenient judges reward length
    max_length_ratio: float = 3.0
    progress_min_items: int = 20  # show a tqdm bar when at least this many judge calls are to be made

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if problems:
            raise ConfigError("invalid judge config: " + "; ".join(problems))


def config_problems(cfg: JudgeConfig) -> list[str]:
    """Every inconsistency of ``cfg`` at once, so a bad config is fixed in one edit, not one per run."""
    problems = []
    if cfg.protocol not in PROTOCOL_NAMES:
        problems.append(f"protocol must be one of {PROTOCOL_NAMES}, got {cfg.protocol!r}")
    if cfg.runs < 1:
        problems.append(f"runs must be >= 1, got {cfg.runs}")
    if cfg.max_tokens < 1:
        problems.append(f"max_tokens must be >= 1, got {cfg.max_tokens}")
    if cfg.stress_size < 1:
        problems.append(f"stress_size must be >= 1, got {cfg.stress_size}")
    for name in ("pass_score", "f1_pass", "max_false_accept"):
        value = getattr(cfg, name)
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name} must be in [0, 1], got {value}")
    if not 0.0 < cfg.ci_level < 1.0:
        problems.append(f"ci_level must be in (0, 1), got {cfg.ci_level}")
    if cfg.max_length_ratio <= 0:
        problems.append(f"max_length_ratio must be > 0, got {cfg.max_length_ratio}")
    return problems


def judge_node(raw: Any) -> Any:
    """The composed config's judge node, or None when no judge is selected (``judge: null`` in the defaults, or
    ``judge=none``, whose empty file names no protocol)."""
    node = raw.get("judge") if hasattr(raw, "get") else None
    return node if node and "protocol" in node else None


def judge_config(node: Any = None, where: str = "judge config") -> JudgeConfig:
    """A validated JudgeConfig from a composed config node or a dict (unknown keys and wrong types raise)."""
    return validate(JudgeConfig, node if node is not None else {}, where=where)
