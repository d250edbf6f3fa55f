"""Typed records that cross module boundaries.

The Multimodal Atomic Unit (MAU) is the paper's (s, e, p, tau, m, l) tuple plus the
bookkeeping the released SimpleMem code keeps (details, status, enrichment). It is
designed for every modality from day one: only the ingestion path decides which
fields a text turn, an image, an audio segment or a video scene fills.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Modality(str, enum.Enum):
    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"


class Status(str, enum.Enum):
    ACTIVE = "active"
    ARCHIVED = "archived"
    PINNED = "pinned"


class LinkKind(str, enum.Enum):
    PREV = "prev"
    NEXT = "next"
    EVENT = "event"
    RELATED = "related"
    SOURCE = "source"  # a compressed MAU points at the raw turns it restates


@dataclass(frozen=True, slots=True)
class Link:
    kind: LinkKind
    target: str  # MAU id


@dataclass(frozen=True, slots=True)
class TimeMention:
    """A relative time expression found in text and resolved in code."""

    text: str  # as written, e.g. "yesterday"
    start: datetime  # resolved absolute interval
    end: datetime
    granularity: str  # "day" | "week" | "month" | "year"


@dataclass(slots=True)
class MAU:
    """Multimodal Atomic Unit: one searchable memory item.

    The hot tier keeps everything here except the raw content, which lives in
    cold storage behind ``pointer`` and is loaded lazily (pyramid level 3).
    """

    id: str
    summary: str  # s: short text used for search and level-1 context
    modality: Modality = Modality.TEXT  # m
    timestamp: datetime | None = None  # tau: when the event happened (absolute)
    pointer: str | None = None  # p: cold-storage key of the raw content
    links: list[Link] = field(default_factory=list)  # l
    embedding: Any = None  # e: unit-norm float32 vector (numpy), kept in the index
    session_id: str | None = None
    source_id: str | None = None  # id in the source data (LoCoMo dia_id, Mem-Gallery round)
    speaker: str | None = None
    details: dict[str, Any] = field(default_factory=dict)  # e.g. full original text
    status: Status = Status.ACTIVE
    persons: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    location: str | None = None
    topic: str | None = None
    time_mentions: list[TimeMention] = field(default_factory=list)
    time_span: tuple[float, float] | None = None  # seconds within a media file

    @property
    def full_text(self) -> str:
        """Level-2 text: the original text when kept, else the summary."""
        return str(self.details.get("text") or self.summary)


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn as a user hands it to ``Memory.add``."""

    id: str
    speaker: str
    text: str
    timestamp: datetime | None = None
    session_id: str | None = None
    image_caption: str | None = None
    image_path: str | None = None
    #: whose memory this is and which conversation it came from, when one store holds many: the scope
    #: a query can be limited to (``Memory.retrieve(..., scope=Scope(user=...))``)
    user: str | None = None
    conversation: str | None = None


@dataclass(frozen=True, slots=True)
class IngestDecision:
    """Outcome of the novelty gate for one candidate item."""

    accepted: bool
    verdict: str  # "novel" | "uncertain" | "redundant" | "silence" | "static" ...
    score: float  # the gate's statistic (overlap, cosine, speech probability)
    reason: str = ""
