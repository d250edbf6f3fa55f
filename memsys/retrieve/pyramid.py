"""Pyramid retrieval under a token budget. Deterministic rules, no LLM judgment.

Level 1: the summary of every top-k candidate (cut to ``summary_max_tokens``, or
its sentences that bear on the query: memsys.retrieve.summary), in rank order, while the
budget lasts. Level 2: full text for candidates whose dense similarity exceeds
theta, most similar first. Level 3: raw content from cold storage, greedily by
similarity per token, in what budget remains. Every item records the level it
reached and why, so the research loop can see what the gates did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from memsys.config import AnswerConfig, PyramidConfig
from memsys.errors import ConfigError
from memsys.records import MAU
from memsys.retrieve.context import Context, ContextItem, MediaPart, render_line
from memsys.retrieve.summary import cut_to_tokens, extractive_summary, query_term_weights


@dataclass
class RankedCandidate:
    mau: MAU
    similarity: float
    sources: set[str]
    fused_score: float = 0.0


@dataclass
class RawContent:
    """What level 3 would add for a MAU: text, or media with a fixed token cost."""

    text: str | None = None
    media: MediaPart | None = None


def level1_summarizer(query: str, candidates: Sequence[RankedCandidate], cfg: PyramidConfig,
                      count_tokens: Callable[[str], int]) -> Callable[[MAU], str]:
    """What level 1 shows of a memory under ``cfg.summary_mode``; the extractive weights are the
    query terms' rarity among these candidates' sentences, the speakers' names left out."""
    if cfg.summary_mode == "cut":
        return lambda mau: cut_to_tokens(mau.summary, cfg.summary_max_tokens, count_tokens)
    if cfg.summary_mode != "extractive":
        raise ConfigError(f"pyramid.summary_mode must be cut|extractive, got {cfg.summary_mode!r}")
    weights = query_term_weights(query, (c.mau.summary for c in candidates),
                                 ignore={c.mau.speaker for c in candidates if c.mau.speaker})
    return lambda mau: extractive_summary(mau.summary, weights, cfg.summary_max_tokens, count_tokens)


def _with_raw(text: str, raw: str) -> str:
    return f"{text}\n   raw: {raw}"


def build_pyramid(
    query: str,
    candidates: Sequence[RankedCandidate],
    cfg: PyramidConfig,
    answer_cfg: AnswerConfig,
    count_tokens: Callable[[str], int],
    load_raw: Callable[[MAU], RawContent | None],
    reserved_tokens: int = 0,
    framing_tokens: Callable[[MAU], int] | None = None,
) -> Context:
    """``framing_tokens(mau)``: tokens a rendered line adds around the item's text (number,
    date, speaker, resolved times); by default counted from :func:`render_line`."""
    if framing_tokens is None:
        def framing_tokens(mau: MAU) -> int:
            return count_tokens(render_line(99, mau, "", answer_cfg.include_metadata))

    ctx = Context(query=query, items=[], budget_tokens=cfg.budget_tokens)
    summarize = level1_summarizer(query, candidates, cfg, count_tokens)
    remaining = _level1(ctx, candidates, summarize, count_tokens, framing_tokens,
                        cfg.budget_tokens - reserved_tokens)
    if not cfg.enabled or answer_cfg.context_text == "summary":
        for item in ctx.items:
            item.reason += "; pyramid off" if not cfg.enabled else "; summaries only"
        return ctx
    remaining = _level2(ctx, cfg.theta, answer_cfg.context_text, count_tokens, remaining)
    if cfg.level3:
        _level3(ctx, load_raw, count_tokens, remaining)
    return ctx


def _level1(ctx: Context, candidates: Sequence[RankedCandidate], summarize: Callable[[MAU], str],
            count_tokens: Callable[[str], int], framing_tokens: Callable[[MAU], int], remaining: int) -> int:
    """Summaries in rank order; returns the tokens left. An item's tokens include its rendered framing
    (number, date, speaker, resolved times), so the prompt itself stays within B."""
    for rank, c in enumerate(candidates):
        text = summarize(c.mau)
        tokens = count_tokens(text) + framing_tokens(c.mau)
        if tokens > remaining:
            ctx.dropped.append((c.mau.id, f"level 1 summary ({tokens} tok) over remaining budget {remaining}"))
            continue
        remaining -= tokens
        ctx.items.append(ContextItem(
            mau=c.mau, rank=rank, similarity=c.similarity, sources=set(c.sources), level=1,
            reason="top-k summary", text=text, tokens=tokens, fused_score=c.fused_score,
        ))
    return remaining


def _level2(ctx: Context, theta: float, context_text: str, count_tokens: Callable[[str], int], remaining: int) -> int:
    """Full text for the items above theta, most similar first; returns the tokens left."""
    for item in sorted(ctx.items, key=lambda i: (-i.similarity, i.rank)):
        if item.similarity <= theta:
            item.reason += f"; sim {item.similarity:.2f} <= theta {theta}"
            continue
        full = item.mau.full_text
        if context_text == "both" and full != item.mau.summary:
            full = f"{item.mau.summary} | original: {full}"
        if full == item.text:
            item.level, item.reason = 2, item.reason + f"; sim {item.similarity:.2f} > theta, summary is the full text"
            continue
        extra = count_tokens(full) - count_tokens(item.text)
        if extra > remaining:
            item.reason += f"; level 2 needs {extra} tok, {remaining} left"
            continue
        remaining -= extra
        item.text, item.tokens, item.level = full, item.tokens + extra, 2
        item.reason += f"; sim {item.similarity:.2f} > theta {theta}: full text"
    return remaining


def _level3(ctx: Context, load_raw: Callable[[MAU], RawContent | None], count_tokens: Callable[[str], int],
            remaining: int) -> None:
    """Raw content, greedy by similarity per token: the budget goes where a token buys the most."""
    offers = []
    for item in ctx.items:
        raw = load_raw(item.mau)
        if raw is None:
            continue
        if raw.media is not None:
            cost = raw.media.tokens
        elif raw.text and raw.text.strip() != item.text.strip() and raw.text not in item.text:
            # charge what the reader will see: the raw text plus its "raw:" framing
            cost = count_tokens(_with_raw(item.text, raw.text)) - count_tokens(item.text)
        else:
            continue
        offers.append((item.similarity / max(cost, 1), item, raw, cost))
    for _, item, raw, cost in sorted(offers, key=lambda o: (-o[0], o[1].rank)):
        if cost > remaining:
            item.reason += f"; level 3 needs {cost} tok, {remaining} left"
            continue
        remaining -= cost
        item.level = 3
        item.tokens += cost
        if raw.media is not None:
            item.media.append(raw.media)
            item.reason += f"; level 3: raw {raw.media.modality.value} ({cost} tok)"
        else:
            item.text = _with_raw(item.text, raw.text)
            item.reason += f"; level 3: raw text ({cost} tok)"


