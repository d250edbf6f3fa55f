"""The report's HTML pieces: cells, tables, cards, figures embedded as data URIs, diffs cut to a readable
size. Pure string building from loaded runs (research.report.data) and tables (research.journal.taxonomy,
research.journal.frames); every piece escapes what it shows, since hypotheses and diffs are the researcher's text.
"""

from __future__ import annotations

import base64
import html
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from research.journal.frames import compare_frame, node_frame, taxonomy_frame
from research.journal.taxonomy import (
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
    start_value,
)
from research.journal.trajectory import TRAJECTORY_FILE, ExperimentRecord
from research.loop.confirm import verdict_of
from research.proposers.base import gain_source, gains_by_source
from research.report.data import RunData, judge_rows, replay_steps
from research.report.figures import (
    DECISION_STYLE,
    pareto_frame,
    plot_pareto,
    plot_replay,
)

log = logging.getLogger(__name__)

MAX_DIFF_LINES = 160
MAX_DIFF_CHARS = 8000
MAX_TEXT_CHARS = 160  # hypotheses and messages in table cells


# --- HTML pieces ---------------------------------------------------------------
def esc(text: Any) -> str:
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
    return f'<span class="badge b-{esc(decision) if known else "other"}">{esc(decision or "?")}</span>'


def _type_label(discovery_type: str | None) -> str:
    if not discovery_type:
        return '<span class="muted">—</span>'
    abbrev = DISCOVERY_ABBREV.get(discovery_type)
    name = esc(discovery_type.replace("_", " "))
    return f"<b>{abbrev}</b> {name}" if abbrev else name


def _types_cell(rec: ExperimentRecord) -> str:
    """The classified type; the researcher's own label under it when the two differ."""
    cell = _type_label(rec.discovery_type)
    if rec.proposed_type and rec.proposed_type != rec.discovery_type:
        cell += f' <br><small class="muted">proposed: {_type_label(rec.proposed_type)}</small>'
    return cell


def _decision_cell(rec: ExperimentRecord) -> str:
    kind = rejection_kind(rec)
    return _badge(rec.decision) + (f' <small class="muted">{esc(kind)}</small>' if kind else "")


def _delta_cell(rec: ExperimentRecord) -> str:
    test = paired_test_text(rec.test)
    return fmt_delta(delta_of(rec)) + (f' <br><small class="muted">{esc(test)}</small>' if test else "")


def _value_cell(rec: ExperimentRecord) -> str:
    """The value, marked when the early stop (research/loop/pruning.py) stopped the candidate (an estimate from its questions)."""
    p = rec.probe or {}
    if not p.get("stopped"):
        return fmt(rec.objective_value)
    why = (f"stopped after the probe: {p.get('questions')} of {p.get('of')} questions ({p.get('sample')}); "
           "the best's value plus the paired delta there")
    return f'<span title="{esc(why)}">~{fmt(rec.objective_value)}</span> <small class="muted">probe</small>'


