"""HTML reports of optimization runs: figures to look at first, the tables behind them after.

``write_report(run_dir)`` reads runs/<run-id>/ (trajectory.jsonl, state.json, replay.json) and writes
report.html (self-contained: inline CSS, PNGs as data URIs) plus the PNGs into run_dir/report/.
``compare_dir`` puts a second run beside it. Tables come from research/taxonomy.py (pure); this
module only draws and renders. A report never fails because a field, a file or MLflow is missing:
what it could not read is listed as a warning at the top of the page.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from string import Template
from typing import Any, Callable, Sequence

import pandas as pd

from research.frames import compare_frame, node_frame, taxonomy_frame
from research.report_figures import (
    DECISION_STYLE,
    plot_categories,
    plot_compare,
    plot_cost_time,
    plot_replay,
    plot_trajectory,
)
from research.taxonomy import (
    DISCOVERY_ABBREV,
    RunSummary,
    cost_time_table,
    delta_of,
    failure_table,
    number,
    objective_name,
    paired_test_text,
    rejection_kind,
    rejection_table,
    run_summary,
    start_value,
)
from research.trajectory import TRAJECTORY_FILE, ExperimentRecord, TrajectoryError, read_trajectory

log = logging.getLogger(__name__)

REPORT_DIR = "report"
REPORT_FILE = "report.html"
STATE_FILE = "state.json"
REPLAY_FILE = "replay.json"
CONFIG_FILE = "config.json"  # written by research/loop.py: {"config": <composed eval config>, "overrides": [...]}
TEMPLATE = Path(__file__).with_name("report_template.html")
MAX_DIFF_LINES = 160
MAX_DIFF_CHARS = 8000
MAX_TEXT_CHARS = 160  # hypotheses and messages in table cells


# --- loading -------------------------------------------------------------------
@dataclass
class RunData:
    run_dir: Path
    records: list[ExperimentRecord]
    warnings: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)  # config.json's "config" (the composed eval config)

    @property
    def run_id(self) -> str:
        return str(self.state.get("run_id") or next((r.run_id for r in self.records if r.run_id), self.run_dir.name))


def _read_json(path: Path, warnings: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        warnings.append(f"{path}: unreadable ({exc}); ignored")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{path}: not a JSON object; ignored")
        return None
    return data


def _read_records_leniently(run_dir: Path, warnings: list[str]) -> list[ExperimentRecord]:
    """Every line that parses; the others become warnings (read_trajectory stops at the first bad one)."""
    records = []
    lines = (run_dir / TRAJECTORY_FILE).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(ExperimentRecord.from_dict(json.loads(line), where=f"{run_dir / TRAJECTORY_FILE}:{n}"))
        except (json.JSONDecodeError, TrajectoryError) as exc:
            warnings.append(f"{run_dir / TRAJECTORY_FILE}:{n}: skipped ({exc})")
    return records


def _fill_nulls(rec: ExperimentRecord) -> None:
    """Explicit nulls in optional list / dict / text fields become empty values (hand-edited or foreign files)."""
    for name, f in ExperimentRecord.__dataclass_fields__.items():
        if getattr(rec, name) is None and f.default_factory in (list, dict):
            setattr(rec, name, f.default_factory())
        elif getattr(rec, name) is None and f.default == "":
            setattr(rec, name, "")


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    warnings: list[str] = []
    state = _read_json(run_dir / STATE_FILE, warnings) or {}
    replay = _read_json(run_dir / REPLAY_FILE, warnings)
    config = (_read_json(run_dir / CONFIG_FILE, warnings) or {}).get("config")
    config = config if isinstance(config, dict) else {}
    if not (run_dir / TRAJECTORY_FILE).exists():
        if replay is None and not state:
            raise TrajectoryError(f"no trajectory at {run_dir / TRAJECTORY_FILE}")
        warnings.append(f"no {TRAJECTORY_FILE} in {run_dir} yet")
        return RunData(run_dir, [], warnings, state, replay, config)
    try:
        records, read_warnings = read_trajectory(run_dir)
        warnings.extend(read_warnings)
    except TrajectoryError:
        records = _read_records_leniently(run_dir, warnings)
    for rec in records:
        _fill_nulls(rec)
        if number(rec.objective_value) is None and rec.decision not in ("failed", "rejected"):
            warnings.append(f"{rec.experiment_id}: decision {rec.decision!r} without an objective value")
    return RunData(run_dir, records, warnings, state, replay, config)


# --- replay --------------------------------------------------------------------
@dataclass
class ReplayStep:
    step: int
    experiment_id: str
    recorded: float | None
    replayed: float | None
    decision: str
    replayed_decision: str
    holds: bool | None
    status: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.recorded is None or self.replayed is None else self.replayed - self.recorded


def _first(d: dict[str, Any], *keys: str) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def replay_steps(run: RunData) -> list[ReplayStep]:
    """replay.json's steps (research/replay.py); what a step leaves out is taken from the original run
    when it sits next to the replay, and from the replay's own trajectory."""
    replay = run.replay or {}
    raw = replay.get("steps") or replay.get("per_step") or []
    original: list[ExperimentRecord] = []
    orig_dir = run.run_dir.parent / str(replay.get("original_run_id", ""))
    if replay.get("original_run_id") and (orig_dir / TRAJECTORY_FILE).exists():
        try:
            original = read_trajectory(orig_dir)[0]
        except TrajectoryError as exc:
            run.warnings.append(f"original run {orig_dir}: {exc}")
    by_id = {r.experiment_id: r for r in [*run.records, *original]}  # the original's wins
    by_index = {r.index: r for r in original}
    steps = []
    for n, s in enumerate(x for x in raw if isinstance(x, dict)):
        idx = _first(s, "step", "index")
        known = by_id.get(str(s.get("experiment_id")))
        idx = idx if isinstance(idx, int) else known.index if known else n
        orig = by_index.get(idx) if original else None
        recorded = number(_first(s, "recorded", "recorded_value", "original"))
        if recorded is None and orig is not None:
            recorded = number(orig.objective_value)
        decision = str(_first(s, "decision", "recorded_decision") or (orig.decision if orig else ""))
        replayed_decision = str(_first(s, "replayed_decision", "replay_decision") or "")
        holds = _first(s, "decision_holds", "still_holds", "holds")
        if not isinstance(holds, bool):
            holds = (replayed_decision == decision) if replayed_decision and decision else None
        exp_id = str(_first(s, "experiment_id") or (orig.experiment_id if orig else f"step-{idx}"))
        steps.append(ReplayStep(idx, exp_id, recorded, number(_first(s, "replayed", "replayed_value", "replay")),
                                decision, replayed_decision, holds, str(s.get("status") or "")))
    return steps


