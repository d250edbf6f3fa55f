"""``memsys eval`` over a grid: Hydra-style sweeps (``memory=omni,naive_rag,bm25_only``) run on the executor.

Every combination is one evaluation through the same two halves as a single ``memsys eval``: the
untrusted half goes to the executor (all of them at once with ``research.executor=ray``), and each
answer set is scored here as it comes back. The result is one DataFrame, one row per config
(what was swept, the objective overall and per category, tokens, seconds, the node), printed as
one table and written to runs/<sweep-id>/comparison.csv; MLflow runs share one parent.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import shutil
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from harness.errors import ConfigError
from research.evaluation.two_half import EvalOutcome, eval_wall_timeout

log = logging.getLogger(__name__)

COMPARISON_CSV = "comparison.csv"
SWEEP_JSON = "sweep.json"


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """The cartesian product of every sweep (``key=a,b``) in Hydra's override grammar, in the order given."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(f"bad override: {' '.join(str(exc).split())[:300]}") from exc
    axes = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
            else [o.input_line] for o in parsed]
    return [list(combo) for combo in itertools.product(*axes)]


def swept_keys(overrides: Sequence[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [o.get_key_element().lstrip("+~") for o in OverridesParser.create().parse_overrides(list(overrides))
            if o.is_sweep_override()]


@dataclass
class SweepRun:
    """One config of a sweep and how its evaluation ended."""

    overrides: list[str]
    run_id: str
    outcome: EvalOutcome | None = None


#: per category when the objective has no per-category figure (reader=none: context_recall)
FALLBACK_CATEGORY_METRIC = "recall_at_10"


def category_metrics(metrics: dict[str, Any], objective: str) -> dict[str, Any]:
    """The per-category figures of one evaluation (research.journal.taxonomy.is_category_key), else recall@10 per category."""
    from research.journal.taxonomy import is_category_key, number

    keys = [k for k in metrics if is_category_key(k, objective)] or \
        [k for k in metrics if k.startswith(FALLBACK_CATEGORY_METRIC + "/")]
    natural = lambda k: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)]  # noqa: E731
    return {k: number(metrics[k]) for k in sorted(keys, key=natural)}


def comparison_frame(runs: Sequence[SweepRun], keys: Sequence[str]) -> pd.DataFrame:
    """One row per config: the swept values, the objective overall and per category, tokens, seconds, node."""
    from research.evaluation.judging import judge_columns

    rows = []
    for r in runs:
        chosen = dict(o.lstrip("+~").split("=", 1) for o in r.overrides)
        row: dict[str, Any] = {k: chosen.get(k) for k in keys}
        out = r.outcome
        res = (out.result or {}) if out is not None else {}
        metrics, objective = res.get("metrics") or {}, res.get("objective") or ""
        row["objective"] = objective
        row["value"] = res.get("objective_value")
        row |= category_metrics(metrics, objective)
        row |= judge_columns(metrics)  # J beside F1, with the judge's false-accept rates and the length ratio
        usage = out.usage if out is not None else None
        row["tokens"] = (usage.prompt_tokens + usage.completion_tokens) if usage is not None else 0
        row["wall_s"] = res.get("wall_s")
        row["node"] = ((out.placement.get("executor_node") if out is not None else None) or "")[:8] or None
        row["status"] = "ok" if out is not None and out.ok else (out.failure.cls.value if out and out.failure else "not run")
        row["run_id"] = r.run_id
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(v: Any) -> str:
    """A frame value as the table shows it: numbers to 4 places, missing as a dash."""
    return "—" if v is None or (isinstance(v, float) and v != v) else f"{v:.4f}" if isinstance(v, float) else str(v)


def config_label(i: int) -> str:
    """The short name of the i-th config (0-based) in a transposed table: A .. Z, AA, AB, ..."""
    label = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        label = chr(ord("A") + r) + label
    return label


def _natural_width(table: Any) -> int:
    """Columns ``table`` takes when nothing is squeezed (rich's own measure, on an unbounded console)."""
    import io

    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000, file=io.StringIO())
    return Measurement.get(console, console.options, table).maximum


def _value_column(table: Any, header: str, values: Sequence[str], *, whole: bool = True) -> None:
    """A right-aligned column; ``whole``: never narrower than its longest value nor wrapped (a number read
    across two lines is misread), else (a console narrower than one config) folded, every character kept."""
    table.add_column(header, justify="right", no_wrap=whole, overflow="fold",
                     min_width=max((len(v) for v in values), default=1) if whole else None)


