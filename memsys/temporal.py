"""Absolute time for memories, computed in code.

Small local models get relative dates wrong (OFFLINE.md), so session dates are
parsed here and relative expressions in a turn ("yesterday", "last week") are
resolved against the session date deterministically and kept as metadata.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta

from harness.dates import format_date, parse_datetime  # noqa: F401 (re-exported)
from memsys.records import TimeMention

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_UNIT_RE = r"(day|week|month|year|weekend)s?"
_RELATIVE_RE = re.compile(
    r"\b(?:"
    r"(?P<simple>today|tonight|yesterday|tomorrow|the day before yesterday|the day after tomorrow)"
    r"|(?P<dir>last|next|this|past|coming)\s+(?P<unit>week|month|year|weekend|" + "|".join(_WEEKDAYS) + r")"
    r"|(?P<num>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)\s+" + _UNIT_RE + r"\s+(?P<ago>ago|later|from now)"
    r")\b",
    re.IGNORECASE,
)


def _day_span(d: date) -> tuple[datetime, datetime]:
    start = datetime.combine(d, time.min)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def _month_shift(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    return date(d.year + y, m + 1, 1)


def resolve_relative_times(text: str, anchor: datetime) -> list[TimeMention]:
    """Resolve relative time expressions in ``text`` against ``anchor`` (the session date)."""
    mentions: list[TimeMention] = []
    today = anchor.date()
    for m in _RELATIVE_RE.finditer(text):
        span: tuple[datetime, datetime] | None = None
        gran = "day"
        if m["simple"]:
            offset = {"today": 0, "tonight": 0, "yesterday": -1, "tomorrow": 1,
                      "the day before yesterday": -2, "the day after tomorrow": 2}[m["simple"].lower()]
            span = _day_span(today + timedelta(days=offset))
        elif m["dir"]:
            direction, unit = m["dir"].lower(), m["unit"].lower()
            sign = {"last": -1, "past": -1, "next": 1, "coming": 1, "this": 0}[direction]
            if unit in _WEEKDAYS:
                target = _WEEKDAYS.index(unit)
                delta = target - today.weekday()
                if sign < 0:
                    delta = delta - 7 if delta >= 0 else delta
                elif sign > 0:
                    delta = delta + 7 if delta <= 0 else delta
                span = _day_span(today + timedelta(days=delta))
            elif unit in ("week", "weekend"):
                monday = today - timedelta(days=today.weekday()) + timedelta(weeks=sign)
                if unit == "weekend":
                    sat = monday + timedelta(days=5)
                    span = (_day_span(sat)[0], _day_span(sat + timedelta(days=1))[1])
                else:
                    span = (_day_span(monday)[0], _day_span(monday + timedelta(days=6))[1])
                gran = "week"
            elif unit == "month":
                first = _month_shift(today, sign)
                nxt = _month_shift(first, 1)
                span = (_day_span(first)[0], _day_span(nxt - timedelta(days=1))[1])
                gran = "month"
            elif unit == "year":
                y = today.year + sign
                span = (datetime(y, 1, 1), datetime(y, 12, 31, 23, 59, 59))
                gran = "year"
        else:
            raw = m["num"].lower()
            n = int(raw) if raw.isdigit() else _NUMBER_WORDS.get(raw.replace("a couple of", "couple of").replace("a few", "few"), 1)
            sign = -1 if m["ago"].lower() == "ago" else 1
            unit = re.search(_UNIT_RE, m.group(0), re.IGNORECASE)[1].lower()
            if unit == "day":
                span = _day_span(today + timedelta(days=sign * n))
            elif unit in ("week", "weekend"):
                d = today + timedelta(weeks=sign * n)
                monday = d - timedelta(days=d.weekday())
                span = (_day_span(monday)[0], _day_span(monday + timedelta(days=6))[1])
                gran = "week"
            elif unit == "month":
                first = _month_shift(today, sign * n)
                span = (_day_span(first)[0], _day_span(_month_shift(first, 1) - timedelta(days=1))[1])
                gran = "month"
            else:
                y = today.year + sign * n
                span = (datetime(y, 1, 1), datetime(y, 12, 31, 23, 59, 59))
                gran = "year"
        if span is not None:
            mentions.append(TimeMention(text=m.group(0), start=span[0], end=span[1], granularity=gran))
    return mentions


def describe_mention(m: TimeMention) -> str:
    """Human-readable resolution, e.g. "yesterday = 7 May 2023"."""
    if m.granularity == "day":
        return f"{m.text} = {format_date(m.start)}"
    if m.granularity == "week":
        return f"{m.text} = week of {format_date(m.start)}"
    if m.granularity == "month":
        return f"{m.text} = {m.start.strftime('%B')} {m.start.year}"
    return f"{m.text} = {m.start.year}"