# --- HTML pieces ---------------------------------------------------------------
def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def fmt(v: Any, digits: int = 4) -> str:
    v = number(v)
    return "—" if v is None else f"{v:.{digits}f}"


def fmt_delta(v: Any, digits: int = 4) -> str:
    v = number(v)
    if v is None:
        return "—"
    cls = "pos" if v > 0 else "neg" if v < 0 else "muted"
    return f'<span class="{cls}">{v:+.{digits}f}</span>'


def fmt_pct(v: Any) -> str:
    v = number(v)
    return "—" if v is None else f"{v * 100:+.1f}%"


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds or 0))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def _badge(decision: str) -> str:
    known = decision in DECISION_STYLE
    return f'<span class="badge b-{_e(decision) if known else "other"}">{_e(decision or "?")}</span>'


def _type_label(discovery_type: str | None) -> str:
    if not discovery_type:
        return '<span class="muted">—</span>'
    abbrev = DISCOVERY_ABBREV.get(discovery_type)
    name = _e(discovery_type.replace("_", " "))
    return f"<b>{abbrev}</b> {name}" if abbrev else name


def _types_cell(rec: ExperimentRecord) -> str:
    """The classified type; the researcher's own label under it when the two differ."""
    cell = _type_label(rec.discovery_type)
    if rec.proposed_type and rec.proposed_type != rec.discovery_type:
        cell += f' <br><small class="muted">proposed: {_type_label(rec.proposed_type)}</small>'
    return cell


