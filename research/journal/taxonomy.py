"""Tables over a trajectory: discovery taxonomy, failures and healing, run summary, time and cost.

Pure: lists of ExperimentRecord in, small dataclasses out; research/report/build.py renders them.
Conventions (also in docs/trajectory.md):

- higher objective is better; the best so far is the running maximum of *accepted*
  experiments (``baseline`` and ``proceed``), as in the paper's Figure 3;
- an experiment's delta is ``delta`` as recorded, else ``objective_value - best_before``;
- the taxonomy counts every experiment but the baseline; cumulative delta sums the deltas of
  accepted (``proceed``) experiments of a type, mean delta is that sum over the accepted count;
- a failure is healed when healing was tried and the experiment still ended with an objective
  value and a decision other than ``failed`` / ``rejected`` (the final outcome decides, not the
  entries' ``result`` texts);
- a proposal rejected before evaluation because it repeats a change already tried
  (``identical_conditions``) or the reader-free screen found it changes nothing (``no_effect``) is
  a rejection, named "repeat" / "no effect (screened)", not a failure: the failure table leaves it
  out and ``rejection_table`` counts it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from research.failures import FailureClass
from research.journal.trajectory import ExperimentRecord

ACCEPTED_DECISIONS = ("baseline", "proceed")
FAILED_DECISIONS = ("failed", "rejected")
UNTAGGED = "untagged"
UNCLASSIFIED = "unclassified"

DISCOVERY_ABBREV = {
    "bug_fix": "BF",
    "architectural_change": "AC",
    "prompt_engineering": "PE",
    "data_pipeline_repair": "DP",
    "evaluation_format_alignment": "EF",
    "hyperparameter_tuning": "HP",
}

#: how reports and the terminal name a proposal rejected before evaluation, by failure class
#: (the classes of research.failures.PRE_EVALUATION_REJECTIONS; a test keeps the two in step)
REJECTION_LABELS = {FailureClass.IDENTICAL_CONDITIONS.value: "repeat", FailureClass.NO_EFFECT.value: "no effect (screened)"}

#: keys a healing entry may use for its action name (the loop writes "action")
_ACTION_KEYS = ("action", "fix", "name", "strategy", "kind")

#: per-category metric keys: LoCoMo f1_cat<n>, Mem-Gallery f1_<CAT>; "<objective>/<cat>" is added per run
_CATEGORY_KEY_RES = (re.compile(r"^f1_cat\d+$"), re.compile(r"^f1_[A-Z][A-Z0-9]*$"))


def number(value: Any) -> float | None:
    """A finite float, or None for None / NaN / inf / bools / non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def delta_of(rec: ExperimentRecord) -> float | None:
    d = number(rec.delta)
    if d is not None:
        return d
    v, b = number(rec.objective_value), number(rec.best_before)
    return None if v is None or b is None else v - b


def start_value(records: Sequence[ExperimentRecord]) -> float | None:
    """The baseline's objective value, else the first recorded value."""
    for rec in records:
        if rec.decision == "baseline" and number(rec.objective_value) is not None:
            return number(rec.objective_value)
    return next((number(r.objective_value) for r in records if number(r.objective_value) is not None), None)


def best_so_far(records: Sequence[ExperimentRecord]) -> list[float | None]:
    """Running maximum over accepted experiments, aligned with ``records`` (None before the first)."""
    out: list[float | None] = []
    best: float | None = None
    for rec in records:
        v = number(rec.objective_value)
        if rec.decision in ACCEPTED_DECISIONS and v is not None and (best is None or v > best):
            best = v
        out.append(best)
    return out


def objective_name(records: Sequence[ExperimentRecord]) -> str:
    return next((r.objective for r in records if r.objective), "")


def is_category_key(key: str, objective: str = "") -> bool:
    """A per-category metric: "<objective>/<cat>", LoCoMo's f1_cat<n>, Mem-Gallery's f1_<CAT>."""
    return bool(objective and key.startswith(objective + "/")) or any(p.match(key) for p in _CATEGORY_KEY_RES)


