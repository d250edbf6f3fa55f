"""The text a MAU's indexes see, apart from the text its reader sees.

Why: 1,966 of LoCoMo's 1,986 questions name a speaker, and the reader sees the speaker on
every memory line, but a turn's summary is only what was said. An index that never sees
"Caroline" cannot rank Caroline's turns above Melanie's. So each index gets its own
rendering of a MAU (speaker, session date, then the summary with any image caption), chosen
per index in ``memory.ingest.index_text``; the reader keeps ``MAU.summary`` / ``full_text``
with the speaker and date in the line header, so no name is shown twice.

A turn is often only half of what it means: "Researching adoption agencies" answers "What have
you been up to?", and the question a user later asks uses the words of both. So with
``index_text.neighbors = n`` both indexes also see the n turns before and after it in the same
session (contextual indexing); the MAU, its reader text and what the scorer counts stay the one
turn. On LoCoMo dev this moved evidence recall@20 of an RRF of the two lists from 0.714 to 0.832
with n = 1 (docs/history.md, "Neighbouring turns in the index text").
"""

from __future__ import annotations

from typing import Callable, Sequence

from memsys.records import MAU, Turn
from memsys.temporal import format_date

#: what an index may see of a MAU, as a config choice: ``text`` (the summary alone, as before),
#: ``speaker`` (speaker name first), ``speaker_date`` (speaker and absolute session date first)
INDEX_TEXT_CHOICES = ("text", "speaker", "speaker_date")
#: how stores built before index text existed were embedded and searched
LEGACY_INDEX_TEXT = "text"
#: where a MAU keeps the neighbouring turns its indexes see (decided at ingestion, stored with it, so a
#: BM25 index rebuilt from the hot tier sees what the embedding saw)
CONTEXT_KEY = "index_context"


def index_text(mau: MAU, fields: str, body: str | None = None) -> str:
    """``speaker (date): body`` as ``fields`` asks (``body`` defaults to the summary)."""
    if fields not in INDEX_TEXT_CHOICES:
        from memsys.errors import ConfigError

        raise ConfigError(f"unknown index text {fields!r} ({' | '.join(INDEX_TEXT_CHOICES)})")
    body = mau.summary if body is None else body
    context = mau.details.get(CONTEXT_KEY) if mau.details else None
    if context:
        body = f"{body}{context}"
    if fields == "text" or not mau.speaker:
        return body
    if fields == "speaker_date" and mau.timestamp is not None:
        return f"{mau.speaker} ({format_date(mau.timestamp)}): {body}"
    return f"{mau.speaker}: {body}"


def _line(speaker: str | None, text: str) -> str:
    return f"{speaker}: {text}" if speaker else text


def neighbour_context(turns: Sequence[Turn], n: int, text_of: Callable[[Turn], str],
                      earlier: Callable[[str], list[tuple[str | None, str]]] | None = None) -> dict[str, str]:
    """Turn id -> the text of its ``n`` neighbours on each side within its session, to append to
    its index text (empty dict when ``n`` is 0).

    Neighbours come from ``turns`` in the order given; a session's first turns here also see the
    session's last stored turns (``earlier(session_id)``, oldest first). A turn ingested alone has
    no later turn yet, so it is indexed with what came before it only: its context is fixed when
    it is stored, never rewritten.
    """
    if n <= 0:
        return {}
    by_session: dict[str | None, list[tuple[str | None, str, str | None]]] = {}
    for t in turns:
        rows = by_session.get(t.session_id)
        if rows is None:
            rows = by_session[t.session_id] = []
            if earlier is not None and t.session_id is not None:
                rows.extend((None, text, speaker) for speaker, text in earlier(t.session_id)[-n:])
        rows.append((t.id, text_of(t), t.speaker))
    out: dict[str, str] = {}
    for rows in by_session.values():
        for i, (tid, _, _) in enumerate(rows):
            if tid is None:
                continue
            before = [_line(sp, tx) for _, tx, sp in rows[max(0, i - n) : i]]
            after = [_line(sp, tx) for _, tx, sp in rows[i + 1 : i + 1 + n]]
            parts = ([f" | before: {' / '.join(before)}"] if before else []) + \
                    ([f" | after: {' / '.join(after)}"] if after else [])
            if parts:
                out[tid] = "".join(parts)
    return out
