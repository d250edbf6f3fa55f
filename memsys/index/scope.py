"""Query scopes: which MAUs a query may return (per user, per conversation, per time range).

A MAU's scope fields come from its record: ``details["user"]``, ``details["conversation"]``
(else its session id) and its timestamp. Times are compared as integer microseconds
since the epoch (exact for ``datetime``), and a MAU without a timestamp is outside
every time range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from memsys.records import MAU

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def micros(ts: datetime) -> int:
    """Microseconds since the epoch (exact: timedelta // timedelta); naive datetimes are read as UTC."""
    return (ts - (_NAIVE_EPOCH if ts.tzinfo is None else _EPOCH)) // _MICROSECOND


@dataclass(frozen=True, slots=True)
class Scope:
    """Every set field must match; ``start``/``end`` are inclusive bounds on the MAU's timestamp."""

    user: str | None = None
    conversation: str | None = None
    start: datetime | None = None
    end: datetime | None = None

    def bounds(self) -> tuple[int | None, int | None]:
        return (micros(self.start) if self.start else None, micros(self.end) if self.end else None)

    def is_empty(self) -> bool:
        return self.user is None and self.conversation is None and self.start is None and self.end is None


@dataclass(frozen=True, slots=True)
class ScopeFields:
    user: str | None
    conversation: str | None
    ts: int | None  # microseconds since the epoch


def scope_fields(m: MAU) -> ScopeFields:
    user = m.details.get("user")
    conv = m.details.get("conversation") or m.session_id
    return ScopeFields(str(user) if user is not None else None, str(conv) if conv is not None else None,
                       micros(m.timestamp) if m.timestamp else None)


def in_scope(f: ScopeFields, scope: Scope) -> bool:
    """The reference rule the indexes implement (used by tests and by exact fallbacks)."""
    lo, hi = scope.bounds()
    return ((scope.user is None or f.user == scope.user)
            and (scope.conversation is None or f.conversation == scope.conversation)
            and (lo is None or (f.ts is not None and f.ts >= lo))
            and (hi is None or (f.ts is not None and f.ts <= hi)))
