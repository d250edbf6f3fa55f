"""Session dates and relative time expressions, resolved in code (memsys.temporal).

Every expected value below is computed by hand from a calendar: 8 May 2023 was a
Monday, 13 May 2023 a Saturday, 15 January 2024 a Monday.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, time

import pytest

from harness.errors import InputError
from memsys.temporal import describe_mention, format_date, parse_datetime, resolve_relative_times

MONDAY_8_MAY = datetime(2023, 5, 8, 13, 56)  # "1:56 pm on 8 May, 2023", LoCoMo conv-26 session 1
SATURDAY_13_MAY = datetime(2023, 5, 13, 10, 0)
MONDAY_15_JAN = datetime(2024, 1, 15, 9, 0)


def day(y: int, m: int, d: int) -> tuple[datetime, datetime]:
    start = datetime(y, m, d)
    return start, datetime.combine(start.date(), time.max)


def span(y1: int, m1: int, d1: int, y2: int, m2: int, d2: int) -> tuple[datetime, datetime]:
    return day(y1, m1, d1)[0], day(y2, m2, d2)[1]


# ------------------------------------------------------------------ parse_datetime
@pytest.mark.parametrize(
    "text, expected",
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:00 am on 1 January, 2024", datetime(2024, 1, 1, 0, 0)),  # midnight
        ("12:30 pm on 1 Jan, 2024", datetime(2024, 1, 1, 12, 30)),  # noon
        ("1:56 PM on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("1:56 p.m. on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("1:56 pm 8 May 2023", datetime(2023, 5, 8, 13, 56)),  # no "on", no comma
        ("  7:05 am on 9 Sept, 2023  ", datetime(2023, 9, 9, 7, 5)),
        ("8 May, 2023", datetime(2023, 5, 8)),
        ("8 May 2023", datetime(2023, 5, 8)),
        ("May 8, 2023", datetime(2023, 5, 8)),
        ("December 31 1999", datetime(1999, 12, 31)),
        ("2023-05-08", datetime(2023, 5, 8)),
        ("2023/05/08 13:56", datetime(2023, 5, 8, 13, 56)),
        ("2023-05-08T13:56:07", datetime(2023, 5, 8, 13, 56, 7)),
    ],
)
def test_parse_datetime_locomo_and_variants(text, expected):
    assert parse_datetime(text) == expected


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("", "empty"),
        ("   ", "empty"),
        (None, "empty or non-string"),
        (20230508, "empty or non-string"),
        ("8 Smarch, 2023", "unknown month"),
        ("1:56 pm on 31 April, 2023", "invalid date"),
        ("2023-13-01", "invalid date"),
        ("yesterday", "unrecognised timestamp"),
    ],
)
def test_parse_datetime_rejects_bad_input_with_one_line_error(bad, fragment):
    with pytest.raises(InputError) as info:
        parse_datetime(bad)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_every_locomo_session_date_parses(locomo_path):
    samples = json.loads(locomo_path.read_text(encoding="utf-8"))
    key = re.compile(r"session_(\d+)_date_time")
    parsed = 0
    for sample in samples:
        for k, value in sample["conversation"].items():
            if key.fullmatch(k):
                when = parse_datetime(value)
                assert 2020 <= when.year <= 2030, (sample["sample_id"], k, value)
                parsed += 1
    assert parsed >= 272  # 272 sessions (a few date keys have no session)
    assert parse_datetime(samples[0]["conversation"]["session_1_date_time"]) == MONDAY_8_MAY


# ------------------------------------------------------------------ relative expressions
@pytest.mark.parametrize(
    "text, anchor, expected, granularity",
    [
        ("I went to a support group yesterday.", MONDAY_8_MAY, day(2023, 5, 7), "day"),
        ("today", MONDAY_8_MAY, day(2023, 5, 8), "day"),
        ("tonight", MONDAY_8_MAY, day(2023, 5, 8), "day"),
        ("Tomorrow", MONDAY_8_MAY, day(2023, 5, 9), "day"),
        ("the day before yesterday", MONDAY_8_MAY, day(2023, 5, 6), "day"),
        ("the day after tomorrow", MONDAY_8_MAY, day(2023, 5, 10), "day"),
        ("two days ago", MONDAY_8_MAY, day(2023, 5, 6), "day"),
        ("Two days ago", MONDAY_8_MAY, day(2023, 5, 6), "day"),
        ("10 days ago", MONDAY_8_MAY, day(2023, 4, 28), "day"),
        ("a few days ago", MONDAY_8_MAY, span(2023, 5, 4, 2023, 5, 6), "range"),  # "a few" = 2 to 4
        ("a couple of days later", MONDAY_8_MAY, day(2023, 5, 10), "day"),
        # "last week" = the Monday-Sunday week before the session's week
        ("last week", MONDAY_8_MAY, span(2023, 5, 1, 2023, 5, 7), "week"),
        ("last week", SATURDAY_13_MAY, span(2023, 5, 1, 2023, 5, 7), "week"),
        ("this week", SATURDAY_13_MAY, span(2023, 5, 8, 2023, 5, 14), "week"),
        ("next week", MONDAY_8_MAY, span(2023, 5, 15, 2023, 5, 21), "week"),
        ("3 weeks ago", MONDAY_8_MAY, span(2023, 4, 17, 2023, 4, 23), "week"),
        ("last weekend", MONDAY_8_MAY, span(2023, 5, 6, 2023, 5, 7), "week"),  # Saturday-Sunday
        ("next weekend", MONDAY_8_MAY, span(2023, 5, 20, 2023, 5, 21), "week"),
        # weekdays: "next X" is the first X strictly after the session day, "last X" the last one before
        ("next Friday", MONDAY_8_MAY, day(2023, 5, 12), "day"),
        ("next Friday", SATURDAY_13_MAY, day(2023, 5, 19), "day"),
        ("next Monday", MONDAY_8_MAY, day(2023, 5, 15), "day"),
        ("last Friday", MONDAY_8_MAY, day(2023, 5, 5), "day"),
        ("last Monday", MONDAY_8_MAY, day(2023, 5, 1), "day"),
        ("last Saturday", SATURDAY_13_MAY, day(2023, 5, 6), "day"),
        ("this Friday", MONDAY_8_MAY, day(2023, 5, 12), "day"),
        # months and years, including a year boundary
        ("last month", MONDAY_8_MAY, span(2023, 4, 1, 2023, 4, 30), "month"),
        ("last month", MONDAY_15_JAN, span(2023, 12, 1, 2023, 12, 31), "month"),
        ("next month", datetime(2023, 12, 20), span(2024, 1, 1, 2024, 1, 31), "month"),
        ("two months ago", MONDAY_8_MAY, span(2023, 3, 1, 2023, 3, 31), "month"),
        ("last month", datetime(2024, 3, 31), span(2024, 2, 1, 2024, 2, 29), "month"),  # leap year
        ("last year", MONDAY_8_MAY, (datetime(2022, 1, 1), datetime(2022, 12, 31, 23, 59, 59)), "year"),
        ("a year ago", MONDAY_8_MAY, (datetime(2022, 1, 1), datetime(2022, 12, 31, 23, 59, 59)), "year"),
    ],
)
def test_relative_expression_resolved_against_session_date(text, anchor, expected, granularity):
    mentions = resolve_relative_times(text, anchor)
    assert len(mentions) == 1, mentions
    m = mentions[0]
    assert (m.start, m.end) == expected
    assert m.granularity == granularity
    assert m.text.lower() in text.lower()


def test_several_mentions_in_one_turn_keep_text_order():
    text = "Yesterday I booked the trip; we leave next Friday and come back two weeks later."
    mentions = resolve_relative_times(text, MONDAY_8_MAY)
    assert [m.text for m in mentions] == ["Yesterday", "next Friday", "two weeks later"]
    assert mentions[0].start == datetime(2023, 5, 7)
    assert mentions[1].start == datetime(2023, 5, 12)
    assert (mentions[2].start, mentions[2].end) == span(2023, 5, 22, 2023, 5, 28)  # week of 22 May


def test_design_example_tomorrow_in_a_15_november_2025_session():
    (m,) = resolve_relative_times("Let's meet tomorrow.", parse_datetime("3:00 pm on 15 November, 2025"))
    assert describe_mention(m) == "tomorrow = 16 November 2025"


@pytest.mark.parametrize(
    "text",
    ["I love painting sunsets.", "The weekday schedule is busy.", "Lastly, the monthly report.", ""],
)
def test_text_without_relative_time_yields_nothing(text):
    assert resolve_relative_times(text, MONDAY_8_MAY) == []


def test_describe_mention_and_format_date():
    by_text = {m.text: m for m in resolve_relative_times("yesterday, last week, last month, last year", MONDAY_8_MAY)}
    assert describe_mention(by_text["yesterday"]) == "yesterday = 7 May 2023"
    assert describe_mention(by_text["last week"]) == "last week = week of 1 May 2023"
    assert describe_mention(by_text["last month"]) == "last month = April 2023"
    assert describe_mention(by_text["last year"]) == "last year = 2022"
    assert format_date(datetime(2023, 5, 8, 13, 56)) == "8 May 2023"


# ------------------------------------------------------------------ issue #14: LoCoMo's own phrasings
@pytest.mark.parametrize(
    "text, anchor, expected, granularity",
    [
        ("We had a blast last night!", MONDAY_8_MAY, day(2023, 5, 7), "day"),
        # seasons: the latest one already over, the one of the session's year, the first one to come
        ("I went camping last summer.", MONDAY_8_MAY, span(2022, 6, 1, 2022, 8, 31), "season"),
        ("last summer", datetime(2023, 9, 15), span(2023, 6, 1, 2023, 8, 31), "season"),
        ("last summer", datetime(2023, 7, 15), span(2022, 6, 1, 2022, 8, 31), "season"),  # this one is not over
        ("this summer", MONDAY_8_MAY, span(2023, 6, 1, 2023, 8, 31), "season"),
        ("next summer", datetime(2023, 9, 15), span(2024, 6, 1, 2024, 8, 31), "season"),
        ("last winter", MONDAY_8_MAY, span(2022, 12, 1, 2023, 2, 28), "season"),
        ("this winter", MONDAY_15_JAN, span(2023, 12, 1, 2024, 2, 29), "season"),
        ("last spring", MONDAY_8_MAY, span(2022, 3, 1, 2022, 5, 31), "season"),
        # "in N units": that far after the session
        ("The race is in two weeks.", MONDAY_8_MAY, span(2023, 5, 22, 2023, 5, 28), "week"),
        ("in 3 days", MONDAY_8_MAY, day(2023, 5, 11), "day"),
        ("in a few days", MONDAY_8_MAY, span(2023, 5, 10, 2023, 5, 12), "range"),
        ("in two months", MONDAY_8_MAY, span(2023, 7, 1, 2023, 7, 31), "month"),
        # vague amounts are ranges, not one made-up day
        ("a few weeks ago", MONDAY_8_MAY, span(2023, 4, 10, 2023, 4, 30), "range"),
        ("a few years ago", MONDAY_8_MAY, (datetime(2019, 1, 1), datetime(2021, 12, 31, 23, 59, 59)), "range"),
        ("several days ago", MONDAY_8_MAY, span(2023, 5, 1, 2023, 5, 5), "range"),
        # the past week is the seven days before the session, not the previous calendar week
        ("this past week", MONDAY_8_MAY, span(2023, 5, 1, 2023, 5, 7), "range"),
        ("past week", datetime(2023, 5, 10), span(2023, 5, 3, 2023, 5, 9), "range"),
        ("the past few weeks", MONDAY_8_MAY, span(2023, 4, 10, 2023, 5, 7), "range"),
        ("the past few months", MONDAY_8_MAY, span(2023, 1, 8, 2023, 5, 7), "range"),
    ],
)
def test_locomo_phrase_classes_resolve(text, anchor, expected, granularity):
    (m,) = resolve_relative_times(text, anchor)
    assert ((m.start, m.end), m.granularity) == (expected, granularity)


def test_short_weekdays_resolve_when_capitalised_and_stay_words_otherwise():
    by_text = {m.text: describe_mention(m) for m in resolve_relative_times(
        "I joined last Tues. and dance next Fri; Last Thurs too", MONDAY_8_MAY)}
    assert by_text == {"last Tues": "last Tues = 2 May 2023", "next Fri": "next Fri = 12 May 2023",
                       "Last Thurs": "Last Thurs = 4 May 2023"}
    assert resolve_relative_times("we sat in this sun; who last sat here?", MONDAY_8_MAY) == []


def test_ranges_are_described_as_ranges():
    by_text = {m.text: describe_mention(m) for m in resolve_relative_times(
        "a few days ago; last summer; a few years ago; past week", MONDAY_8_MAY)}
    assert by_text == {"a few days ago": "a few days ago = between 4 May 2023 and 6 May 2023",
                       "last summer": "last summer = June-August 2022",
                       "a few years ago": "a few years ago = between 2019 and 2021",
                       "past week": "past week = between 1 May 2023 and 7 May 2023"}


#: phrase class -> (pattern over LoCoMo turns, how many turns have it in locomo10.json, counted 2026-12-01)
LOCOMO_CLASSES = {
    "last night": (r"\blast night\b", 16),
    "season": (r"\b(?:last|this|next|past) (?:summer|winter|spring|fall|autumn)\b", 15),
    "in N units": (r"\bin (?:a few|a couple of|\d+|a|an|one|two|three|four|five) (?:day|week|month|year)s?\b", 4),
    "vague ago": (r"\b(?:a few|several) (?:day|week|month|year)s? ago\b", 10),
    "past window": (r"\bpast (?:few )?(?:week|month|year)s?\b", 3),
    "short weekday": (r"\b(?:last|next|this) (?:Mon|Tues?|Wed|Thu(?:rs?)?|Fri|Sat|Sun)\b", 6),  # counted 2026-12-04
}


@pytest.mark.parametrize("name", LOCOMO_CLASSES)
def test_every_locomo_turn_of_a_phrase_class_gets_a_resolution(name, locomo_path):
    pattern, count = LOCOMO_CLASSES[name]
    samples = json.loads(locomo_path.read_text(encoding="utf-8"))
    found = resolved = 0
    for sample in samples:
        conv = sample["conversation"]
        for key, turns in conv.items():
            if not (key.startswith("session_") and isinstance(turns, list)):
                continue
            anchor = parse_datetime(conv[f"{key}_date_time"])
            for t in turns:
                for hit in re.finditer(pattern, t.get("text", ""), re.IGNORECASE):
                    found += 1
                    spans = [(m.text.lower(), m.granularity) for m in resolve_relative_times(t["text"], anchor)]
                    resolved += any(hit.group(0).lower() in text for text, _ in spans)
    assert found == count and resolved == found
