"""Whose statements a reader's answer comes from: abstention after the reply (issue #14).

Why: LoCoMo's category 5 questions name one speaker for what the other did ("What did Melanie
realize after the race?" when Caroline ran it). Retrieval's margin (memsys/retrieve/support.py)
has to guess from the question which turn holds the content. The 1.5B reader is sure of its trap
answers, so its token confidence does not help either (docs/history.md, "Calibrated abstention").
But the reader's answer shows which memory it used: a small reader copies words. When the answer's
words are in a statement about another speaker, and less so or not at all in any statement about
the speaker the question names, the answer belongs to someone else, and the honest reply is "not
mentioned".

The measure is lexical on purpose: the answer's content words (the BM25 tokenizer's, stopwords
out) found in a statement, as a fraction of the answer's. An embedding of a three-word answer
matches too loosely to tell two speakers' statements about the same topic apart. Statements and
their subjects are support.py's: questions state nothing, and a second-person sentence is about
its listener.
"""

from __future__ import annotations

from typing import Iterable

from memsys.index.sparse import tokenize
from memsys.retrieve.context import ContextItem
from memsys.retrieve.support import one_named, statements, subject_of


def answer_margin(question: str, answer: str, items: Iterable[ContextItem], speakers: set[str] | frozenset[str]) -> float | None:
    """The largest share of the answer's content words found in one statement about the speaker the
    question names, minus the largest in a statement about anyone else. None when the question names
    no speaker or all of them, the answer has no content word, or no statement is about anyone else.
    With no statement about the named speaker at all, their share counts as -1: memory holds nothing
    of theirs."""
    speakers = set(speakers)
    named = one_named(question, speakers)
    words = set(tokenize(answer))
    if named is None or not words:
        return None
    own: list[float] = []
    other: list[float] = []
    for item in items:
        for sentence in statements(item.mau.full_text):
            subject = subject_of(sentence, item.mau.speaker, speakers)
            if subject is None:  # a restatement with no speaker: about nobody we can tell
                continue
            share = len(words & set(tokenize(sentence))) / len(words)
            (own if subject in named else other).append(share)
    if not other:
        return None
    return (max(own) if own else -1.0) - max(other)


def attributed_elsewhere(question: str, answer: str, items: Iterable[ContextItem],
                         speakers: set[str] | frozenset[str]) -> str | None:
    """Why the answer is someone else's (the abstention reason), or None when nothing says so: another
    speaker's statements hold more of its words than any of the named speaker's."""
    margin = answer_margin(question, answer, items, speakers)
    if margin is None or margin >= 0:
        return None
    return f"the answer's words are in a statement about another speaker (share margin {margin:+.2f})"
