"""Schema of ``memsys eval`` configs (configs/eval.yaml + groups)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from omegaconf import OmegaConf

from benchmarks.judge.config import JudgeConfig, judge_config, judge_metric_key, judge_node
from benchmarks.splits import BenchmarkConfig, benchmark_config, check_complement
from harness.config import validate
from harness.errors import ConfigError
from memsys import LLMConfig, MemoryConfig
from memsys import compose_config as compose

#: memsys: the memory system under test. full_context: the whole conversation, when it fits the reader's
#: window (a conversation that does not fit gets its latest turns, and the run says ``recent_window``).
#: recent_window: the latest turns that fit ``full_context_budget``, whatever the window.
SYSTEMS = ("memsys", "full_context", "recent_window")
#: tokens of the reader's window kept for the prompt's instructions and the question (full_context)
PROMPT_RESERVE_TOKENS = 512
READERS = ("llm", "none")


@dataclass
class EvalConfig:
    split: str = "dev"
    sample: str | None = None
    # the split's questions NOT in ``sample``, stratified down to its size: a disjoint slice of the
    # same split on which a candidate selected on ``sample`` is checked (benchmarks.splits.select)
    complement: bool = False
    system: str = "memsys"
    reader: str = "llm"
    workers: int = 2
    objective: str = "auto"
    run_id: str | None = None
    resume: bool = True
    full_context_budget: int = 6000  # recent_window's budget (full_context's is the reader's window)
    # the scorer's own budget B: context recall counts only the evidence inside the first B context tokens
    # (the longest prefix of the claimed context ids whose raw turns fit, recounted by the trusted side, never
    # the answer's own count), so claiming everything buys nothing and tokens past B change nothing. The
    # metrics record it (``context_budget_tokens``, ``context_recall@<B>``). It does not cut the reader's
    # prompt: reader objectives (F1, J) score whatever context the memory gave its reader (docs/evaluate.md)
    context_budget_tokens: int | None = 6000
    # true: reader objectives are scored at that budget too. The reader's gateway refuses a request whose prompt
    # exceeds B plus READER_FIXED_TOKENS (the instructions, the question, the reply format: 178-189 tokens for
    # the presets' prompts), so a question whose memory gave more context than B gets no answer (F1 0): F1 and
    # J then cost what context recall counts, and no config buys answers with tokens (issue #50)
    reader_at_budget: bool = False
    # where the untrusted half runs for `memsys eval`: auto | docker | bwrap | process | inprocess
    sandbox: str = "auto"
    # the untrusted half's wall-clock limit; null: 1800 s, plus 90 s a question when a reader answers
    # (the embedded reader takes 10-60 s a question on 2 cores). A run stopped by it keeps its answers:
    # the same command resumes it
    sandbox_timeout_s: float | None = None
    mlflow: bool = True
    mlflow_experiment: str = "memsys-eval"
    parent_run_id: str | None = None


@dataclass
class EvalSetup:
    """Everything one evaluation needs, validated."""

    options: EvalConfig  # split, sample, reader, workers, objective, ...: the run-time choices
    benchmark: BenchmarkConfig
    memory: MemoryConfig
    llm: LLMConfig
    raw: dict[str, Any] = field(default_factory=dict)  # the resolved config as composed

    @property
    def objective(self) -> str:
        if self.options.objective != "auto":
            return self.options.objective
        if self.options.reader == "none":  # evidence inside the context the reader would get, cut at the scorer's budget
            return "context_recall"
        return "all_honest" if self.benchmark.name == "locomo" else "f1"

    @property
    def judge(self) -> JudgeConfig | None:
        """The LLM judge of this evaluation (None: no J). Read from the composed config, so it is the trusted
        side's own (this checkout's configs/judge/ and command line), whatever tree is evaluated."""
        node = judge_node(self.raw)
        return None if node is None else judge_config(node)


#: the reader prompt's allowance beyond the context budget under ``reader_at_budget``
READER_FIXED_TOKENS = 300


def reader_prompt_cap(ev: EvalConfig) -> int | None:
    """The most prompt tokens the reader's gateway forwards for this evaluation (None: no cap)."""
    if not ev.reader_at_budget or ev.context_budget_tokens is None:
        return None
    return ev.context_budget_tokens + READER_FIXED_TOKENS


