"""The benchmark material a change must not carry: question n-grams, distinctive gold answers, question ids.

Built once per run from the dev AND test questions of every benchmark (test too: a change that
carries held-out answers is leakage even if dev cannot reward it yet), then shared read-only by
every screen; ``load_index`` caches it per data version.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Question
from benchmarks.leakage.config import LeakageConfig
from benchmarks.leakage.text import normal, words
from benchmarks.splits import load_benchmark_config, select

_CASED_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class LeakageIndex:
    """Lookup tables of benchmark material (all keys in ``text.normal`` form)."""

    ngrams: Mapping[str, str]  # n-gram of a question (or a whole short question) -> a question id
    ngram_lengths: tuple[int, ...]  # the word lengths of those keys, longest first
    answers: Mapping[str, str]  # distinctive gold answer -> a question id it answers
    answer_names: Mapping[str, str]  # name-like answers among them -> their cased words ("Lake Tahoe")
    question_ids: frozenset[str]
    questions: Mapping[str, str]  # question id -> question text (for snippets)
    versions: tuple[str, ...] = ()  # "<benchmark>@<data version>" the index was built from

    @classmethod
    def build(cls, questions: Iterable[Question], cfg: LeakageConfig | None = None,
              versions: tuple[str, ...] = ()) -> LeakageIndex:
        """Index ``questions`` (pass dev and test of every benchmark). Pure."""
        cfg = cfg or LeakageConfig()
        qs = list(questions)
        ngrams = question_ngrams(qs, cfg)
        answers, names = distinctive_answers(qs, cfg)
        return cls(
            ngrams=MappingProxyType(ngrams),
            ngram_lengths=tuple(sorted({k.count(" ") + 1 for k in ngrams}, reverse=True)),
            answers=MappingProxyType(answers),
            answer_names=MappingProxyType(names),
            question_ids=frozenset(q.id for q in qs),
            questions=MappingProxyType({q.id: q.question for q in qs}),
            versions=versions,
        )

    def stats(self) -> dict[str, int]:
        return {"questions": len(self.questions), "ngrams": len(self.ngrams), "answers": len(self.answers)}


def question_keys(question: str, cfg: LeakageConfig) -> set[str]:
    """The word n-grams of one question, or the whole question when it is shorter than ``cfg.ngram``
    but long enough to be specific."""
    w = words(question)
    if len(w) < cfg.ngram:
        return {" ".join(w)} if len(w) >= cfg.short_question_min_words else set()
    return {" ".join(w[i:i + cfg.ngram]) for i in range(len(w) - cfg.ngram + 1)}


def question_ngrams(questions: list[Question], cfg: LeakageConfig) -> dict[str, str]:
    """n-gram -> question id, without the n-grams many different questions share (dataset templates)."""
    texts: dict[str, set[str]] = defaultdict(set)
    owner: dict[str, str] = {}
    for q in questions:
        for key in question_keys(q.question, cfg):
            texts[key].add(normal(q.question))
            owner.setdefault(key, q.id)
    return {k: owner[k] for k, t in texts.items() if len(t) < cfg.max_questions_per_ngram}


def gold_strings(q: Question) -> list[str]:
    """The answers a question's table would carry: the gold one and LoCoMo's adversarial trap answer."""
    return [a for a in (q.answer, q.adversarial_answer) if a and a.strip()]


def lowercase_vocabulary(questions: list[Question]) -> frozenset[str]:
    """Words the questions and answers write in lower case somewhere: common words, not names.

    Why: "Before" or "Running" as a one-word answer is capitalised only because it opens a sentence;
    "Sweden" or "Phuket" never appears in lower case. The dataset itself tells the two apart.
    """
    vocab: set[str] = set()
    for q in questions:
        for text in (q.question, *gold_strings(q)):
            vocab.update(w for w in _CASED_WORD.findall(text) if w.islower())
    return frozenset(vocab)


def name_words(answer: str, lowercase: frozenset[str]) -> list[str]:
    """The answer's capitalised words that the dataset never writes in lower case (names, places, titles)."""
    return [w for w in _CASED_WORD.findall(answer) if w[0].isupper() and w.lower() not in lowercase]


def answer_kind(answer: str, share: float, lowercase: frozenset[str], cfg: LeakageConfig) -> str | None:
    """How a rare, specific answer counts: "number" (has a digit), "name" (names a thing, so it must be
    written as a name), "phrase" (several plain words); None for a common one.

    Why: a table of answers is told apart from code by answers nobody writes by chance; "Yes",
    "Not mentioned.", "2022" or "two times" are in every codebase (and in many questions' answers).
    """
    norm = normal(answer)
    if len(norm) < cfg.answer_min_chars or share > cfg.answer_max_share or norm.replace(" ", "").isdigit():
        return None
    if any(c.isdigit() for c in norm):
        return "number"
    if name_words(answer, lowercase):
        return "name"
    return "phrase" if norm.count(" ") + 1 >= cfg.answer_min_plain_words else None


def cased(text: str) -> str:
    """The words of ``text`` with their case kept: how a name-like answer must be written to count."""
    return " ".join(_CASED_WORD.findall(text))


def distinctive_answers(questions: list[Question], cfg: LeakageConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(normalised distinctive answer -> the id of a question it answers, normalised name-like answer ->
    its cased form)."""
    counts: Counter[str] = Counter()
    for q in questions:
        counts.update({normal(a) for a in gold_strings(q)})
    lowercase = lowercase_vocabulary(questions)
    total = max(len(questions), 1)
    out: dict[str, str] = {}
    names: dict[str, str] = {}
    for q in questions:
        for a in gold_strings(q):
            norm = normal(a)
            kind = None if norm in out else answer_kind(a, counts[norm] / total, lowercase, cfg)
            if kind is not None:
                out[norm] = q.id
                if kind == "name":
                    names[norm] = cased(a)
    return out, names


def split_questions(name: str) -> tuple[tuple[Question, ...], str]:
    """The dev and test questions of one benchmark (its versioned split) and "<name>@<data>/v<split>"."""
    bench = load_benchmark(name)
    cfg = load_benchmark_config(name)
    qs = select(bench, "dev", None, cfg).questions + select(bench, "test", None, cfg).questions
    return qs, f"{name}@{bench.version}/v{cfg.split_version}"


_INDEXES: dict[tuple[tuple[str, ...], LeakageConfig], LeakageIndex] = {}


def load_index(names: tuple[str, ...] = ("locomo", "memgallery"), cfg: LeakageConfig | None = None) -> LeakageIndex:
    """The index of every benchmark's dev and test questions, built once per process and data version.

    The loaders cache parsed data by file version; this caches the index on top, keyed by the data and
    split versions, so a changed data file is indexed again (building takes about a second, screening
    a diff milliseconds).
    """
    cfg = cfg or LeakageConfig()
    parts = [split_questions(n) for n in names]
    key = (tuple(v for _, v in parts), cfg)
    if key not in _INDEXES:
        _INDEXES[key] = LeakageIndex.build((q for qs, _ in parts for q in qs), cfg, key[0])
    return _INDEXES[key]
