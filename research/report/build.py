"""HTML reports of optimization runs: figures to look at first, the tables behind them after.

``write_report(run_dir)`` reads runs/<run-id>/ (trajectory.jsonl, state.json, replay.json) and writes
report.html (self-contained: inline CSS, PNGs as data URIs) plus the PNGs into run_dir/report/.
``compare_dir`` puts a second run beside it. Tables come from research/journal/taxonomy.py (pure), the run's files
are read by research/report/data.py, the pieces drawn by research/report/html.py and research/report/figures.py;
this module puts the pages together and writes them. A report never fails because a field, a file or MLflow is missing:
what it could not read is listed as a warning at the top of the page.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from pathlib import Path
from string import Template
from typing import Sequence

from research.journal.frames import compare_frame
from research.journal.taxonomy import (
    DISCOVERY_ABBREV,
    run_summary,
)
from research.journal.trajectory import TRAJECTORY_FILE, TrajectoryError
from research.report.data import REPLAY_FILE, STATE_FILE, RunData, load_proxy_validity, load_run, run_budget
from research.report.figures import (
    plot_categories,
    plot_compare,
    plot_cost_time,
    plot_trajectory,
)
from research.report.html import (
    accepted_html,
    compare_html,
    confirmation_html,
    cost_time_html,
    esc,
    experiments_html,
    failures_html,
    gains_html,
    header_html,
    held_out_line,
    img,
    nodes_html,
    pareto_html,
    proxy_html,
    rejections_html,
    replay_html,
    taxonomy_html,
    verdict_html,
    warnings_html,
)

log = logging.getLogger(__name__)

REPORT_DIR = "report"
REPORT_FILE = "report.html"
TEMPLATE = Path(__file__).with_name("template.html")


# --- pages -----------------------------------------------------------------------
def _page(title: str, body: str) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Template(TEMPLATE.read_text(encoding="utf-8")).substitute(title=esc(title), body=body, generated=now)


_ABBREV_NOTE = ", ".join(f"{a} = {t.replace('_', ' ')}" for t, a in DISCOVERY_ABBREV.items())


def single_run_body(run: RunData, out_dir: Path) -> str:
    recs, s = run.records, run_summary(run.records)
    traj = img(plot_trajectory(recs, out_dir / "trajectory.png", f"{run.run_id}: {s.objective or 'objective'}"),
               "objective per experiment",
               f"Objective per experiment with the best-so-far line; accepted points carry their discovery type ({_ABBREV_NOTE}).")
    cats = img(plot_categories(recs, out_dir / "categories.png"), "per-category metrics")
    cost = img(plot_cost_time(recs, out_dir / "cost_time.png"), "time and cost per experiment")
    replay = replay_html(run, out_dir) if run.replay is not None else ""  # before the warnings: it adds some
    proxy = proxy_html(s.objective, run_budget(run), load_proxy_validity())
    parts = [header_html(run, s), verdict_html(run.state), warnings_html(run.warnings), proxy, confirmation_html(run.state),
             "<h2>Trajectory</h2>", traj,
             replay, pareto_html(run, out_dir)]
    parts += ["<h2>Per-category metrics</h2>", cats,
              "<h2>Discovery taxonomy</h2><p class=muted>Experiments per type (baseline excluded), how many were "
              "accepted, and the sum and mean of the accepted deltas.</p>", taxonomy_html(recs),
              "<h2>Failures and healing</h2>", failures_html(recs), rejections_html(recs),
              "<h2>Experiments</h2><p class=muted>Type: the discovery type classified from what the change touched; "
              "the researcher's own label under it when the two differ. Δ: against the best so far, with the paired "
              "test's confidence interval when one was run.</p>", experiments_html(recs),
              "<h2>Time and cost</h2>", cost, cost_time_html(recs), nodes_html(recs),
              "<h2>Where the gains came from</h2>", gains_html(recs),
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
    side = "".join(f"<div><h3>{esc(r.run_id)}</h3>"
                   f"{img(plot_trajectory(r.records, out_dir / f'trajectory_{t}.png', r.run_id), r.run_id)}"
                   f"{taxonomy_html(r.records)}</div>" for r, t in ((a, "a"), (b, "b")))
    return (f"<h1>{esc(a.run_id)} vs {esc(b.run_id)}</h1><p class=sub>{esc(a.run_dir)} · {esc(b.run_dir)}</p>"
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
    """Write report.html and its PNGs (and with ``csv`` the tables behind them, research.journal.frames.write_csv);
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
    from research.journal.frames import COMPARE_CSV, write_csv

    if other is None:
        return write_csv(run.records, out_dir)
    a, b = _slug(run.run_dir.name), _slug(other.run_dir.name)  # folder names: two runs may share a run id
    paths = [*write_csv(run.records, out_dir / a), *write_csv(other.records, out_dir / (b if b != a else f"{b}-b"))]
    frame = compare_frame([(run.run_id, run.records), (other.run_id, other.records)]).astype(object)
    frame.loc["held-out verdict"] = [held_out_line(run.state), held_out_line(other.state)]
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
