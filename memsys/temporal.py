"""Absolute time for memories, computed in code.

Small local models get relative dates wrong (OFFLINE.md), so session dates are
parsed here and relative expressions in a turn ("yesterday", "last week", "last summer",
"in two weeks") are resolved against the session date deterministically and kept as
metadata. Vague amounts ("a few days ago", "several weeks ago") and rolling windows
("the past week" = the seven days before the session) resolve to a range, never to one
made-up day: the reader is shown the range.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta

from harness.dates import format_date, parse_datetime  # noqa: F401 (re-exported)
from memsys.records import TimeMention

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
#: short forms people type ("last Fri", "last Tues."; LoCoMo has 6 such turns), matched capitalised only so
#: that "this sun" or "who last sat" stay words
_WEEKDAY_SHORT = {"mon": "monday", "tue": "tuesday", "tues": "tuesday", "wed": "wednesday", "thu": "thursday",
                  "thur": "thursday", "thurs": "thursday", "fri": "friday", "sat": "saturday", "sun": "sunday"}
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "couple of": 2}
#: vague amounts: (fewest, most) units they can mean
_VAGUE = {"a few": (2, 4), "few": (2, 4), "several": (3, 7)}
#: meteorological seasons (northern hemisphere): first month, months long
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
_NUM = r"\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few|several"
_UNIT_RE = r"(day|week|month|year|weekend)s?"
#: relative time expressions; ingestion resolves them in turns, memsys/answer/times.py in answers
RELATIVE_RE = re.compile(
    r"\b(?:"
    r"(?P<simple>today|tonight|last night|yesterday|tomorrow|the day before yesterday|the day after tomorrow)"
    r"|(?P<pdir>past|last)\s+(?P<pnum>few|couple of|\d+|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(?P<punit>day|week|month|year)s"
    r"|(?P<sdir>last|this|next|past|coming)\s+(?P<season>spring|summer|fall|autumn|winter)"
    r"|(?P<dir>last|next|this|past|coming)\s+(?P<unit>week|month|year|weekend|" + "|".join(_WEEKDAYS)
    + "|(?-i:" + "|".join(w.capitalize() for w in _WEEKDAY_SHORT) + "))"
    r"|(?P<num>" + _NUM + r")\s+" + _UNIT_RE + r"\s+(?P<ago>ago|later|from now)"
    r"|in\s+(?P<innum>" + _NUM + r")\s+(?P<inunit>day|week|month|year)s?"
    r")\b",
    re.IGNORECASE,
)


def _day_span(d: date) -> tuple[datetime, datetime]:
    start = datetime.combine(d, time.min)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def _days(first: date, last: date) -> tuple[datetime, datetime]:
    return _day_span(first)[0], _day_span(last)[1]


def _month_shift(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    return date(d.year + y, m + 1, 1)


def _month_span(first: date, months: int = 1) -> tuple[datetime, datetime]:
    return _days(first, _month_shift(first, months) - timedelta(days=1))


def _year_span(first: int, last: int) -> tuple[datetime, datetime]:
    return datetime(first, 1, 1), datetime(last, 12, 31, 23, 59, 59)


def _amount(raw: str) -> tuple[int, int]:
    """(fewest, most) units a number word means: equal for exact amounts, a range for vague ones."""
    raw = raw.lower()
    if raw.isdigit():
        return int(raw), int(raw)
    if raw in _VAGUE:
        return _VAGUE[raw]
    n = _NUMBER_WORDS.get(raw, 1)
    return n, n


def _offset_span(today: date, unit: str, n: int, sign: int) -> tuple[tuple[datetime, datetime], str]:
    """The day, week, month or year ``n`` units before (sign -1) or after (+1) ``today``."""
    if unit == "day":
        return _day_span(today + timedelta(days=sign * n)), "day"
    if unit in ("week", "weekend"):
        d = today + timedelta(weeks=sign * n)
        monday = d - timedelta(days=d.weekday())
        return _days(monday, monday + timedelta(days=6)), "week"
    if unit == "month":
        return _month_span(_month_shift(today, sign * n)), "month"
    return _year_span(today.year + sign * n, today.year + sign * n), "year"


def _vague_offset(today: date, unit: str, lo: int, hi: int, sign: int) -> tuple[tuple[datetime, datetime], str]:
    """Between ``lo`` and ``hi`` units away: one span for an exact amount, the hull for a vague one."""
    a, gran = _offset_span(today, unit, lo, sign)
    if lo == hi:
        return a, gran
    b, _ = _offset_span(today, unit, hi, sign)
    return (min(a[0], b[0]), max(a[1], b[1])), "range"


def _season_span(today: date, direction: str, season: str) -> tuple[datetime, datetime]:
    """``last`` = the latest such season already over, ``next`` = the first not yet begun, ``this`` = the one
    of the session's year (winter: the one that began in December before the session, if it is winter)."""
    first_month = _SEASONS[season]

    def start(year: int) -> date:
        return date(year, first_month, 1)

    year = today.year - (1 if first_month == 12 and today.month <= 2 else 0)
    this = start(year)
    if direction in ("last", "past"):
        while _month_shift(this, 3) > today:
            this = start(this.year - 1)
    elif direction in ("next", "coming"):
        while this <= today:
            this = start(this.year + 1)
    return _month_span(this, 3)