def _wide_table(df: pd.DataFrame, cells: list[list[str]], title: str) -> Any:
    """One row per config, one column per column of the frame (as ``memsys eval`` printed it before)."""
    from rich.table import Table

    table = Table(title=title)
    numeric = {c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])}
    for c in df.columns:
        table.add_column(str(c), justify="right" if c in numeric else "left")
    for row in cells:
        table.add_row(*row)
    return table


def _transposed_table(metrics: Sequence[str], columns: dict[str, list[str]], title: str, *, whole: bool = True) -> Any:
    """One row per metric, one column per config (label -> its values, in the order of ``metrics``)."""
    from rich.table import Table

    table = Table(title=title or None)
    table.add_column("metric", justify="left", overflow="fold")
    for label, values in columns.items():
        _value_column(table, label, values, whole=whole)
    for n, metric in enumerate(metrics):
        table.add_row(metric, *(values[n] for values in columns.values()))
    return table


def rich_table(df: pd.DataFrame, title: str = "", *, width: int | None = None, keys: Sequence[str] = ()) -> Any:
    """A DataFrame as rich renderables at most ``width`` columns wide (the console's), no value ever cut.

    Numbers right-aligned to 4 places, missing values as a dash. One row per config, as wide as the frame, when
    that fits (or ``width`` is None); else transposed: one row per column of the frame, one column per config
    named A, B, ... with a legend below it ("A = memory=omni", from the ``keys`` columns, the swept ones, which
    leave the rows); else that table in blocks of as many configs as fit, the metric names repeated in each. A
    value column is never narrower than its longest value, nor wrapped, so no number reads "0.8…"; only a
    single config wider than the console folds its values (every digit kept) rather than cutting them.
    """
    from rich.console import Group
    from rich.text import Text

    cells = [[_cell(v) for v in row] for row in df.itertuples(index=False)]
    wide = _wide_table(df, cells, title)
    if width is None or _natural_width(wide) <= width:
        return wide
    keys = [k for k in keys if k in df.columns]
    metrics = [str(c) for c in df.columns if c not in keys]
    at = [n for n, c in enumerate(df.columns) if c not in keys]
    columns = {config_label(i): [row[n] for n in at] for i, row in enumerate(cells)}
    legend = [Text(f"{label} = " + (" ".join(f"{k}={_cell(df[k].iloc[i])}" for k in keys) or f"config {i + 1}"),
                   overflow="fold") for i, label in enumerate(columns)]
    blocks, block = [], {}
    for label, values in columns.items():
        if block and _natural_width(_transposed_table(metrics, block | {label: values}, "")) > width:
            blocks.append(block)
            block = {}
        block[label] = values
    blocks.append(block)
    tables = [_transposed_table(metrics, b, title if n == 0 else "",
                                whole=_natural_width(_transposed_table(metrics, b, "")) <= width)
              for n, b in enumerate(blocks)]
    return Group(*tables, *legend)


def run_sweep(overrides: Sequence[str], *, sweep_id: str | None = None,
              on_done: Callable[[SweepRun], None] | None = None) -> tuple[pd.DataFrame, Path]:
    """Evaluate every combination on the executor of ``research.executor``; returns the comparison and
    the sweep folder (runs/<sweep-id>/ with comparison.csv and sweep.json)."""
    from benchmarks.config import load_eval_setup
    from harness.atomic import atomic_write_json, atomic_write_text
    from harness.paths import runs_dir

    combos = expand_sweep(overrides)
    keys = swept_keys(overrides)
    sweep_id = sweep_id or f"sweep-{datetime.now():%Y%m%d-%H%M%S}"
    setups = [load_eval_setup(c) for c in combos]  # every config fails at compose time, before anything runs
    runs = [SweepRun(c, f"{sweep_id}-{i:02d}") for i, c in enumerate(combos)]
    parent = _mlflow_parent(setups[0], sweep_id, len(runs)) if setups[0].options.mlflow else None
    for s, r in zip(setups, runs):
        s.options.run_id, s.options.parent_run_id = r.run_id, parent
    _evaluate_all(setups, runs, on_done)
    frame = comparison_frame(runs, keys)
    folder = runs_dir() / sweep_id
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / COMPARISON_CSV, frame.to_csv(index=False))
    atomic_write_json(folder / SWEEP_JSON, {"sweep_id": sweep_id, "overrides": list(overrides),
                                            "configs": [_run_summary(r) for r in runs],
                                            "mlflow_parent_run_id": parent})
    if parent:
        _mlflow_finish(parent, folder / COMPARISON_CSV)
    return frame, folder


