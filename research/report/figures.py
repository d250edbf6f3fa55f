"""The report's figures (matplotlib, Agg via Figure objects: no pyplot state, safe in any thread).

Each function draws one PNG from trajectory records and returns its path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from research.journal.taxonomy import (
    DISCOVERY_ABBREV,
    best_so_far,
    category_keys,
    cost_time_table,
    number,
    objective_name,
    rejection_kind,
)
from research.journal.trajectory import ExperimentRecord
from research.levers.study import OBJECTIVE_DIRECTIONS, pareto_indices, trial_values

DPI = 110
#: decision -> (marker, colour) of the trajectory figure (the paper's Figure 3)
DECISION_STYLE = {
    "baseline": ("s", "#111111"),
    "proceed": ("^", "#2ca02c"),
    "iterate": ("o", "#ff7f0e"),
    "pivot": ("v", "#d62728"),
    "failed": ("x", "#888888"),
    "rejected": ("x", "#888888"),
    "not_taken": ("d", "#9467bd"),
}
BEST_COLOUR = "#1f77b4"
#: a proposal rejected before evaluation (repeat, no effect): a hollow ring on the floor, apart from failures
SCREENED_STYLE = ("o", "#888888")


def _figure(size: tuple[float, float]) -> tuple[Figure, Any]:
    fig = Figure(figsize=size, dpi=DPI)
    ax = fig.add_subplot()
    ax.grid(True, color="#e6e6e6", lw=0.7)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig, ax


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight")
    return path


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777777", fontsize=12)


def _ylim(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.12 or max(abs(hi) * 0.05, 0.01)
    return lo - 2 * pad, hi + pad  # room below for the failed markers


def plot_trajectory(records: Sequence[ExperimentRecord], path: Path, title: str = "") -> Path:
    """Objective per experiment, best-so-far step line, one marker per decision (cf. the paper's Figure 3)."""
    fig, ax = _figure((10, 4.6))
    objective = objective_name(records) or "objective"
    values = [number(r.objective_value) for r in records]
    lo, hi = _ylim([v for v in values if v is not None])
    ax.set_ylim(lo, hi)
    bottom = lo + (hi - lo) * 0.05
    best = [(r.index, b) for r, b in zip(records, best_so_far(records)) if b is not None]
    if best:
        xs, ys = zip(*best)
        ax.step(xs, ys, where="post", color=BEST_COLOUR, lw=1.8, zorder=2)
    seen: list[str] = []
    on_floor = screened = False
    for rec, v in zip(records, values):
        if rejection_kind(rec) is not None:
            screened = True
            ax.scatter([rec.index], [bottom if v is None else v], marker=SCREENED_STYLE[0], facecolors="none",
                       edgecolors=SCREENED_STYLE[1], s=46, zorder=3, linewidths=1.4)
            continue
        marker, colour = DECISION_STYLE.get(rec.decision, (".", "#666666"))
        if v is None:  # no value: a grey cross on the floor of the plot
            marker, colour, v, on_floor = "x", DECISION_STYLE["failed"][1], bottom, True
        ax.scatter([rec.index], [v], marker=marker, color=colour, s=46, zorder=3, linewidths=1.6)
        seen.append(rec.decision)
        if rec.decision == "proceed" and number(rec.objective_value) is not None:
            ax.annotate(DISCOVERY_ABBREV.get(rec.discovery_type or "", "?"), (rec.index, v), textcoords="offset points",
                        xytext=(0, 7), ha="center", fontsize=7.5, color=DECISION_STYLE["proceed"][1])
    if not records:
        _empty(ax, "no experiments recorded yet")
    handles = [Line2D([], [], color=BEST_COLOUR, lw=1.8, label="best so far")]
    for decision, (marker, colour) in DECISION_STYLE.items():
        if decision == "rejected":
            continue
        if decision == "failed" and ({"failed", "rejected"} & set(seen) or on_floor):
            handles.append(Line2D([], [], ls="", marker=marker, color=colour, label="failed / rejected"))
        elif decision in seen and decision != "failed":
            handles.append(Line2D([], [], ls="", marker=marker, color=colour, label=decision))
    if screened:
        handles.append(Line2D([], [], ls="", marker=SCREENED_STYLE[0], markerfacecolor="none",
                              markeredgecolor=SCREENED_STYLE[1], label="not evaluated (repeat / no effect)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=len(handles), frameon=False, fontsize=8.5)
    ax.set_xlabel("experiment")
    ax.set_ylabel(objective)
    ax.set_title(title or f"{objective} per experiment", fontsize=11)
    return _save(fig, path)


def plot_categories(records: Sequence[ExperimentRecord], path: Path) -> Path:
    fig, ax = _figure((10, 4.2))
    keys = category_keys(records)
    for key in keys:
        ys = [number((r.metrics or {}).get(key)) for r in records]  # NaN breaks the line where a run has no value
        ax.plot([r.index for r in records], [math.nan if y is None else y for y in ys], marker="o", ms=3.5, lw=1.3, label=key)
    if keys:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8.5)
    else:
        _empty(ax, "no per-category metrics in this run")
    ax.set_xlabel("experiment")
    ax.set_ylabel("score")
    ax.set_title("per-category metrics", fontsize=11)
    return _save(fig, path)


def plot_cost_time(records: Sequence[ExperimentRecord], path: Path) -> Path:
    fig, ax = _figure((10, 3.8))
    rows = cost_time_table(records)
    longest = max((r.total_s for r in rows), default=0.0)
    unit, scale = ("h", 3600.0) if longest >= 3 * 3600 else ("min", 60.0) if longest >= 600 else ("s", 1.0)
    xs = [r.index for r in rows]
    base = [0.0] * len(rows)
    for name, colour in (("eval_s", "#4c72b0"), ("propose_s", "#dd8452"), ("overhead_s", "#b8b8b8")):
        heights = [getattr(r, name) / scale for r in rows]
        ax.bar(xs, heights, bottom=base, color=colour, width=0.75, label=name.removesuffix("_s"))
        base = [b + h for b, h in zip(base, heights)]
    ax.set_xlabel("experiment")
    ax.set_ylabel(f"time ({unit})")
    handles, labels = ax.get_legend_handles_labels()
    if any(r.cost_usd for r in rows):
        twin = ax.twinx()
        twin.plot(xs, [r.cost_usd for r in rows], color="#c44e52", marker="D", ms=3.5, lw=1.2, label="cost (USD)")
        twin.set_ylabel("cost (USD)")
        twin.set_ylim(bottom=0)
        h2, l2 = twin.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if not rows:
        _empty(ax, "no experiments recorded yet")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False, fontsize=8.5)
    ax.set_title("time and cost per experiment", fontsize=11)
    return _save(fig, path)


def plot_replay(steps: Sequence[Any], path: Path, objective: str = "") -> Path:
    """Recorded vs replayed objective per step (``steps``: .step, .recorded, .replayed, .holds)."""
    fig, ax = _figure((10, 4.0))
    for attr, label, colour, marker in (("recorded", "original (recorded)", BEST_COLOUR, "o"),
                                        ("replayed", "replay", "#ff7f0e", "s")):
        pts = [(s.step, getattr(s, attr)) for s in steps if getattr(s, attr) is not None]
        if pts:
            ax.plot(*zip(*pts), marker=marker, ms=4.5, lw=1.4, color=colour, label=label)
    broken = [(s.step, s.replayed) for s in steps if s.holds is False and s.replayed is not None]
    if broken:
        ax.scatter(*zip(*broken), s=160, facecolors="none", edgecolors="#d62728", linewidths=1.6, zorder=4,
                   label="decision does not hold")
    if not steps:
        _empty(ax, "replay.json has no steps")
    else:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False, fontsize=8.5)
    ax.set_xlabel("step")
    ax.set_ylabel(objective or "objective")
    ax.set_title("original vs replay", fontsize=11)
    return _save(fig, path)


