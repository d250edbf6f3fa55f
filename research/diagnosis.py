"""Semantic diagnosis: when a run succeeds but the metric drops or stalls, say where.

Per-category deltas between the best evaluation and the latest one, and the
questions that flipped (correct -> wrong and back) with the evidence each run
retrieved. Pure functions over the runs' ``predictions.jsonl`` rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CORRECT_AT = 0.5  # a question counts as answered correctly at token F1 >= 0.5


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


def diagnose(best_rows: list[dict[str, Any]], new_rows: list[dict[str, Any]]) -> Diagnosis:
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
        if sb >= CORRECT_AT > sn:
            d.broke.append(row)
        elif sn >= CORRECT_AT > sb:
            d.fixed.append(row)
    d.category_deltas = {c: sum(v) / len(v) for c, v in per_cat.items() if v}
    return d


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
