"""Semantic diagnosis: where the best system fails, and where a new run differs from it.

- ``diagnose_misses``: the best evaluation's misses split into *retrieval misses* (the
  evidence is not all in the context the reader got) and *reader misses* (it is, and the
  answer is still wrong), per category, with examples of the kind that dominates: the
  question, the gold answer, the evidence turn's text, what the context began with, and
  the prediction. Which kind dominates decides which source files the researcher sees.
- ``diagnose``: per-category deltas between the best evaluation and the latest one, and
  the questions that flipped (correct -> wrong and back) with the evidence each run retrieved.

Pure functions over the runs' ``predictions.jsonl`` rows (turn texts are passed in).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

CORRECT_AT = 0.5  # a question counts as answered correctly at token F1 >= 0.5
#: characters of a turn's text shown in an example (a turn can be a long paragraph)
TURN_CHARS = 160
CONTEXT_CHARS = 70  # of each context turn (they only show what the system put first)
#: objectives that are means over the questions with evidence (benchmarks.metrics.retrieval)
_EVIDENCE_METRICS = re.compile(r"^(recall_at_\d+|hit_at_\d+|precision|mrr|context_recall)$")

#: (conversation id, turn id) -> the turn's text as the dialogue shows it
TurnTexts = Mapping[tuple[str, str], str]


@dataclass
class MissExample:
    kind: str  # retrieval | reader
    category: str
    question: str
    gold: str
    prediction: str
    evidence: list[tuple[str, str]]  # (turn id, text) of every evidence turn
    missing: list[str]  # evidence turn ids the context lacked
    context: list[tuple[str, str]]  # (turn id, text) of the context's first turns


@dataclass
class MissDiagnosis:
    """The best evaluation's misses, split by where the answer was lost."""

    n: int = 0  # questions scored
    with_reader: bool = False
    per_category: dict[str, dict[str, int]] = field(default_factory=dict)  # cat -> n, retrieval, reader
    retrieval: int = 0
    reader: int = 0
    examples: list[MissExample] = field(default_factory=list)  # of the dominant kind
    category_names: dict[str, str] = field(default_factory=dict)

    @property
    def dominant_kind(self) -> str:
        """retrieval | reader | "" (no misses). Ties go to retrieval: it comes first in the pipeline."""
        if not self.retrieval and not self.reader:
            return ""
        return "retrieval" if self.retrieval >= self.reader else "reader"

    def render(self, examples: int = 4, context_lines: int = 3) -> str:
        if not self.n:
            return "(no evaluation of the best system yet)"
        wrong = "F1 < 0.5" if self.with_reader else "no reader: only retrieval is scored"
        lines = [f"Best evaluation: {self.n} questions, {self.retrieval} retrieval misses (evidence not all "
                 f"in the context), {self.reader} reader misses (evidence all in the context, answer wrong; {wrong})."]
        cats = []
        for c, v in sorted(self.per_category.items()):
            name = self.category_names.get(c, "")
            cats.append(f"{c}{' ' + name if name else ''}: {v['n']}/{v['retrieval']}/{v['reader']}")
        if cats:
            lines.append("Per category (questions/retrieval misses/reader misses): " + ", ".join(cats))
        kind = self.dominant_kind
        if not kind:
            return "\n".join(lines)
        lines.append(f"Dominant: {kind} misses. Examples:")
        for ex in self.examples[:examples]:
            gold = ex.gold or "(none: the question has no answer in the conversation)"
            lines.append(f"- [{ex.category}] Q: {ex.question} | gold: {gold} | prediction: {_cut(ex.prediction, 80)}")
            for tid, text in ex.evidence:
                flag = " (NOT in context)" if tid in ex.missing else ""
                lines.append(f"  evidence {tid}{flag}: {_cut(text, TURN_CHARS)}")
            shown = ex.context[:context_lines]
            if shown:
                lines.append("  context began: " + " / ".join(f"{tid} {_cut(text, CONTEXT_CHARS)}" for tid, text in shown))
            else:
                lines.append("  context: (empty)")
        return "\n".join(lines)


