"""The MAU fields that image, audio and video ingestion fill the same way: cold-tier pointers
(content-addressed, counting only newly written bytes), timestamps offset into a source, the
caller's when / where / who, and prev/next links between consecutive MAUs of one item.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from memsys.records import MAU, Link, LinkKind
from memsys.store.atomic import sha256_bytes
from memsys.store.cold import POINTER_PREFIX, ColdStore


def put_blob(cold: ColdStore, data: bytes, ext: str) -> tuple[str, int]:
    """Cold pointer and the number of bytes newly written (0 when deduplicated)."""
    existed = cold.path(f"{POINTER_PREFIX}{sha256_bytes(data)}.{ext.lstrip('.')}").exists()
    return cold.put(data, ext), 0 if existed else len(data)


def time_shift(ts: datetime | None, seconds: float) -> datetime | None:
    return ts + timedelta(seconds=round(seconds, 3)) if ts is not None else None


@dataclass(frozen=True)
class MauMeta:
    """The caller's when / where / who, copied onto every MAU an item yields."""

    timestamp: datetime | None
    session_id: str | None
    speaker: str | None

    @property
    def persons(self) -> list[str]:
        return [self.speaker] if self.speaker else []


def link_chain(maus: Sequence[MAU]) -> None:
    for a, b in zip(maus, maus[1:]):
        a.links.append(Link(LinkKind.NEXT, b.id))
        b.links.append(Link(LinkKind.PREV, a.id))
