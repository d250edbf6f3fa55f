"""LoCoMo answer scoring, as LoCoMo's own evaluation does it.

Reference: snap-research/locomo ``task_eval/evaluation.py`` (``normalize_answer``,
``f1_score``, ``f1``, ``eval_question_answering``). Reproduced rules:

- normalize: delete commas, lowercase, delete ASCII punctuation (deleted, not turned
  into spaces: "D1:3" -> "d13"), drop the words a/an/the/and, collapse whitespace;
  then Porter-stem every token and take the token-overlap F1.
- category 1 (multi-hop): split prediction *and* gold on commas; for every gold part
  take its best F1 against any prediction part; average over the gold parts.
- category 3 (open-domain): the gold is cut at the first ';'.
- categories 2 and 4: plain token F1.
- category 5 (adversarial): 1 if the prediction abstains, else 0. By default this is
  LoCoMo's own rule: "no information available" or "not mentioned" is a substring of
  the lowercased prediction (``OFFICIAL_ABSTENTION_PHRASES``). That is what ``f1_cat5``,
  ``all_honest``, ``all_paper_protocol`` and the per-question ``f1`` mean.

A wider phrase list (``ABSTENTION_PHRASES``: "unknown", "I don't know", ... matched as
whole words) is reported *beside* it, never instead of it: the per-question
``f1_lenient`` (``score_locomo_scores``) and the aggregates ``f1_cat5_lenient`` and
``all_honest_lenient``. Refusing in other words is still refusing, but those numbers
are not comparable with published LoCoMo results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from benchmarks.datasets.schema import CATEGORY_NAMES, Question
from benchmarks.metrics.text import PUNCTUATION, coerce_text, mean, stem_tokens, token_f1
from harness.errors import InputError

CATEGORIES = tuple(CATEGORY_NAMES["locomo"])  # "1".."5"
ADVERSARIAL = "5"
ANSWERABLE = ("1", "2", "3", "4")

#: LoCoMo's own category-5 rule: either phrase as a substring of ``prediction.lower()``
OFFICIAL_ABSTENTION_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")
#: the lenient superset (metrics ``*_lenient``), matched case-insensitively as whole words
ABSTENTION_PHRASES: tuple[str, ...] = (
    *OFFICIAL_ABSTENTION_PHRASES,
    "no information",
    "not enough information",
    "insufficient information",
    "no mention",
    "never mentioned",
    "does not mention",
    "doesn't mention",
    "did not mention",
    "didn't mention",
    "not specified",
    "not stated",
    "not provided",
    "unknown",
    "cannot be determined",
    "can't be determined",
    "cannot determine",
    "unable to determine",
    "cannot answer",
    "can't answer",
    "unable to answer",
    "i don't know",
    "i do not know",
)

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_locomo(text: str) -> str:
    """LoCoMo's ``normalize_answer``."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def locomo_f1(prediction: str, gold: str) -> float:
    """Stemmed token F1 after LoCoMo normalization (LoCoMo's ``f1_score``)."""
    return token_f1(stem_tokens(normalize_locomo(prediction).split()), stem_tokens(normalize_locomo(gold).split()))


def multi_answer_f1(prediction: str, gold: str) -> float:
    """Category 1: mean over comma-separated gold parts of the best F1 against a prediction part."""
    predictions = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return mean([max(locomo_f1(p, g) for p in predictions) for g in golds])


