"""LLM access for the memory system: one OpenAI-compatible client (remote endpoints
and the embedded llama.cpp server alike) with retries mapped to typed errors, a
persistent response cache, a pre-call budget and per-call usage accounting.

Typical use::

    from memsys.llm import open_llm
    with open_llm(cfg.llm) as llm:
        reply = llm.chat([{"role": "user", "content": "hi"}])
        data = llm.chat_json(messages, schema)

Importing this package is cheap: the ``openai`` SDK loads when a client is built and
llama.cpp only ever runs in a child process.
"""

from harness.llm_budget import Budget, BudgetState, UsageLog, UsageRecord, UsageTotals, cost_usd
from harness.reply_cache import CacheStats, ResponseCache, request_key
from harness.structured_output import parse_json_reply, response_format_for
from memsys.llm.client import LLMClient, LLMReply, open_llm

__all__ = [
    "Budget",
    "BudgetState",
    "CacheStats",
    "LLMClient",
    "LLMReply",
    "ResponseCache",
    "UsageLog",
    "UsageRecord",
    "UsageTotals",
    "cost_usd",
    "open_llm",
    "parse_json_reply",
    "request_key",
    "response_format_for",
]
