"""Steps after the merge that put the evidence higher: pure functions over the candidate list.

Why each (issue #14, measured in docs/history.md "Memory quality (issue #14)"):
- ``speaker_first``: nearly every LoCoMo question names whose turn it is about; among the
  candidates, that speaker's turns move ahead of the others (stable, so each group keeps the
  merge's order). Only when the query names some but not all of the store's speakers.
- ``lift_speaker``: the soft form. A question can name one speaker and be answered by the other (category 5
  names the wrong one on purpose; "what did X tell Y" is answered by X's partner), so moving the named
  speaker's turns up a fixed number of places keeps a strong hit of the other speaker in reach. With
  neighbouring turns in the index text, LoCoMo dev evidence recall@20 (categories 1-4) is 0.832 with all
  of them first, 0.838 with no speaker step, and 0.852 lifted by 15 places; category 5's 0.30 / 0.94 / 0.90.
- ``fuse_graph``: the graph's memories used to be appended after the merged list, so they never
  counted within the first k; reciprocal-rank fusion puts a strong graph hit among the top.
- ``lift_dated``: a "when" question's evidence says when (on LoCoMo dev, 35% of category-2 evidence
  turns carry a relative date such as "yesterday", against 8% of all turns); for such questions a
  candidate with a resolved date moves up a few places.
- ``expand_neighbors``: an answer often sits in the turn before or after the one that matches
  (a question, then its answer); the neighbours of the best candidates follow them directly.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

from memsys.records import MAU, LinkKind
from memsys.retrieve.pyramid import RankedCandidate

_WORD_RE = re.compile(r"[a-z0-9]+")


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """Speakers whose first name (or full name) the query contains as a word."""
    words = set(_WORD_RE.findall(query.lower()))
    named = set()
    for s in speakers:
        tokens = _WORD_RE.findall(s.lower())
        if tokens and (tokens[0] in words or " ".join(tokens) in query.lower()):
            named.add(s)
    return named


def speaker_first(cands: Sequence[RankedCandidate], query: str, speakers: set[str]) -> list[RankedCandidate]:
    """The named speakers' candidates first, each group in its own order."""
    named = named_speakers(query, speakers)
    if not named or named >= speakers:
        return list(cands)
    return sorted(cands, key=lambda c: c.mau.speaker not in named)  # sorted() is stable


def lift_speaker(cands: Sequence[RankedCandidate], query: str, speakers: set[str],
                 places: int) -> list[RankedCandidate]:
    """Each candidate of a speaker the query names moves up ``places`` ranks (ties keep the merge's order)."""
    named = named_speakers(query, speakers) if places > 0 else set()
    if not named or named >= speakers:
        return list(cands)
    return _lift(cands, lambda c: c.mau.speaker in named, places)


def _lift(cands: Sequence[RankedCandidate], chosen: Callable[[RankedCandidate], bool],
          places: int) -> list[RankedCandidate]:
    """The chosen candidates move up ``places`` ranks each; a chosen one ends ahead of an unchosen one
    that was ``places`` ahead of it, and each group keeps its order."""
    keyed = [(rank - (places + 0.5 if chosen(c) else 0), rank, c) for rank, c in enumerate(cands)]
    return [c for _, _, c in sorted(keyed, key=lambda x: (x[0], x[1]))]


_WHEN_RE = re.compile(r"\b(when|what (date|day|month|year|time)|which (date|day|month|year)|how long ago)\b",
                      re.IGNORECASE)


def asks_when(query: str) -> bool:
    return bool(_WHEN_RE.search(query))


def lift_dated(cands: Sequence[RankedCandidate], query: str, places: int) -> list[RankedCandidate]:
    """For a "when" question, each candidate whose text resolved a date moves up ``places`` ranks."""
    if places <= 0 or not asks_when(query):
        return list(cands)
    return _lift(cands, lambda c: bool(c.mau.time_mentions), places)


def fuse_graph(cands: Sequence[RankedCandidate], graph: Sequence[RankedCandidate], rrf_k: float,
               weight: float) -> list[RankedCandidate]:
    """Reciprocal-rank fusion of the retrieval list and the graph's list (best first each)."""
    score: dict[str, float] = {}
    by_id: dict[str, RankedCandidate] = {}
    for rank, c in enumerate(cands, start=1):
        score[c.mau.id] = 1.0 / (rrf_k + rank)
        by_id[c.mau.id] = c
    for rank, g in enumerate(graph, start=1):
        score[g.mau.id] = score.get(g.mau.id, 0.0) + weight / (rrf_k + rank)
        if g.mau.id in by_id:
            by_id[g.mau.id].sources.add("graph")
        else:
            by_id[g.mau.id] = g
    order = sorted(score, key=lambda mid: -score[mid])  # stable: ties keep the retrieval order
    return [by_id[mid] for mid in order]


def expand_neighbors(cands: Sequence[RankedCandidate], top: int, window: int,
                     get: Callable[[str], MAU | None],
                     similarity: Callable[[list[MAU]], list[float]]) -> list[RankedCandidate]:
    """Each of the first ``top`` candidates followed by up to ``window`` turns before and after it
    in its session (prev/next links), unless they already rank higher; later copies are dropped."""
    if top <= 0 or window <= 0:
        return list(cands)
    placed: set[str] = set()
    out: list[RankedCandidate] = []
    extra: dict[str, MAU] = {}
    plan: list[tuple[RankedCandidate | None, MAU | None]] = []
    for i, c in enumerate(cands):
        if c.mau.id in placed:
            continue
        placed.add(c.mau.id)
        plan.append((c, None))
        if i >= top:
            continue
        for m in _neighbours(c.mau, window, get):
            if m.id not in placed:
                placed.add(m.id)
                extra[m.id] = m
                plan.append((None, m))
    sims = dict(zip(extra, similarity(list(extra.values())))) if extra else {}
    for c, m in plan:
        out.append(c if c is not None else RankedCandidate(m, float(sims[m.id]), {"neighbor"}, 0.0))
    return out


def _neighbours(mau: MAU, window: int, get: Callable[[str], MAU | None]) -> list[MAU]:
    """Up to ``window`` turns before (nearest first), then after, following prev/next links."""
    out: list[MAU] = []
    for kind in (LinkKind.PREV, LinkKind.NEXT):
        cur = mau
        for _ in range(window):
            nxt = next((link.target for link in cur.links if link.kind == kind), None)
            m = get(nxt) if nxt else None
            if m is None:
                break
            out.append(m)
            cur = m
    return out
