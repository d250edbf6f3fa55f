"""Rendering the reader's context (memsys/retrieve/context.py): by relevance, or grouped by session."""

from __future__ import annotations

from datetime import datetime

from memsys.records import MAU
from memsys.retrieve.context import Context, ContextItem


def item(mid: str, speaker: str, ts: datetime, session: str, text: str, resolved: list[str] | None = None) -> ContextItem:
    mau = MAU(mid, text, speaker=speaker, timestamp=ts, session_id=session,
              details={"resolved_times": resolved} if resolved else {})
    return ContextItem(mau=mau, rank=0, similarity=0.5, sources={"dense"}, level=1, reason="", text=text, tokens=5)


ITEMS = [
    item("D2:5", "Caroline", datetime(2023, 5, 25, 9, 5), "S2", "I ran a charity race last Saturday.",
         ["last Saturday = 20 May 2023"]),
    item("D1:3", "Melanie", datetime(2023, 5, 8, 13, 58), "S1", "I painted a sunrise."),
    item("D1:1", "Caroline", datetime(2023, 5, 8, 13, 56), "S1", "I went to a support group."),
]


def test_default_rendering_is_by_relevance_with_date_on_every_line():
    assert Context("q", ITEMS, 1000).render().splitlines() == [
        "1. [25 May 2023 09:05] Caroline: I ran a charity race last Saturday. (last Saturday = 20 May 2023)",
        "2. [8 May 2023 13:58] Melanie: I painted a sunrise.",
        "3. [8 May 2023 13:56] Caroline: I went to a support group.",
    ]


def test_grouped_rendering_puts_sessions_oldest_first_under_their_date_and_turns_in_spoken_order():
    assert Context("q", ITEMS, 1000).render(group_by_session=True).splitlines() == [
        "Session S1 on 8 May 2023:",
        "3. [13:56] Caroline: I went to a support group.",
        "2. [13:58] Melanie: I painted a sunrise.",
        "Session S2 on 25 May 2023:",
        "1. [09:05] Caroline: I ran a charity race last Saturday. (last Saturday = 20 May 2023)",
    ]
    plain = Context("q", ITEMS[:1], 1000).render(include_metadata=False, group_by_session=True)
    assert plain.splitlines() == ["Session S2:", "1. I ran a charity race last Saturday."]
