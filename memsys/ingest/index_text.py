"""The text a MAU's indexes see, apart from the text its reader sees.

Why: 1,966 of LoCoMo's 1,986 questions name a speaker, and the reader sees the speaker on
every memory line, but a turn's summary is only what was said. An index that never sees
"Caroline" cannot rank Caroline's turns above Melanie's. So each index gets its own
rendering of a MAU (speaker, session date, then the summary with any image caption), chosen
per index in ``memory.ingest.index_text``; the reader keeps ``MAU.summary`` / ``full_text``
with the speaker and date in the line header, so no name is shown twice.
"""

from __future__ import annotations

from memsys.records import MAU
from memsys.temporal import format_date

#: what an index may see of a MAU, as a config choice: ``text`` (the summary alone, as before),
#: ``speaker`` (speaker name first), ``speaker_date`` (speaker and absolute session date first)
INDEX_TEXT_CHOICES = ("text", "speaker", "speaker_date")
#: how stores built before index text existed were embedded and searched
LEGACY_INDEX_TEXT = "text"


def index_text(mau: MAU, fields: str, body: str | None = None) -> str:
    """``speaker (date): body`` as ``fields`` asks (``body`` defaults to the summary)."""
    if fields not in INDEX_TEXT_CHOICES:
        from memsys.errors import ConfigError

        raise ConfigError(f"unknown index text {fields!r} ({' | '.join(INDEX_TEXT_CHOICES)})")
    body = mau.summary if body is None else body
    if fields == "text" or not mau.speaker:
        return body
    if fields == "speaker_date" and mau.timestamp is not None:
        return f"{mau.speaker} ({format_date(mau.timestamp)}): {body}"
    return f"{mau.speaker}: {body}"
