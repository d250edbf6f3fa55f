"""How well retrieval supports an answer, for calibrated abstention (issue #14).

Why this signal: LoCoMo's unanswerable (category 5) questions mostly ask what one speaker did
when it was the other who did it ("What did Melanie realize after the race?" when Caroline ran).
The top similarity says nothing there (the index text carries the speaker, so the named
speaker's turns always score high); what tells is who said the best-matching *content*. The
margin compares the query without speaker names against the candidates' own words: the best
turn of the named speaker minus the best turn of anyone else. Negative: someone else said it.
Measured on LoCoMo dev (docs/history.md, "Memory quality (issue #14)"): at margin < -0.08, 30% of category
5 questions and 12% of categories 1-4 abstain.

Who *said* a turn is not who it is *about*. "Your painting is lovely" is about the listener, and a
question ("How was your race?") states nothing. ``subject_margin`` therefore compares statements, not
turns: each candidate is cut into sentences, questions are left out, and a sentence in the second person
only (you, your; no I, my) is credited to the other speaker. In LoCoMo's own evidence, 75% of category 5
questions have their evidence in the other speaker's turns and 3% of categories 1-4 do, so attribution
is the signal; which turn holds the content is what retrieval can only estimate. At margin < -0.1
(answer.abstain_margin's default, chosen on dev) the subject margin abstains on 52% of dev's category 5
and 3.9% of its categories 1-4; on the held-out test split, 41% and 3.8% (the speaker margin at 0.12:
15% and 8.5%). docs/history.md, "Calibrated abstention", has both signals on both splits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


def _best_own_minus_other(query: str, pairs: Sequence[tuple[str, str | None]], named: set[str],
                          speakers: set[str], embed: Callable[[list[str]], np.ndarray],
                          no_own: float | None) -> float | None:
    """Over (text, whom it concerns) pairs: the best similarity to the name-free query among the texts that
    concern a named speaker, minus the best among the rest. None when no text concerns anyone else; with
    none concerning the named speaker, ``no_own`` stands in for their best (None: no margin at all)."""
    if not pairs:
        return None
    vecs = embed([without_names(query, speakers)] + [text for text, _ in pairs])
    sims = vecs[1:] @ vecs[0]
    own = [float(x) for x, (_, who) in zip(sims, pairs) if who in named]
    other = [float(x) for x, (_, who) in zip(sims, pairs) if who not in named]
    if not other:
        return None
    if own:
        return max(own) - max(other)
    return None if no_own is None else no_own - max(other)


def one_named(query: str, speakers: set[str]) -> set[str] | None:
    """The speakers the query names, when it names some but not all of them: else no margin applies."""
    named = named_speakers(query, speakers)
    return named if named and not named >= speakers else None


def speaker_margin(query: str, cands: Sequence[RankedCandidate], speakers: set[str],
                   embed: Callable[[list[str]], np.ndarray]) -> float | None:
    """Best content similarity of the named speaker's candidates minus everyone else's; None when the
    query names no speaker, or all of them, or one side has no candidate."""
    named = one_named(query, speakers)
    if named is None:
        return None
    return _best_own_minus_other(query, [(c.mau.summary, c.mau.speaker) for c in cands], named, speakers, embed,
                                 no_own=None)


#: pronouns that make a sentence about its listener (second person) or its speaker (first person);
#: "ya" is LoCoMo's casual "you"
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd|ya)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'll|i'd)\b", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that state something: questions and fragments left out."""
    out = []
    for sentence in _SENTENCE_BREAK.split(text.replace("\u2019", "'")):
        sentence = sentence.strip()
        if len(sentence) >= 3 and not sentence.endswith("?"):
            out.append(sentence)
    return out


def subject_of(sentence: str, speaker: str | None, speakers: set[str]) -> str | None:
    """Whom a sentence is about: its listener when it speaks only in the second person (in a dialogue
    of two), else its speaker."""
    listeners = speakers - {speaker}
    if len(listeners) == 1 and _SECOND_PERSON.search(sentence) and not _FIRST_PERSON.search(sentence):
        return next(iter(listeners))
    return speaker


def subject_margin(query: str, cands: Sequence[RankedCandidate], speakers: set[str],
                   embed: Callable[[list[str]], np.ndarray]) -> float | None:
    """Best content similarity of the statements about the named speaker minus the best about anyone
    else; None when the query names no speaker or all of them, or no statement is about anyone else.
    With no statement about the named speaker at all, their best counts as -1 (the least a cosine can
    be): memory holds nothing of theirs."""
    named = one_named(query, speakers)
    if named is None:
        return None
    pairs = [(s, subject_of(s, c.mau.speaker, speakers)) for c in cands for s in statements(c.mau.full_text)]
    return _best_own_minus_other(query, pairs, named, speakers, embed, no_own=-1.0)


@dataclass(frozen=True)
class Signal:
    """One ``answer.abstain_signal``: its margin, and what the abstention reason says matched better."""

    margin: Callable[[str, Sequence[RankedCandidate], set[str], Callable[[list[str]], np.ndarray]], float | None]
    better_match: str


#: ``answer.abstain_signal`` -> the margin it uses
SIGNALS: dict[str, Signal] = {"speaker": Signal(speaker_margin, "another speaker's turn"),
                              "subject": Signal(subject_margin, "a statement about another speaker")}