def _decision_cell(rec: ExperimentRecord) -> str:
    kind = rejection_kind(rec)
    return _badge(rec.decision) + (f' <small class="muted">{_e(kind)}</small>' if kind else "")


def _delta_cell(rec: ExperimentRecord) -> str:
    test = paired_test_text(rec.test)
    return fmt_delta(delta_of(rec)) + (f' <br><small class="muted">{_e(test)}</small>' if test else "")


def _value_cell(rec: ExperimentRecord) -> str:
    """The value, marked when the futility probe stopped the candidate (an estimate from its questions)."""
    p = rec.probe or {}
    if not p.get("stopped"):
        return fmt(rec.objective_value)
    why = (f"stopped after the probe: {p.get('questions')} of {p.get('of')} questions ({p.get('sample')}); "
           "the best's value plus the paired delta there")
    return f'<span title="{_e(why)}">~{fmt(rec.objective_value)}</span> <small class="muted">probe</small>'


def _hypothesis_cell(rec: ExperimentRecord) -> str:
    lesson = f' <br><small class="muted">lesson: {_e(_cut(rec.lesson))}</small>' if rec.lesson else ""
    return _e(_cut(rec.hypothesis) or "—") + lesson


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
          total: Sequence[str] | None = None, cls: str = "") -> str:
    """Cells are HTML already escaped by the caller; ``numeric`` columns are right-aligned."""
    def row(cells: Sequence[str], tag: str = "td") -> str:
        return "".join(f'<{tag}{" class=n" if i in numeric else ""}>{c}</{tag}>' for i, c in enumerate(cells))
    body = "".join(f"<tr>{row(r)}</tr>" for r in rows)
    if total is not None:
        body += f'<tr class="total">{row(total)}</tr>'
    return (f'<table class="{cls}"><thead><tr>{row([_e(h) for h in headers], "th")}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def img(path: Path, alt: str, caption: str = "") -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f'<figure><img src="data:image/png;base64,{data}" alt="{_e(alt)}">{cap}</figure>'


def _card(key: str, value: str, cls: str = "") -> str:
    return f'<div class="card"><div class="k">{_e(key)}</div><div class="v {cls}">{value}</div></div>'


def _lookup(run: RunData, key: str) -> str:
    """benchmark / split from state.json, the run's config.json, or the first record's metrics."""
    sources = [run.state, run.config, run.config.get("eval")] + [r.metrics for r in run.records[:1]]
    for src in sources:
        if isinstance(src, dict) and src.get(key) not in (None, ""):
            value = src[key]
            return str(value.get("name", value)) if isinstance(value, dict) else str(value)
    return "?"


def header_html(run: RunData, s: RunSummary) -> str:
    base = run.state.get("base_commit") or next((r.parent_commit for r in run.records if r.parent_commit), "?")
    d = s.decisions
    up = "up" if (s.improvement or 0) > 0 else "down" if (s.improvement or 0) < 0 else ""
    cards = "".join([
        _card("start", fmt(s.start)),
        _card("best", fmt(s.best)),
        _card("improvement", "—" if s.improvement is None else
              f"{fmt_delta(s.improvement)} <small>{fmt_pct(s.improvement_rel)}</small>", up),
        _card("experiments", f"{s.experiments} <small>({d.get('proceed', 0)} proceed)</small>"),
        _card("time", fmt_duration(s.total_s)),
        _card("cost", f"${s.cost_usd:.2f}"),
        _card("tokens", f"{s.tokens:,}"),
    ])
    meta = [("run", run.run_id), ("benchmark / split", f"{_lookup(run, 'benchmark')} / {_lookup(run, 'split')}"),
            ("objective", s.objective or "?"), ("base commit", base), ("best experiment", s.best_experiment or "—"),
            ("decisions", ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "—")]
    if s.rejections:
        meta.append(("rejected before evaluation", ", ".join(f"{k} {v}" for k, v in s.rejections.items())))
    for key in ("status", "stop_reason"):
        if run.state.get(key):
            meta.append((key.replace("_", " "), run.state[key]))
    if run.replay:
        meta.append(("replay of", run.replay.get("original_run_id", "?")))
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta)
    return (f"<h1>Run {_e(run.run_id)}</h1><p class=sub>{_e(run.run_dir)}</p>"
            f'<div class="cards">{cards}</div><dl class="meta">{dl}</dl>')