def eligible_examples(ids: Sequence[str], shown: Collection[str], cap: int, seed: int) -> set[str]:
    """The questions a diagnosis may show with their gold: those shown before, and new ones (drawn with
    ``seed``) only while fewer than ``cap`` have been shown. Pure.

    Why a cap: acceptance needs a gain on questions whose gold the researcher never saw; a diagnosis that
    showed new examples every step would use up the run's never-shown questions in a few steps."""
    own = [str(i) for i in ids]
    before = {i for i in own if i in set(shown)}
    new = [i for i in own if i not in before]
    random.Random(seed).shuffle(new)
    return before | set(new[: max(0, cap - len(before))])


#: a question counts as shown when this much of its text is in the researcher's context (a line cut at the
#: budget still showed it)
SHOWN_PREFIX_CHARS = 40


def questions_shown(rows: list[dict[str, Any]], text: str) -> list[str]:
    """The ids of the questions ``text`` shows, with their gold (a question's text appears in it).

    Why: the loop keeps, per run, which questions' gold the researcher has seen (docs/design.md section 6),
    so that a gain must also hold on questions it never saw. Matching the rendered text itself (not the
    examples asked for) counts exactly what fit in the researcher's context budget."""
    flat = " ".join(text.split())
    return sorted({str(r["question_id"]) for r in rows
                   if r.get("question") and " ".join(str(r["question"]).split())[:SHOWN_PREFIX_CHARS] in flat})


