"""Measured reader runs read back, and composed with a decision the reader never saw.

Why: several levers act before the reader is asked (retrieval abstention) or after it answered (its
token confidence, ``answer.resolve_times``). On a finished reader run their end-to-end figure is
exact at no reader time: replace the affected rows, score them with the scorer, and compare with the
run on the same questions. bench_abstention_reader and bench_answer_times do this; the parts they
share live here so both read runs, mark abstentions and report the paired test the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any, Mapping

from harness.paths import runs_dir
from memsys.answer.generate import ABSTAIN_TEXT
from research.evaluation.stats import paired_test


def read_run(spec: str) -> tuple[Path, list[dict[str, Any]]]:
    """A finished run's folder and scored rows; ``spec`` is a run id under runs/ or a folder."""
    run_dir = Path(spec) if Path(spec).is_dir() else runs_dir() / spec
    path = run_dir / "predictions.jsonl"
    if not path.exists():
        raise SystemExit(f"{run_dir}: no predictions.jsonl (is the run finished and scored?)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:  # the scorer writes the file whole (atomically): a bad line is damage, and a figure must not skip it
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{n}: not a JSON row ({e.msg}): the run's predictions are damaged") from None
    return run_dir, rows


def named(text: str) -> dict[str, str]:
    """``"a=x,b=y"`` -> {"a": "x", "b": "y"} (the benches' --runs)."""
    out = {}
    for item in filter(None, text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"{item!r}: expected name=value")
        out[name] = value
    return out


def presets(text: str) -> dict[str, tuple[str, list[str]]]:
    """bench_reader's variant syntax (``"omni=omni:answer.abstain=off;retrieval.top_k=8,naive_rag"``) ->
    {"omni": ("omni", ["memory.answer.abstain=off", "memory.retrieval.top_k=8"]), "naive_rag": ("naive_rag", [])}:
    the preset and memory overrides a run's contexts are rebuilt with."""
    from research.perf.bench_reader import parse_variants

    return {v.name: (v.preset, [o if o.startswith("memory.") else f"memory.{o}" for o in v.overrides])
            for v in parse_variants(text)}


def abstained(row: Mapping[str, Any], scores: Mapping[str, float]) -> dict[str, Any]:
    """The row as it would be had the system abstained: the fixed text, its scores, no context, no reader."""
    return {**row, "prediction": ABSTAIN_TEXT, "scores": dict(scores), "context_ids": [], "context_tokens": 0,
            "prompt_tokens": 0, "abstained": True}


def mean4(values: Mapping[str, float]) -> float | None:
    return round(mean(values.values()), 4) if values else None


def paired(candidate: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, Any] | None:
    """The loop's paired test (research.evaluation.stats) as the benches report it; None without shared questions."""
    if not set(candidate) & set(reference):
        return None
    t = paired_test(candidate, reference)
    return {"delta": round(t.mean_delta, 4), "ci": [round(t.ci_low, 4), round(t.ci_high, 4)],
            "p_better": round(t.p_better, 4), "p_worse": round(t.p_worse, 4), "n": t.n}


def format_paired(d: Mapping[str, Any] | None) -> str:
    return f"{d['delta']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] p={d['p_better']:.3f}" if d else "-"