def confirmation_html(state: dict[str, Any]) -> str:
    """Dev and held-out test side by side (research.confirm); the researcher never saw the test figures."""
    c = state.get("confirmation") or {}
    if not c:
        return ("<h2>Held-out confirmation</h2><p>Not run (the run has not finished, or "
                "<code>research.confirm.enabled=false</code>): <code>memsys confirm &lt;run&gt;</code></p>")
    runs = c.get("runs", {})

    def failed(label: str) -> str:
        r = runs.get(label, {})
        return "" if r.get("ok", True) else f" <small>({_e(r.get('failure', 'failed'))})</small>"

    rows = [[_e(split), fmt(c[key].get("baseline")), fmt(c[key].get("best")),
             fmt_delta(None if c[key].get("baseline") is None or c[key].get("best") is None
                       else c[key]["best"] - c[key]["baseline"])]
            for split, key in (("dev (what the loop saw)", "dev"),
                               (f"{c.get('split', 'test')} / {c.get('sample') or 'full'} (held out)", "test"))]
    rows[1][1] += failed("baseline")
    rows[1][2] += failed("best")
    return (f"<h2>Held-out confirmation</h2><p>{_e(c.get('objective', ''))}: baseline and best commit, dev as the "
            f"loop measured it and the held-out split scored once at the end ({_e(c.get('finished', ''))}).</p>"
            + table(["split", "baseline", "best", "delta"], rows, numeric=(1, 2, 3)))


