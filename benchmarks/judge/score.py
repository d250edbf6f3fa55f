"""J, the LLM-judge accuracy, from judged answers; with the answers' length and the judge's agreement with F1.

Why length and agreement sit next to J: a lenient judge rewards long answers that mention the right
topic, so a J gain that comes with answers three times longer than the gold is suspect; and a judge
that disagrees with F1 on most questions is measuring something else than the benchmark. Both are
reported with J, never folded into it.

Rules: a question's J is the mean of its ``runs`` judge verdicts (1/0, or 0/0.5/1 on Mem-Gallery); J is
the mean over the judged questions (LoCoMo categories 1-4; every Mem-Gallery category). LoCoMo category
5 is not judged: it keeps the official refusal rule and is reported apart (``unjudged``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from statistics import fmean
from typing import Iterable, Mapping, Sequence

from benchmarks.datasets.schema import Question
from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.protocol import JudgeItem, Protocol, Verdict, unjudged_score
from harness.errors import InputError

DEFAULTS = JudgeConfig()


@dataclass(frozen=True)
class JudgedRow:
    """One question: its answer, the judge's verdicts on it (one per run), and its official F1."""

    qid: str
    category: str
    gold: str
    answer: str
    scores: tuple[float, ...]  # judge verdicts; for an unjudged question, its one official score
    f1: float | None = None  # the official per-question F1, for the agreement with the judge
    judged: bool = True  # False: scored by its category's own rule (LoCoMo 5), not by the judge

    @property
    def j(self) -> float:
        """The question's J: the mean of its verdicts."""
        return fmean(self.scores)


@dataclass(frozen=True)
class LengthStats:
    """How long the answers are, in words, against the gold answers."""

    n: int
    answer_words: float  # mean words of an answer
    gold_words: float  # mean words of a gold answer
    ratio: float  # answer_words / gold_words
    mean_ratio: float  # the per-question ratio, averaged


@dataclass(frozen=True)
class Agreement:
    """How often the judge and F1 agree on whether an answer is right."""

    n: int
    agreement: float  # fraction of questions with (J_q >= pass_score) == (F1_q >= f1_pass)
    kappa: float | None  # Cohen's kappa; None when undefined (one side gives a single label)


@dataclass(frozen=True)
class JudgeSummary:
    """J and what to read it with."""

    protocol: str
    n: int  # judged questions
    j: float | None
    j_by_category: Mapping[str, float]
    n_by_category: Mapping[str, int]
    length: LengthStats | None
    agreement: Agreement | None
    unjudged: Mapping[str, float] = field(default_factory=dict)  # category -> mean of its own rule (LoCoMo 5)
    n_unjudged: Mapping[str, int] = field(default_factory=dict)

    def metrics(self, prefix: str = "judge_") -> dict[str, float | int]:
        """Flat numbers for a run's metrics (absent, never NaN, when undefined)."""
        out: dict[str, float | int] = {f"{prefix}n": self.n}
        if self.j is not None:
            out[f"{prefix}j"] = self.j
        for cat, value in self.j_by_category.items():
            out[f"{prefix}j_cat{cat}"] = value
            out[f"{prefix}n_cat{cat}"] = self.n_by_category[cat]
        for cat, value in self.unjudged.items():
            out[f"{prefix}rule_cat{cat}"] = value
        if self.length is not None:
            out[f"{prefix}answer_words"] = self.length.answer_words
            out[f"{prefix}length_ratio"] = self.length.ratio
            out[f"{prefix}length_ratio_mean"] = self.length.mean_ratio
        if self.agreement is not None:
            out[f"{prefix}f1_agreement"] = self.agreement.agreement
            if self.agreement.kappa is not None:
                out[f"{prefix}f1_kappa"] = self.agreement.kappa
        return out


# --- from questions and verdicts to rows ----------------------------------------------------------
def judge_items(questions: Sequence[Question], answers: Mapping[str, str], protocol: Protocol) -> list[JudgeItem]:
    """The answers the judge is asked about: every question whose category the protocol judges."""
    return [JudgeItem(q.id, q.question, q.answer, _answer(answers, q), q.category)
            for q in questions if protocol.judges(q.category)]


def _answer(answers: Mapping[str, str], q: Question) -> str:
    if q.id not in answers:
        raise InputError(f"no answer for question {q.id}")
    return answers[q.id] or ""


def verdict_scores(verdicts: Iterable[Verdict]) -> dict[str, tuple[float, ...]]:
    """Each item's verdict scores, in run order."""
    grouped: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for v in verdicts:
        grouped[v.item_id].append((v.run, v.score))
    return {item: tuple(score for _, score in sorted(runs)) for item, runs in grouped.items()}


def mean_scores(verdicts: Iterable[Verdict]) -> dict[str, float]:
    """Each item's mean verdict over its runs (what a stress item or a question is judged at)."""
    return {item: fmean(scores) for item, scores in verdict_scores(verdicts).items()}


