"""Dates as the benchmark files write them, parsed the same way by the scorer and the system.

Session dates ("1:56 pm on 8 May, 2023", ISO, "May 8, 2023") are part of the gold data's
meaning, so their parser is fixed code outside the research agent's reach.
"""

from __future__ import annotations

import re
from datetime import date, datetime

from harness.errors import InputError

_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"),
            ("may",), ("jun", "june"), ("jul", "july"), ("aug", "august"),
            ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"), ("dec", "december"),
        ],
        start=1,
    )
    for m in names
}

# "1:56 pm on 8 May, 2023" (LoCoMo) and variants without the time or comma
_LOCOMO_RE = re.compile(
    r"^\s*(?:(?P<h>\d{1,2}):(?P<mi>\d{2})\s*(?P<ampm>[ap]\.?m\.?)\s*(?:on\s+)?)?"
    r"(?P<d>\d{1,2})\s+(?P<mon>[A-Za-z]+)\.?,?\s+(?P<y>\d{4})\s*$",
    re.IGNORECASE,
)
# "May 8, 2023" and "8 May 2023"
_MDY_RE = re.compile(r"^\s*(?P<mon>[A-Za-z]+)\.?\s+(?P<d>\d{1,2}),?\s+(?P<y>\d{4})\s*$")
# Mem-Gallery / ISO-ish: "2023-05-08", "2023/05/08 13:56", "2023-05-08T13:56:00"
_ISO_RE = re.compile(
    r"^\s*(?P<y>\d{4})[-/](?P<mo>\d{1,2})[-/](?P<d>\d{1,2})(?:[ T](?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2}))?)?\s*$"
)


def parse_datetime(text: str) -> datetime:
    """Parse a session date as written by LoCoMo ("1:56 pm on 8 May, 2023"), ISO, or "May 8, 2023"."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty or non-string timestamp: {text!r}")
    m = _LOCOMO_RE.match(text)
    if m:
        month = _MONTHS.get(m["mon"].lower())
        if month is None:
            raise InputError(f"unknown month {m['mon']!r} in timestamp {text!r}")
        hour, minute = 0, 0
        if m["h"]:
            hour, minute = int(m["h"]) % 12, int(m["mi"])
            if m["ampm"].lower().startswith("p"):
                hour += 12
        return _build(text, int(m["y"]), month, int(m["d"]), hour, minute)
    m = _MDY_RE.match(text)
    if m and m["mon"].lower() in _MONTHS:
        return _build(text, int(m["y"]), _MONTHS[m["mon"].lower()], int(m["d"]), 0, 0)
    m = _ISO_RE.match(text)
    if m:
        return _build(text, int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"] or 0), int(m["mi"] or 0), int(m["s"] or 0))
    raise InputError(f"unrecognised timestamp {text!r} (expected e.g. '1:56 pm on 8 May, 2023' or '2023-05-08')")


def _build(text: str, y: int, mo: int, d: int, h: int, mi: int, s: int = 0) -> datetime:
    try:
        return datetime(y, mo, d, h, mi, s)
    except ValueError as exc:
        raise InputError(f"invalid date in timestamp {text!r}: {exc}") from exc


def format_date(value: datetime | date) -> str:
    """The reader's date format from the answer rules: "8 May 2023"."""
    return f"{value.day} {value.strftime('%B')} {value.year}"
