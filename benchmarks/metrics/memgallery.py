"""Mem-Gallery answer scoring, as Mem-Gallery's own evaluation does it.

Reference: Mem-Gallery ``benchmark/memengine/evaluate/evaluation.py``
(``normalize_answer_universal``, ``f1_score``, ``exact_match_score``, ``bleu_score``).
Reproduced rules:

- normalize: lowercase; keep decimal points between digits ("3.14") and underscores
  ("d1:img_001" keeps its "_"); drop the words a/an/the/and; turn every other ASCII
  punctuation character into a space; collapse whitespace.
- F1: Porter-stemmed token-overlap F1 of the normalized strings (0 if no overlap).
- EM: equality of the normalized (unstemmed) strings.
- BLEU: NLTK ``sentence_bleu`` on normalized tokens, smoothing method 1; BLEU with
  uniform 4-gram weights, BLEU-1 weights (1,0,0,0), BLEU-2 (0.5,0.5,0,0); 0 when
  either side is empty.
- every category (including AR, answer refusal, whose golds say e.g. "Not
  mentioned.") is scored by the same rules, averaged per category and overall.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from benchmarks.datasets.schema import CATEGORY_NAMES, Question
from benchmarks.metrics.text import PUNCTUATION, coerce_text, mean, stem_tokens, token_f1
from harness.errors import InputError

CATEGORIES = tuple(CATEGORY_NAMES["memgallery"])
METRICS = ("f1", "em", "bleu", "bleu1", "bleu2")
BLEU_WEIGHTS = {
    "bleu": (0.25, 0.25, 0.25, 0.25),
    "bleu1": (1.0, 0.0, 0.0, 0.0),
    "bleu2": (0.5, 0.5, 0.0, 0.0),
}

# Placeholders made of word characters, like the original: they must not create
# word boundaries (the article rule uses \b) and cannot occur in lowercased text.
_DOT = "DOTPLACEHOLDER"
_UNDERSCORE = "UNDERSCOREPLACEHOLDER"
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_memgallery(text: str) -> str:
    """Mem-Gallery's ``normalize_answer_universal``."""
    text = str(text).lower()
    text = _DECIMAL_POINT.sub(_DOT, text)
    text = text.replace("_", _UNDERSCORE)
    text = _ARTICLES.sub(" ", text)
    text = "".join(" " if ch in PUNCTUATION else ch for ch in text)
    text = text.replace(_DOT, ".").replace(_UNDERSCORE, "_")
    return " ".join(text.split())


def memgallery_f1(prediction: str, gold: str) -> float:
    return token_f1(
        stem_tokens(normalize_memgallery(prediction).split()), stem_tokens(normalize_memgallery(gold).split())
    )


def exact_match(prediction: str, gold: str) -> float:
    return 1.0 if normalize_memgallery(prediction) == normalize_memgallery(gold) else 0.0


def bleu(prediction: str, gold: str, weights: tuple[float, ...] = BLEU_WEIGHTS["bleu"]) -> float:
    hypothesis = normalize_memgallery(prediction).split()
    reference = normalize_memgallery(gold).split()
    if not hypothesis or not reference:
        return 0.0
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu  # lazy: see text._stemmer

    return float(sentence_bleu([reference], hypothesis, weights=weights,
                               smoothing_function=SmoothingFunction().method1))


def score_memgallery(prediction: object, gold: object, question_id: str | None = None) -> dict[str, float]:
    """All five metrics for one answer: ``{"f1", "em", "bleu", "bleu1", "bleu2"}``."""
    pred = coerce_text(prediction, question_id)
    gold_text = coerce_text(gold, question_id, what="gold answer")
    return {
        "f1": memgallery_f1(pred, gold_text),
        "em": exact_match(pred, gold_text),
        **{name: bleu(pred, gold_text, weights) for name, weights in BLEU_WEIGHTS.items()},
    }


def score_memgallery_question(prediction: object, question: Question) -> dict[str, float]:
    return score_memgallery(prediction, question.answer, question.id)


def aggregate_memgallery(scores: Iterable[tuple[str, Mapping[str, float]]]) -> dict[str, float | int]:
    """Means of ``(category, metrics)`` pairs, overall and per category.

    Keys: ``f1``, ``em``, ``bleu``, ``bleu1``, ``bleu2`` and ``n`` over all questions;
    ``<metric>_<CAT>`` and ``n_<CAT>`` per category (e.g. ``f1_VS``). Metric keys are
    present only when at least one question counts, so nothing is ever NaN.
    """
    per_cat: dict[str, list[Mapping[str, float]]] = {}
    for category, metrics in scores:
        cat = str(category).strip()
        if cat not in CATEGORIES:
            raise InputError(f"unknown Mem-Gallery category {category!r} in scores")
        missing = [m for m in METRICS if m not in metrics]
        if missing:
            raise InputError(f"Mem-Gallery scores for category {cat} lack {missing}")
        per_cat.setdefault(cat, []).append(metrics)
    everything = [m for rows in per_cat.values() for m in rows]
    out: dict[str, float | int] = {"n": len(everything)}
    if everything:
        for name in METRICS:
            out[name] = mean([float(m[name]) for m in everything])
    for cat in CATEGORIES:
        rows = per_cat.get(cat, [])
        out[f"n_{cat}"] = len(rows)
        if rows:
            for name in METRICS:
                out[f"{name}_{cat}"] = mean([float(m[name]) for m in rows])
    return out
