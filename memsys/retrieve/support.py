"""How well retrieval supports an answer, for calibrated abstention (issue #14).

Why this signal: LoCoMo's unanswerable (category 5) questions mostly ask what one speaker did
when it was the other who did it ("What did Melanie realize after the race?" when Caroline ran).
The top similarity says nothing there (the index text carries the speaker, so the named
speaker's turns always score high); what tells is who said the best-matching *content*. The
margin compares the query without speaker names against the candidates' own words: the best
turn of the named speaker minus the best turn of anyone else. Negative: someone else said it.
Measured on LoCoMo dev (docs/figures.md, "Memory quality"): at margin < -0.08, 30% of category
5 questions and 12% of categories 1-4 abstain.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from memsys.retrieve.pyramid import RankedCandidate
from memsys.retrieve.rerank import named_speakers


def without_names(query: str, speakers: set[str]) -> str:
    """The query with every speaker's first name (and possessive) removed."""
    for s in speakers:
        first = s.split()[0] if s.split() else s
        query = re.sub(rf"\b{re.escape(first)}(?:'s)?\b", "", query, flags=re.IGNORECASE)
    return " ".join(query.split())


def speaker_margin(query: str, cands: Sequence[RankedCandidate], speakers: set[str],
                   embed: Callable[[list[str]], np.ndarray]) -> float | None:
    """Best content similarity of the named speaker's candidates minus everyone else's; None when the
    query names no speaker, or all of them, or one side has no candidate."""
    named = named_speakers(query, speakers)
    if not named or named >= speakers or not cands:
        return None
    vecs = embed([without_names(query, speakers)] + [c.mau.summary for c in cands])
    sims = vecs[1:] @ vecs[0]
    own = [float(s) for c, s in zip(cands, sims) if c.mau.speaker in named]
    other = [float(s) for c, s in zip(cands, sims) if c.mau.speaker not in named]
    if not own or not other:
        return None
    return max(own) - max(other)
