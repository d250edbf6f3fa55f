"""Fixed-config evaluation: ingest (cached) -> answer with a worker pool -> score -> run folder.

The run folder ``runs/<run_id>/`` holds ``config.json`` (resolved), ``predictions.jsonl``
(one line per answered question, appended and flushed as answers arrive, so a killed
evaluation resumes from what is there), ``metrics.json`` and ``table.txt``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmarks.config import EvalSetup
from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Benchmark, Conversation, Question
from benchmarks.metrics.locomo import aggregate_locomo, score_locomo
from benchmarks.metrics.memgallery import aggregate_memgallery, score_memgallery_question
from benchmarks.metrics.retrieval import RetrievalRecord, aggregate_retrieval
from benchmarks.splits import select
from benchmarks.stores import build_or_open_store, conversation_turns
from memsys.errors import LLMAuthError, LLMError, LLMResponseFormatError, MemsysError, StoreError
from memsys.paths import runs_dir
from memsys.store.atomic import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)
RUN_FORMAT_VERSION = 1
PREDICTIONS = "predictions.jsonl"


class RunFolderError(StoreError):
    kind = "run_folder"


@dataclass
class EvalResult:
    run_id: str
    run_dir: Path
    metrics: dict[str, Any]
    objective: str
    objective_value: float | None
    n_questions: int
    n_errors: int
    wall_s: float
    mlflow_run_id: str | None = None
    table: str = ""


def new_run_id(setup: EvalSetup) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"eval-{stamp}-{setup.benchmark.name}-{setup.eval.split}"


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """Answers already written; a line cut off by a kill is dropped (and re-answered)."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                done[rec["question_id"]] = rec
            except (json.JSONDecodeError, KeyError):
                log.warning("%s:%d is incomplete (killed run?); that question is answered again", path, n)
    return done