def judged_rows(questions: Sequence[Question], answers: Mapping[str, str], verdicts: Iterable[Verdict],
                protocol: Protocol, f1: Mapping[str, float] | None = None) -> list[JudgedRow]:
    """One row per question: the judge's verdicts, or for an unjudged category its official score.

    A judged question without any verdict is an InputError: J over a partly judged set would
    silently mean something else."""
    by_item = verdict_scores(verdicts)
    rows = []
    for q in questions:
        answer = _answer(answers, q)
        f1_q = (f1 or {}).get(q.id)
        if not protocol.judges(q.category):
            rows.append(JudgedRow(q.id, q.category, q.answer, answer, (unjudged_score(answer, q.answer, q.category),),
                                  f1_q, judged=False))
        elif q.id not in by_item:
            raise InputError(f"question {q.id} (category {q.category}) has no judge verdict")
        else:
            rows.append(JudgedRow(q.id, q.category, q.answer, answer, by_item[q.id], f1_q))
    return rows


# --- the figures ------------------------------------------------------------------------------------
def _words(text: str) -> int:
    return len(text.split())


def length_stats(rows: Sequence[JudgedRow]) -> LengthStats | None:
    """Answer length in words against the gold's, over the judged rows with a non-empty gold."""
    usable = [r for r in rows if r.judged and _words(r.gold) > 0]
    if not usable:
        return None
    answer_words = fmean(_words(r.answer) for r in usable)
    gold_words = fmean(_words(r.gold) for r in usable)
    return LengthStats(n=len(usable), answer_words=answer_words, gold_words=gold_words, ratio=answer_words / gold_words,
                       mean_ratio=fmean(_words(r.answer) / _words(r.gold) for r in usable))


def _formula_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa for two binary raters: (observed - expected) / (1 - expected) agreement."""
    observed = fmean(x == y for x, y in zip(a, b))
    pa, pb = fmean(a), fmean(b)
    expected = pa * pb + (1 - pa) * (1 - pb)
    return None if expected == 1 else (observed - expected) / (1 - expected)


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa (scikit-learn's when installed); None when undefined: both raters give one same label."""
    if len(set(a)) == 1 and set(a) == set(b):
        return None
    try:
        from sklearn.metrics import cohen_kappa_score
    except ImportError:  # pragma: no cover - scikit-learn comes with the project's dependencies
        return _formula_kappa(a, b)
    return float(cohen_kappa_score(list(a), list(b)))


def agreement(rows: Sequence[JudgedRow], pass_score: float = DEFAULTS.pass_score,
              f1_pass: float = DEFAULTS.f1_pass) -> Agreement | None:
    """How often "the judge accepts" and "F1 >= f1_pass" agree, over judged rows that carry an F1."""
    usable = [r for r in rows if r.judged and r.f1 is not None]
    if not usable:
        return None
    judge = [r.j >= pass_score for r in usable]
    by_f1 = [r.f1 >= f1_pass for r in usable]  # type: ignore[operator]
    return Agreement(n=len(usable), agreement=fmean(x == y for x, y in zip(judge, by_f1)), kappa=cohen_kappa(judge, by_f1))


def _by_category(rows: Sequence[JudgedRow]) -> tuple[dict[str, float], dict[str, int]]:
    grouped: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        grouped[r.category].append(r.j)
    cats = sorted(grouped)
    return {c: fmean(grouped[c]) for c in cats}, {c: len(grouped[c]) for c in cats}


def summarize(rows: Sequence[JudgedRow], protocol: str, cfg: JudgeConfig = DEFAULTS) -> JudgeSummary:
    """J over the judged rows, per category, with length, agreement with F1, and the unjudged categories' rule."""
    judged = [r for r in rows if r.judged]
    j_by_cat, n_by_cat = _by_category(judged)
    rule_by_cat, n_rule = _by_category([r for r in rows if not r.judged])
    return JudgeSummary(
        protocol=protocol,
        n=len(judged),
        j=fmean(r.j for r in judged) if judged else None,
        j_by_category=j_by_cat,
        n_by_category=n_by_cat,
        length=length_stats(rows),
        agreement=agreement(rows, cfg.pass_score, cfg.f1_pass),
        unjudged=rule_by_cat,
        n_unjudged=n_rule,
    )


def length_warnings(summary: JudgeSummary, max_length_ratio: float = DEFAULTS.max_length_ratio) -> list[str]:
    """A WARNING line when answers are much longer than the gold (a lenient judge rewards length)."""
    length = summary.length
    if length is None or length.ratio <= max_length_ratio:
        return []
    return [f"WARNING: answers average {length.answer_words:.1f} words, {length.ratio:.1f}x the gold answers' "
            f"{length.gold_words:.1f} (limit {max_length_ratio:g}x); a judge may reward their length"]