def warnings_html(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
    return f'<div class="warn"><b>Warnings</b> ({len(warnings)})<ul>{items}</ul></div>'


def frame_html(df: pd.DataFrame, formats: dict[str, Callable[[Any], str]] | None = None, *,
               total: dict[str, Any] | None = None, numeric: Sequence[int] | None = None, cls: str = "") -> str:
    """The report's one DataFrame renderer: each cell through its column's formatter (escaped text when a
    column has none), the optional total row through the same formatters; numeric columns right-aligned."""
    formats = formats or {}
    cols = [str(c) for c in df.columns]
    cell = lambda col, v: formats[col](v) if col in formats else _e("—" if v is None else v)  # noqa: E731
    rows = [[cell(c, v) for c, v in zip(cols, row)] for row in df.itertuples(index=False)]
    if numeric is None:
        numeric = [i for i, c in enumerate(df.columns) if pd.api.types.is_numeric_dtype(df[c])]
    footer = None if total is None else [cell(c, total.get(c)) for c in cols]
    return table(cols, rows, numeric=numeric, total=footer, cls=cls)


_TAXONOMY_FORMATS: dict[str, Callable[[Any], str]] = {
    "discovery type": _type_label, "experiments": str, "accepted": str, "cumulative Δ": fmt_delta,
    "cumulative Δ (% of start)": fmt_pct, "mean Δ": fmt_delta}


def taxonomy_html(records: Sequence[ExperimentRecord]) -> str:
    tax = taxonomy_frame(records)
    accepted = tax["accepted"] > 0
    shown = pd.DataFrame({
        "discovery type": tax["discovery_type"], "experiments": tax["count"], "accepted": tax["accepted"],
        "cumulative Δ": tax["cumulative_delta"].where(accepted),
        "cumulative Δ (% of start)": tax["cumulative_delta_rel"].where(accepted), "mean Δ": tax["mean_delta"]})
    n, acc, cum, start = int(tax["count"].sum()), int(tax["accepted"].sum()), tax["cumulative_delta"].sum(), start_value(records)
    total = {"discovery type": "all", "experiments": n, "accepted": acc, "cumulative Δ": cum if acc else None,
             "cumulative Δ (% of start)": cum / abs(start) if acc and start else None,
             "mean Δ": cum / acc if acc else None}
    return frame_html(shown, _TAXONOMY_FORMATS, total=total, cls="taxonomy")


#: how compare_frame's rows are shown
_SUMMARY_FORMATS: dict[str, Callable[[Any], str]] = {
    "objective": _e, "experiments": str, "proceeds": str, "rejected before evaluation": str, "start": fmt,
    "best": fmt, "improvement": fmt_delta, "improvement (rel)": fmt_pct, "total time": fmt_duration,
    "cost": lambda v: f"${v:.2f}", "tokens": lambda v: f"{v:,}"}


def compare_html(runs: Sequence[RunData]) -> str:
    """The runs' headline numbers side by side (research.frames.compare_frame), one row per number."""
    frame = compare_frame([(r.run_id, r.records) for r in runs])
    shown = frame.apply(lambda row: row.map(_SUMMARY_FORMATS[row.name]), axis=1)
    shown.insert(0, "", [_e(k) for k in shown.index])
    as_html = dict.fromkeys(map(str, shown.columns), str)
    return frame_html(shown, as_html, numeric=range(1, len(shown.columns)), cls="summary")


def nodes_html(records: Sequence[ExperimentRecord]) -> str:
    """Per-node timings when evaluations ran on a Ray cluster (research.executor=ray); empty otherwise."""
    nodes = node_frame(records)
    if nodes.empty:
        return ""
    shown = nodes.assign(node=nodes["node"].str[:12])
    formats = {"node": lambda v: f"<code>{_e(v)}</code>", "experiments": str, "eval_s": fmt_duration,
               "mean_eval_s": fmt_duration, "total_s": fmt_duration}
    return ("<h3>Where evaluations ran</h3><p class=muted>Ray node of each experiment's evaluation "
            "(research.executor=ray): how many, and the seconds they took.</p>" + frame_html(shown, formats, cls="nodes"))


def failures_html(records: Sequence[ExperimentRecord]) -> str:
    rows = failure_table(records)
    if not rows:
        return '<p class="muted">No failures.</p>'
    body = [[f"<code>{_e(r.failure_class)}</code>", str(r.count), f"{r.healed} / {r.count}",
             _e(", ".join(f"{a} ×{n}" if n > 1 else a for a, n in r.actions) or "—"), _e(r.severity or "—"),
             _e(_cut(r.message)), _e(_cut(", ".join(r.experiments), 80))] for r in rows]
    return table(["failure class", "count", "healed", "healing actions", "severity", "message", "experiments"],
                 body, numeric=(1, 2), cls="failures")


def rejections_html(records: Sequence[ExperimentRecord]) -> str:
    """Proposals refused before evaluation (repeats, screened no-effect changes): not failures, listed apart."""
    rows = rejection_table(records)
    if not rows:
        return ""
    body = [[_e(r.kind), f"<code>{_e(r.failure_class)}</code>", str(r.count), _e(_cut(r.message)),
             _e(_cut(", ".join(r.experiments), 80))] for r in rows]
    return ("<h3>Rejected before evaluation</h3><p class=muted>Proposals that repeat a change already tried, or that "
            "the reader-free screen found to change nothing the scorer sees: no evaluation was spent on them.</p>"
            + table(["rejection", "class", "count", "message", "experiments"], body, numeric=(2,), cls="rejections"))


def experiments_html(records: Sequence[ExperimentRecord]) -> str:
    body = [[str(r.index), _e(r.experiment_id), _decision_cell(r), _types_cell(r),
             _value_cell(r), _delta_cell(r), fmt_pct(r.delta_rel), _hypothesis_cell(r)]
            for r in records]
    return table(["#", "experiment", "decision", "type", "objective", "Δ", "Δ rel", "hypothesis"],
                 body, numeric=(0, 4, 5, 6), cls="experiments")


def cost_time_html(records: Sequence[ExperimentRecord]) -> str:
    rows = cost_time_table(records)
    body = [[str(r.index), _e(r.experiment_id), _badge(r.decision), fmt_duration(r.propose_s), fmt_duration(r.eval_s),
             fmt_duration(r.overhead_s), fmt_duration(r.total_s), f"{r.tokens:,}", f"${r.cost_usd:.3f}"] for r in rows]
    sums = (fmt_duration(sum(getattr(r, k) for r in rows)) for k in ("propose_s", "eval_s", "overhead_s", "total_s"))
    total = ["", "total", "", *sums,
             f"{sum(r.tokens for r in rows):,}", f"${sum(r.cost_usd for r in rows):.3f}"]
    return table(["#", "experiment", "decision", "propose", "eval", "overhead", "total", "tokens", "cost"],
                 body, numeric=(0, 3, 4, 5, 6, 7, 8), total=total, cls="cost-time")


def cut_diff(diff: str) -> str:
    lines = diff.splitlines()
    shown, size = [], 0
    for line in lines:
        if len(shown) >= MAX_DIFF_LINES or size + len(line) > MAX_DIFF_CHARS:
            break
        shown.append(line)
        size += len(line) + 1
    out = "\n".join(shown)
    if len(shown) < len(lines):
        out += f"\n… {len(lines) - len(shown)} more lines not shown (full diff in {TRAJECTORY_FILE})"
    return out


def diff_html(diff: str) -> str:
    """Escaped diff lines, added / removed / hunk lines wrapped in spans for colour."""
    def line(text: str) -> str:
        cls = ("d-hunk" if text.startswith("@@") else "d-file" if text.startswith(("+++", "---", "diff ")) else
               "d-add" if text.startswith("+") else "d-del" if text.startswith("-") else "")
        return f'<span class="{cls}">{_e(text)}</span>' if cls else _e(text)
    return "\n".join(line(t) for t in diff.split("\n"))


def accepted_html(records: Sequence[ExperimentRecord]) -> str:
    parts = []
    for r in (r for r in records if r.decision == "proceed"):
        stats = r.diff_stats or {}
        stat = (f"{stats.get('files', '?')} files, +{stats.get('insertions', 0)} −{stats.get('deletions', 0)}"
                if stats else "diff")
        overrides = (f"<p>config overrides: <code>{_e(' '.join(r.config_overrides))}</code></p>"
                     if r.config_overrides else "")
        diff = (f"<details open><summary>{_e(stat)}</summary><pre>{diff_html(cut_diff(r.diff))}</pre></details>"
                if r.diff else '<p class="muted">no diff recorded</p>')
        test = paired_test_text(r.test)
        facts = [f"paired test against the best: {_e(test)}"] if test else []
        if r.proposed_type and r.proposed_type != r.discovery_type:
            facts.append(f"proposed as {_type_label(r.proposed_type)}")
        if r.lesson:
            facts.append(f"lesson: {_e(r.lesson)}")
        facts_html = "".join(f'<p class="muted">{f}</p>' for f in facts)
        parts.append(
            f'<div class="exp" id="{_e(r.experiment_id)}"><h3>{_e(r.experiment_id)} · {_type_label(r.discovery_type)} · '
            f"{fmt_delta(delta_of(r))} <small>({fmt_pct(r.delta_rel)})</small> → {fmt(r.objective_value)}</h3>"
            f'<p class="hyp">{_e(r.hypothesis or "(no hypothesis recorded)")}</p>{facts_html}{overrides}{diff}</div>')
    return "".join(parts) or '<p class="muted">No accepted experiments.</p>'


def replay_html(run: RunData, out_dir: Path) -> str:
    replay = run.replay or {}
    steps = replay_steps(run)
    run.warnings.extend(f"replay: {w}" for w in replay.get("warnings") or [] if isinstance(w, str))
    objective = str(replay.get("objective") or objective_name(run.records))
    fig = img(plot_replay(steps, out_dir / "replay.png", objective), "original vs replay",
              "Recorded objective of the original run and the replayed value per step; red rings: decision does not hold.")
    holds = {True: '<span class="badge b-yes">yes</span>', False: '<span class="badge b-no">no</span>', None: "—"}
    body = [[str(s.step), _e(s.experiment_id), fmt(s.recorded), fmt(s.replayed), fmt_delta(s.delta),
             _badge(s.decision) if s.decision else "—", _badge(s.replayed_decision) if s.replayed_decision else "—",
             holds[s.holds], '<span class="muted">ok</span>' if s.status == "ok" else _e(_cut(s.status) or "—")]
            for s in steps]
    n_hold, n_known = sum(1 for s in steps if s.holds), sum(1 for s in steps if s.holds is not None)
    facts = [f"{n_hold} of {n_known} decisions still hold"]
    if number(replay.get("wall_s")) is not None:
        facts.append(f"replay took {fmt_duration(replay['wall_s'])}"
                     + (f" (original run {fmt_duration(replay['original_wall_s'])})"
                        if number(replay.get("original_wall_s")) else ""))
    if replay.get("overrides"):
        facts.append(f"overrides: <code>{_e(' '.join(map(str, replay['overrides'])))}</code>")
    if replay.get("only") not in (None, "all"):
        facts.append(f"steps replayed: {_e(replay['only'])}")
    return (f"<h2>Replay of {_e(replay.get('original_run_id', '?'))}</h2><p>{'; '.join(facts)}.</p>{fig}"
            + table(["step", "experiment", "recorded", "replayed", "Δ", "decision", "replayed decision", "still holds",
                     "status"], body, numeric=(0, 2, 3, 4), cls="replay"))


# --- pages -----------------------------------------------------------------------
def _page(title: str, body: str) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Template(TEMPLATE.read_text(encoding="utf-8")).substitute(title=_e(title), body=body, generated=now)


_ABBREV_NOTE = ", ".join(f"{a} = {t.replace('_', ' ')}" for t, a in DISCOVERY_ABBREV.items())


def single_run_body(run: RunData, out_dir: Path) -> str:
    recs, s = run.records, run_summary(run.records)
    traj = img(plot_trajectory(recs, out_dir / "trajectory.png", f"{run.run_id}: {s.objective or 'objective'}"),
               "objective per experiment",
               f"Objective per experiment with the best-so-far line; accepted points carry their discovery type ({_ABBREV_NOTE}).")
    cats = img(plot_categories(recs, out_dir / "categories.png"), "per-category metrics")
    cost = img(plot_cost_time(recs, out_dir / "cost_time.png"), "time and cost per experiment")
    replay = replay_html(run, out_dir) if run.replay is not None else ""  # before the warnings: it adds some
    parts = [header_html(run, s), warnings_html(run.warnings), confirmation_html(run.state), "<h2>Trajectory</h2>", traj,
             replay]
    parts += ["<h2>Per-category metrics</h2>", cats,
              "<h2>Discovery taxonomy</h2><p class=muted>Experiments per type (baseline excluded), how many were "
              "accepted, and the sum and mean of the accepted deltas.</p>", taxonomy_html(recs),
              "<h2>Failures and healing</h2>", failures_html(recs), rejections_html(recs),
              "<h2>Experiments</h2><p class=muted>Type: the discovery type classified from what the change touched; "
              "the researcher's own label under it when the two differ. Δ: against the best so far, with the paired "
              "test's confidence interval when one was run.</p>", experiments_html(recs),
              "<h2>Time and cost</h2>", cost, cost_time_html(recs), nodes_html(recs),
              "<h2>Accepted experiments</h2>", accepted_html(recs)]
    return "".join(parts)


def compare_body(a: RunData, b: RunData, out_dir: Path) -> str:
    sa, sb = run_summary(a.records), run_summary(b.records)
    warnings = [f"{a.run_id}: {w}" for w in a.warnings] + [f"{b.run_id}: {w}" for w in b.warnings]
    if sa.objective and sb.objective and sa.objective != sb.objective:
        warnings.append(f"the runs optimise different objectives: {sa.objective} vs {sb.objective}")
    summary = compare_html([a, b])
    fig = img(plot_compare([(a.run_id, a.records), (b.run_id, b.records)], out_dir / "compare.png"), "best so far, both runs",
              "Best-so-far objective of both runs against the experiment index; faint dots are single experiments.")
    side = "".join(f"<div><h3>{_e(r.run_id)}</h3>"
                   f"{img(plot_trajectory(r.records, out_dir / f'trajectory_{t}.png', r.run_id), r.run_id)}"
                   f"{taxonomy_html(r.records)}</div>" for r, t in ((a, "a"), (b, "b")))
    return (f"<h1>{_e(a.run_id)} vs {_e(b.run_id)}</h1><p class=sub>{_e(a.run_dir)} · {_e(b.run_dir)}</p>"
            f"{warnings_html(warnings)}<h2>Best so far</h2>{fig}<h2>Summary</h2>{summary}"
            f'<h2>Trajectories and discovery taxonomy</h2><div class="grid2">{side}</div>')


def _log_to_mlflow(run: RunData, files: Sequence[Path], artifact_path: str) -> None:
    """Attach the report to the loop's MLflow parent run; never fails the report."""
    parent = run.state.get("mlflow_parent_run_id")
    if not parent:
        return
    try:
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import tracking_uri

        logging.getLogger("alembic").setLevel(logging.WARNING)
        client = MlflowClient(tracking_uri=str(run.state.get("mlflow_tracking_uri") or tracking_uri()))
        for f in files:
            client.log_artifact(str(parent), str(f), artifact_path=artifact_path)
    except Exception as exc:  # noqa: BLE001 - MLflow is optional for a report
        log.warning("report not logged to MLflow run %s: %s", parent, " ".join(str(exc).split())[:300])


def write_report(run_dir: Path, out_dir: Path | None = None, compare_dir: Path | None = None,
                 csv: bool = False) -> Path:
    """Write report.html and its PNGs (and with ``csv`` the tables behind them, research.frames.write_csv);
    returns the path of report.html.

    Default out_dir: run_dir/report/, or run_dir/report-vs-<other run>/ in compare mode.
    """
    run = load_run(Path(run_dir))
    other = load_run(Path(compare_dir)) if compare_dir is not None else None
    if out_dir is None:
        out_dir = run.run_dir / (REPORT_DIR if other is None else f"{REPORT_DIR}-vs-{_slug(other.run_id)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if other is None:
        page = _page(f"memsys report: {run.run_id}", single_run_body(run, out_dir))
    else:
        page = _page(f"memsys report: {run.run_id} vs {other.run_id}", compare_body(run, other, out_dir))
    out = out_dir / REPORT_FILE
    out.write_text(page, encoding="utf-8")
    if csv:
        _write_csv(run, other, out_dir)
    _log_to_mlflow(run, [out, *sorted(out_dir.glob("*.png"))], out_dir.name)
    return out


def _write_csv(run: RunData, other: RunData | None, out_dir: Path) -> list[Path]:
    from harness.atomic import atomic_write_text
    from research.frames import COMPARE_CSV, write_csv

    if other is None:
        return write_csv(run.records, out_dir)
    a, b = _slug(run.run_dir.name), _slug(other.run_dir.name)  # folder names: two runs may share a run id
    paths = [*write_csv(run.records, out_dir / a), *write_csv(other.records, out_dir / (b if b != a else f"{b}-b"))]
    frame = compare_frame([(run.run_id, run.records), (other.run_id, other.records)])
    atomic_write_text(out_dir / COMPARE_CSV, frame.rename_axis("value").to_csv())
    return [*paths, out_dir / COMPARE_CSV]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


def main_report(run_ids: list[str], runs_root: Path, csv: bool = False) -> Path:
    """``memsys report <run-id> [<run-id-b>] [--csv]``: resolve ids under runs_root (or as folders) and write the report."""
    if not 1 <= len(run_ids) <= 2:
        raise TrajectoryError(f"report takes one run id, or two to compare; got {len(run_ids)}")
    runs_root = Path(runs_root)
    dirs = []
    for rid in run_ids:
        cand = [runs_root / rid, Path(rid)]
        found = next((c for c in cand if any((c / f).is_file() for f in (TRAJECTORY_FILE, STATE_FILE, REPLAY_FILE))), None)
        if found is None:
            known = sorted(p.name for p in runs_root.iterdir()
                           if (p / TRAJECTORY_FILE).is_file() or (p / STATE_FILE).is_file()) if runs_root.is_dir() else []
            shown = ", ".join(known[-12:]) + (f" (and {len(known) - 12} more)" if len(known) > 12 else "")
            raise TrajectoryError(f"no run {rid!r} in {runs_root}/; known: {shown or 'none'}")
        dirs.append(found)
    return write_report(dirs[0], compare_dir=dirs[1] if len(dirs) == 2 else None, csv=csv)