def plot_compare(runs: Sequence[tuple[str, Sequence[ExperimentRecord]]], path: Path) -> Path:
    """Best-so-far lines of (label, records) runs against the experiment index."""
    fig, ax = _figure((10, 4.4))
    for (label, records), colour, style in zip(runs, (BEST_COLOUR, "#d62728", "#2ca02c"), ("-", "--", ":")):
        pts = [(r.index, b) for r, b in zip(records, best_so_far(records)) if b is not None]
        vals = [(r.index, number(r.objective_value)) for r in records if number(r.objective_value) is not None]
        if vals:
            ax.scatter(*zip(*vals), color=colour, alpha=0.3, s=18)
        if pts:
            ax.step(*zip(*pts), where="post", color=colour, lw=2, ls=style, label=f"{label} (best so far)")
    if any(records for _, records in runs):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False, fontsize=8.5)
    else:
        _empty(ax, "no experiments recorded yet")
    ax.set_xlabel("experiment")
    ax.set_ylabel(next((objective_name(r) for _, r in runs if objective_name(r)), "objective"))
    ax.set_title("best so far", fontsize=11)
    return _save(fig, path)


#: the two axes of the Pareto figure: the run's objective (maximized) against its context cost (minimized)
PARETO_OBJECTIVES = ("quality", "context_tokens")
#: decisions that mark a config the run accepted (its best line): the baseline and every proceed
ACCEPTED = ("baseline", "proceed")


