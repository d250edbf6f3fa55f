"""Text helpers shared by the answer metrics: input coercion, stemming, token F1.

Each benchmark normalizes text its own way (see ``locomo.normalize_locomo`` and
``memgallery.normalize_memgallery``); what they share lives here.
"""

from __future__ import annotations

import string
from collections import Counter
from functools import lru_cache
from typing import Sequence

from harness.errors import InputError

#: ASCII punctuation, the set both benchmarks' own evaluation code strips
PUNCTUATION = frozenset(string.punctuation)



class PredictionTypeError(InputError, ValueError):
    """A prediction (or gold) that is not text: a dict, list, or other object."""

    kind = "input"


def coerce_text(value: object, question_id: str | None = None, what: str = "prediction") -> str:
    """Text from a system output: None -> "", numbers -> str, str unchanged.

    Anything else (dict, list, bytes, ...) is a bug in the system under test or the
    runner, never something to score: a PredictionTypeError names the question.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    where = f" for question {question_id}" if question_id else ""
    raise PredictionTypeError(f"{what}{where} is not a string (got {type(value).__name__})")


@lru_cache(maxsize=1)
def _stemmer():  # noqa: ANN202 (nltk's type, imported here)
    """NLTK's Porter stemmer in its default NLTK_EXTENSIONS mode, as both evaluations use.

    Imported on first use: ``import nltk`` loads scipy and scikit-learn (1-2 s), which every process
    that imports the metrics (each ``memsys run`` start, each sandboxed half) paid without scoring text.
    """
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Porter stem of one token (cached: the same words recur across thousands of answers)."""
    return _stemmer().stem(word)


def stem_tokens(tokens: Sequence[str]) -> list[str]:
    return [stem(t) for t in tokens]


def token_f1(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """SQuAD-style token-overlap F1 (multiset overlap); 0 when nothing overlaps.

    Both benchmarks' evaluations return 0 (not 1) for two empty token lists, so do we.
    """
    common = Counter(prediction_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values))