def _rewrite_clean(path: Path, done: dict[str, dict[str, Any]]) -> None:
    """Drop a partial last line so appends start on a fresh line."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done.values()))


def score_question(bench_name: str, prediction: str, q: Question) -> dict[str, float]:
    if bench_name == "locomo":
        return {"f1": score_locomo(prediction, q)}
    return score_memgallery_question(prediction, q)


def aggregate(bench_name: str, rows: list[dict[str, Any]], with_reader: bool) -> dict[str, Any]:
    records = [RetrievalRecord(r["question_id"], r["category"], tuple(r["retrieved_ids"]),
                               tuple(r["evidence"]), int(r["context_tokens"])) for r in rows]
    metrics: dict[str, Any] = dict(aggregate_retrieval(records))
    # evidence the reader actually sees (the whole context, whatever its length): the figure that
    # compares systems with different context sizes, e.g. full-context vs retrieval
    with_ev = [r for r in rows if r["evidence"]]
    if with_ev:
        metrics["context_recall"] = sum(
            len(set(r["evidence"]) & set(r.get("context_ids", r["retrieved_ids"]))) / len(set(r["evidence"]))
            for r in with_ev) / len(with_ev)
    if with_reader:
        if bench_name == "locomo":
            metrics.update(aggregate_locomo([(r["category"], r["scores"]["f1"]) for r in rows]))
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


class _FullContext:
    """Baseline: the latest turns of the conversation that fit the token budget."""

    def __init__(self, conv: Conversation, budget: int):
        from memsys.tokens import count_tokens
        from memsys.temporal import format_date

        lines, ids, total = [], [], 0
        for t in reversed(conversation_turns(conv)):
            when = f"[{format_date(t.timestamp)}] " if t.timestamp else ""
            line = f"{when}{t.speaker}: {t.text}"
            n = count_tokens(line)
            if total + n > budget:
                break
            lines.append(line)
            ids.append(t.id)
            total += n
        self.text = "\n".join(reversed(lines))
        self.ids = list(reversed(ids))
        self.tokens = total


def run_eval(setup: EvalSetup, *, llm: Any = None, progress: bool = True,
             on_question: Callable[[dict[str, Any]], None] | None = None) -> EvalResult:
    """Evaluate one config on one benchmark split. ``llm``: an open LLMClient when reader=llm."""
    ev = setup.eval
    started = time.perf_counter()
    bench = select(load_benchmark(setup.benchmark.name), ev.split, ev.sample, setup.benchmark)
    run_id = ev.run_id or new_run_id(setup)
    run_dir = runs_dir() / run_id
    pred_path = run_dir / PREDICTIONS
    _prepare_run_dir(run_dir, setup, bench)
    done = read_predictions(pred_path) if ev.resume else {}
    if done:
        _rewrite_clean(pred_path, done)
    elif pred_path.exists():
        pred_path.unlink()
    with_reader = ev.reader == "llm"
    if with_reader and llm is None:
        raise MemsysError("reader=llm needs an LLM client")
    questions = [(c, q) for c in bench.conversations for q in c.questions]
    todo = [(c, q) for c, q in questions if q.id not in done]
    lock = threading.Lock()
    rows = list(done.values())
    fatal: list[BaseException] = []

    bar = _progress(len(questions), len(done), progress)
    with open(pred_path, "a", encoding="utf-8") as out:
        for conv in bench.conversations:
            conv_todo = [q for c, q in todo if c.id == conv.id]
            if not conv_todo or fatal:
                continue
            if ev.system == "full_context":
                system = _FullContext(conv, ev.full_context_budget)
                mem = None
            else:
                mem, _ = build_or_open_store(bench, conv, setup.memory, llm=llm)
                system = None

            def answer(q: Question) -> dict[str, Any]:
                return _answer_one(setup, bench, q, mem, system, llm)

            with ThreadPoolExecutor(max_workers=ev.workers) as pool:
                futures = {pool.submit(answer, q): q for q in conv_todo}
                for fut in as_completed(futures):
                    try:
                        rec = fut.result()
                    except (LLMAuthError,) as exc:  # retrying other questions cannot help
                        fatal.append(exc)
                        for f in futures:
                            f.cancel()
                        break
                    with lock:
                        out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        out.flush()
                        rows.append(rec)
                    if on_question:
                        on_question(rec)
                    bar(1)
            if mem is not None:
                mem.close()
    bar(None)
    if fatal:
        raise fatal[0]

    if with_reader and rows and all(r.get("error") for r in rows):
        # every reader call failed: that is a broken endpoint, not a score of zero
        from memsys.errors import LLMServerError

        raise LLMServerError(f"all {len(rows)} reader calls failed; first: {rows[0]['error']}")
    metrics = aggregate(bench.name, rows, with_reader)
    objective = setup.objective
    value = metrics.get(objective)
    if value is not None and (not isinstance(value, (int, float)) or math.isnan(value)):
        value = None
    if bench.name == "memgallery":  # say which path the images took
        from benchmarks.stores import image_mode

        metrics["image_mode"] = image_mode(bench)
    metrics["objective"] = objective
    metrics["objective_value"] = value
    wall = time.perf_counter() - started
    metrics["wall_s"] = wall
    table = render_table(bench, setup, metrics, with_reader)
    atomic_write_json(run_dir / "metrics.json", metrics)
    atomic_write_text(run_dir / "table.txt", table + "\n")
    result = EvalResult(run_id, run_dir, metrics, objective, value, len(rows), metrics["n_errors"], wall, table=table)
    if ev.mlflow:
        from benchmarks.tracking import log_eval

        result.mlflow_run_id = log_eval(setup, bench, result)
    return result


def _answer_one(setup: EvalSetup, bench: Benchmark, q: Question, mem: Any, system: Any, llm: Any) -> dict[str, Any]:
    from memsys.answer.generate import answer_question, build_messages

    t0 = time.perf_counter()
    rec: dict[str, Any] = {
        "question_id": q.id, "conversation_id": q.conversation_id, "question": q.question,
        "gold": q.answer, "category": q.category, "evidence": list(q.evidence), "prediction": "",
        "error": None, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "cached": False,
    }
    if system is not None:  # full-context baseline
        rec["retrieved_ids"], rec["context_tokens"] = system.ids, system.tokens
        rec["context_ids"] = system.ids
        context = None
    else:
        r = mem.retrieve(q.question)
        context = r.context
        ranked: list[str] = []
        for c in r.candidates:
            for sid in c.mau.details.get("source_ids", [c.mau.source_id]):
                if sid and sid not in ranked:
                    ranked.append(sid)
        rec["retrieved_ids"] = ranked
        rec["context_ids"] = context.source_ids
        rec["context_tokens"] = context.total_tokens
        rec["levels"] = [i.level for i in context.items]
        rec["retrieval_ms"] = sum(v for k, v in r.timings_ms.items())
    if setup.eval.reader == "llm":
        try:
            if context is None:
                from memsys.retrieve.context import Context

                context = _text_context(q.question, system.text)
            ans = answer_question(llm, q.question, context, setup.memory.answer,
                                  question_image=q.question_image_path)
            rec.update(prediction=ans.text, prompt_tokens=ans.prompt_tokens,
                       completion_tokens=ans.completion_tokens, cost_usd=ans.cost_usd, cached=ans.cached)
        except LLMAuthError:
            raise
        except LLMError as exc:  # one bad reply is a wrong answer, not a failed run
            rec["error"] = f"{exc.kind}: {exc}"
        rec["scores"] = score_question(bench.name, rec["prediction"], q)
    rec["latency_s"] = time.perf_counter() - t0
    return rec


def _text_context(question: str, text: str):
    """Wrap raw text (full-context baseline) as a Context the answer prompt can render."""
    from memsys.retrieve.context import Context

    class _Raw(Context):
        def render(self, include_metadata: bool = True, include_graph: bool = True) -> str:
            return text

    return _Raw(query=question, items=[], budget_tokens=0)


def _prepare_run_dir(run_dir: Path, setup: EvalSetup, bench: Benchmark) -> None:
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
        if meta.get("config") != setup.raw and setup.eval.resume:
            raise RunFolderError(f"{run_dir} holds a run with a different config; use a new run_id or resume=false")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(meta_path, {
        "format_version": RUN_FORMAT_VERSION, "kind": "eval", "created": datetime.now().isoformat(),
        "benchmark": bench.name, "split": bench.split, "sample": bench.sample,
        "split_version": bench.split_version, "dataset_files": bench.files, "config": setup.raw,
    })
    atomic_write_json(run_dir / "config.json", setup.raw)


def _progress(total: int, done: int, enabled: bool) -> Callable[[int | None], None]:
    if not enabled:
        return lambda n: None
    from tqdm import tqdm

    bar = tqdm(total=total, initial=done, unit="q", desc="eval")

    def step(n: int | None) -> None:
        if n is None:
            bar.close()
        else:
            bar.update(n)

    return step


def render_table(bench: Benchmark, setup: EvalSetup, m: dict[str, Any], with_reader: bool) -> str:
    """Per-category table (rich), returned as text so it can be saved and logged."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from benchmarks.datasets.schema import category_names

    names = category_names(bench)
    t = Table(title=f"{bench.name} {bench.split}{' / ' + bench.sample if bench.sample else ''} - memory={setup.memory.name} reader={setup.eval.reader}")
    t.add_column("category")
    t.add_column("n", justify="right")
    main = "f1"
    if with_reader:
        t.add_column("F1" if bench.name == "locomo" else "F1 / EM / BLEU-1", justify="right")
    for k in (5, 10, 20):
        t.add_column(f"R@{k}", justify="right")
    t.add_column("ctx tok", justify="right")
    cats = sorted({k.split("/", 1)[1] for k in m if k.startswith("n/")})
    def fmt(v: Any) -> str:
        return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    for c in cats:
        row = [f"{c} {names.get(c, '')}".strip(), fmt(m.get(f"n/{c}"))]
        if with_reader:
            if bench.name == "locomo":
                row.append(fmt(m.get(f"f1_cat{c}")))
            else:
                row.append(" / ".join(fmt(m.get(f"{x}_{c}")) for x in ("f1", "em", "bleu1")))
        row += [fmt(m.get(f"recall_at_{k}/{c}")) for k in (5, 10, 20)]
        row.append(fmt(m.get(f"context_tokens/{c}")))
        t.add_row(*row)
    total = ["overall", fmt(m.get("n"))]
    if with_reader:
        total.append(fmt(m.get("f1_cat1_4") if bench.name == "locomo" else " / ".join(fmt(m.get(x)) for x in ("f1", "em", "bleu1"))))
    total += [fmt(m.get(f"recall_at_{k}")) for k in (5, 10, 20)] + [fmt(m.get("context_tokens"))]
    t.add_row(*total, style="bold")
    buf = StringIO()
    console = Console(file=buf, width=120, force_terminal=False)
    console.print(t)
    if with_reader and bench.name == "locomo":
        console.print(
            f"LoCoMo F1: categories 1-4 {fmt(m.get('f1_cat1_4'))} | category 5 (adversarial, on the actual answer) "
            f"{fmt(m.get('f1_cat5'))} | All honest {fmt(m.get('all_honest'))} | All, paper protocol (cat 5 = 1.0) "
            f"{fmt(m.get('all_paper_protocol'))}"
        )
    if m.get("image_mode"):
        console.print(f"Mem-Gallery image mode: {m['image_mode']}"
                      + (" (image files not on disk: text systems get image id + caption; fetch them with "
                         "scripts/fetch_data.py memgallery --images)" if m["image_mode"] == "captions" else ""))
    console.print(f"objective {m.get('objective')} = {fmt(m.get('objective_value'))}  ({m.get('n_errors', 0)} reader errors)")
    return buf.getvalue().rstrip()