def check_judge(ev: EvalConfig, judge: JudgeConfig | None, benchmark: str) -> None:
    """A judge needs answers to judge, a protocol written for this benchmark, and a judge objective needs a judge."""
    if judge_metric_key(ev.objective) is not None and judge is None:
        raise ConfigError(f"objective={ev.objective} needs a judge: add judge=lenient|strict (LoCoMo) or judge=memgallery")
    if judge is None:
        return
    if ev.reader != "llm":
        raise ConfigError("a judge grades the reader's answers: judge=... needs reader=llm (or judge=none)")
    wanted = "memgallery" if benchmark == "memgallery" else ("lenient", "strict")
    if judge.protocol not in wanted:
        raise ConfigError(f"judge protocol {judge.protocol!r} does not grade {benchmark}: use judge="
                          + ("memgallery" if benchmark == "memgallery" else "lenient or judge=strict"))


def load_eval_setup(overrides: Sequence[str] = (), config_name: str = "eval") -> EvalSetup:
    cfg = compose(config_name, overrides)
    raw = OmegaConf.to_container(cfg, resolve=True)
    top = {k: v for k, v in raw.items() if k not in ("benchmark", "memory", "llm")}
    ev = validate(EvalConfig, {k: v for k, v in top.items() if k in EvalConfig.__dataclass_fields__}, where="eval config")
    unknown = sorted(set(top) - set(EvalConfig.__dataclass_fields__)
                     - {"research", "proposer", "budget", "loop", "sandbox", "repo", "judge"})
    if unknown:
        raise ConfigError(f"unknown eval config keys: {unknown}")
    if ev.system not in SYSTEMS:
        raise ConfigError(f"system must be one of {SYSTEMS}, got {ev.system!r}")
    if ev.reader not in READERS:
        raise ConfigError(f"reader must be one of {READERS}, got {ev.reader!r}")
    if ev.workers < 1:
        raise ConfigError("workers must be >= 1")
    if ev.context_budget_tokens is not None and ev.context_budget_tokens < 1:
        raise ConfigError(f"context_budget_tokens must be >= 1 (null: no cut), got {ev.context_budget_tokens}")
    if ev.reader_at_budget and (ev.reader != "llm" or ev.context_budget_tokens is None):
        raise ConfigError("reader_at_budget=true caps the reader's prompt at the context budget: it needs reader=llm "
                          "and a context_budget_tokens")
    bench = benchmark_config(cfg.benchmark)
    if ev.complement:
        check_complement(bench, ev.sample)
    node = judge_node(raw)
    check_judge(ev, None if node is None else judge_config(node), bench.name)
    return EvalSetup(
        options=ev,
        benchmark=bench,
        memory=validate(MemoryConfig, cfg.memory, where="memory config"),
        llm=validate(LLMConfig, cfg.llm, where="llm config"),
        raw=raw,
    )


def reader_window_tokens(llm: LLMConfig) -> int | None:
    """Context tokens the reader accepts: the embedded server's n_ctx, else the endpoint's declared
    ``llm.context_window`` (None when not declared: full_context cannot know what fits)."""
    if llm.backend == "local":
        return llm.local.n_ctx
    return llm.context_window


def baseline_budget(setup: EvalSetup) -> int:
    """Tokens of conversation a baseline system hands the reader.

    ``full_context``: the reader's window less its reply and the prompt's own text, so a conversation
    that fits is given whole; ``recent_window``: ``full_context_budget``."""
    ev = setup.options
    if ev.system != "full_context":
        return ev.full_context_budget
    window = reader_window_tokens(setup.llm)
    if window is None:
        raise ConfigError("system=full_context needs the reader's window: set llm.context_window (tokens) for "
                          "this endpoint, or use system=recent_window with full_context_budget")
    return max(0, window - setup.llm.max_tokens - PROMPT_RESERVE_TOKENS)