def category_keys(records: Sequence[ExperimentRecord]) -> list[str]:
    """Numeric per-category metric keys found in any record, in natural order."""
    objective = objective_name(records)
    keys: set[str] = set()
    for rec in records:
        for key, value in (rec.metrics or {}).items():
            if number(value) is None:
                continue
            if is_category_key(key, objective):
                keys.add(key)
    return sorted(keys, key=lambda k: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)])


def paired_test_text(test: dict[str, Any] | None) -> str:
    """A record's paired test as one line (CI [+0.0040, +0.0200]; p 0.003; n 152); empty without one.
    ``p`` is the one-sided p-value that the candidate is better (small = supported), not a probability."""
    test = test if isinstance(test, dict) else {}
    lo, hi = number(test.get("ci_low")), number(test.get("ci_high"))
    parts = [f"CI [{lo:+.4f}, {hi:+.4f}]"] if lo is not None and hi is not None else []
    if number(test.get("p_better")) is not None:
        parts.append(f"p {test['p_better']:.2g}")
    if parts and number(test.get("n")) is not None:
        parts.append(f"n {int(test['n'])}")
    return "; ".join(parts)


# --- discovery taxonomy --------------------------------------------------------
# --- failures and healing ------------------------------------------------------
@dataclass
class FailureRow:
    failure_class: str
    count: int = 0
    healed: int = 0
    actions: list[tuple[str, int]] = field(default_factory=list)  # (healing action, times), most used first
    severity: str = ""  # most frequent
    message: str = ""  # first one seen
    experiments: list[str] = field(default_factory=list)


def _recorded_class(rec: ExperimentRecord) -> str | None:
    f = rec.failure if isinstance(rec.failure, dict) else {}
    cls = f.get("class") or f.get("cls") or f.get("failure_class")
    return str(cls) if cls else None


def rejection_kind(rec: ExperimentRecord) -> str | None:
    """The name of a proposal rejected before evaluation ("repeat", "no effect (screened)"), else None."""
    return REJECTION_LABELS.get(_recorded_class(rec) or "")


def failure_class(rec: ExperimentRecord) -> str | None:
    """The record's failure class, "unclassified" for a failed record without one, else None
    (also None for a rejection before evaluation: see ``rejection_kind``)."""
    if rejection_kind(rec) is not None:
        return None
    f = rec.failure if isinstance(rec.failure, dict) else None
    if f:
        return _recorded_class(rec) or UNCLASSIFIED
    if rec.healing:
        first = rec.healing[0] if isinstance(rec.healing[0], dict) else {}
        return str(first.get("failure") or first.get("class") or first.get("cls") or UNCLASSIFIED)
    return UNCLASSIFIED if rec.decision == "failed" else None


