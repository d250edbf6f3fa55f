"""What each retrieval component is worth on LoCoMo (or Mem-Gallery), reader-free (issue #14).

Why: `omni` should find the evidence before a reader ever sees it, and every component
(index text, speaker/time ranking, neighbour expansion, graph fusion, pyramid) must earn its
place with a measured figure. Evidence recall needs no LLM, so the comparison is exact and
cheap: every variant answers the same questions of the split through the same code path an
evaluation uses (``memsys.predict`` with ``reader=none``), and the trusted scorer
(``benchmarks.scoring``) scores them.

Per variant: evidence recall@5/10/20 of the ranked candidate list (same depth for every
variant), and context recall at token budgets B (the retrieval runs with
``memory.pyramid.budget_tokens=B`` and the scorer cuts the claimed context at B with its own
token count: same budget for every variant). LoCoMo: categories 1-4 pooled, each category apart,
and category 5 apart (it has little evidence). Mem-Gallery (caption mode offline): all categories
pooled ("all"), each apart. Each variant also keeps its per-question recall@20 (categories 1-4,
``per_question``), so two variants can be compared question by question::

    python -c "import json, sys; from research.evaluation.stats import paired_test; v = json.load(open(sys.argv[1]))['variants'];
    print(paired_test(v[sys.argv[2]]['per_question'], v[sys.argv[3]]['per_question']))" OUT.json A B

Usage::

    python -m benchmarks.perf.bench_retrieval_components [--benchmark locomo] [--split dev] [--budgets 1000,2000,4000]
        [--variants baselines,ablation,merges] [--out runs/bench/retrieval_components.json]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from benchmarks.datasets import load_benchmark
from benchmarks.scoring import score_answers
from benchmarks.splits import load_benchmark_config, select
from benchmarks.views import write_public_view
from harness.bench_output import utc_now, write_json
from harness.paths import runs_dir
from harness.views import VIEW_FILE, PredictRequest, read_answers

RECALL_KS = (5, 10, 20)
DEFAULT_BUDGETS = (1000, 1500, 2000, 4000)
CATS_1_4 = ("1", "2", "3", "4")


@dataclass(frozen=True)
class Variant:
    name: str
    preset: str
    overrides: tuple[str, ...] = ()
    system: str = "memsys"  # memsys | recent_window


# One step at a time from the starting point (`omni_before`: the paper's set-union of the dense
# top-20 and BM25, the rule graph's turns appended and its facts shown, indexes that see the turn text
# only), so each row differs from the one before by one component, ending at today's omni (`-graph`);
# then what each other component is worth added to omni.
_GRAPH_ON = "memory.graph.enabled=true"
_BEFORE = ("memory.ingest.index_text.dense=text", "memory.ingest.index_text.sparse=text",
           "memory.ingest.index_text.neighbors=0", "memory.retrieval.merge=set_union", "memory.retrieval.top_k=20",
           "memory.retrieval.speaker_lift=0", "memory.retrieval.time_lift=0")
_STEPS = (
    ("omni_before", (*_BEFORE, _GRAPH_ON)),
    ("+index_text", (*_BEFORE[2:], _GRAPH_ON)),
    ("+neighbour_text", (*_BEFORE[3:], _GRAPH_ON)),
    ("+rrf", (*_BEFORE[4:], _GRAPH_ON)),
    ("+top_k_40", (*_BEFORE[5:], _GRAPH_ON)),
    ("+speaker_lift", (*_BEFORE[6:], _GRAPH_ON)),
    ("+time_lift", (_GRAPH_ON,)),
    ("-graph", ()),
)
ABLATION: dict[str, Variant] = {name: Variant(name, "omni", ovs) for name, ovs in _STEPS}
ABLATION.update({v.name: v for v in (
    Variant("omni+graph_rrf", "omni", (_GRAPH_ON, "memory.graph.placement=rrf")),
    Variant("omni+neighbors", "omni", ("memory.retrieval.expand_top=3",)),  # neighbour expansion of the list
    Variant("omni+abstain", "omni", ("memory.answer.abstain=retrieval",)),
    Variant("omni-pyramid", "omni", ("memory.pyramid.enabled=false",)),
)})
BASELINES: dict[str, Variant] = {v.name: v for v in (
    Variant("omni", "omni"),
    Variant("naive", "naive"),
    Variant("naive_rag", "naive_rag"),
    Variant("bm25_only", "bm25_only"),
    Variant("recent_window", "naive_rag", system="recent_window"),
)}


def _merge_variants() -> dict[str, Variant]:
    """Every merge strategy on omni (its index text and steps), same lists (dense 20, BM25 20), cut at 40."""
    return {f"merge_{m}": Variant(f"merge_{m}", "omni", (f"memory.retrieval.merge={m}",))
            for m in ("set_union", "rrf", "linear", "dense_only", "bm25_only")}


ALL_VARIANTS = {**BASELINES, **ABLATION, **_merge_variants()}
GROUPS = {"baselines": list(BASELINES), "ablation": list(ABLATION), "merges": list(_merge_variants())}


def parse_variant(spec: str) -> Variant:
    """A named variant, or ``name=preset:override,override`` for an ad hoc one."""
    if spec in ALL_VARIANTS:
        return ALL_VARIANTS[spec]
    if "=" not in spec:
        raise SystemExit(f"unknown variant {spec!r} (known: {', '.join(ALL_VARIANTS)}; or name=preset:k=v;k=v)")
    name, rest = spec.split("=", 1)
    preset, _, overrides = rest.partition(":")
    return Variant(name, preset, tuple(o for o in overrides.split(";") if o))


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _recall(ids: Sequence[str], evidence: Sequence[str]) -> float:
    gold = set(evidence)
    return len(gold & set(ids)) / len(gold)


def _row_recall(r: dict[str, Any], key: str, k: int | None = None) -> float:
    """Evidence recall of one question's ``key`` list, repeats dropped before the cut at ``k``
    (a repeated id must not push a distinct one past the cut)."""
    ids = list(dict.fromkeys(r[key]))
    return _recall(ids[:k] if k else ids, r["evidence"])


def summarize(rows: list[dict[str, Any]], key: str, k: int | None = None) -> dict[str, Any]:
    """Mean recall over questions with evidence: categories 1-4 pooled, and each category."""
    ev = [r for r in rows if r["evidence"]]
    out: dict[str, Any] = {"cat1_4": _mean([_row_recall(r, key, k) for r in ev if r["category"] in CATS_1_4]),
                           "all": _mean([_row_recall(r, key, k) for r in ev])}
    for cat in sorted({r["category"] for r in ev}):
        out[f"cat{cat}"] = _mean([_row_recall(r, key, k) for r in ev if r["category"] == cat])
    return out


def per_question_recall(rows: list[dict[str, Any]], k: int) -> dict[str, float]:
    """Question id -> evidence recall@k, categories 1-4 with evidence: what a paired comparison of two
    variants on the same questions needs (``research.evaluation.stats.paired_test`` reads two of these)."""
    return {r["question_id"]: round(_row_recall(r, "retrieved_ids", k), 4)
            for r in rows if r["evidence"] and r["category"] in CATS_1_4}


def run_variant(v: Variant, view_path: Path, question_ids: list[str], budget: int, work: Path) -> dict[str, Any]:
    """Answers (reader-free) of one variant at one budget, validated like an evaluation's."""
    from memsys.predict import predict

    out_dir = work / f"{v.name}-{budget}"
    overrides = (*v.overrides, f"memory.pyramid.budget_tokens={budget}")
    req = PredictRequest(view_path=str(view_path), out_dir=str(out_dir), memory_preset=v.preset,
                         memory_overrides=overrides, reader="none", system=v.system,
                         full_context_budget=budget, resume=False)
    t0 = time.perf_counter()
    predict(req)
    wall = time.perf_counter() - t0
    return {"answers": read_answers(out_dir / "answers.jsonl", question_ids), "wall_s": wall}


