"""Typed records of the knowledge graph and the name normalization every part shares.

Two layers of records:

- what an extractor returns for one MAU (:class:`Extraction` of
  :class:`ExtractedEntity` / :class:`ExtractedRelation`, names as written), and
- the resolved graph (:class:`Entity` / :class:`Relation`, endpoints are entity ids)
  that entity resolution builds from all extractions of a store.

The 7 entity types are the paper's; the 12 relation types are the released code's.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from memsys.records import MAU, TimeMention
from memsys.temporal import format_date

ENTITY_TYPES: tuple[str, ...] = ("Person", "Location", "Event", "Concept", "Time", "Organization", "Object")
RELATION_TYPES: tuple[str, ...] = (
    "located_in", "part_of", "contains", "interacts_with", "owns", "created_by",
    "occurs_at", "related_to", "has_attribute", "temporal_before", "temporal_after", "causes",
)
_ENTITY_TYPE_SET = frozenset(ENTITY_TYPES)
_RELATION_TYPE_SET = frozenset(RELATION_TYPES)


def is_entity_type(value: Any) -> bool:
    return isinstance(value, str) and value in _ENTITY_TYPE_SET


def is_relation_type(value: Any) -> bool:
    return isinstance(value, str) and value in _RELATION_TYPE_SET


# --- extraction output (per MAU, surface names) -------------------------------------
@dataclass(frozen=True, slots=True)
class ExtractedEntity:
    name: str  # as written (or as the extractor composed it, e.g. "Melanie's dog")
    type: str  # one of ENTITY_TYPES
    confidence: float


@dataclass(frozen=True, slots=True)
class ExtractedRelation:
    source: str  # an ExtractedEntity.name of the same extraction
    target: str
    type: str  # one of RELATION_TYPES
    confidence: float


@dataclass(slots=True)
class Extraction:
    """Entities and relations found in one MAU by one extractor."""

    mau_id: str
    entities: list[ExtractedEntity] = field(default_factory=list)
    relations: list[ExtractedRelation] = field(default_factory=list)
    dropped: int = 0  # invalid items the extractor discarded (LLM replies)
    prompt_tokens: int = 0  # LLM usage spent on this MAU (0 for rules)
    completion_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "entities": [[e.name, e.type, round(e.confidence, 4)] for e in self.entities],
            "relations": [[r.source, r.target, r.type, round(r.confidence, 4)] for r in self.relations],
            "dropped": self.dropped,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }

    @classmethod
    def from_json(cls, mau_id: str, data: dict[str, Any]) -> "Extraction":
        return cls(
            mau_id=mau_id,
            entities=[ExtractedEntity(str(n), str(t), float(c)) for n, t, c in data.get("entities", [])],
            relations=[ExtractedRelation(str(s), str(d), str(t), float(c)) for s, d, t, c in data.get("relations", [])],
            dropped=int(data.get("dropped", 0)),
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
        )


# --- resolved graph --------------------------------------------------------------------
@dataclass(slots=True)
class Entity:
    id: str  # "<type lower>:<normalized canonical name>", stable for one canonical name
    name: str  # canonical surface form
    type: str
    aliases: list[str] = field(default_factory=list)  # other surface forms merged into it
    confidence: float = 0.5  # noisy-or of its mention confidences
    mau_ids: list[str] = field(default_factory=list)  # MAUs that mention it, store order


@dataclass(frozen=True, slots=True)
class Relation:
    src: str  # entity id
    dst: str
    type: str
    confidence: float
    mau_id: str | None = None  # the MAU the relation was extracted from


def entity_id(type_: str, key: str) -> str:
    return f"{type_.lower()}:{key}"


# --- names --------------------------------------------------------------------------------
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_POSSESSIVE = re.compile(r"(?<=\w)'s\b")
_DROP = re.compile(r"[^\w\s'&-]+")
_APOSTROPHE = re.compile(r"'(?!s\b)|(?<!\s)'(?=s\b)")

#: words ignored at the start of a name ("the Louvre" == "Louvre")
LEADING_ARTICLES = frozenset({"the", "a", "an"})
#: personal titles stripped for resolution (``core_name``), kept in the surface form
TITLES = frozenset({
    "dr", "doctor", "mr", "mrs", "ms", "miss", "mx", "prof", "professor", "sir", "madam",
    "dame", "lord", "lady", "rev", "reverend", "capt", "captain", "coach", "officer",
})


def normalize_name(name: str) -> str:
    """Lowercase, NFKC, ASCII quotes; punctuation removed except ``& - '``; a possessive
    ``'s`` becomes its own token (``"Melanie's dog" -> "melanie 's dog"``) so a query
    n-gram ``melanie`` still matches the owner; a leading article is dropped."""
    text = unicodedata.normalize("NFKC", name).translate(_QUOTES).lower()
    text = _POSSESSIVE.sub(" 's", text)
    text = _DROP.sub(" ", text)
    text = _APOSTROPHE.sub("", text)  # "don't" -> "dont"; the "'s" token survives
    tokens = [t.strip("-&") or t for t in text.split()]
    tokens = [t for t in tokens if t]
    if len(tokens) > 1 and tokens[-1] == "'s":  # "Caroline's" alone names Caroline
        tokens = tokens[:-1]
    while len(tokens) > 1 and tokens[0] in LEADING_ARTICLES:
        tokens = tokens[1:]
    return " ".join(tokens)


def core_name(key: str) -> str:
    """A normalized name without leading titles: ``"dr smith" -> "smith"``."""
    tokens = key.split()
    while len(tokens) > 1 and tokens[0] in TITLES:
        tokens = tokens[1:]
    return " ".join(tokens)


def split_owner(key: str) -> tuple[str | None, str]:
    """``"melanie 's dog" -> ("melanie", "dog")``; names without an owner -> (None, key)."""
    if " 's " in key:
        owner, head = key.split(" 's ", 1)
        return owner, head
    return None, key


# --- time labels ------------------------------------------------------------------------
def time_label(m: TimeMention) -> str:
    """The Time entity name of a resolved mention: "7 May 2023", "week of 1 May 2023"."""
    if m.granularity == "day":
        return format_date(m.start)
    if m.granularity == "week":
        return f"week of {format_date(m.start)}"
    if m.granularity == "month":
        return f"{m.start.strftime('%B')} {m.start.year}"
    return str(m.start.year)


def mau_date_label(m: MAU) -> str | None:
    """When a MAU's content happened, for fact lines: its first resolved time mention,
    else its timestamp ("7 May 2023"), else None."""
    if m.time_mentions:
        return time_label(m.time_mentions[0])
    if m.timestamp is not None:
        return format_date(m.timestamp)
    return None
