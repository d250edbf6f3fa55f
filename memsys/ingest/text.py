"""Text ingestion: validated dialogue turns -> gated, time-resolved text MAUs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memsys.config import IngestConfig
from memsys.errors import InputError
from memsys.ingest.text_gate import TextNoveltyGate
from memsys.records import MAU, IngestDecision, Link, LinkKind, Modality, TimeMention, Turn
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


@dataclass
class _SessionChain:
    """The prev/next bookkeeping of one ingest call.

    Kept together because a link may point into this batch (patched in place)
    or at an already stored MAU (owed to the caller through ``stored_next``).
    """

    last_in_session: dict[str, str]
    stored_next: dict[str, str] | None
    in_batch: dict[str, MAU] = field(default_factory=dict)

    def link(self, m: MAU, session_id: str | None, enabled: bool) -> None:
        if enabled and session_id:
            prev = self.last_in_session.get(session_id)
            if prev:
                m.links.append(Link(LinkKind.PREV, prev))
                if prev in self.in_batch:
                    self.in_batch[prev].links.append(Link(LinkKind.NEXT, m.id))
                elif self.stored_next is not None:
                    self.stored_next[prev] = m.id
            self.last_in_session[session_id] = m.id
        self.in_batch[m.id] = m


def _time_mentions(turn: Turn, cfg: IngestConfig) -> list[TimeMention]:
    if cfg.resolve_relative_time and turn.timestamp is not None:
        return resolve_relative_times(turn.text, turn.timestamp)
    return []


def _store_raw_turn(turn: Turn, cold: ColdStore) -> str:
    """Keep the turn as given, so the summary can be rebuilt or audited later."""
    raw = {"id": turn.id, "speaker": turn.speaker, "text": turn.text,
           "timestamp": turn.timestamp.isoformat() if turn.timestamp else None,
           "image_caption": turn.image_caption, "image_path": turn.image_path}
    return cold.put_text(json.dumps(raw, ensure_ascii=False, sort_keys=True))


def _text_details(turn: Turn, text: str, verdict: str, mentions: list[TimeMention]) -> dict[str, Any]:
    details: dict[str, Any] = {"text": text, "novelty": verdict}
    if mentions:
        details["resolved_times"] = [describe_mention(m) for m in mentions]
    if turn.image_path:
        details["image_path"] = turn.image_path
    if turn.user is not None:
        details["user"] = turn.user
    if turn.conversation is not None:
        details["conversation"] = turn.conversation
    return details


def _text_mau(turn: Turn, text: str, pointer: str, details: dict[str, Any],
              mentions: list[TimeMention]) -> MAU:
    return MAU(
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
    chain = _SessionChain(last_in_session, stored_next)
    for turn in turns:
        text = turn_text(turn)
        decision = gate.check(text)
        report.record(turn.id, decision)
        if not decision.accepted:
            continue
        mentions = _time_mentions(turn, cfg)
        pointer = _store_raw_turn(turn, cold)
        m = _text_mau(turn, text, pointer, _text_details(turn, text, decision.verdict, mentions), mentions)
        chain.link(m, turn.session_id, cfg.link_sessions)
        out.append(m)
    return out
