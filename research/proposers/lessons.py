"""Lessons: what each experiment taught, as one deterministic line, and a rolling summary.

A small researcher forgets everything between steps; the journal of lessons is its memory.
Every line is built from the record alone (the changes, the measured outcome with its paired
confidence interval when there is one, the verdict), so replaying a run gives the same text.
Pure functions over ``ExperimentRecord``s.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from benchmarks.judge.config import judge_metric_key
from harness.tokens import count_tokens
from research.config import LoopConfig
from research.failures import PRE_EVALUATION_REJECTIONS
from research.journal.trajectory import ExperimentRecord

#: significance level of the paired test's p-values (the loop's default, research.loop.alpha)
ALPHA = LoopConfig.alpha
#: failure classes of experiments refused before evaluation because the change does nothing new
NO_EFFECT_CLASSES = frozenset(c.value for c in PRE_EVALUATION_REJECTIONS)
#: characters of a failure message kept in a lesson
MESSAGE_CHARS = 90
#: summary sections, in the order they are rendered
SECTIONS = (("worked", "What worked"), ("no_effect", "No effect / dead ends"), ("hurt", "What hurt"))


#: overrides a lesson lists in full; a record with more (a draw of every lever) is summarized
MAX_OVERRIDES_SHOWN = 8


def describe_changes(rec: ExperimentRecord) -> str:
    """The overrides as written, and the files the code edits touched."""
    parts = []
    overrides = [o.replace(" ", "") for o in rec.config_overrides]
    if len(overrides) > MAX_OVERRIDES_SHOWN:  # a sampler's draw of every lever: a line a prompt can afford
        parts.append(f"{len(overrides)} levers at once ({', '.join(overrides[:MAX_OVERRIDES_SHOWN - 2])}, ...)")
    elif overrides:
        parts.append(", ".join(overrides))
    if rec.edits:
        files = list(dict.fromkeys(e.get("path", "?") for e in rec.edits))
        n = len(rec.edits)
        parts.append(f"{n} code edit{'s' if n != 1 else ''} to {', '.join(files)}")
    if parts:
        return " + ".join(parts)
    return "baseline" if rec.index == 0 else "no change"


def _failure_cls(rec: ExperimentRecord) -> str:
    return str((rec.failure or {}).get("cls") or "")


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def _message(rec: ExperimentRecord) -> str:
    return _cut(" ".join(str((rec.failure or {}).get("message") or "").split()))


def _screen_note(rec: ExperimentRecord) -> str:
    """"0 of 40 reader inputs changed" when the reader-free screen counted them."""
    q, changed = rec.screen.get("questions"), rec.screen.get("changed")
    if isinstance(q, int) and isinstance(changed, int):
        return f"{changed} of {q} reader inputs changed, "
    return ""


def is_no_effect(rec: ExperimentRecord) -> bool:
    return rec.decision == "rejected" and (_failure_cls(rec) in NO_EFFECT_CLASSES
                                           or rec.screen.get("verdict") in ("no effect", "no_effect"))


def withheld_levers(history: Sequence[ExperimentRecord], start_commit: str | None, *,
                    pivot: bool = False) -> dict[str, str]:
    """Lever id -> why the menu leaves it out of the next proposal from ``start_commit``.

    - A config-only change of it from that very commit was refused before evaluation (no effect, or
      a repeat). Seen in a 20-step run of the embedded 1.5B model: told in the journal that
      ``sparse_k=50`` did nothing under ``top_k=20``, it proposed ``sparse_k=50`` again eight times.
      A change from another commit says nothing about this one, so only records with this parent count.
    - On a pivot, also every lever the abandoned direction moved: the evaluated experiments since the
      best last moved (a sampler's draw of every lever aside). Asked to "change direction", the same
      model went on raising ``sparse_k`` one step at a time; the hybrid's hypotheses follow the same rule.
    The newest record of a lever gives its reason."""
    from research.levers.catalogue import levers_of
    from research.proposers.base import is_sampler_draw

    out: dict[str, str] = {}
    if pivot:
        abandoned: dict[str, list[str]] = {}
        for rec in reversed(history):
            if rec.decision in ("proceed", "baseline"):
                break
            if rec.objective_value is None or rec.decision not in ("iterate", "pivot") or is_sampler_draw(rec):
                continue
            for lever in levers_of(rec.config_overrides):
                abandoned.setdefault(lever, []).insert(0, rec.experiment_id)
        out.update({lv: f"moved by {', '.join(ids)} since the best last moved, no supported gain"
                    for lv, ids in abandoned.items()})
    for rec in history:
        if not start_commit or rec.parent_commit != start_commit or rec.edits or not rec.config_overrides:
            continue
        if not is_no_effect(rec) and _failure_cls(rec) != "identical_conditions":
            continue
        why = "a repeat" if _failure_cls(rec) == "identical_conditions" else "no effect"
        for lever in levers_of(rec.config_overrides):
            out[lever] = f"refused before evaluation: {_cut(describe_changes(rec))}, {why}, {rec.experiment_id}"
    return out


def significance(rec: ExperimentRecord, alpha: float = ALPHA) -> str:
    """better | worse | none | "" (no paired test recorded), by the test's one-sided p-values
    (``research.evaluation.stats.PairedTest``: p_better small means better), else by its interval."""
    t = rec.test or {}
    if t.get("p_better") is not None and t.get("p_worse") is not None:
        return "better" if t["p_better"] < alpha else "worse" if t["p_worse"] < alpha else "none"
    lo, hi = t.get("ci_low"), t.get("ci_high")
    if lo is None or hi is None:
        return ""
    return "better" if lo > 0 else "worse" if hi < 0 else "none"


def describe_outcome(rec: ExperimentRecord, objective: str, alpha: float = ALPHA) -> str:
    """The measured change against the best: "all_honest +0.021 [0.01, 0.03] over 50 questions,
    p=0.004" when a paired test was recorded, else the raw delta."""
    t = rec.test or {}
    sig = significance(rec, alpha)
    if sig:
        mean = float(t.get("mean_delta", rec.delta or 0.0))
        text = f"{objective} {mean:+.3f} [{float(t['ci_low']):.2f}, {float(t['ci_high']):.2f}]"
        if t.get("n"):
            text += f" over {t['n']} questions"
        if (rec.probe or {}).get("stopped"):  # only the probe's questions were answered
            text += f" (the probe's {rec.probe.get('sample')} sample: stopped there as clearly worse)"
        # p of the direction observed: p_better / p_worse are one-sided p-values
        p = t.get("p_better") if sig == "better" else t.get("p_worse") if sig == "worse" else None
        if p is not None:
            text += f", p={float(p):.2g}"
        return text + (", not significant" if sig == "none" else "")
    if rec.delta is not None:
        return f"{objective} {rec.delta:+.4f} (no paired test)"
    if rec.objective_value is not None:
        return f"{objective} {rec.objective_value:.4f}"
    return "not measured"


_VERDICTS = {"proceed": "accepted", "iterate": "not accepted, iterate", "pivot": "not accepted, pivot",
             "not_taken": "not taken"}


def lesson_for(rec: ExperimentRecord, objective: str, alpha: float = ALPHA) -> str:
    """One line of what ``rec`` taught: changes, outcome, verdict (``alpha``: the loop's significance level)."""
    changes = describe_changes(rec)
    cls = _failure_cls(rec)
    if rec.decision == "baseline":
        value = "not measured" if rec.objective_value is None else f"{rec.objective_value:.4f}"
        return f"baseline: {objective} {value}"
    if rec.decision == "rejected":
        if cls == "identical_conditions":
            return f"{changes}: repeats a change already evaluated from the same commit (rejected before evaluation)"
        if is_no_effect(rec):
            return f"{changes}: no effect on the reader's input ({_screen_note(rec)}rejected before evaluation)"
        if cls == "leakage":
            return f"{changes}: carries benchmark data ({_message(rec)})"
        if cls == "forbidden_edit":
            return f"{changes}: edits outside the mutable surface (rejected: {_message(rec)})"
        return f"{changes}: rejected ({cls or 'no class'}: {_message(rec)})"
    if rec.decision == "failed":
        where = f" at {rec.failure['stage']}" if (rec.failure or {}).get("stage") else ""
        return f"{changes}: failed{where} ({cls or 'unknown'}: {_message(rec)})"
    line = f"{changes}: {describe_outcome(rec, objective, alpha)}: {_VERDICTS.get(rec.decision, rec.decision)}"
    if rec.never_shown.get("supported") is False:
        line += (f" (gained only where the researcher had seen the gold: {float(rec.never_shown.get('mean_delta', 0.0)):+.4f}"
                 f" on the {rec.never_shown.get('n', '?')} never-shown questions)")
    if rec.check and rec.check.get("passed") is False:
        line += " (did not hold on the check slice)"
    return line + length_flag(rec)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def length_flag(rec: ExperimentRecord) -> str:
    """A note when the candidate raised J (a judge objective, positive delta) with answers longer than the judge's
    ``max_length_ratio`` times the gold's: a lenient judge rewards long answers that mention the right topic, so
    such a gain may be length, not content. From the record alone (its metrics carry the ratio and its limit)."""
    m = rec.metrics or {}
    ratio, limit = _number(m.get("length_ratio")), _number(m.get("judge_max_length_ratio"))
    raised = judge_metric_key(rec.objective or "") is not None and (rec.delta or 0.0) > 0
    if not raised or ratio is None or limit is None or ratio <= limit:
        return ""
    return (f" (LENGTH: answers average {ratio:.1f}x the gold's words, above the judge's {limit:g}x limit; "
            "a lenient judge may reward the length)")


def classify(rec: ExperimentRecord) -> str | None:
    """Which summary section a record belongs to: worked | no_effect | hurt (None: baseline)."""
    if rec.decision == "baseline":
        return None
    if rec.decision == "proceed":
        return "worked"
    if rec.decision in ("rejected", "failed"):
        return "no_effect"
    sig = significance(rec)
    if rec.degraded or sig == "worse" or (not sig and rec.delta is not None and rec.delta < 0):
        return "hurt"  # the loop's own definition first: a significant fall, or any fall without a test
    return "no_effect"


def _dedupe_key(rec: ExperimentRecord) -> str:
    return describe_changes(rec)


def summary_line(rec: ExperimentRecord) -> str:
    """The record's own lesson when it names the change, else the built line with it appended."""
    auto = lesson_for(rec, rec.objective or "objective")
    if not rec.lesson or rec.lesson == auto:
        return auto
    if describe_changes(rec) in rec.lesson:
        return rec.lesson
    return f"{auto} ({rec.lesson})"


def summarize_lessons(records: Iterable[ExperimentRecord], limit_tokens: int) -> str:
    """A rolling summary (what worked, what was dead or had no effect, what hurt), one line per
    distinct change, newest first, cut to ``limit_tokens``. The newest lessons win the budget."""
    chosen: dict[str, list[str]] = {key: [] for key, _ in SECTIONS}
    seen: set[str] = set()
    candidates: list[tuple[str, str]] = []
    for rec in reversed(list(records)):
        section = classify(rec)
        key = _dedupe_key(rec)
        if section is None or key in seen:
            continue
        seen.add(key)
        candidates.append((section, summary_line(rec)))
    text = ""
    for section, line in candidates:
        chosen[section].append(line)
        trial = render_summary(chosen)
        if count_tokens(trial) > limit_tokens:
            chosen[section].pop()
            continue
        text = trial
    return text


def render_summary(sections: dict[str, Sequence[str]]) -> str:
    blocks = []
    for key, title in SECTIONS:
        if sections.get(key):
            blocks.append(f"{title}:\n" + "\n".join(f"- {line}" for line in sections[key]))
    return "\n".join(blocks)