def pareto_frame(records: Sequence[ExperimentRecord]) -> pd.DataFrame:
    """One row per evaluated config (a value and a counted context cost; failed and rejected ones are not
    configs the run measured): experiment, decision, quality, context_tokens, accepted, on_front. The front is
    Optuna's ``best_trials`` over these points (research.levers.study.pareto_indices), as the study sees it."""
    rows = []
    for rec in records:
        values = trial_values(rec.objective_value, rec.metrics, PARETO_OBJECTIVES)
        if values is not None and rec.decision not in ("failed", "rejected"):
            rows.append({"index": rec.index, "experiment": rec.experiment_id, "decision": rec.decision,
                         "quality": values[0], "context_tokens": values[1], "accepted": rec.decision in ACCEPTED})
    frame = pd.DataFrame(rows, columns=["index", "experiment", "decision", "quality", "context_tokens", "accepted"])
    front = pareto_indices(frame[list(PARETO_OBJECTIVES)].to_numpy().tolist(),
                           [OBJECTIVE_DIRECTIONS[o] for o in PARETO_OBJECTIVES]) if len(frame) else []
    return frame.assign(on_front=frame.index.isin(front))


def plot_pareto(frame: pd.DataFrame, path: Path, objective: str = "", budget: Any = None) -> Path:
    """Quality against the context tokens the scorer counted, one point per evaluated config: the Pareto front
    as a step line, the accepted configs (baseline and proceeds) marked and named."""
    fig, ax = _figure((10, 4.6))
    ax.xaxis.set_major_locator(MaxNLocator())
    ax.scatter(frame["context_tokens"], frame["quality"], color="#bbbbbb", s=30, zorder=2, label="evaluated config")
    front = frame[frame["on_front"]].sort_values("context_tokens")
    if len(front):
        ax.step(front["context_tokens"], front["quality"], where="post", color=BEST_COLOUR, lw=1.6, zorder=3,
                label="Pareto front")
        ax.scatter(front["context_tokens"], front["quality"], color=BEST_COLOUR, s=34, zorder=4)
    for _, row in frame[frame["accepted"]].iterrows():
        marker, colour = DECISION_STYLE[row["decision"]]
        ax.scatter([row["context_tokens"]], [row["quality"]], marker=marker, color=colour, s=80, zorder=5)
        ax.annotate(row["experiment"], (row["context_tokens"], row["quality"]), textcoords="offset points",
                    xytext=(6, -11), fontsize=7.5, color=colour)
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="", marker=DECISION_STYLE[d][0], color=DECISION_STYLE[d][1],
                       label=f"accepted ({d})") for d in ACCEPTED if d in set(frame["decision"])]
    if not len(frame):
        _empty(ax, "no evaluated config with a counted context cost")
    else:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=len(handles),
                  frameon=False, fontsize=8.5)
    within = f" (its budget: the first {budget:,} tokens)" if budget is not None else ""
    ax.set_xlabel(f"mean context tokens counted by the scorer{within}")
    ax.set_ylabel(objective or "objective")
    ax.set_title(f"{objective or 'objective'} against context cost", fontsize=11)
    return _save(fig, path)
