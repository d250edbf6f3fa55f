"""Fixed-config evaluation, trusted side: select -> (answers from the untrusted half) -> score -> run folder.

The run folder ``runs/<run_id>/`` holds ``run.json`` and ``config.json`` (resolved),
``predictions.jsonl`` (one scored row per question: the answer, gold, scores and the
ids the scorer counted), ``metrics.json`` and ``table.txt``. Answers are produced by
``memsys.predict`` (the untrusted half) from a public view; see ``research.evaluation.two_half``
for how the two halves are run.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from benchmarks.config import EvalSetup
from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Benchmark
from benchmarks.metrics.locomo import aggregate_locomo
from benchmarks.metrics.memgallery import aggregate_memgallery
from benchmarks.metrics.retrieval import RetrievalRecord, aggregate_retrieval, budgeted_key, one_budget
from benchmarks.result import EvalResult
from benchmarks.scoring import TurnCosts, Usage, score_answers
from benchmarks.splits import select
from harness.atomic import atomic_write_json, atomic_write_text
from harness.errors import StoreError
from harness.paths import runs_dir
from harness.views import Answer

log = logging.getLogger(__name__)
RUN_FORMAT_VERSION = 1
PREDICTIONS = "predictions.jsonl"
#: the saved and printed table fits an 80-column terminal (every value whole)
TABLE_WIDTH = 80


class RunFolderError(StoreError):
    kind = "run_folder"


def new_run_id(setup: EvalSetup) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"eval-{stamp}-{setup.benchmark.name}-{setup.options.split}"


def aggregate(bench_name: str, rows: list[dict[str, Any]], with_reader: bool) -> dict[str, Any]:
    records = [RetrievalRecord(r["question_id"], r["category"], tuple(r["retrieved_ids"]),
                               tuple(r["evidence"]), int(r["context_tokens"])) for r in rows]
    metrics: dict[str, Any] = dict(aggregate_retrieval(records))
    # evidence inside the first B context tokens, B the scorer's budget the rows were cut at (recorded in each
    # row by benchmarks.scoring; rows written before it was recorded say nothing): the figure that compares
    # systems with different context sizes, e.g. full-context vs retrieval, without rewarding extra tokens
    budgets = [r["context_budget_tokens"] for r in rows if "context_budget_tokens" in r]
    budget = one_budget(budgets)
    if budgets:
        metrics["context_budget_tokens"] = budget
    with_ev = [r for r in rows if r["evidence"]]
    if with_ev:
        metrics["context_recall"] = sum(
            len(set(r["evidence"]) & set(r.get("context_ids", r["retrieved_ids"]))) / len(set(r["evidence"]))
            for r in with_ev) / len(with_ev)
        if budget is not None:
            metrics[budgeted_key("context_recall", budget)] = metrics["context_recall"]
    if with_reader:
        if bench_name == "locomo":
            metrics.update(aggregate_locomo([(r["category"], r["scores"]["f1"], r["scores"].get("f1_lenient")) for r in rows]))
        else:
            metrics.update(aggregate_memgallery([(r["category"], r["scores"]) for r in rows]))
        lat = [r["latency_s"] for r in rows if r.get("latency_s") is not None]
        metrics["seconds_per_question"] = sum(lat) / len(lat) if lat else 0.0
        metrics["prompt_tokens"] = sum(r.get("prompt_tokens", 0) for r in rows)
        metrics["completion_tokens"] = sum(r.get("completion_tokens", 0) for r in rows)
        metrics["cost_usd"] = sum(r.get("cost_usd", 0.0) for r in rows)
        metrics["answer_words_mean"] = (sum(len(r["prediction"].split()) for r in rows) / len(rows)) if rows else 0.0
    metrics["n_errors"] = sum(1 for r in rows if r.get("error"))
    return metrics


def selection(setup: EvalSetup) -> Benchmark:
    """The benchmark restricted to the requested split and sample (gold included: trusted side only)."""
    ev = setup.options
    return select(load_benchmark(setup.benchmark.name), ev.split, ev.sample, setup.benchmark, complement=ev.complement)


def prepare_run(setup: EvalSetup, bench: Benchmark, runs_root: Path | None = None, *,
                code: str | None = None) -> tuple[str, Path]:
    """The run id and its folder under ``runs_root`` (default ``runs/``): created, or checked when resuming.

    ``code`` names the evaluated memory system's source (a content hash). A resumed run keeps the answers
    already written, so answers made by other code would be scored as if one system gave them all.
    """
    run_id = setup.options.run_id or new_run_id(setup)
    run_dir = (runs_root or runs_dir()) / run_id
    _prepare_run_dir(run_dir, setup, bench, code)
    return run_id, run_dir


def finish_eval(setup: EvalSetup, bench: Benchmark, run_id: str, run_dir: Path, answers: Mapping[str, Answer],
                wall_s: float, usage: Usage | None = None) -> EvalResult:
    """Score validated answers against gold, write the run folder and return the result.

    The objective's name and the question count are the ones requested here, never read
    back from the evaluated code.
    """
    ev = setup.options
    with_reader = ev.reader == "llm"
    rows = score_answers(bench, answers, with_reader=with_reader, context_budget_tokens=ev.context_budget_tokens)
    atomic_write_text(run_dir / PREDICTIONS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    if with_reader and rows and all(r.get("error") for r in rows):
        # every reader call failed: that is a broken endpoint, not a score of zero
        from harness.errors import LLMServerError

        raise LLMServerError(f"all {len(rows)} reader calls failed; first: {rows[0]['error']}")
    metrics = aggregate(bench.name, rows, with_reader)
    if usage is not None and with_reader:  # the gateway's count, not the evaluated code's claim
        metrics["prompt_tokens"], metrics["completion_tokens"] = usage.prompt_tokens, usage.completion_tokens
        metrics["cost_usd"], metrics["reader_requests"] = usage.cost_usd, usage.requests
        metrics["reader_billed_tokens"], metrics["reader_cache_hits"] = usage.billed_tokens, usage.cache_hits
    metrics["unknown_ids"] = sum(r["unknown_ids"] for r in rows)
    metrics.update(system_label(bench, answers, ev.system))
    objective = setup.objective
    value = metrics.get(objective)
    if value is not None and (not isinstance(value, (int, float)) or math.isnan(value)):
        value = None
    if bench.name == "memgallery":  # say which path the images took
        metrics["image_mode"] = image_mode(bench)
    metrics["objective"] = objective
    metrics["objective_value"] = value
    metrics["wall_s"] = wall_s
    table = render_table(bench, setup, metrics, with_reader)
    atomic_write_json(run_dir / "metrics.json", metrics)
    atomic_write_text(run_dir / "table.txt", table + "\n")
    result = EvalResult(run_id, run_dir, metrics, objective, value, len(rows), metrics["n_errors"], wall_s, table=table)
    if ev.mlflow:
        from benchmarks.tracking import log_eval

        result.mlflow_run_id = log_eval(setup, bench, result)
    return result


def system_label(bench: Benchmark, answers: Mapping[str, Answer], system: str) -> dict[str, Any]:
    """What the run measured, named from the answers, not from the request: ``full_context`` only when
    every question's context held its whole conversation; otherwise the baseline was a window of the
    latest turns and is reported as ``recent_window``. Depth and tokens are of the context as given
    (known turn ids, recounted here, before the scorer's own budget cut)."""
    depth, tokens, asked, short = [], [], set(), set()
    for conv in bench.conversations:
        costs, turns = TurnCosts(conv), {t.id for s in conv.sessions for t in s.turns}
        for q in conv.questions:
            if q.id not in answers:
                continue
            given = {i for i in answers[q.id].context_ids if i in turns}
            depth.append(len(given))
            tokens.append(sum(costs.cost(i) for i in given))
            asked.add(conv.id)
            if not turns <= given:
                short.add(conv.id)
    n = max(1, len(depth))
    out: dict[str, Any] = {"system": system, "context_depth": sum(depth) / n, "context_tokens_given": sum(tokens) / n}
    if system != "memsys":
        out["whole_conversations"] = f"{len(asked - short)}/{len(asked)}"
        if short:
            out["system"] = "recent_window"
    return out


def image_mode(bench: Benchmark) -> str:
    """"images" when the benchmark's image files are on disk (fetched), else "captions"."""
    has = any(t.image_path for c in bench.conversations for s in c.sessions for t in s.turns)
    return "images" if has else "captions"


#: eval config keys that say where, how fast or how watched a run goes, never what it answers or
#: scores: a run resumed with other values of these is the same run (a new executor option in a
#: later version, more workers, another sandbox backend or time limit must not orphan its answers)
PLACEMENT_KEYS = frozenset({"research", "resume", "workers", "sandbox", "sandbox_timeout_s", "mlflow",
                            "mlflow_experiment", "parent_run_id"})


def answers_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's config its answers and scores depend on."""
    return {k: v for k, v in raw.items() if k not in PLACEMENT_KEYS}


def _prepare_run_dir(run_dir: Path, setup: EvalSetup, bench: Benchmark, code: str | None = None) -> None:
    meta_path = run_dir / "run.json"
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as exc:
            raise RunFolderError(f"{meta_path} is corrupt ({exc.msg}); choose another run_id") from exc
        if meta.get("format_version") != RUN_FORMAT_VERSION:
            raise RunFolderError(
                f"{meta_path}: run folder format {meta.get('format_version')} (this version writes {RUN_FORMAT_VERSION}); use a new run_id"
            )
        old, new = answers_config(meta.get("config") or {}), answers_config(setup.raw)
        if setup.options.resume and old != new:
            differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            raise RunFolderError(f"{run_dir} holds a run with a different config ({', '.join(differ)}); "
                                 "use a new run_id or resume=false")
        made_by = meta.get("code")  # absent in folders written before the code was recorded: not checkable
        if setup.options.resume and code is not None and made_by is not None and made_by != code:
            raise RunFolderError(f"{run_dir} holds answers made by other memsys code ({made_by[:12]}, this "
                                 f"checkout's is {code[:12]}); use a new run_id or resume=false")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(meta_path, {
        "format_version": RUN_FORMAT_VERSION, "kind": "eval", "created": datetime.now().isoformat(),
        "benchmark": bench.name, "split": bench.split, "sample": bench.sample,
        "split_version": bench.split_version, "dataset_files": bench.files, "config": setup.raw, "code": code,
    })
    atomic_write_json(run_dir / "config.json", setup.raw)


def _fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _metric_table(bench: Benchmark, setup: EvalSetup, system: str, with_reader: bool) -> Any:
    """The empty rich table: the answer-score column only when a reader answered."""
    from rich.table import Table

    what = f"memory={setup.memory.name}" if system == "memsys" else f"system={system}"
    t = Table(title=f"{bench.name} {bench.split}{' / ' + bench.sample if bench.sample else ''} - {what} reader={setup.options.reader}")
    t.add_column("category", overflow="fold")  # names wrap; numbers never do (80 columns, issue #48)
    t.add_column("n", justify="right", no_wrap=True)
    if with_reader:
        for name in (("F1",) if bench.name == "locomo" else ("F1", "EM", "B-1")):
            t.add_column(name, justify="right", no_wrap=True)
    for k in (5, 10, 20):
        t.add_column(f"R@{k}", justify="right", no_wrap=True)
    t.add_column("ctx tok", justify="right", no_wrap=True)
    return t


def _category_row(bench: Benchmark, m: dict[str, Any], c: str, name: str, with_reader: bool) -> list[str]:
    row = [f"{c} {name}".strip(), _fmt(m.get(f"n/{c}"))]
    if with_reader:
        if bench.name == "locomo":
            row.append(_fmt(m.get(f"f1_cat{c}")))
        else:
            row += [_fmt(m.get(f"{x}_{c}")) for x in ("f1", "em", "bleu1")]
    row += [_fmt(m.get(f"recall_at_{k}/{c}")) for k in (5, 10, 20)]
    row.append(_fmt(m.get(f"context_tokens/{c}")))
    return row


def _overall_row(bench: Benchmark, m: dict[str, Any], with_reader: bool) -> list[str]:
    """LoCoMo's overall F1 is categories 1-4: category 5 is scored apart (see benchmarks.metrics.locomo)."""
    total = ["overall", _fmt(m.get("n"))]
    if with_reader:
        keys = ("f1_cat1_4",) if bench.name == "locomo" else ("f1", "em", "bleu1")
        total += [_fmt(m.get(x)) for x in keys]
    total += [_fmt(m.get(f"recall_at_{k}")) for k in (5, 10, 20)] + [_fmt(m.get("context_tokens"))]
    return total


def _print_locomo_f1(console: Any, m: dict[str, Any]) -> None:
    """Both "All" numbers, and the lenient ones apart, so none is read as LoCoMo's own rule."""
    console.print(
        f"LoCoMo F1: categories 1-4 {_fmt(m.get('f1_cat1_4'))} | category 5 (adversarial, on the actual answer) "
        f"{_fmt(m.get('f1_cat5'))} | All honest {_fmt(m.get('all_honest'))} | All, paper protocol (cat 5 = 1.0) "
        f"{_fmt(m.get('all_paper_protocol'))}"
    )
    if m.get("f1_cat5_lenient") is not None:
        console.print(f"category 5 with the wider abstention phrases (not LoCoMo's rule, reported apart): "
                      f"{_fmt(m.get('f1_cat5_lenient'))} | All honest, lenient {_fmt(m.get('all_honest_lenient'))}")


def _print_run_notes(console: Any, setup: EvalSetup, m: dict[str, Any], system: str) -> None:
    """What changes how the numbers read: the image mode, a baseline's whole conversations, the objective."""
    if m.get("image_mode"):
        console.print(f"Mem-Gallery image mode: {m['image_mode']}"
                      + (" (image files not on disk: text systems get image id + caption; fetch them with "
                         "scripts/fetch_data.py memgallery --images)" if m["image_mode"] == "captions" else ""))
    if m.get("whole_conversations") is not None:
        asked = setup.options.system
        console.print(f"baseline {asked}: whole conversation given for {m['whole_conversations']} conversations"
                      + (f"; reported as {system} (the latest turns that fit)" if system != asked else "")
                      + f"; depth {_fmt(m.get('context_depth'))} turns, {_fmt(m.get('context_tokens_given'))} tokens per question")
    console.print(f"objective {m.get('objective')} = {_fmt(m.get('objective_value'))}  ({m.get('n_errors', 0)} reader errors)")


def render_table(bench: Benchmark, setup: EvalSetup, m: dict[str, Any], with_reader: bool) -> str:
    """Per-category table (rich), returned as text so it can be saved and logged."""
    from io import StringIO

    from rich.console import Console

    from benchmarks.datasets.schema import category_names

    names = category_names(bench)
    system = m.get("system", setup.options.system)
    t = _metric_table(bench, setup, system, with_reader)
    for c in sorted({k.split("/", 1)[1] for k in m if k.startswith("n/")}):
        t.add_row(*_category_row(bench, m, c, names.get(c, ""), with_reader))
    t.add_row(*_overall_row(bench, m, with_reader), style="bold")
    buf = StringIO()
    console = Console(file=buf, width=TABLE_WIDTH, force_terminal=False)
    console.print(t)
    if with_reader and bench.name == "locomo":
        _print_locomo_f1(console, m)
    _print_run_notes(console, setup, m, system)
    return buf.getvalue().rstrip()