def measure(variants: Sequence[Variant], split: str, sample: str | None, budgets: Sequence[int],
            benchmark: str = "locomo") -> dict[str, Any]:
    bench = select(load_benchmark(benchmark), split, sample, load_benchmark_config(benchmark))
    qids = [q.id for c in bench.conversations for q in c.questions]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        work = Path(tmp)
        write_public_view(bench, work / "view")
        view_path = work / "view" / VIEW_FILE
        for v in tqdm(variants, desc="variants", unit="variant"):
            row: dict[str, Any] = {"preset": v.preset, "overrides": list(v.overrides), "system": v.system,
                                   "context_recall": {}, "context_tokens": {}, "wall_s": {}}
            for b in budgets:
                got = run_variant(v, view_path, qids, b, work)
                scored = score_answers(bench, got["answers"], with_reader=False, context_budget_tokens=b)
                row["context_recall"][str(b)] = summarize(scored, "context_ids")
                row["context_tokens"][str(b)] = _mean([r["context_tokens"] for r in scored])
                row["wall_s"][str(b)] = round(got["wall_s"], 2)
                if b == budgets[-1]:
                    row["recall_at"] = {str(k): summarize(scored, "retrieved_ids", k) for k in RECALL_KS}
                    row["per_question"] = per_question_recall(scored, RECALL_KS[-1])
            results[v.name] = row
    return {"benchmark": benchmark, "pooled": "cat1_4" if benchmark == "locomo" else "all", "split": split,
            "sample": sample, "n_questions": len(qids), "budgets": list(budgets), "variants": results}


def table(report: dict[str, Any]) -> str:
    """Markdown: the pooled categories (LoCoMo 1-4, Mem-Gallery all); recall@k, then context recall per budget."""
    budgets, pooled = report["budgets"], report.get("pooled", "cat1_4")
    head = ["variant", *(f"R@{k}" for k in RECALL_KS), *(f"ctx@{b}" for b in budgets), "cat5 ctx@max"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in report["variants"].items():
        ra = row.get("recall_at", {})
        cells = [name, *(f"{ra.get(str(k), {}).get(pooled)}" for k in RECALL_KS),
                 *(f"{row['context_recall'][str(b)][pooled]}" for b in budgets),
                 f"{row['context_recall'][str(budgets[-1])].get('cat5')}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", default="locomo", choices=["locomo", "memgallery"])
    p.add_argument("--split", default="dev")
    p.add_argument("--sample", default=None)
    p.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)))
    p.add_argument("--variants", default="baselines,ablation,merges",
                   help="groups (baselines, ablation, merges), names, or name=preset:key=v;key=v")
    p.add_argument("--out", default=str(runs_dir() / "bench" / "retrieval_components.json"))
    args = p.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    specs = [n for s in args.variants.split(",") if s for n in GROUPS.get(s, [s])]
    variants = [parse_variant(s) for s in dict.fromkeys(specs)]
    t0 = time.perf_counter()
    report = measure(variants, args.split, args.sample, budgets, args.benchmark)
    report.update(wall_s=round(time.perf_counter() - t0, 1), host=platform.node(),
                  when=utc_now(), argv=sys.argv[1:])
    out = Path(args.out)
    write_json(out, report)
    print(table(report))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
