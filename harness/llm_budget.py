"""Run budgets and usage accounting for LLM calls.

A run is compared with others at a fixed budget, so the cap must hold *before*
money is spent: :class:`Budget` refuses a call whose worst case (estimated prompt
tokens + the requested ``max_tokens``) would pass the cap, and only afterwards
books the actual usage. Calls run concurrently from a thread pool, so the worst
case is *reserved* atomically and released when the call ends; two threads can
never both squeeze under the cap with the same headroom.

:class:`UsageLog` is the per-call journal (tokens, latency, cost, cache hit) a run
reports at the end; it is independent of any cap.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import BudgetExceededError, ConfigError


def cost_usd(prompt_tokens: int, completion_tokens: int, price_input_per_1m: float, price_output_per_1m: float) -> float:
    """USD of one call at per-1M-token prices."""
    return (prompt_tokens * price_input_per_1m + completion_tokens * price_output_per_1m) / 1_000_000


@dataclass(frozen=True, slots=True)
class Reservation:
    """The worst case of one in-flight call, held against the cap until it ends."""

    tokens: int
    usd: float


@dataclass(frozen=True, slots=True)
class BudgetState:
    max_tokens: int | None
    max_usd: float | None
    used_tokens: int
    used_usd: float
    reserved_tokens: int
    reserved_usd: float
    calls: int
    refused: int


class Budget:
    """A token and/or USD cap for one run; ``None`` means no cap on that axis."""

    def __init__(self, max_tokens: int | None = None, max_usd: float | None = None) -> None:
        if max_tokens is not None and max_tokens < 0:
            raise ConfigError(f"budget max_tokens must be >= 0, got {max_tokens}")
        if max_usd is not None and max_usd < 0:
            raise ConfigError(f"budget max_usd must be >= 0, got {max_usd}")
        self.max_tokens = max_tokens
        self.max_usd = max_usd
        self._lock = threading.Lock()
        self._used_tokens = 0
        self._used_usd = 0.0
        self._reserved_tokens = 0
        self._reserved_usd = 0.0
        self._calls = 0
        self._refused = 0

    def reserve(self, prompt_tokens: int, max_completion_tokens: int, usd: float) -> Reservation:
        """Hold a call's worst case, or raise :class:`BudgetExceededError` without holding anything."""
        tokens = prompt_tokens + max_completion_tokens
        with self._lock:
            committed_tokens = self._used_tokens + self._reserved_tokens
            committed_usd = self._used_usd + self._reserved_usd
            if self.max_tokens is not None and committed_tokens + tokens > self.max_tokens:
                self._refused += 1
                raise BudgetExceededError(
                    f"token budget exceeded: call needs up to {tokens} tokens "
                    f"(~{prompt_tokens} prompt + {max_completion_tokens} max completion), "
                    f"{committed_tokens} of {self.max_tokens} already used or reserved"
                )
            if self.max_usd is not None and committed_usd + usd > self.max_usd:
                self._refused += 1
                raise BudgetExceededError(
                    f"USD budget exceeded: call may cost ${usd:.6f}, "
                    f"${committed_usd:.6f} of ${self.max_usd:.6f} already used or reserved"
                )
            self._reserved_tokens += tokens
            self._reserved_usd += usd
        return Reservation(tokens=tokens, usd=usd)

    def release(self, reservation: Reservation) -> None:
        """Drop a reservation (the call failed before the provider billed anything)."""
        with self._lock:
            self._reserved_tokens -= reservation.tokens
            self._reserved_usd -= reservation.usd

    def commit(self, reservation: Reservation, prompt_tokens: int, completion_tokens: int, cost: float) -> None:
        """Replace a reservation by the call's actual usage."""
        with self._lock:
            self._reserved_tokens -= reservation.tokens
            self._reserved_usd -= reservation.usd
            self._used_tokens += prompt_tokens + completion_tokens
            self._used_usd += cost
            self._calls += 1

    @property
    def used_tokens(self) -> int:
        return self._used_tokens

    @property
    def used_usd(self) -> float:
        return self._used_usd

    def state(self) -> BudgetState:
        with self._lock:
            return BudgetState(
                max_tokens=self.max_tokens,
                max_usd=self.max_usd,
                used_tokens=self._used_tokens,
                used_usd=self._used_usd,
                reserved_tokens=self._reserved_tokens,
                reserved_usd=self._reserved_usd,
                calls=self._calls,
                refused=self._refused,
            )


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One finished LLM call (successful or failed after the provider answered)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost_usd: float
    cached: bool
    attempts: int = 1
    ok: bool = True
    error_kind: str | None = None  # MemsysError.kind of a failed call


@dataclass(frozen=True, slots=True)
class UsageTotals:
    calls: int
    cached_calls: int
    failed_calls: int
    prompt_tokens: int  # sent to a server (cache hits excluded)
    completion_tokens: int
    cached_prompt_tokens: int  # what the cache hits would have cost in tokens
    cached_completion_tokens: int
    cost_usd: float
    latency_s: float  # summed over calls (wall time can be lower with a thread pool)
    retries: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UsageLog:
    """Thread-safe journal of per-call usage, summed by :meth:`totals`."""

    records: list[UsageRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, record: UsageRecord) -> None:
        with self._lock:
            self.records.append(record)

    def totals(self) -> UsageTotals:
        with self._lock:
            records = list(self.records)
        return UsageTotals(
            calls=len(records),
            cached_calls=sum(r.cached for r in records),
            failed_calls=sum(not r.ok for r in records),
            prompt_tokens=sum(r.prompt_tokens for r in records if not r.cached),
            completion_tokens=sum(r.completion_tokens for r in records if not r.cached),
            cached_prompt_tokens=sum(r.prompt_tokens for r in records if r.cached),
            cached_completion_tokens=sum(r.completion_tokens for r in records if r.cached),
            cost_usd=sum(r.cost_usd for r in records),
            latency_s=sum(r.latency_s for r in records),
            retries=sum(max(0, r.attempts - 1) for r in records),
        )
