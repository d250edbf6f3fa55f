"""Relative times in the reader's answer, made absolute in code (issue #14).

Why: a small reader asked "When did Melanie go to the museum?" copies the memory's own words,
"Yesterday", although the memory line it read carries the resolution ("Yesterday = 5 July 2023").
On LoCoMo dev that was 9 of the embedded reader's temporal answers (docs/history.md, "Relative times
in answers"). Ingestion already resolved every such expression against its session date
(memsys/temporal.py); here an expression in the answer takes the resolution of the highest-ranked
memory in the context that says it. An answer that is only the expression becomes the date; one that
says more keeps its words and gains the date in brackets. An expression no memory in the context says
is left alone: the reader may have made it up, and no date would be true.
"""

from __future__ import annotations

import re
from typing import Sequence

from memsys.retrieve.context import ContextItem
from memsys.temporal import RELATIVE_RE, answer_date, mention_key

_FILLER = re.compile(r"^(?:on|in|during|it was|around|about)\s+", re.IGNORECASE)


def resolutions(items: Sequence[ContextItem]) -> dict[str, str]:
    """Expression (temporal.mention_key) -> what an answer should say for it, from the first item that has it."""
    out: dict[str, str] = {}
    for item in items:
        said_on = item.mau.timestamp
        if said_on is None:
            continue
        for m in item.mau.time_mentions:
            out.setdefault(mention_key(m.text), answer_date(m, said_on))
    return out


def resolve_answer_times(answer: str, items: Sequence[ContextItem]) -> str:
    """The answer with each relative time a context memory resolved replaced by (or, inside a longer
    answer, followed by) its absolute form."""
    found = list(RELATIVE_RE.finditer(answer))
    if not found:
        return answer
    known = resolutions(items)
    bare = _FILLER.sub("", answer.strip().rstrip(".!").strip())
    if len(found) == 1 and bare.lower() == found[0].group(0).lower():
        return known.get(mention_key(bare), answer)

    def dated(x: re.Match) -> str:
        said = known.get(mention_key(x.group(0)))
        return x.group(0) if said is None else f"{x.group(0)} ({said})"

    return RELATIVE_RE.sub(dated, answer)
