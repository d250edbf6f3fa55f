"""End to end with a reader: each memory variant answers the same questions, compared pair by pair (issue #14).

Why: reader-free recall says whether the evidence reached the context; only the reader says
whether a small model can use it. Each variant runs the real evaluation path (``memsys eval``:
public view, answers in the sandbox, trusted scoring) under its own run id, so a killed bench
resumes where it stopped (the run folder's resume plus the content-hashed reply cache) and a
finished variant is read back, not answered again. Variants are compared on the questions they
share with the reference, with the paired bootstrap CI and sign-flip test the loop's acceptance
uses (``research.evaluation.stats``): 100 questions leave a CI of several points, which the table shows.

Usage::

    python -m research.perf.bench_reader [--split dev] [--sample medium] [--reference naive_rag]
        [--variants "naive_rag,naive,omni,omni@1500=omni:memory.pyramid.budget_tokens=1500"]
        [--out runs/bench/reader.json] [-- extra overrides for every variant, e.g. llm=local]
    python -m research.perf.bench_reader --reference omni --runs "omni=<run-id>,omni-rrf=<run-id>,..."
        (finished evaluations of the same benchmark and split, read back into one paired table)

A variant is ``name=preset:override;override`` or just a preset name; ``ablation`` names the group of
``omni`` with one component off at a time (``ABLATION``; use ``--reference omni`` with it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean
from typing import Any, Sequence

from benchmarks.metrics.locomo import CATEGORIES as LOCOMO_CATEGORIES
from benchmarks.metrics.memgallery import CATEGORIES as MEMGALLERY_CATEGORIES
from harness.bench_output import command, write_result
from harness.paths import REPO_ROOT, runs_dir
from research.evaluation.caches import code_namespace
from research.evaluation.diagnosis import context_of, read_rows
from research.evaluation.stats import paired_test, per_question

DEFAULT_VARIANTS = "naive_rag,naive,omni,omni@1500=omni:memory.pyramid.budget_tokens=1500"
COST = ("context_recall", "context_tokens", "prompt_tokens_per_q", "seconds_per_q")


@dataclass(frozen=True)
class Profile:
    """What a benchmark's rows report: LoCoMo splits its F1 by answerable vs adversarial, Mem-Gallery does not."""

    objectives: tuple[str, ...]  # paired against the reference, per question; the first is the table's headline
    scores: tuple[str, ...]  # the scorer's aggregates shown as columns
    categories: tuple[str, ...]  # per-category F1 keys are f"{prefix}{category}"
    category_prefix: str


PROFILES = {
    "locomo": Profile(("f1_cat1_4", "all_honest", "f1_cat5_lenient"), ("f1_cat1_4", "f1_cat5", "all_honest"),
                      tuple(LOCOMO_CATEGORIES), "f1_cat"),
    "memgallery": Profile(("f1", "em"), ("f1", "em"), tuple(MEMGALLERY_CATEGORIES), "f1_"),
}


def profile_of(benchmark: str) -> Profile:
    if benchmark not in PROFILES:
        raise SystemExit(f"--benchmark {benchmark!r}: known {', '.join(sorted(PROFILES))}")
    return PROFILES[benchmark]


@dataclass(frozen=True)
class Variant:
    name: str
    preset: str
    overrides: tuple[str, ...] = ()


#: ``--variants ablation``: shipped ``omni`` and each of its components taken away (or, for the levers it ships
#: off, put in) one at a time, so the reader-side ablation table is one command; the reader-free one is
#: ``benchmarks.perf.bench_retrieval_components --variants ablation``. At 1-3 minutes a question with the
#: embedded reader on 2 cores, each row of the 100-question sample is hours: pick rows by name with
#: ``--variants "omni,omni-pyramid=omni:memory.pyramid.enabled=false"`` when the machine is small.
ABLATION = ("omni",
            "omni-index_text=omni:memory.ingest.index_text.dense=text;memory.ingest.index_text.sparse=text",
            "omni-neighbors=omni:memory.ingest.index_text.neighbors=0",
            "omni-rrf=omni:memory.retrieval.merge=set_union",
            "omni-speaker_lift=omni:memory.retrieval.speaker_lift=0",
            "omni-time_lift=omni:memory.retrieval.time_lift=0",
            "omni-pyramid=omni:memory.pyramid.enabled=false",
            "omni-attribution=omni:memory.answer.abstain_attribution=false",
            "omni-resolve_times=omni:memory.answer.resolve_times=false",
            "omni+graph=omni:memory.graph.enabled=true",
            "omni+type_hints=omni:memory.answer.type_hints=true")
GROUPS = {"ablation": ABLATION}


def parse_variants(text: str) -> list[Variant]:
    """``a,b=omni:x=1;y=2`` -> variants; overrides of one variant are separated by ';' (commas split variants).
    A group's name (``ablation``) stands for its variants."""
    out: list[Variant] = []
    items = (s.strip() for s in text.split(","))
    for item in (v for i in items if i for v in GROUPS.get(i, (i,))):
        name, eq, rest = item.partition("=")
        if not eq:
            out.append(Variant(item, item))
            continue
        preset, _, ovs = rest.partition(":")
        out.append(Variant(name, preset, tuple(filter(None, ovs.split(";")))))
    if len({v.name for v in out}) != len(out):
        raise SystemExit(f"variant names repeat in {text!r}")
    return out