def healing_action(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    return str(next((entry[k] for k in _ACTION_KEYS if entry.get(k)), "unnamed"))


def is_healed(rec: ExperimentRecord) -> bool:
    """Healing was tried and the experiment still ended with an objective value (not failed / rejected)."""
    return bool(rec.healing) and rec.decision not in FAILED_DECISIONS and number(rec.objective_value) is not None


def failure_table(records: Sequence[ExperimentRecord]) -> list[FailureRow]:
    """One row per failure class seen, most frequent first."""
    rows: dict[str, FailureRow] = {}
    actions: dict[str, Counter] = {}
    severities: dict[str, Counter] = {}
    for rec in records:
        cls = failure_class(rec)
        if cls is None:
            continue
        row = rows.setdefault(cls, FailureRow(cls))
        row.count += 1
        row.healed += is_healed(rec)
        row.experiments.append(rec.experiment_id)
        actions.setdefault(cls, Counter()).update(healing_action(e) for e in rec.healing)
        f = rec.failure if isinstance(rec.failure, dict) else {}
        if f.get("severity"):
            severities.setdefault(cls, Counter())[str(f["severity"])] += 1
        if not row.message and f.get("message"):
            row.message = str(f["message"])
    for cls, row in rows.items():
        row.actions = actions[cls].most_common()
        if cls in severities:
            row.severity = severities[cls].most_common(1)[0][0]
    return sorted(rows.values(), key=lambda r: (-r.count, r.failure_class))


@dataclass
class RejectionRow:
    kind: str  # REJECTION_LABELS value
    failure_class: str
    count: int = 0
    message: str = ""  # first one seen
    experiments: list[str] = field(default_factory=list)


def rejection_table(records: Sequence[ExperimentRecord]) -> list[RejectionRow]:
    """Proposals rejected before evaluation, one row per kind (in REJECTION_LABELS order)."""
    rows: dict[str, RejectionRow] = {}
    for rec in records:
        kind = rejection_kind(rec)
        if kind is None:
            continue
        row = rows.setdefault(kind, RejectionRow(kind, _recorded_class(rec) or ""))
        row.count += 1
        row.experiments.append(rec.experiment_id)
        if not row.message:
            row.message = str((rec.failure or {}).get("message") or "")
    return [rows[k] for k in REJECTION_LABELS.values() if k in rows]


# --- time, cost, summary -------------------------------------------------------
@dataclass
class CostTimeRow:
    index: int
    experiment_id: str
    decision: str
    propose_s: float
    eval_s: float  # the reader's evaluation: the early-stop samples and the full run
    overhead_s: float  # total - propose - eval when total is known, else apply + overhead
    total_s: float
    tokens: int
    cost_usd: float


def cost_time_row(rec: ExperimentRecord) -> CostTimeRow:
    d = rec.durations if isinstance(rec.durations, dict) else {}
    get = lambda k: number(d.get(k)) or 0.0  # noqa: E731
    propose, evaluate = get("propose_s"), get("eval_s") + get("probe_s")  # the probe is the reader's run too
    total = get("total_s")
    if total:
        overhead = max(total - propose - evaluate, 0.0)
    else:
        overhead = get("apply_s") + get("overhead_s")
        total = propose + evaluate + overhead
    tokens = rec.tokens if isinstance(rec.tokens, int) and not isinstance(rec.tokens, bool) else 0
    return CostTimeRow(rec.index, rec.experiment_id, rec.decision, propose, evaluate, overhead, total,
                       tokens, number(rec.cost_usd) or 0.0)


def cost_time_table(records: Iterable[ExperimentRecord]) -> list[CostTimeRow]:
    return [cost_time_row(r) for r in records]


@dataclass
class RunSummary:
    experiments: int  # every record, baseline included
    decisions: dict[str, int]
    objective: str
    start: float | None
    best: float | None
    best_experiment: str | None
    total_s: float
    cost_usd: float
    tokens: int
    rejections: dict[str, int] = field(default_factory=dict)  # rejection kind -> count (before evaluation)

    @property
    def improvement(self) -> float | None:
        return None if self.start is None or self.best is None else self.best - self.start

    @property
    def improvement_rel(self) -> float | None:
        return None if not self.start or self.best is None else (self.best - self.start) / abs(self.start)


def run_summary(records: Sequence[ExperimentRecord]) -> RunSummary:
    best, best_id = None, None
    for rec in records:
        v = number(rec.objective_value)
        if rec.decision in ACCEPTED_DECISIONS and v is not None and (best is None or v > best):
            best, best_id = v, rec.experiment_id
    costs = cost_time_table(records)
    return RunSummary(
        experiments=len(records),
        decisions=dict(Counter(r.decision for r in records)),
        objective=objective_name(records),
        start=start_value(records),
        best=best,
        best_experiment=best_id,
        total_s=sum(c.total_s for c in costs),
        cost_usd=sum(c.cost_usd for c in costs),
        tokens=sum(c.tokens for c in costs),
        rejections={r.kind: r.count for r in rejection_table(records)},
    )