def _phrase_pattern(phrases: Sequence[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p.lower()) for p in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


_DEFAULT_PATTERN = _phrase_pattern(ABSTENTION_PHRASES)


def is_official_abstention(prediction: str) -> bool:
    """LoCoMo's check, verbatim: a phrase of ``OFFICIAL_ABSTENTION_PHRASES`` is a substring of the lowercased text."""
    text = prediction.lower()
    return any(phrase in text for phrase in OFFICIAL_ABSTENTION_PHRASES)


def is_abstention(prediction: str, phrases: Sequence[str] = OFFICIAL_ABSTENTION_PHRASES) -> bool:
    """True if the prediction refuses to answer.

    With LoCoMo's own phrases (the default) this is LoCoMo's rule exactly
    (``is_official_abstention``); any other list is matched leniently: case-insensitive
    whole words, curly apostrophes folded, runs of whitespace collapsed.
    """
    if tuple(phrases) == OFFICIAL_ABSTENTION_PHRASES:
        return is_official_abstention(prediction)
    pattern = _DEFAULT_PATTERN if phrases is ABSTENTION_PHRASES else _phrase_pattern(phrases)
    text = " ".join(prediction.lower().replace("\u2019", "'").split())
    return pattern.search(text) is not None


def score_locomo_answer(
    prediction: object,
    gold: object,
    category: str | int,
    *,
    question_id: str | None = None,
    abstention_phrases: Sequence[str] = OFFICIAL_ABSTENTION_PHRASES,
) -> float:
    """Score one prediction against one gold answer under the category's rule.

    Category 5 uses LoCoMo's official rule unless ``abstention_phrases`` says otherwise
    (``ABSTENTION_PHRASES`` for the lenient score).
    """
    pred = coerce_text(prediction, question_id)
    cat = str(category).strip()
    if cat == ADVERSARIAL:
        return 1.0 if is_abstention(pred, abstention_phrases) else 0.0
    if cat not in ANSWERABLE:
        where = f" of question {question_id}" if question_id else ""
        raise InputError(f"unknown LoCoMo category {category!r}{where} (expected 1-5)")
    gold_text = coerce_text(gold, question_id, what="gold answer")
    if cat == "3":
        gold_text = gold_text.split(";")[0].strip()
    if cat == "1":
        return multi_answer_f1(pred, gold_text)
    return locomo_f1(pred, gold_text)


def score_locomo(
    prediction: object, question: Question, *, abstention_phrases: Sequence[str] = OFFICIAL_ABSTENTION_PHRASES
) -> float:
    """Score a system's answer to a LoCoMo question (a float in [0, 1]; official rule by default)."""
    return score_locomo_answer(
        prediction,
        question.answer,
        question.category,
        question_id=question.id,
        abstention_phrases=abstention_phrases,
    )


def score_locomo_scores(prediction: object, question: Question) -> dict[str, float]:
    """Both per-question scores: ``f1`` (official rule) and ``f1_lenient`` (``ABSTENTION_PHRASES``).

    They differ only on category 5; ``aggregate_locomo`` takes ``(category, f1, f1_lenient)``.
    """
    official = score_locomo(prediction, question)
    if str(question.category).strip() != ADVERSARIAL:
        return {"f1": official, "f1_lenient": official}
    return {"f1": official, "f1_lenient": score_locomo(prediction, question, abstention_phrases=ABSTENTION_PHRASES)}


def aggregate_locomo(
    scores: Iterable[tuple[str | int, float] | tuple[str | int, float, float | None]],
) -> dict[str, float | int]:
    """Per-category and overall means of ``(category, score)`` or ``(category, score, lenient)``.

    ``score`` is the official per-question score (``f1`` of ``score_locomo_scores``);
    the optional ``lenient`` one is its ``f1_lenient``.

    Keys (a key is present only when at least one question counts towards it, so
    no metric is ever NaN): ``f1_cat<c>`` and ``n_cat<c>`` per category,
    ``f1_cat1_4`` (mean over the questions of categories 1-4), ``f1_cat5``,
    ``all_honest`` (mean over all questions, category 5 scored on the system's real
    answer) and ``all_paper_protocol`` (mean over all questions with every category-5
    question counted as 1.0), plus ``n``.

    Why two "All" numbers: the released SimpleMem runner discards the model's
    answer on category 5 and writes a fixed refusal, so all adversarial questions
    score 1.0 and are averaged into its "All". That makes the paper's numbers
    comparable only with ``all_paper_protocol``; ``all_honest`` is what the system
    actually achieves and is the one to optimize and report first.

    Lenient keys, separate and never mixed into the ones above: ``f1_cat5_lenient``
    (category 5 under ``ABSTENTION_PHRASES``) and ``all_honest_lenient`` (``all_honest``
    with that category-5 score). Present only when every category-5 entry carries a
    lenient score (categories 1-4 score the same under both rules).
    """
    got = _CategoryScores()
    for entry in scores:
        got.add(entry)
    out: dict[str, float | int] = {}
    _add_category_means(out, got.per_cat)
    _add_overall_means(out, got)
    if got.lenient_complete:
        _add_lenient_means(out, got)
    return out


@dataclass
class _CategoryScores:
    """Scores by category, with category 5's lenient scores kept apart so they never mix into the official ones."""

    per_cat: dict[str, list[float]] = field(default_factory=dict)
    adversarial_lenient: list[float] = field(default_factory=list)
    lenient_complete: bool = True  # every category-5 entry carried a lenient score

    def add(self, entry: tuple[str | int, float] | tuple[str | int, float, float | None]) -> None:
        if len(entry) not in (2, 3):
            raise InputError(f"LoCoMo score entry {entry!r} is not (category, score[, lenient])")
        category, score = entry[0], entry[1]
        lenient = entry[2] if len(entry) == 3 else None
        cat = str(category).strip()
        if cat not in CATEGORIES:
            raise InputError(f"unknown LoCoMo category {category!r} in scores (expected 1-5)")
        value = _unit_score(score, cat)
        self.per_cat.setdefault(cat, []).append(value)
        if cat == ADVERSARIAL:
            if lenient is None:
                self.lenient_complete = False
            else:
                self.adversarial_lenient.append(_unit_score(lenient, cat))

    @property
    def answerable(self) -> list[float]:
        return [v for c in ANSWERABLE for v in self.per_cat.get(c, [])]

    @property
    def adversarial(self) -> list[float]:
        return self.per_cat.get(ADVERSARIAL, [])


def _add_category_means(out: dict[str, float | int], per_cat: dict[str, list[float]]) -> None:
    for cat in CATEGORIES:
        values = per_cat.get(cat, [])
        out[f"n_cat{cat}"] = len(values)
        if values:
            out[f"f1_cat{cat}"] = mean(values)


def _add_overall_means(out: dict[str, float | int], got: _CategoryScores) -> None:
    answerable, adversarial = got.answerable, got.adversarial
    n = len(answerable) + len(adversarial)
    out["n"] = n
    if answerable:
        out["f1_cat1_4"] = mean(answerable)
    if adversarial:
        out["f1_cat5"] = mean(adversarial)
    if n:
        out["all_honest"] = (sum(answerable) + sum(adversarial)) / n
        out["all_paper_protocol"] = (sum(answerable) + len(adversarial)) / n


def _add_lenient_means(out: dict[str, float | int], got: _CategoryScores) -> None:
    """Categories 1-4 score the same under both rules, so only category 5 changes."""
    answerable, adversarial, adversarial_lenient = got.answerable, got.adversarial, got.adversarial_lenient
    n = len(answerable) + len(adversarial)
    if adversarial_lenient:
        out["f1_cat5_lenient"] = mean(adversarial_lenient)
    if n and (adversarial_lenient or not adversarial):
        out["all_honest_lenient"] = (sum(answerable) + sum(adversarial_lenient)) / n


def _unit_score(score: object, cat: str) -> float:
    value = float(score)  # type: ignore[arg-type]
    if not 0.0 <= value <= 1.0:
        raise InputError(f"LoCoMo score {score!r} for category {cat} is outside [0, 1]")
    return value