def _cut(text: str, n: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def conversation_of(row: dict[str, Any]) -> str:
    """A row's conversation: its own field, else the question id's prefix ("conv-26:q3")."""
    return str(row.get("conversation_id") or str(row.get("question_id", "")).rsplit(":q", 1)[0])


def context_of(row: dict[str, Any]) -> list[str]:
    """The turn ids the reader was given (the scorer's counted context; retrieved ids in old rows)."""
    return list(row.get("context_ids", row.get("retrieved_ids")) or [])


def miss_kind(row: dict[str, Any]) -> str | None:
    """retrieval | reader | None (not a miss).

    With a reader a miss is a wrong answer (F1 < 0.5): a retrieval miss when some evidence was
    not in the context, else a reader miss. Without one, every question whose evidence is not
    all in the context is a retrieval miss."""
    evidence = set(row.get("evidence") or [])
    incomplete = bool(evidence - set(context_of(row)))
    score = _score(row)
    if score is None:
        return "retrieval" if incomplete else None
    if score >= CORRECT_AT:
        return None
    return "retrieval" if incomplete else "reader"


def diagnose_misses(rows: list[dict[str, Any]], turn_texts: TurnTexts | None = None, *, examples: int = 5,
                    seed: int = 0, category_names: Mapping[str, str] | None = None,
                    eligible: Collection[str] | None = None, prefer: Collection[str] = ()) -> MissDiagnosis:
    """Retrieval vs reader misses of one evaluation, per category, with up to ``examples``
    examples of the dominant kind (a sample drawn with ``seed``, so steps show different ones).

    ``eligible``: the only question ids an example may show (None: any); ``prefer``: ids shown before,
    drawn first, so the set of questions whose gold the researcher has seen grows as little as it can
    (docs/design.md section 6). The per-category counts cover every row: aggregates show no gold."""
    texts = turn_texts or {}
    d = MissDiagnosis(n=len(rows), with_reader=any(_score(r) is not None for r in rows),
                      category_names=dict(category_names or {}))
    misses: dict[str, list[dict[str, Any]]] = {"retrieval": [], "reader": []}
    for r in rows:
        cat = str(r.get("category", ""))
        counts = d.per_category.setdefault(cat, {"n": 0, "retrieval": 0, "reader": 0})
        counts["n"] += 1
        kind = miss_kind(r)
        if kind:
            counts[kind] += 1
            misses[kind].append(r)
    d.retrieval, d.reader = len(misses["retrieval"]), len(misses["reader"])
    kind = d.dominant_kind
    if kind:
        pool = [r for r in misses[kind] if eligible is None or str(r["question_id"]) in eligible]
        random.Random(seed).shuffle(pool)
        seen = set(prefer)
        pool.sort(key=lambda r: str(r["question_id"]) not in seen)  # stable: shown ones first, each group shuffled
        d.examples = [_example(r, kind, texts) for r in pool[:examples]]
    return d


def _example(row: dict[str, Any], kind: str, texts: TurnTexts) -> MissExample:
    conv = conversation_of(row)
    context = context_of(row)
    in_context = set(context)
    evidence = list(dict.fromkeys(row.get("evidence") or []))

    def text(tid: str) -> str:
        return texts.get((conv, tid), "(text not available)")

    return MissExample(kind, str(row.get("category", "")), str(row.get("question", "")), str(row.get("gold", "")),
                       str(row.get("prediction", "")), [(t, text(t)) for t in evidence],
                       [t for t in evidence if t not in in_context], [(t, text(t)) for t in context[:5]])


def questions_counted(objective: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows ``objective`` is a mean over: questions with evidence for retrieval metrics,
    one category for per-category metrics (``f1_cat2``, ``f1_VS``, ``recall_at_10/2``),
    categories 1-4 for ``f1_cat1_4``, else every question."""
    base, _, cat = objective.partition("/")
    if cat:
        rows = [r for r in rows if str(r.get("category")) == cat]
    if _EVIDENCE_METRICS.match(base):
        return [r for r in rows if r.get("evidence")]
    if base.startswith("f1_cat1_4"):
        return [r for r in rows if str(r.get("category")) in ("1", "2", "3", "4")]
    m = re.match(r"^f1_cat(\d)(_lenient)?$", base) or re.match(r"^(?:f1|em|bleu|bleu1|bleu2)_([A-Z]+)$", base)
    if m:
        return [r for r in rows if str(r.get("category")) == m.group(1)]
    return rows


@dataclass
class Diagnosis:
    category_deltas: dict[str, float] = field(default_factory=dict)
    broke: list[dict[str, Any]] = field(default_factory=list)  # correct in best, wrong now
    fixed: list[dict[str, Any]] = field(default_factory=list)  # wrong in best, correct now

    def render(self, limit: int = 4) -> str:
        if not self.category_deltas and not self.broke and not self.fixed:
            return "(no comparison available yet)"
        lines = ["Per-category change vs best: " + ", ".join(
            f"{c}: {d:+.3f}" for c, d in sorted(self.category_deltas.items()))]
        for title, rows in (("Broke (was right, now wrong)", self.broke), ("Fixed (was wrong, now right)", self.fixed)):
            if rows:
                lines.append(f"{title}: {len(rows)}")
                for r in rows[:limit]:
                    lines.append(f"- [{r['category']}] {r['question']} | gold: {r['gold']} | now: {r['prediction'][:60]} "
                                 f"| evidence {r['evidence']} retrieved now: {r['hit_now']}, before: {r['hit_before']}")
        return "\n".join(lines)


def _score(row: dict[str, Any]) -> float | None:
    s = row.get("scores") or {}
    if "f1" in s:
        return float(s["f1"])
    return None


def _hit(row: dict[str, Any]) -> bool:
    ev = set(row.get("evidence") or [])
    return bool(ev & set((row.get("retrieved_ids") or [])[:20]))


def diagnose(best_rows: list[dict[str, Any]], new_rows: list[dict[str, Any]],
             eligible: Collection[str] | None = None) -> Diagnosis:
    """Per-category change of ``new_rows`` against ``best_rows``, and the questions that broke or were fixed
    (only ``eligible`` ones are listed, with their gold: docs/design.md section 6)."""
    best = {r["question_id"]: r for r in best_rows}
    d = Diagnosis()
    per_cat: dict[str, list[float]] = {}
    for r in new_rows:
        b = best.get(r["question_id"])
        if b is None:
            continue
        sb, sn = _score(b), _score(r)
        if sb is None or sn is None:  # retrieval-only runs: compare evidence hits
            sb, sn = float(_hit(b)), float(_hit(r))
        per_cat.setdefault(r["category"], []).append(sn - sb)
        row = {"question_id": r["question_id"], "category": r["category"], "question": r["question"],
               "gold": r.get("gold", ""), "prediction": r.get("prediction", ""), "evidence": r.get("evidence", []),
               "hit_now": _hit(r), "hit_before": _hit(b)}
        listed = eligible is None or str(r["question_id"]) in eligible
        if listed and sb >= CORRECT_AT > sn:
            d.broke.append(row)
        elif listed and sn >= CORRECT_AT > sb:
            d.fixed.append(row)
    d.category_deltas = {c: sum(v) / len(v) for c, v in per_cat.items() if v}
    return d


def row_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The mean of a numeric field over scored rows (``context_tokens``, ``prompt_tokens``); None without any."""
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return sum(values) / len(values) if values else None


def read_rows(eval_dir: str | Path | None) -> list[dict[str, Any]]:
    if not eval_dir:
        return []
    path = Path(eval_dir) / "predictions.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