def _weekday_span(today: date, weekday: str, sign: int) -> tuple[datetime, datetime]:
    delta = _WEEKDAYS.index(weekday) - today.weekday()
    if sign < 0:
        delta = delta - 7 if delta >= 0 else delta
    elif sign > 0:
        delta = delta + 7 if delta <= 0 else delta
    return _day_span(today + timedelta(days=delta))


def _directed_span(today: date, direction: str, unit: str) -> tuple[tuple[datetime, datetime], str]:
    """"last/this/next X" for a weekday, week, weekend, month or year (calendar units); "past week" etc.
    are the rolling window ending the day before the session."""
    if direction == "past" and unit in ("week", "month", "year"):
        back = {"week": timedelta(days=7), "month": timedelta(days=30), "year": timedelta(days=365)}[unit]
        return _days(today - back, today - timedelta(days=1)), "range"
    sign = {"last": -1, "past": -1, "next": 1, "coming": 1, "this": 0}[direction]
    if unit in _WEEKDAYS:
        return _weekday_span(today, unit, sign), "day"
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=sign)
        if unit == "weekend":
            return _days(monday + timedelta(days=5), monday + timedelta(days=6)), "week"
        return _days(monday, monday + timedelta(days=6)), "week"
    if unit == "month":
        return _month_span(_month_shift(today, sign)), "month"
    return _year_span(today.year + sign, today.year + sign), "year"


def _rolling_window(today: date, raw: str, unit: str) -> tuple[datetime, datetime]:
    """"past few weeks", "last 3 days": from the most units back to the day before the session."""
    _, most = _amount({"few": "a few", "couple of": "a couple of"}.get(raw.lower(), raw))
    days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit.lower()] * most
    return _days(today - timedelta(days=days), today - timedelta(days=1))


def _resolve_one(m: re.Match, today: date) -> tuple[tuple[datetime, datetime], str]:
    if m["simple"]:
        offset = {"today": 0, "tonight": 0, "last night": -1, "yesterday": -1, "tomorrow": 1,
                  "the day before yesterday": -2, "the day after tomorrow": 2}[m["simple"].lower()]
        return _day_span(today + timedelta(days=offset)), "day"
    if m["pdir"]:
        return _rolling_window(today, m["pnum"], m["punit"]), "range"
    if m["season"]:
        return _season_span(today, m["sdir"].lower(), m["season"].lower()), "season"
    if m["dir"]:
        return _directed_span(today, m["dir"].lower(), mention_key(m["unit"]))
    if m["innum"]:
        lo, hi = _amount(m["innum"])
        return _vague_offset(today, m["inunit"].lower(), lo, hi, 1)
    lo, hi = _amount(m["num"])
    unit = re.search(_UNIT_RE, m.group(0)[len(m["num"]):], re.IGNORECASE)[1].lower()
    return _vague_offset(today, unit, lo, hi, -1 if m["ago"].lower() == "ago" else 1)


def resolve_relative_times(text: str, anchor: datetime) -> list[TimeMention]:
    """Resolve relative time expressions in ``text`` against ``anchor`` (the session date)."""
    today = anchor.date()
    mentions = []
    for m in RELATIVE_RE.finditer(text):
        (start, end), gran = _resolve_one(m, today)
        mentions.append(TimeMention(text=m.group(0), start=start, end=end, granularity=gran))
    return mentions


def describe_mention(m: TimeMention) -> str:
    """Human-readable resolution, e.g. "yesterday = 7 May 2023", "a few days ago = 4-6 May 2023"."""
    if m.granularity == "day":
        return f"{m.text} = {format_date(m.start)}"
    if m.granularity == "week":
        return f"{m.text} = week of {format_date(m.start)}"
    if m.granularity == "month":
        return f"{m.text} = {m.start.strftime('%B')} {m.start.year}"
    if m.granularity == "season":
        return f"{m.text} = {m.start.strftime('%B')}-{m.end.strftime('%B')} {m.end.year}"
    if m.granularity == "range":
        whole_years = (m.start.month, m.start.day, m.end.month, m.end.day) == (1, 1, 12, 31)
        if whole_years and m.start.year != m.end.year:
            return f"{m.text} = between {m.start.year} and {m.end.year}"
        return f"{m.text} = between {format_date(m.start)} and {format_date(m.end)}"
    return f"{m.text} = {m.start.year}"


_ANCHORED = re.compile(r"^(?P<dir>last|past|this|next|coming)\s+(?P<unit>week|weekend)$", re.IGNORECASE)
_ANCHOR_WORD = {"last": "before", "past": "before", "this": "of", "next": "after", "coming": "after"}


def mention_key(text: str) -> str:
    """One key for one expression however it is written: "Last Tues" and "last tuesday" match."""
    return " ".join(_WEEKDAY_SHORT.get(w, w) for w in text.lower().split())


def answer_date(m: TimeMention, said_on: datetime) -> str:
    """What a "when" answer says for a mention: the day itself when it names one; "the week before 9 June
    2023" for last/next week or weekend (what the speaker said, anchored to the day they said it: no
    calendar week is assumed); else the resolution the reader is shown (a month, season, year or range)."""
    if m.granularity == "day":
        return format_date(m.start)
    anchored = _ANCHORED.match(m.text.strip())
    if anchored:
        return f"the {anchored['unit'].lower()} {_ANCHOR_WORD[anchored['dir'].lower()]} {format_date(said_on)}"
    return describe_mention(m).split(" = ", 1)[1]