def _hypothesis_cell(rec: ExperimentRecord) -> str:
    lesson = f' <br><small class="muted">lesson: {esc(_cut(rec.lesson))}</small>' if rec.lesson else ""
    return esc(_cut(rec.hypothesis) or "—") + lesson


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
          total: Sequence[str] | None = None, cls: str = "") -> str:
    """Cells are HTML already escaped by the caller; ``numeric`` columns are right-aligned."""
    def row(cells: Sequence[str], tag: str = "td") -> str:
        return "".join(f'<{tag}{" class=n" if i in numeric else ""}>{c}</{tag}>' for i, c in enumerate(cells))
    body = "".join(f"<tr>{row(r)}</tr>" for r in rows)
    if total is not None:
        body += f'<tr class="total">{row(total)}</tr>'
    return (f'<table class="{cls}"><thead><tr>{row([esc(h) for h in headers], "th")}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def img(path: Path, alt: str, caption: str = "") -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">{cap}</figure>'


def _card(key: str, value: str, cls: str = "") -> str:
    return f'<div class="card"><div class="k">{esc(key)}</div><div class="v {cls}">{value}</div></div>'


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
    verdict = verdict_of(run.state.get("confirmation"))
    held_out = "" if not verdict else f" <small>({esc(verdict['status'].replace('_', ' '))} on test)</small>"
    cards = "".join([
        _card("start", fmt(s.start)),
        _card("best", fmt(s.best) + held_out, "" if verdict.get("confirmed") is not False else "down"),
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
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in meta)
    return (f"<h1>Run {esc(run.run_id)}</h1><p class=sub>{esc(run.run_dir)}</p>"
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
        return "" if r.get("ok", True) else f" <small>({esc(r.get('failure', 'failed'))})</small>"

    rows = [[esc(split), fmt(c[key].get("baseline")), fmt(c[key].get("best")),
             fmt_delta(None if c[key].get("baseline") is None or c[key].get("best") is None
                       else c[key]["best"] - c[key]["baseline"])]
            for split, key in (("dev (what the loop saw)", "dev"),
                               (f"{c.get('split', 'test')} / {c.get('sample') or 'full'} (held out)", "test"))]
    rows[1][1] += failed("baseline")
    if runs.get("baseline", {}).get("skipped"):
        rows[1][1] += f" <small>(not evaluated: {esc(runs['baseline']['skipped'])})</small>"
    rows[1][2] += failed("best")
    reader = (state.get("reader_check") or {}).get("line")  # `memsys confirm --reader` (research.loop.confirm)
    return (f"<h2>Held-out confirmation</h2><p>{esc(c.get('objective', ''))}: baseline and best commit, dev as the "
            f"loop measured it and the held-out split scored once at the end ({esc(c.get('finished', ''))}).</p>"
            + table(["split", "baseline", "best", "delta"], rows, numeric=(1, 2, 3))
            + (f"<p><b>End to end:</b> {esc(reader)}</p>" if reader else ""))


def verdict_html(state: dict[str, Any]) -> str:
    """The held-out verdict as a banner at the top of the report: a dev gain that test does not confirm is
    said before any figure (research/loop/confirm.py confirmation_verdict)."""
    verdict = verdict_of(state.get("confirmation"))
    if not verdict:
        return ""
    css = "warn" if verdict.get("confirmed") is False else "note"
    return f'<div class="{css} verdict"><b>{esc(verdict["line"])}</b></div>'


def proxy_html(objective: str, budget: Any, measured: dict[str, Any] | None) -> str:
    """Next to a run that climbed the reader-free proxy: how well that proxy ranks configs as the reader's F1
    does, as research/perf/bench_proxy.py measured it at the same budget on this machine, or the command that
    measures it. Other objectives: nothing."""
    if objective != "context_recall":
        return ""
    if not measured or measured.get("budget") != budget:
        return (f'<p class="muted">How well context recall at B = {esc(budget)} ranks configs as the reader\'s F1 does '
                f"is not measured here: <code>python -m research.perf.bench_proxy --budget {esc(budget)}</code>.</p>")
    a = measured["agreement"]
    return (f'<p class="muted">Proxy validity ({esc(measured.get("when", "?"))}, {len(measured["configs"])} configs, '
            f"{measured['questions']} questions, {esc(measured.get('sample', '?'))}): Spearman &rho; "
            f"{a['spearman']:+.2f} [{a['spearman_ci'][0]:+.2f}, {a['spearman_ci'][1]:+.2f}], Kendall &tau; "
            f"{a['kendall']:+.2f} between this objective and the reader's F1 on categories 1-4 "
            f"(<code>{esc(measured.get('command', ''))}</code>).</p>")


def warnings_html(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
    return f'<div class="warn"><b>Warnings</b> ({len(warnings)})<ul>{items}</ul></div>'


def frame_html(df: pd.DataFrame, formats: dict[str, Callable[[Any], str]] | None = None, *,
               total: dict[str, Any] | None = None, numeric: Sequence[int] | None = None, cls: str = "") -> str:
    """The report's one DataFrame renderer: each cell through its column's formatter (escaped text when a
    column has none), the optional total row through the same formatters; numeric columns right-aligned."""
    formats = formats or {}
    cols = [str(c) for c in df.columns]
    cell = lambda col, v: formats[col](v) if col in formats else esc("—" if v is None else v)  # noqa: E731
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
    "objective": esc, "experiments": str, "proceeds": str, "rejected before evaluation": str, "start": fmt,
    "best": fmt, "improvement": fmt_delta, "improvement (rel)": fmt_pct, "total time": fmt_duration,
    "cost": lambda v: f"${v:.2f}", "tokens": lambda v: f"{v:,}"}


def compare_html(runs: Sequence[RunData]) -> str:
    """The runs' headline numbers side by side (research.journal.frames.compare_frame), one row per number."""
    frame = compare_frame([(r.run_id, r.records) for r in runs])
    shown = frame.apply(lambda row: row.map(_SUMMARY_FORMATS[row.name]), axis=1)
    shown.insert(0, "", [esc(k) for k in shown.index])
    shown.loc["held-out verdict"] = ["held-out verdict", *(esc(held_out_line(r.state)) for r in runs)]
    as_html = dict.fromkeys(map(str, shown.columns), str)
    return frame_html(shown, as_html, numeric=range(1, len(shown.columns)), cls="summary")


def held_out_line(state: dict[str, Any]) -> str:
    """A run's held-out verdict as the comparison shows it beside its best value."""
    return verdict_of(state.get("confirmation")).get("line") or "not confirmed yet (memsys confirm <run>)"


def nodes_html(records: Sequence[ExperimentRecord]) -> str:
    """Per-node timings when evaluations ran on a Ray cluster (research.executor=ray); empty otherwise."""
    nodes = node_frame(records)
    if nodes.empty:
        return ""
    shown = nodes.assign(node=nodes["node"].str[:12])
    formats = {"node": lambda v: f"<code>{esc(v)}</code>", "experiments": str, "eval_s": fmt_duration,
               "mean_eval_s": fmt_duration, "total_s": fmt_duration}
    return ("<h3>Where evaluations ran</h3><p class=muted>Ray node of each experiment's evaluation "
            "(research.executor=ray): how many, and the seconds they took.</p>" + frame_html(shown, formats, cls="nodes"))


def failures_html(records: Sequence[ExperimentRecord]) -> str:
    rows = failure_table(records)
    if not rows:
        return '<p class="muted">No failures.</p>'
    body = [[f"<code>{esc(r.failure_class)}</code>", str(r.count), f"{r.healed} / {r.count}",
             esc(", ".join(f"{a} ×{n}" if n > 1 else a for a, n in r.actions) or "—"), esc(r.severity or "—"),
             esc(_cut(r.message)), esc(_cut(", ".join(r.experiments), 80))] for r in rows]
    return table(["failure class", "count", "healed", "healing actions", "severity", "message", "experiments"],
                 body, numeric=(1, 2), cls="failures")


def rejections_html(records: Sequence[ExperimentRecord]) -> str:
    """Proposals refused before evaluation (repeats, screened no-effect changes): not failures, listed apart."""
    rows = rejection_table(records)
    if not rows:
        return ""
    body = [[esc(r.kind), f"<code>{esc(r.failure_class)}</code>", str(r.count), esc(_cut(r.message)),
             esc(_cut(", ".join(r.experiments), 80))] for r in rows]
    return ("<h3>Rejected before evaluation</h3><p class=muted>Proposals that repeat a change already tried, or that "
            "the reader-free screen found to change nothing the scorer sees: no evaluation was spent on them.</p>"
            + table(["rejection", "class", "count", "message", "experiments"], body, numeric=(2,), cls="rejections"))


def experiments_html(records: Sequence[ExperimentRecord]) -> str:
    body = [[str(r.index), esc(r.experiment_id), _decision_cell(r), _types_cell(r),
             _value_cell(r), _delta_cell(r), fmt_pct(r.delta_rel), _hypothesis_cell(r)]
            for r in records]
    return table(["#", "experiment", "decision", "type", "objective", "Δ", "Δ rel", "hypothesis"],
                 body, numeric=(0, 4, 5, 6), cls="experiments") + judge_html(records)


def judge_html(records: Sequence[ExperimentRecord]) -> str:
    """J beside F1 per evaluated experiment, with the judge's false-accept rates on its stress test and the answers'
    length against the gold's; a raised J with over-long answers is flagged. Empty when no evaluation had a judge."""
    rows = judge_rows(list(records))
    if not rows:
        return ""
    rate = lambda v: "—" if v is None else f"{100 * v:.0f}%"  # noqa: E731 - a share, unsigned
    body = [[esc(r.experiment_id), _badge(r.decision), fmt(r.f1), fmt(r.j), rate(r.false_accept_vague),
             rate(r.false_accept_specific), "—" if r.length_ratio is None else f"{r.length_ratio:.2f}×",
             f'<span class="badge b-no">{esc(r.flag)}</span>' if r.flag else ""] for r in rows]
    return ("<h3>J, the LLM judge's accuracy</h3><p class=muted>J beside F1 for each judged evaluation; the false-accept "
            "rates are how often the judge accepted known-wrong answers in its stress test (vague-but-topical, "
            "specific-but-wrong: docs/judge.md). Length: the answers' mean words over the gold answers'.</p>"
            + table(["experiment", "decision", "F1", "J", "false-accept vague", "false-accept specific", "length",
                     "flag"], body, numeric=(2, 3, 4, 5, 6), cls="judge"))


def cost_time_html(records: Sequence[ExperimentRecord]) -> str:
    rows = cost_time_table(records)
    body = [[str(r.index), esc(r.experiment_id), _badge(r.decision), fmt_duration(r.propose_s), fmt_duration(r.eval_s),
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
        return f'<span class="{cls}">{esc(text)}</span>' if cls else esc(text)
    return "\n".join(line(t) for t in diff.split("\n"))


def gains_html(records: Sequence[ExperimentRecord]) -> str:
    """Each accepted gain attributed to its source: the researcher's own proposal, a sampler draw, the hybrid's
    levers with TPE's values, or a repair (research.proposers.base.gain_source)."""
    rows = [[esc(source), str(n), fmt_delta(gain)] for source, n, gain in gains_by_source(records)]
    if not rows:
        return '<p class="muted">No accepted gain to attribute.</p>'
    return table(["source", "accepted", "summed gain"], rows, numeric=(1, 2))


def accepted_html(records: Sequence[ExperimentRecord]) -> str:
    parts = []
    for r in (r for r in records if r.decision == "proceed"):
        stats = r.diff_stats or {}
        stat = (f"{stats.get('files', '?')} files, +{stats.get('insertions', 0)} −{stats.get('deletions', 0)}"
                if stats else "diff")
        overrides = (f"<p>config overrides: <code>{esc(' '.join(r.config_overrides))}</code></p>"
                     if r.config_overrides else "")
        diff = (f"<details open><summary>{esc(stat)}</summary><pre>{diff_html(cut_diff(r.diff))}</pre></details>"
                if r.diff else '<p class="muted">no diff recorded</p>')
        test = paired_test_text(r.test)
        facts = [f"paired test against the best: {esc(test)}"] if test else []
        if r.proposed_type and r.proposed_type != r.discovery_type:
            facts.append(f"proposed as {_type_label(r.proposed_type)}")
        if r.lesson:
            facts.append(f"lesson: {esc(r.lesson)}")
        facts_html = "".join(f'<p class="muted">{f}</p>' for f in facts)
        parts.append(
            f'<div class="exp" id="{esc(r.experiment_id)}"><h3>{esc(r.experiment_id)} · {esc(gain_source(r))} · '
            f'{_type_label(r.discovery_type)} · '
            f"{fmt_delta(delta_of(r))} <small>({fmt_pct(r.delta_rel)})</small> → {fmt(r.objective_value)}</h3>"
            f'<p class="hyp">{esc(r.hypothesis or "(no hypothesis recorded)")}</p>{facts_html}{overrides}{diff}</div>')
    return "".join(parts) or '<p class="muted">No accepted experiments.</p>'


def replay_html(run: RunData, out_dir: Path) -> str:
    replay = run.replay or {}
    steps = replay_steps(run)
    run.warnings.extend(f"replay: {w}" for w in replay.get("warnings") or [] if isinstance(w, str))
    objective = str(replay.get("objective") or objective_name(run.records))
    fig = img(plot_replay(steps, out_dir / "replay.png", objective), "original vs replay",
              "Recorded objective of the original run and the replayed value per step; red rings: decision does not hold.")
    holds = {True: '<span class="badge b-yes">yes</span>', False: '<span class="badge b-no">no</span>', None: "—"}
    body = [[str(s.step), esc(s.experiment_id), fmt(s.recorded), fmt(s.replayed), fmt_delta(s.delta),
             _badge(s.decision) if s.decision else "—", _badge(s.replayed_decision) if s.replayed_decision else "—",
             holds[s.holds], '<span class="muted">ok</span>' if s.status == "ok" else esc(_cut(s.status) or "—")]
            for s in steps]
    n_hold, n_known = sum(1 for s in steps if s.holds), sum(1 for s in steps if s.holds is not None)
    facts = [f"{n_hold} of {n_known} decisions still hold"]
    if number(replay.get("wall_s")) is not None:
        facts.append(f"replay took {fmt_duration(replay['wall_s'])}"
                     + (f" (original run {fmt_duration(replay['original_wall_s'])})"
                        if number(replay.get("original_wall_s")) else ""))
    if replay.get("overrides"):
        facts.append(f"overrides: <code>{esc(' '.join(map(str, replay['overrides'])))}</code>")
    if replay.get("only") not in (None, "all"):
        facts.append(f"steps replayed: {esc(replay['only'])}")
    return (f"<h2>Replay of {esc(replay.get('original_run_id', '?'))}</h2><p>{'; '.join(facts)}.</p>{fig}"
            + table(["step", "experiment", "recorded", "replayed", "Δ", "decision", "replayed decision", "still holds",
                     "status"], body, numeric=(0, 2, 3, 4), cls="replay"))


def _run_objectives(run: RunData) -> list[str]:
    """research.objectives of the run as its config.json says (runs before the key: quality alone)."""
    research = run.config.get("research") if isinstance(run.config.get("research"), dict) else {}
    found = research.get("objectives")
    return [str(o) for o in found] if isinstance(found, list) and found else ["quality"]


def pareto_html(run: RunData, out_dir: Path) -> str:
    """Quality against context cost over the run's evaluated configs: the Pareto front (Optuna's best_trials)
    with the accepted configs marked, then the front and the accepted ones as a table. Empty when no record
    holds both numbers (runs scored before the scorer counted context tokens)."""
    frame = pareto_frame(run.records)
    if not len(frame):
        return ""
    objective = objective_name(run.records) or "objective"
    budgets = {number((r.metrics or {}).get("context_budget_tokens")) for r in run.records} - {None}
    budget = int(next(iter(budgets))) if len(budgets) == 1 else None
    objectives = _run_objectives(run)
    how = (f"The run's study was multi-objective ({', '.join(objectives)}): TPE sampled towards this front; "
           if len(objectives) > 1 else "The run's study optimized quality alone; ")
    caption = (f"{how}acceptance is the paired test on {esc(objective)} either way. Blue: the configs no other "
               "evaluated config beats on both axes; marked and named: the accepted ones (baseline and proceeds).")
    fig = img(plot_pareto(frame, out_dir / "pareto.png", objective, budget), "quality against context cost", caption)
    shown = frame[frame["on_front"] | frame["accepted"]].sort_values("context_tokens")
    yes = '<span class="badge b-yes">yes</span>'
    body = [[esc(r.experiment), _badge(r.decision), fmt(r.quality), f"{r.context_tokens:,.1f}",
             yes if r.on_front else "—", yes if r.accepted else "—"] for r in shown.itertuples()]
    return ("<h2>Quality against context cost</h2>" + fig
            + table(["experiment", "decision", objective, "context tokens", "on the front", "accepted"], body,
                    numeric=(2, 3), cls="pareto"))
