"""Which proposers a run uses, built from its config (one place for research.proposer and
research.researcher)."""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError
from research.proposers.base import Proposer

#: what a researcher prompt costs besides its context sections (system prompt, instructions, framing);
#: measured on the menu prompt: 672 prompt tokens with a 150-token context (see tests)
PROMPT_OVERHEAD_TOKENS = 700


def researcher_mode(setup: Any) -> str:
    from research.proposers.llm import pick_mode

    return pick_mode(setup.research.researcher.mode, setup.eval.llm)


def reply_tokens(setup: Any) -> int:
    rc = setup.research.researcher
    if rc.max_tokens:
        return rc.max_tokens
    return 384 if setup.research.proposer == "hybrid" or researcher_mode(setup) == "menu" else 1024


def make_proposers(setup: Any, llm: Any, study: Any) -> dict[str, Proposer]:
    kind, rc = setup.research.proposer, setup.research.researcher
    out: dict[str, Proposer] = {}
    if kind in ("llm", "alternate"):
        from research.proposers.llm import LLMProposer

        out["llm"] = LLMProposer(llm, mode=researcher_mode(setup), max_tokens=reply_tokens(setup),
                                 temperature=rc.temperature, max_changes=rc.max_changes, batch=rc.batch)
    if kind in ("optuna", "alternate"):
        from research.proposers.optuna_proposer import OptunaProposer

        out["optuna"] = OptunaProposer(study)
    if kind == "hybrid":
        from research.proposers.hybrid import HybridProposer

        out["hybrid"] = HybridProposer(llm, study, trials=rc.hybrid_trials, max_tokens=reply_tokens(setup),
                                       temperature=rc.temperature, batch=rc.batch, coupled=rc.hybrid_coupled,
                                       explore_first=rc.hybrid_explore_first,
                                       explore_on_pivot=rc.hybrid_explore_on_pivot)
    if kind == "random":
        from research.proposers.random_proposer import RandomProposer

        out["random"] = RandomProposer()
    return out


def uses_llm_researcher(setup: Any) -> bool:
    return setup.research.proposer in ("llm", "alternate", "hybrid")


def context_budget(setup: Any) -> int:
    """The researcher's context budget in tokens (``research.loop.context_budget_tokens``).

    A number applies to any model. ``auto`` follows the model the run talks to now (a refused key switches
    to the embedded one): the embedded model keeps ``research.researcher.local_context_tokens`` (2,500: its
    window holds that with the prompt and the reply), any other backend gets ``hosted_context_tokens``
    (16,000), held within ``llm.context_window`` when that is set. Why: at 2,500 a capable hosted model saw
    one file (merge.py) of the retrieval code it was asked to improve."""
    budget = setup.research.loop.context_budget_tokens
    if budget != "auto":
        return int(budget)
    rc, llm = setup.research.researcher, setup.eval.llm
    if llm.backend == "local":
        return int(rc.local_context_tokens)
    window = getattr(llm, "context_window", None)
    room = window - PROMPT_OVERHEAD_TOKENS - reply_tokens(setup) * batch_size(setup) if window else None
    return int(rc.hosted_context_tokens if room is None else max(0, min(rc.hosted_context_tokens, room)))


def model_window(llm: Any) -> tuple[int | None, str]:
    """The researcher model's window in tokens and the key that sets it (None: not known)."""
    if llm.backend == "local":
        return llm.local.n_ctx, "llm.local.n_ctx"
    return getattr(llm, "context_window", None), "llm.context_window"


def check_context_fits(setup: Any) -> None:
    """The researcher's prompt plus its reply must fit the model's window (the embedded model's, or a hosted
    one's when ``llm.context_window`` says it); refuse to start a run that would overflow it (the server
    would cut the prompt, silently, or refuse every step)."""
    window, key = model_window(setup.eval.llm)
    if window is None or not uses_llm_researcher(setup):
        return
    budget = context_budget(setup)
    replies = batch_size(setup)  # a batched request's reply carries one proposal per candidate
    need = budget + PROMPT_OVERHEAD_TOKENS + reply_tokens(setup) * replies
    if need > window or budget < 1:
        more = f" ({replies} proposals per reply: or research.researcher.batch=false)" if replies > 1 else ""
        raise ConfigError(f"research.loop.context_budget_tokens={budget} plus prompt and reply ({need} tokens) exceed "
                          f"the model's window {key}={window}: lower the budget or raise {key}{more}")


def batch_size(setup: Any) -> int:
    """Proposals one researcher reply carries: research.parallel when batched, else 1."""
    return setup.research.parallel if setup.research.researcher.batch else 1
