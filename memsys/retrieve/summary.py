"""Level-1 summaries of the pyramid: a cut, or the sentences that bear on the question.

Why a second mode: a raw turn's summary is its whole text, so the cut (``cut``) shows the
first ``summary_max_tokens`` of it, which for almost every LoCoMo turn is the turn itself;
level 1 then costs what level 2 costs and the pyramid has nothing to expand. ``extractive``
keeps, of each memory's summary, only the sentences that share words with the question,
weighted like BM25 weights query terms (a word rare among the candidates counts more), in
their original order and within the same cap. No LLM, pure, deterministic and cheap: one
regex split and one word set per sentence (benchmarks/perf/bench_summary.py measures it).
Level 2 still replaces the summary with the full text when its gate opens.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Iterable, Mapping

from memsys.index.sparse import tokenize

#: a sentence ends at . ! or ? followed by space; an attached "[shared an image: ...]" is its own sentence
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|\s*\n+\s*|\s+(?=\[)")


def cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest word prefix of ``text`` that fits ``max_tokens`` with its " ..." marker."""
    if count(text) <= max_tokens:
        return text
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:  # longest word prefix within the limit
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid]) + " ...") <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " ..."


def split_sentences(text: str) -> list[str]:
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text)) if s]


def query_term_weights(query: str, texts: Iterable[str], ignore: Iterable[str] = ()) -> dict[str, float]:
    """BM25's idf of each query term over the sentences of ``texts`` (the candidates at hand): a term
    in few of those sentences tells them apart, one in all of them (the speaker's topic) barely does.
    Words of ``ignore`` (the speakers' names) are not query terms: every memory line already names
    its speaker, and in a turn's text the other speaker's name is mostly a greeting ("Hey Gina!")."""
    skip = {t for name in ignore for t in tokenize(name)}
    terms = set(tokenize(query)) - skip
    if not terms:
        return {}
    n, df = 0, dict.fromkeys(terms, 0)
    for text in texts:
        for sentence in split_sentences(text):
            n += 1
            for t in terms & set(tokenize(sentence)):
                df[t] += 1
    return {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}


def extractive_summary(text: str, weights: Mapping[str, float], max_tokens: int,
                       count: Callable[[str], int]) -> str:
    """The sentences of ``text`` that contain query terms, best first (sum of their weights, ties by
    position), each with the sentence after it, while they fit ``max_tokens``, shown in their original
    order; " ..." marks that sentences were left out. A text sharing no term with the query keeps its
    first two sentences. A lone sentence longer than the cap is cut, as ``cut_to_tokens`` does.

    Why the sentence after: on LoCoMo dev evidence turns the matching sentences alone keep 58% of the
    gold answer's words (9.5 tokens a turn), with their followers 79% (18.4 tokens; the full text
    30.1): a turn often echoes the question first and gives the detail next (bench_summary)."""
    sentences = split_sentences(text)
    if len(sentences) <= 1:
        return cut_to_tokens(text, max_tokens, count)
    scores = [sum(weights.get(t, 0.0) for t in set(tokenize(s))) for s in sentences]
    chosen: set[int] = set()
    used = 0

    def take(i: int) -> bool:
        nonlocal used
        cost = count(sentences[i]) + 1  # its joining space (or the " ..." marker's share)
        if i in chosen or used + cost > max_tokens:
            return False
        chosen.add(i)
        used += cost
        return True

    for i in sorted(range(len(sentences)), key=lambda i: (-scores[i], i)):
        if chosen and scores[i] <= 0:
            break  # only sentences that bear on the question, once one is in
        if i not in chosen and not take(i):  # (one already in as a follower still brings its own)
            if not chosen:  # the best sentence alone is over the cap: cut it
                return cut_to_tokens(sentences[i], max_tokens, count)
            continue
        if i + 1 < len(sentences):
            take(i + 1)  # the sentence after: the words echoing a question often lead into the detail
    summary = " ".join(sentences[i] for i in sorted(chosen))
    if len(chosen) < len(sentences):
        summary += " ..."
    # the marker and joins are estimated above; a counter that merges differently is held to the cap here
    return summary if count(summary) <= max_tokens else cut_to_tokens(summary, max_tokens, count)
