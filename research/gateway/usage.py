"""What the LLM gateway counts: requests, cache hits, budget refusals, tokens, cost and time.

Why a frozen record that subtracts: an evaluation's share is the difference of two snapshots taken
around it, while the handler threads keep adding to one lock-guarded table behind them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class GatewayUsage:
    """A snapshot of the gateway's counters (subtract two for one evaluation's share)."""

    requests: int = 0  # HTTP requests answered, any path
    forwarded: int = 0  # chat requests sent upstream
    node_forwarded: int = 0  # of those, answered by the embedded server of the node that asked (research.execution.node_llm)
    cache_hits: int = 0  # chat requests answered from the cache
    rejected_budget: int = 0  # refused with 402 before reaching upstream
    rejected_prompt: int = 0  # refused with 413: a prompt over the run's reader budget (prompt_cap); also in errors
    errors: int = 0  # answers with status >= 400 other than budget refusals (upstream's included)
    prompt_tokens: int = 0  # booked from forwarded successful calls
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # the usage recorded with replies answered from the cache (not billed)
    cached_completion_tokens: int = 0
    cost_usd: float = 0.0
    upstream_s: float = 0.0  # time spent waiting for upstream
    overhead_s: float = 0.0  # time spent in the gateway itself (waits for upstream and the child's body excluded)

    @property
    def overhead_per_request_s(self) -> float:
        return self.overhead_s / self.requests if self.requests else 0.0

    def __sub__(self, other: "GatewayUsage") -> "GatewayUsage":
        return GatewayUsage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["overhead_per_request_s"] = self.overhead_per_request_s
        return out


class Counters:
    """Thread-safe accumulation behind :meth:`research.gateway.service.LLMGateway.usage`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {f.name: f.default for f in fields(GatewayUsage)}

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                self._values[name] += delta

    def snapshot(self) -> GatewayUsage:
        with self._lock:
            return GatewayUsage(**self._values)
