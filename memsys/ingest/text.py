"""Text ingestion: validated dialogue turns -> gated, time-resolved text MAUs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memsys.config import IngestConfig
from memsys.errors import InputError
from memsys.ingest.text_gate import TextNoveltyGate
from memsys.records import MAU, IngestDecision, Link, LinkKind, Modality, Turn
from memsys.store.cold import ColdStore
from memsys.temporal import describe_mention, resolve_relative_times


@dataclass
class IngestReport:
    """What the gate did with a batch; counts feed the novelty-rate figures."""

    accepted: int = 0
    uncertain: int = 0
    rejected: int = 0
    resumed_after: int = 0  # input turns an earlier, stopped ingest of the same input had already processed
    decisions: dict[str, IngestDecision] = field(default_factory=dict)
    compression: Any = None  # memsys.ingest.compress.CompressionReport when compression ran

    def record(self, turn_id: str, d: IngestDecision) -> None:
        self.decisions[turn_id] = d
        if not d.accepted:
            self.rejected += 1
        else:
            self.accepted += 1
            self.uncertain += d.verdict == "uncertain"


def validate_turn(turn: Turn, where: str = "") -> Turn:
    """Reject empty / non-text turns with a one-line error naming the turn."""
    at = f"{where}turn {turn.id!r}"
    if not isinstance(turn.id, str) or not turn.id.strip():
        raise InputError(f"{where}turn with empty id")
    if not isinstance(turn.text, str):
        raise InputError(f"{at}: text is {type(turn.text).__name__}, expected str")
    if not isinstance(turn.speaker, str):
        raise InputError(f"{at}: speaker is {type(turn.speaker).__name__}, expected str")
    for name in ("session_id", "image_caption", "image_path", "user", "conversation"):
        value = getattr(turn, name)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{at}: {name} is {type(value).__name__}, expected str or None")
    if not turn.text.strip() and not (turn.image_caption or "").strip():
        raise InputError(f"{at}: empty text")
    # every string lands in SQLite / cold-tier JSON as UTF-8: lone surrogates must stop here
    for name in ("text", "speaker", "session_id", "image_caption", "image_path", "user", "conversation"):
        value = getattr(turn, name)
        try:
            (value or "").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"{at}: {name} is not valid UTF-8 ({exc.reason})") from exc
    if turn.timestamp is not None and not isinstance(turn.timestamp, datetime):
        raise InputError(f"{at}: timestamp must be a datetime, got {type(turn.timestamp).__name__}")
    return turn


def turn_text(turn: Turn) -> str:
    """The searchable text of a turn: its words plus any image caption."""
    text = turn.text.strip()
    if turn.image_caption:
        text = f"{text} [shared an image: {turn.image_caption.strip()}]".strip()
    return text


def build_text_maus(
    turns: list[Turn],
    cfg: IngestConfig,
    gate: TextNoveltyGate,
    cold: ColdStore,
    report: IngestReport,
    last_in_session: dict[str, str],
    stored_next: dict[str, str] | None = None,
) -> list[MAU]:
    """Gate each turn, resolve relative times against its timestamp, store raw text cold.

    ``last_in_session`` carries the previous MAU id per session across batches, so
    prev/next links survive incremental ingestion; a NEXT link owed by an already
    stored MAU is reported in ``stored_next`` (prev id -> new id) for the caller.
    """
    out: list[MAU] = []
    in_batch: dict[str, MAU] = {}
    for turn in turns:
        text = turn_text(turn)
        decision = gate.check(text)
        report.record(turn.id, decision)
        if not decision.accepted:
            continue
        mentions = []
        if cfg.resolve_relative_time and turn.timestamp is not None:
            mentions = resolve_relative_times(turn.text, turn.timestamp)
        raw = {"id": turn.id, "speaker": turn.speaker, "text": turn.text,
               "timestamp": turn.timestamp.isoformat() if turn.timestamp else None,
               "image_caption": turn.image_caption, "image_path": turn.image_path}
        pointer = cold.put_text(json.dumps(raw, ensure_ascii=False, sort_keys=True))
        details = {"text": text, "novelty": decision.verdict}
        if mentions:
            details["resolved_times"] = [describe_mention(m) for m in mentions]
        if turn.image_path:
            details["image_path"] = turn.image_path
        if turn.user is not None:
            details["user"] = turn.user
        if turn.conversation is not None:
            details["conversation"] = turn.conversation
        m = MAU(
            id=turn.id,
            summary=text,
            modality=Modality.TEXT,
            timestamp=turn.timestamp,
            pointer=pointer,
            session_id=turn.session_id,
            source_id=turn.id,
            speaker=turn.speaker,
            details=details,
            persons=[turn.speaker] if turn.speaker else [],
            time_mentions=mentions,
        )
        if cfg.link_sessions and turn.session_id:
            prev = last_in_session.get(turn.session_id)
            if prev:
                m.links.append(Link(LinkKind.PREV, prev))
                if prev in in_batch:
                    in_batch[prev].links.append(Link(LinkKind.NEXT, m.id))
                elif stored_next is not None:
                    stored_next[prev] = m.id
            last_in_session[turn.session_id] = m.id
        in_batch[m.id] = m
        out.append(m)
    return out
