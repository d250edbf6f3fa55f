"""The trusted half of an evaluation: validated answers -> scored rows -> metrics.

Answers come from code the research agent wrote, so nothing they claim is taken on
faith where it can be recomputed from public data:
- retrieved and context ids are kept only when they are turns of the question's own
  conversation (each once, first position wins);
- the context's token cost is recounted from those turns' raw text (never the answer's own
  ``context_tokens``), and the context is cut to the longest prefix of ids that fits the
  trusted budget ``context_budget_tokens`` before context recall is computed: the cut stops at
  the first id that does not fit, so nothing placed after it (however cheap) is counted, and
  claiming the whole conversation as context buys nothing. Each row records the budget it was
  cut at;
- the reader's token usage is what the host-side gateway counted, when there was one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from benchmarks.datasets.schema import Benchmark, Conversation, Question
from benchmarks.metrics.locomo import score_locomo_scores
from benchmarks.metrics.memgallery import score_memgallery_question
from harness.tokens import count_tokens
from harness.views import Answer


@dataclass(frozen=True, slots=True)
class Usage:
    """Reader usage as the trusted gateway counted it (None: no gateway, answers' own counts).

    Token counts include replies served from the cache (the work the reader did, comparable
    between a cold and a warm run); ``billed_tokens`` and ``cost_usd`` only what reached the
    endpoint (what the run's budget pays)."""

    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    requests: int = 0
    billed_tokens: int = 0
    cache_hits: int = 0


def score_question(bench_name: str, prediction: str, q: Question) -> dict[str, float]:
    if bench_name == "locomo":  # f1: LoCoMo's own rule; f1_lenient: the wider abstention phrases (cat. 5)
        return score_locomo_scores(prediction, q)
    return score_memgallery_question(prediction, q)


class TurnCosts:
    """Token cost of each turn's raw text, counted once per conversation."""

    def __init__(self, conv: Conversation):
        self._texts = {t.id: t.dialogue_text for s in conv.sessions for t in s.turns}
        self._costs: dict[str, int] = {}

    def known(self, turn_id: str) -> bool:
        return turn_id in self._texts

    def cost(self, turn_id: str) -> int:
        if turn_id not in self._costs:
            self._costs[turn_id] = count_tokens(self._texts[turn_id])
        return self._costs[turn_id]


def _known_unique(ids: tuple[str, ...], costs: TurnCosts) -> tuple[list[str], int]:
    out: list[str] = []
    dropped = 0
    seen: set[str] = set()
    for i in ids:
        if not costs.known(i):
            dropped += 1
        elif i not in seen:
            seen.add(i)
            out.append(i)
    return out, dropped


def within_budget(ids: list[str], costs: TurnCosts, budget: int | None) -> tuple[list[str], int]:
    """The prefix of ``ids`` whose recounted cost fits ``budget`` (None: all), and that cost.

    A prefix, not a knapsack: it stops at the first id that does not fit, so the budget means "the first
    B context tokens" and an id appended after that point can never change what is counted."""
    kept, total = [], 0
    for i in ids:
        c = costs.cost(i)
        if budget is not None and total + c > budget:
            break
        kept.append(i)
        total += c
    return kept, total


def score_row(bench: Benchmark, q: Question, a: Answer, costs: TurnCosts, *, with_reader: bool,
              context_budget_tokens: int | None) -> dict[str, Any]:
    retrieved, dropped_r = _known_unique(a.retrieved_ids, costs)
    context, dropped_c = _known_unique(a.context_ids, costs)
    counted, tokens = within_budget(context, costs, context_budget_tokens)
    row: dict[str, Any] = {
        "question_id": q.id, "conversation_id": q.conversation_id, "question": q.question, "gold": q.answer,
        "category": q.category, "evidence": list(q.evidence), "prediction": a.answer, "error": a.error,
        "retrieved_ids": retrieved, "context_ids": counted, "context_tokens": tokens,
        "context_budget_tokens": context_budget_tokens,  # what the cut was: rows at other budgets do not compare
        "context_ids_claimed": len(a.context_ids), "context_tokens_claimed": a.context_tokens,
        "unknown_ids": dropped_r + dropped_c, "levels": list(a.levels), "latency_s": a.latency_s,
        "retrieval_ms": a.retrieval_ms, "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens, "cost_usd": a.cost_usd, "cached": a.cached,
        "input_sha256": a.input_sha256,
    }
    if a.answer_logprobs is not None:
        row["answer_logprobs"] = list(a.answer_logprobs)
    if with_reader:
        row["scores"] = score_question(bench.name, a.answer, q)
    return row


def score_answers(bench: Benchmark, answers: Mapping[str, Answer], *, with_reader: bool,
                  context_budget_tokens: int | None) -> list[dict[str, Any]]:
    """One scored row per question of ``bench`` (answers already validated: every id present)."""
    rows = []
    for conv in bench.conversations:
        costs = TurnCosts(conv)
        for q in conv.questions:
            rows.append(score_row(bench, q, answers[q.id], costs, with_reader=with_reader,
                                  context_budget_tokens=context_budget_tokens))
    return rows