def run_id_of(v: Variant, common: Sequence[str], code: str) -> str:
    """Stable per (variant, common overrides, memsys code), so a rerun resumes the same run folder and a
    changed memory system (a prompt file, a retriever) is answered again instead of read back; messages
    that did not change still come from the reply cache."""
    key = json.dumps([v.preset, list(v.overrides), list(common), code])
    return f"bench-reader-{v.name.replace('@', '-at-')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def finished_runs(text: str, benchmark: str, split: str) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``--runs "a=run-id,b=run-id"``: finished evaluations read back as rows, answered nothing.

    Why: rows measured in different sessions (a reader ablation run one row at a time, under different
    code) are still comparable question by question when they scored the same questions of the same
    split; this puts them in one paired table without hours of the reader. A run that is not finished, or
    scored another benchmark or split, is refused in one line."""
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, run_id = item.partition("=")
        if not eq or not name or not run_id:
            raise SystemExit(f"--runs item {item!r} is not name=run-id")
        if name in out:
            raise SystemExit(f"--runs names {name!r} twice")
        run_dir = Path(run_id) if "/" in run_id else runs_dir() / run_id  # a run id, or a folder (a loop's evals)
        if not (run_dir / "metrics.json").is_file():
            raise SystemExit(f"--runs {name}: {run_dir} has no metrics.json (not a finished evaluation)")
        try:
            meta = json.loads((run_dir / "run.json").read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--runs {name}: {run_dir / 'run.json'} cannot be read ({exc})") from exc
        got = (meta.get("benchmark"), meta.get("split")) if isinstance(meta, dict) else (None, None)
        if got != (benchmark, split):
            raise SystemExit(f"--runs {name}: {run_id} scored {got[0]}/{got[1]}, not {benchmark}/{split}")
        out[name] = (run_dir, meta)
    return out


def evaluate(v: Variant, common: Sequence[str], log_dir: Path, code: str) -> Path:
    """Run (or resume) one variant through ``memsys eval`` on this checkout's code; returns its run folder."""
    run_id = run_id_of(v, common, code)
    run_dir = runs_dir() / run_id
    if (run_dir / "metrics.json").exists():
        return run_dir
    argv = [sys.executable, "-m", "launcher.main", "eval", f"memory={v.preset}", *common, *v.overrides,
            f"run_id={run_id}", "mlflow=false", "--no-progress"]
    log = log_dir / f"{run_id}.log"
    print(f"[bench_reader] {v.name}: {' '.join(argv[3:])} (log {log})", flush=True)
    t0 = time.perf_counter()
    with log.open("a") as fh:
        proc = subprocess.run(argv, cwd=REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{v.name}: memsys eval exited {proc.returncode}; see {log}")
    print(f"[bench_reader] {v.name}: done in {time.perf_counter() - t0:.0f} s", flush=True)
    return run_dir


def summarize(rows: list[dict[str, Any]], metrics: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """The row's figures: the scorer's own aggregates plus per-question reader cost from the scored rows."""
    answered = [r for r in rows if not r.get("error")]
    # the gateway's count of replies from the reply cache (trusted; the rows' own flag cannot see the
    # gateway's cache): those cost no reader time, and the rows do not say which they were, so the
    # fastest that many are left out of the seconds
    hits = int(metrics.get("reader_cache_hits") or sum(1 for r in answered if r.get("cached")))
    fresh = sorted(answered, key=lambda r: r.get("latency_s") or 0.0)[hits:]
    per_category = {c: metrics[k] for c in profile.categories if (k := f"{profile.category_prefix}{c}") in metrics}
    return {
        "n": len(rows), "n_errors": len(rows) - len(answered),
        **{k: metrics.get(k) for k in profile.scores},
        "context_recall": metrics.get("context_recall"), "context_tokens": metrics.get("context_tokens"),
        "prompt_tokens_per_q": mean(r.get("prompt_tokens", 0) for r in answered) if answered else None,
        # a cached reply costs no reader time: the reader's seconds are over the questions it answered now
        "seconds_per_q": mean(r.get("latency_s", 0.0) for r in fresh) if fresh else None,
        "cached_replies": hits,
        "per_category_f1": per_category,
    }


def compare(rows: dict[str, list[dict[str, Any]]], reference: str, profile: Profile) -> dict[str, dict[str, Any]]:
    """variant -> objective -> paired test against the reference on the shared questions."""
    out: dict[str, dict[str, Any]] = {}
    for name, vrows in rows.items():
        if name == reference:
            continue
        out[name] = {}
        for obj in profile.objectives:
            cand, ref = per_question(obj, vrows), per_question(obj, rows[reference])
            if set(cand) & set(ref):
                out[name][obj] = paired_test(cand, ref).to_dict()
    return out


#: how a question's evidence stood in the two contexts (all of it in, or not)
EVIDENCE_GROUPS = ("in both", "variant only", "reference only", "in neither", "no evidence")


def _evidence_group(cand: dict[str, Any], ref: dict[str, Any]) -> str:
    evidence = set(cand.get("evidence") or [])
    if not evidence:
        return "no evidence"
    has = (not evidence - set(context_of(cand)), not evidence - set(context_of(ref)))
    return {(True, True): "in both", (True, False): "variant only", (False, True): "reference only"}.get(has, "in neither")


def sources_of_difference(cand_rows: list[dict[str, Any]], ref_rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Where a variant's F1 difference comes from, on the shared questions: grouped by whether each
    context held all the evidence. A gain "in both" is the reader doing better with the same evidence
    (or worse: a longer context can cost); "variant only" is what retrieval bought. The deltas of the
    groups add up to the total (``mean_delta`` times ``n``)."""
    ref = {r["question_id"]: r for r in ref_rows}
    out = {g: {"n": 0, "better": 0, "worse": 0, "sum_delta": 0.0} for g in EVIDENCE_GROUPS}
    for c in cand_rows:
        r = ref.get(c["question_id"])
        if r is None or c.get("error") or r.get("error") or "f1" not in (c.get("scores") or {}) \
                or "f1" not in (r.get("scores") or {}):
            continue
        delta = float(c["scores"]["f1"]) - float(r["scores"]["f1"])
        g = out[_evidence_group(c, r)]
        g["n"] += 1
        g["better"] += delta > 1e-9
        g["worse"] += delta < -1e-9
        g["sum_delta"] += delta
    return out


def render_sources(result: dict[str, Any]) -> str:
    lines = ["", f"F1 difference against {result['reference']} by where the evidence was (questions: better / worse "
             "of n, summed delta)", "| variant | " + " | ".join(EVIDENCE_GROUPS) + " |", "| --- " * 6 + "|"]
    for name, groups in result.get("sources", {}).items():
        cells = [f"{g['better']} / {g['worse']} of {g['n']}, {g['sum_delta']:+.2f}" for g in groups.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or abs(x) >= 100:  # a mean that happens to be whole is an int after a JSON round trip
        return f"{x:,.0f}"
    return f"{x:.3f}"


def render(result: dict[str, Any], profile: Profile) -> str:
    ref, headline = result["reference"], profile.objectives[0]
    columns = (*profile.scores, *COST)
    lines = ["| variant | " + " | ".join(columns) + f" | {headline} vs {ref} (95% CI) |",
             "| --- " * (len(columns) + 2) + "|"]
    for name, row in result["variants"].items():
        t = result["paired"].get(name, {}).get(headline)
        vs = "reference" if name == ref else (
            f"{t['mean_delta']:+.3f} [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}] p={t['p_better']:.3f}" if t else "-")
        lines.append(f"| {name} | " + " | ".join(_fmt(row.get(c)) for c in columns) + f" | {vs} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="locomo")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sample", default="medium")
    ap.add_argument("--variants", default=None, help=f"default {DEFAULT_VARIANTS!r} (none when --runs is given)")
    ap.add_argument("--runs", default="", help="name=run-id,...: finished evaluations to read back into the table")
    ap.add_argument("--reference", default="naive_rag")
    ap.add_argument("--llm", default="local", help="llm config group (local: the embedded model)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    variants = parse_variants(args.variants if args.variants is not None else "" if args.runs else DEFAULT_VARIANTS)
    read_back = finished_runs(args.runs, args.benchmark, args.split)
    profile = profile_of(args.benchmark)
    if set(read_back) & {v.name for v in variants}:
        raise SystemExit(f"--runs and --variants share names: {sorted(set(read_back) & {v.name for v in variants})}")
    if args.reference not in {v.name for v in variants} | set(read_back):
        raise SystemExit(f"--reference {args.reference!r} is not one of the variants or runs")
    common = [f"benchmark={args.benchmark}", f"split={args.split}", f"sample={args.sample}", f"llm={args.llm}", *extra]
    out = args.out or runs_dir() / "bench" / "reader.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = out.parent / "reader-logs"
    log_dir.mkdir(exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    code = code_namespace(REPO_ROOT)
    described: list[tuple[str, Path, dict[str, Any]]] = [
        (v.name, evaluate(v, common, log_dir, code), {"preset": v.preset, "overrides": list(v.overrides)})
        for v in variants]
    described += [(name, run_dir, {"read_back": True, "code": meta.get("code"), "sample": meta.get("sample"),
                                   "preset": ((meta.get("config") or {}).get("memory") or {}).get("name")})
                  for name, (run_dir, meta) in read_back.items()]
    for name, run_dir, about in described:
        rows[name] = read_rows(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        summaries[name] = {"run_id": run_dir.name, **about, **summarize(rows[name], metrics, profile)}
    result = {
        "command": command("research.perf.bench_reader", argv),
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.platform(),
        "common_overrides": common, "code": code, "reference": args.reference, "variants": summaries,
        "paired": compare(rows, args.reference, profile),
        "sources": {name: sources_of_difference(vrows, rows[args.reference])
                    for name, vrows in rows.items() if name != args.reference},
    }
    write_result(out, result, render(result, profile) + "\n" + render_sources(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
