"""LLM entity/relation extraction, one call per MAU, with a strict JSON schema.

The schema (sent as ``response_format`` structured output) fixes the shape and the
type enums: entities ``[{name, type}]`` with the 7 types, relations
``[{source, target, type, confidence}]`` with the 12 types. A reply that is not JSON or
breaks the schema raises the client's :class:`~memsys.errors.LLMResponseFormatError`
(the build skips that MAU, counts it, and retries it on the next build). Items that fit
the schema but cannot be used are dropped one by one and counted in
``Extraction.dropped``: empty or over-long names, relations whose endpoints are not
among the reply's entities (or the speaker), self-relations, confidences outside
[0, 1]. The speaker is always added as a Person (rule E1 of the rule extractor), and
entities get ``ENTITY_CONFIDENCE`` since the schema asks no confidence for them.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Sequence

from memsys.errors import LLMResponseFormatError
from memsys.graph.schema import (
    ENTITY_TYPES,
    RELATION_TYPES,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    is_entity_type,
    is_relation_type,
    normalize_name,
    time_label,
)
from memsys.records import MAU
from memsys.temporal import format_date

log = logging.getLogger(__name__)

ENTITY_CONFIDENCE = 0.8
SPEAKER_CONFIDENCE = 0.95
MAX_NAME_CHARS = 80
DEFAULT_MAX_TOKENS = 512

EXTRACTION_SCHEMA: dict[str, Any] = {
    "title": "kg_extraction",
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string", "enum": list(ENTITY_TYPES)}},
                "required": ["name", "type"],
                "additionalProperties": False,
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "target": {"type": "string"},
                    "type": {"type": "string", "enum": list(RELATION_TYPES)},
                    "confidence": {"type": "number"},
                },
                "required": ["source", "target", "type", "confidence"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["entities", "relations"],
    "additionalProperties": False,
}


def load_prompt() -> str:
    return resources.files("memsys.graph").joinpath("prompts/extract.txt").read_text(encoding="utf-8")


@dataclass
class LLMExtractStats:
    """Cost and yield of LLM extraction (per build); per-MAU figures divide by ``maus``."""

    maus: int = 0  # MAUs attempted
    calls: int = 0
    failed: int = 0  # malformed replies (LLMResponseFormatError), MAU skipped
    dropped_items: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def per_mau(self) -> dict[str, float]:
        n = max(1, self.maus)
        return {"calls": self.calls / n, "prompt_tokens": self.prompt_tokens / n,
                "completion_tokens": self.completion_tokens / n}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_mau": self.per_mau()}


class LLMExtractor:
    """Extract with any client that has ``chat(messages, json_schema=..., max_tokens=...)``
    returning a reply with ``parsed``, ``prompt_tokens``, ``completion_tokens``
    (:class:`memsys.llm.LLMClient`). Thread-safe: the client is, and stats take a lock."""

    name = "llm"

    def __init__(self, llm: Any, *, max_tokens: int = DEFAULT_MAX_TOKENS, workers: int = 1,
                 prompt: str | None = None):
        self.llm = llm
        self.max_tokens = max_tokens
        self.workers = max(1, workers)
        self.system = prompt if prompt is not None else load_prompt()
        self.stats = LLMExtractStats()
        self._lock = threading.Lock()

    def messages(self, mau: MAU) -> list[dict[str, str]]:
        lines = [f"Speaker: {mau.speaker or 'unknown'}"]
        if mau.timestamp is not None:
            lines.append(f"Date: {format_date(mau.timestamp)}")
        if mau.time_mentions:
            lines.append("Resolved times: " + "; ".join(f"{m.text} = {time_label(m)}" for m in mau.time_mentions))
        lines.append(f"Memory: {mau.full_text}")
        return [{"role": "system", "content": self.system}, {"role": "user", "content": "\n".join(lines)}]

    def extract(self, mau: MAU) -> Extraction:
        """One call; raises LLMResponseFormatError on a malformed reply."""
        with self._lock:
            self.stats.maus += 1
            self.stats.calls += 1
        try:
            reply = self.llm.chat(self.messages(mau), json_schema=EXTRACTION_SCHEMA, max_tokens=self.max_tokens)
        except LLMResponseFormatError:
            with self._lock:
                self.stats.failed += 1
            raise
        if reply.parsed is None:  # a client that ignored the schema request
            with self._lock:
                self.stats.failed += 1
            raise LLMResponseFormatError(f"no JSON object in the extraction reply for MAU {mau.id!r}")
        ex = parse_extraction(mau.id, reply.parsed, mau.speaker)
        ex.prompt_tokens, ex.completion_tokens = int(reply.prompt_tokens), int(reply.completion_tokens)
        with self._lock:
            self.stats.dropped_items += ex.dropped
            self.stats.prompt_tokens += ex.prompt_tokens
            self.stats.completion_tokens += ex.completion_tokens
        return ex

    def _try(self, mau: MAU) -> Extraction | None:
        try:
            return self.extract(mau)
        except LLMResponseFormatError as exc:
            log.warning("graph extraction skipped MAU %s: %s", mau.id, exc)
            return None

    def extract_many(self, maus: Sequence[MAU]) -> list[Extraction]:
        """Extractions of the MAUs whose reply parsed (malformed ones are counted, skipped)."""
        if self.workers == 1 or len(maus) < 2:
            results = [self._try(m) for m in maus]
        else:
            with ThreadPoolExecutor(self.workers) as pool:
                results = list(pool.map(self._try, maus))
        return [r for r in results if r is not None]


def parse_extraction(mau_id: str, data: dict[str, Any], speaker: str | None = None) -> Extraction:
    """Validate a schema-shaped reply item by item; unusable items are dropped and counted."""
    dropped = 0
    entities: dict[str, ExtractedEntity] = {}
    if speaker and speaker.strip():
        entities[normalize_name(speaker)] = ExtractedEntity(speaker.strip(), "Person", SPEAKER_CONFIDENCE)
    for item in data.get("entities") or []:
        name = str(item.get("name", "")).strip() if isinstance(item, dict) else ""
        key = normalize_name(name)
        if not key or len(name) > MAX_NAME_CHARS or not is_entity_type(item.get("type")):
            dropped += 1
            continue
        entities.setdefault(key, ExtractedEntity(name, item["type"], ENTITY_CONFIDENCE))
    relations: list[ExtractedRelation] = []
    seen: set[tuple[str, str, str]] = set()
    for item in data.get("relations") or []:
        if not isinstance(item, dict):
            dropped += 1
            continue
        src = entities.get(normalize_name(str(item.get("source", ""))))
        dst = entities.get(normalize_name(str(item.get("target", ""))))
        conf = item.get("confidence")
        ok_conf = isinstance(conf, (int, float)) and not isinstance(conf, bool) and 0.0 <= float(conf) <= 1.0
        if src is None or dst is None or src is dst or not is_relation_type(item.get("type")) or not ok_conf:
            dropped += 1
            continue
        key3 = (src.name, dst.name, item["type"])
        if key3 not in seen:
            seen.add(key3)
            relations.append(ExtractedRelation(src.name, dst.name, item["type"], float(conf)))
    return Extraction(mau_id, list(entities.values()), relations, dropped)