def _run_summary(r: SweepRun) -> dict[str, Any]:
    out = r.outcome
    return {"overrides": r.overrides, "run_id": r.run_id, "ok": bool(out and out.ok),
            "objective_value": out.objective_value if out else None,
            "failure": out.failure.to_dict() if out and out.failure else None,
            "placement": out.placement if out else {}}


def _evaluate_all(setups: list[Any], runs: list[SweepRun], on_done: Callable[[SweepRun], None] | None) -> None:
    """Prepare every config here, run the untrusted halves on the executor, score each as it returns."""
    from benchmarks.runner import selection
    from harness.paths import REPO_ROOT, cache_dir, runs_dir
    from research.config import ExecutionConfig
    from research.evaluation.caches import SharedCache
    from research.evaluation.fixed import memory_choice
    from research.evaluation.two_half import EvalJob, begin_sandboxed, end_sandboxed, evaluate
    from research.execution.executor import make_executor
    from sandbox import make_sandbox

    execution = _execution(setups[0], ExecutionConfig)
    with ExitStack() as stack:
        executor = make_executor(execution)
        stack.callback(executor.close)
        pending, order, gateways = [], [], {}
        for i, (setup, run) in enumerate(zip(setups, runs)):
            preset, mem = memory_choice(run.overrides, setup)
            bench = selection(setup)
            job = EvalJob(setup, Path(REPO_ROOT), preset, runs_dir() / run.run_id / "untrusted", memory_overrides=mem,
                          wall_timeout_s=eval_wall_timeout(setup.options, sum(len(c.questions) for c in bench.conversations)))
            if setup.options.sandbox == "inprocess":
                if execution.executor != "local":
                    raise ConfigError("sandbox=inprocess runs in this process: research.executor=ray needs a sandbox "
                                      "(sandbox=auto | docker | bwrap | process)")
                run.outcome = evaluate(job, None)
                on_done and on_done(run)
                continue
            gateway, reader_llm = _gateway(stack, setup, gateways)
            job.reader_llm = reader_llm
            shared = SharedCache.for_split(cache_dir(), setup.options.split)
            pending.append(begin_sandboxed(job, bench, make_sandbox(setup.options.sandbox), gateway=gateway,
                                           shared=shared, label=" ".join(run.overrides)))
            order.append(i)
        for j, ran in executor.run_all([p.task for p in pending]):
            run = runs[order[j]]
            run.outcome = end_sandboxed(pending[j], ran)
            on_done and on_done(run)


def _execution(setup: Any, schema: type) -> Any:
    from harness.config import validate

    research = setup.raw.get("research") or {}
    return validate(schema, research, where="research config")


def _gateway(stack: ExitStack, setup: Any, opened: dict[str, tuple[Any, dict[str, Any]]]) -> tuple[Any, dict[str, Any]]:
    """One reader endpoint and host-side gateway per distinct LLM config of the sweep (none for reader=none)."""
    if setup.options.reader != "llm":
        return None, {}
    from benchmarks.config import reader_prompt_cap
    from memsys.llm.client import open_llm
    from research.evaluation.reader_link import open_gateway, reader_config_for_sandbox, short_socket_dir

    cap = reader_prompt_cap(setup.options)
    key = json.dumps([asdict(setup.llm), cap], sort_keys=True, default=str)  # one gateway per endpoint and budget
    if key not in opened:
        llm = stack.enter_context(open_llm(setup.llm))
        sock = short_socket_dir()
        stack.callback(shutil.rmtree, sock, True)
        opened[key] = (stack.enter_context(open_gateway(setup.llm, llm, sock, prompt_cap=cap)),
                       reader_config_for_sandbox(setup.llm))
    return opened[key]


def _mlflow_parent(setup: Any, sweep_id: str, n: int) -> str | None:
    """The parent run the sweep's evaluations nest under; a warning (no parent) when MLflow fails."""
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import setup_mlflow, tracking_uri

        exp = setup_mlflow(setup.options.mlflow_experiment)
        return MlflowClient(tracking_uri()).create_run(exp, run_name=sweep_id, tags={"kind": "sweep", "configs": str(n)}).info.run_id
    except Exception as exc:  # noqa: BLE001 - tracking never stops an evaluation
        log.warning("MLflow parent run of the sweep not created: %s", exc)
        return None


def _mlflow_finish(parent: str, csv: Path) -> None:
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import tracking_uri

        client = MlflowClient(tracking_uri())
        client.log_artifact(parent, str(csv))
        client.set_terminated(parent, status="FINISHED")
    except Exception as exc:  # noqa: BLE001
        log.warning("MLflow sweep parent not finished: %s", exc)
