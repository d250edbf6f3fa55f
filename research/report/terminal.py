"""What ``memsys run`` / ``memsys quickstart`` print: the loop's events as lines, and the closing table.

Readable at 80 columns and in a file (CI logs, ``memsys quickstart > log``): short fixed columns,
free text (hypotheses, lessons, messages) wrapped on lines of its own, never cut. An experiment's
overrides are the exception: one line of the levers that moved from its parent (``changed_levers``), the
whole list staying in trajectory.jsonl and the HTML report.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from rich.text import Text

from research.journal.taxonomy import DISCOVERY_ABBREV, delta_of, paired_test_text, rejection_kind
from research.journal.trajectory import ExperimentRecord
from research.proposers.base import gains_by_source

#: without a terminal (a file, CI) a progress line at most every this fraction of the total
PROGRESS_STEP = 0.10
INDENT = "    "
MIN_WRAP = 20  # columns of text per line, however narrow the console
DECISION_STYLES = {"baseline": "bold", "proceed": "bold green", "iterate": "yellow", "pivot": "red",
                   "failed": "red", "rejected": "dim"}


def wrap_lines(console: Any, text: Text | str, *, indent: str = INDENT, first: str | None = None,
               style: str = "") -> list[Text]:
    """``text`` wrapped to the console width after ``indent`` (``first`` on the first line), no trailing spaces.

    A str is flattened to one paragraph; a Text keeps its styles.
    """
    first = indent if first is None else first
    body = text.copy() if isinstance(text, Text) else Text(" ".join(str(text).split()), style=style)
    head = body.wrap(console, max(console.width - len(first), MIN_WRAP), overflow="fold")[0]
    cut = len(head.plain)  # wrap keeps every character: the rest starts where the first line ends
    cut += len(body.plain[cut:]) - len(body.plain[cut:].lstrip(" "))
    rest = body[cut:]
    out = [Text(first) + head]
    if rest.plain.strip():
        out += [Text(indent) + line for line in rest.wrap(console, max(console.width - len(indent), MIN_WRAP),
                                                              overflow="fold")]
    for line in out:
        line.rstrip()
    return out


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def value_text(r: ExperimentRecord) -> str:
    """The recorded value; "~" marks one estimated from the questions answered before an early stop (best + paired delta)."""
    return ("~" if stopped_early(r) and r.objective_value is not None else "") + _value(r.objective_value)


def stopped_early(r: ExperimentRecord) -> bool:
    return bool((r.probe or {}).get("stopped"))


def probe_text(r: ExperimentRecord) -> str:
    p = r.probe or {}
    if not p.get("stopped"):
        return ""
    return (f"stopped after the probe: {p.get('questions')} of {p.get('of')} questions ({p.get('sample')}), "
            f"Δ {float(p.get('delta', 0.0)):+.4f} [{float(p.get('ci_low', 0.0)):+.3f}, {float(p.get('ci_high', 0.0)):+.3f}]")


class EventPrinter:
    """The loop's ``on_event`` as terminal lines: one per stage, throttled progress, each experiment's outcome.

    Events of research/loop/research_loop.py (kind, data):

    - ``stage``: {experiment, stage, detail}, stage one of propose | screen | apply | probe | evaluate | check |
      decide | record (any other name is printed as well): "exp-003 screen: 152 questions, reader-free";
    - ``progress``: {experiment, stage, done, total[, unit]}: "exp-003 evaluate: 40/152 questions", on a
      terminal one line updated in place, elsewhere at most one line every PROGRESS_STEP of the total;
    - ``experiment``: {record: ExperimentRecord, best}: decision, value, delta and paired test, then the
      hypothesis, the failure or rejection, and the lesson;
    - ``started``: {experiment, stage, node, host} (executor=ray) as the evaluation starts on a node:
      "exp-004 evaluate on node ab12cd34ef56: started on host-2"; ``placed`` the same when it ends;
    - ``note``: {text}, one line the loop wants the user to see (levers the run's memsys lacks);
    - ``sandbox``, ``propose``, ``heal``, ``confirm``, ``confirmed`` as before.

    Any other kind is ignored, and a missing field never raises (the printer must not stop the loop).
    """

    def __init__(self, console: Any):
        self.console = console
        self._printed: dict[tuple[str, str], int] = {}  # (experiment, stage) -> last "done" printed
        self._status: Any = None  # rich Status of the live progress line (terminal only)
        self._handlers = {"sandbox": self._sandbox, "propose": self._propose, "stage": self._stage,
                          "progress": self._progress, "experiment": self._experiment, "heal": self._heal,
                          "confirm": self._confirm, "confirmed": self._confirmed, "executor": self._executor,
                          "started": self._started, "placed": self._placed, "note": self._note}

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        handler = self._handlers.get(kind)
        if handler is None:
            return
        if kind != "progress":
            self.close()
        handler(data if isinstance(data, dict) else {})

    def close(self) -> None:
        """Take down the live progress line (call before printing anything else, and at the end)."""
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _print(self, *lines: Text) -> None:
        print_lines(self.console, lines)

    def _sandbox(self, d: dict[str, Any]) -> None:
        line = Text(f"sandbox {d.get('backend', '?')}: {', '.join(d.get('guarantees') or [])}", style="dim")
        if d.get("weak"):
            line.append(" (weak: allowed by research.sandbox.allow_weak)", style="red")
        self._print(line)

    def _executor(self, d: dict[str, Any]) -> None:
        self._print(Text(f"executor {d.get('executor', '?')}: {d.get('detail') or 'evaluations run here'}", style="dim"))

    def _note(self, d: dict[str, Any]) -> None:
        self._print(Text(str(d.get("text", "")), style="dim"))

    def _started(self, d: dict[str, Any]) -> None:
        """Where an evaluation's untrusted half started (research.executor=ray), before it ends."""
        self._print(Text(f"{d.get('experiment', '?')} {d.get('stage', '?')} on node {str(d.get('node', '?'))[:12]}: "
                         f"started on {d.get('host', '?')}", style="dim"))

    def _placed(self, d: dict[str, Any]) -> None:
        """Which node ran an evaluation's untrusted half (research.executor=ray)."""
        seconds = d.get("untrusted_s")
        took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
        self._print(Text(f"{d.get('experiment', '?')} {d.get('stage', '?')}: ran on node {str(d.get('node', '?'))[:12]} "
                         f"({d.get('host', '?')}){took}", style="dim"))

    def _propose(self, d: dict[str, Any]) -> None:
        self._print(Text(f"{d.get('experiment', '?')}: asking the {d.get('proposer', '?')} proposer "
                         f"({d.get('mode', '?')})...", style="dim"))

    def _stage(self, d: dict[str, Any]) -> None:
        exp, stage, detail = str(d.get("experiment", "?")), str(d.get("stage", "?")), str(d.get("detail") or "")
        self._printed.pop((exp, stage), None)  # a stage (re)starts: its progress starts over
        line = Text.assemble((exp, "bold"), " ", (stage, "cyan"), (": " + " ".join(detail.split())) if detail else "")
        self._print(*wrap_lines(self.console, line, first=""))

    def _progress(self, d: dict[str, Any]) -> None:
        exp, stage = str(d.get("experiment", "?")), str(d.get("stage", "evaluate"))
        done, total = d.get("done"), d.get("total")
        if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
            return
        text = f"{exp} {stage}: {done}/{total} {d.get('unit', 'questions')}"
        if self.console.is_terminal and done < total:
            if self._status is None:
                self._status = self.console.status(text)
                self._status.start()
            else:
                self._status.update(text)
            return
        last = self._printed.get((exp, stage), 0)
        if done == last or (done < total and done - last < max(1, math.ceil(PROGRESS_STEP * total))):
            return
        self.close()
        self._printed[(exp, stage)] = done
        self._print(Text(text, style="dim"))

    def _experiment(self, d: dict[str, Any]) -> None:
        r = d.get("record")
        if r is None:
            return
        self._print(*experiment_lines(self.console, r))

    def _heal(self, d: dict[str, Any]) -> None:
        self._print(Text(f"  heal {d.get('experiment', '?')} #{d.get('attempt', '?')}: {d.get('failure', '?')} -> "
                         f"{d.get('action', '?')}", style="yellow"))

    def _confirm(self, d: dict[str, Any]) -> None:
        self._print(Text(f"held-out confirmation: baseline and best on the {d.get('split', 'test')} split...", style="dim"))

    def _confirmed(self, d: dict[str, Any]) -> None:
        self._print(Text.assemble(("held-out", "bold"), " ", str(d.get("line", ""))))


def experiment_lines(console: Any, r: ExperimentRecord) -> list[Text]:
    """An experiment's outcome: decision, value, delta with the paired test; then what it tried and learned."""
    head = Text.assemble((r.experiment_id, "bold"), " ", (r.decision, DECISION_STYLES.get(r.decision, "")))
    kind = rejection_kind(r)
    if kind:
        head.append(f": {kind}, not evaluated")
    elif r.objective_value is not None or r.decision not in ("failed", "rejected"):
        head.append(f" {value_text(r)}")
        delta = delta_of(r)
        if delta is not None and r.decision != "baseline":
            head.append(f" Δ {delta:+.4f}")
        test = paired_test_text(r.test)
        if test:
            head.append(f" {test}")
    lines = wrap_lines(console, head, first="")
    if r.hypothesis and r.decision != "baseline":
        lines += wrap_lines(console, r.hypothesis, style="dim")
    text, style = _outcome(r)
    if text:  # a rejection's kind is in the first line already: its message alone here
        lines += wrap_lines(console, str((r.failure or {}).get("message") or "") if kind else text, style=style)
    if probe_text(r):
        lines += wrap_lines(console, probe_text(r), style="dim")
    if r.lesson:
        lines += wrap_lines(console, f"lesson: {r.lesson}")
    return lines


# --- the closing table ---------------------------------------------------------------
TABLE_COLUMNS = ("exp", "proposer", "decision", "value", "delta", "type")
#: widest value a column takes before it is cut (known values always fit)
TABLE_CAPS = {"exp": 12, "proposer": 9, "decision": 9, "type": 11}  # decision: "not_taken" whole
GAP = "  "


def type_abbrev(r: ExperimentRecord) -> str:
    """The classified type's abbreviation, "/" and the researcher's own when the two differ (AC/HP)."""
    def ab(t: str | None) -> str:
        return DISCOVERY_ABBREV.get(t, t) if t else "-"
    if r.proposed_type and r.proposed_type != r.discovery_type:
        return f"{ab(r.discovery_type)}/{ab(r.proposed_type)}"
    return ab(r.discovery_type)


def parent_record(rec: ExperimentRecord, records: Sequence[ExperimentRecord]) -> ExperimentRecord | None:
    """The record whose commit is ``rec``'s parent commit, its ``config_overrides`` widened to every override of
    its ancestry (parent, grandparent, ... down to the baseline): what the journal knows of the config at that
    commit, since each experiment writes its overrides into the preset file on top of its parent's. None when no
    record made that commit. An accepted record (baseline, proceed) wins over another of the same commit (a
    rejected edit keeps its parent's commit as its own)."""
    by_commit: dict[str, ExperimentRecord] = {}
    for r in records:
        if r.commit and (r.commit not in by_commit or r.decision in ("baseline", "proceed")
                         and by_commit[r.commit].decision not in ("baseline", "proceed")):
            by_commit[r.commit] = r
    parent = by_commit.get(rec.parent_commit)
    if parent is None or parent is rec:
        return None
    chain, seen, node = [], set(), parent
    while node is not None and node.commit not in seen and node is not rec:
        chain.append(node)
        seen.add(node.commit)
        node = by_commit.get(node.parent_commit)
    inherited = [o for r in reversed(chain) for o in r.config_overrides]
    return dataclasses.replace(parent, config_overrides=inherited)


def _lever_values(overrides: Sequence[str]) -> dict[str, str]:
    """key -> value of ``key=value`` overrides, the key without its optional ``memory.`` (the last one wins)."""
    out = {}
    for o in overrides:
        if "=" in o:
            key, value = o.split("=", 1)
            out[key.strip().removeprefix("memory.")] = value.strip()
    return out


def _same_value(a: str, b: str) -> bool:
    """Two override values that write the same thing: equal text, booleans in any case, equal numbers."""
    if a == b or a.lower() == b.lower() in ("true", "false"):
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def changed_levers(rec: ExperimentRecord, parent_rec: ExperimentRecord | None) -> list[str]:
    """The overrides of ``rec`` that change something from its parent: "key=old→new" when the parent's value
    is known, "key=new" when not; known changes first, each group in the proposal's order.

    Why: a sampler (TPE, the hybrid's TPE part) writes every lever of its space into each proposal, 47
    overrides of which most repeat the value the parent commit already has; the terminal shows what moved
    and leaves the whole list to trajectory.jsonl and the HTML report. A record keeps no resolved config, so
    the parent's values are the overrides of ``parent_rec`` (``parent_record`` widens them to the parent's
    ancestry): an override whose key the parent sets to the same value is unchanged and left out; a key the
    parent does not set keeps its new value alone (the preset's default is not in the journal).
    ``parent_rec`` None: nothing is known of the parent, every override is shown. Pure: no I/O, no config.
    """
    before = _lever_values(parent_rec.config_overrides) if parent_rec is not None else {}
    known, unknown = [], []
    for o in rec.config_overrides:
        if "=" not in o:
            unknown.append(" ".join(o.split()))
            continue
        key, value = (part.strip() for part in o.split("=", 1))
        old = before.get(key.removeprefix("memory."))
        if old is None:
            unknown.append(f"{key}={value}")
        elif not _same_value(old, value):
            known.append(f"{key}={old}→{value}")
    return known + unknown


def overrides_line(rec: ExperimentRecord, parent_rec: ExperimentRecord | None, width: int) -> str:
    """``changed_levers`` as one line of at most ``width`` characters: "overrides a=1→2 b=3 (+5 more, 40
    unchanged)"; the first lever is always named (folded by the printer if even it is too long)."""
    items = changed_levers(rec, parent_rec)
    unchanged = len(rec.config_overrides) - len(items)
    if not items:
        return f"overrides: all {unchanged} as in the parent"

    def line(k: int) -> str:
        more = [f"+{len(items) - k} more"] if k < len(items) else []
        more += [f"{unchanged} unchanged"] if unchanged else []
        return "overrides " + " ".join(items[:k]) + (f" ({', '.join(more)})" if more else "")

    return next((line(k) for k in range(len(items), 0, -1) if len(line(k)) <= width), line(1))


def _changes(r: ExperimentRecord, parent: ExperimentRecord | None = None, width: int = 76) -> list[str]:
    """What an experiment changed, each line at most ``width`` characters (an edited path longer than that
    is folded by the printer): the overrides that moved (``overrides_line``) and the edited files, on one
    line when both fit."""
    parts = [overrides_line(r, parent, width)] if r.config_overrides else []
    paths = list(dict.fromkeys(str(e.get("path", "?")) for e in r.edits if isinstance(e, dict)))
    if paths:
        parts.append("edits " + ", ".join(paths))
    if len(parts) == 2 and len("; ".join(parts)) > width:
        return parts
    return ["; ".join(parts)] if parts else []


def _outcome(r: ExperimentRecord) -> tuple[str, str]:
    """(text, style) of why an experiment was not evaluated or failed; empty when it was not."""
    f = r.failure if isinstance(r.failure, dict) else {}
    kind = rejection_kind(r)
    message = str(f.get("message") or "")
    if kind:
        return f"rejected, {kind}" + (f": {message}" if message else ""), "dim"
    if f:
        return f"{f.get('cls') or f.get('class') or 'failure'}" + (f": {message}" if message else ""), "red"
    return "", ""


def trajectory_lines(console: Any, records: Sequence[ExperimentRecord], title: str = "") -> list[Text]:
    """One short row per experiment (fits 80 columns), its hypothesis, changes, outcome and lesson below it.

    The changes are the overrides that moved from the parent commit, on one line (``overrides_line``: a TPE
    draw's 47 overrides are in trajectory.jsonl and the HTML report, not here), then the edited files."""
    rows = []
    for r in records:
        delta = delta_of(r)
        rows.append((r.experiment_id, r.proposer, r.decision, value_text(r),
                     "" if delta is None or r.decision == "baseline" else f"{delta:+.4f}", type_abbrev(r)))
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(TABLE_COLUMNS)]
    widths = [min(w, TABLE_CAPS.get(c, w)) for w, c in zip(widths, TABLE_COLUMNS)]
    right = {"value", "delta"}

    def cells(values: Sequence[str]) -> list[str]:
        return [(v[:w].rjust(w) if c in right else v[:w].ljust(w)) for v, w, c in zip(values, widths, TABLE_COLUMNS)]

    lines = wrap_lines(console, Text(title, style="bold"), first="") if title else []
    lines.append(Text(GAP.join(cells(TABLE_COLUMNS)).rstrip(), style="bold"))
    for r, row in zip(records, rows):
        line = Text()
        for n, (cell, column) in enumerate(zip(cells(row), TABLE_COLUMNS)):
            line.append(GAP if n else "")
            line.append(cell, style=DECISION_STYLES.get(r.decision, "") if column == "decision" else "")
        line.rstrip()
        lines.append(line)
        if r.hypothesis and r.decision != "baseline":
            lines += wrap_lines(console, r.hypothesis)
        for change in _changes(r, parent_record(r, records), max(console.width - len(INDENT), MIN_WRAP)):
            lines += wrap_lines(console, change, style="dim")
        text, style = _outcome(r)
        if text:
            lines += wrap_lines(console, text, style=style)
        if probe_text(r):
            lines += wrap_lines(console, probe_text(r), style="dim")
        if r.lesson:
            lines += wrap_lines(console, f"lesson: {r.lesson}", style="dim")
    legend = ", ".join(f"{a} {t.replace('_', ' ')}" for t, a in DISCOVERY_ABBREV.items())
    lines += wrap_lines(console, f"type: {legend}; X/Y: classified X, proposed as Y", first="", style="dim")
    return lines


def gains_line(records: Sequence[ExperimentRecord]) -> str:
    """Where the accepted gains came from (research.proposers.base.gain_source), or "" when none was accepted."""
    parts = [f"{source} {gain:+.4f} ({n})" for source, n, gain in gains_by_source(records)]
    return "gains by source: " + "; ".join(parts) if parts else ""


def summary_lines(console: Any, records: Sequence[ExperimentRecord], *, run_id: str, run_dir: Any, objective: str,
                  best_value: float | None, best_commit: str, elapsed_s: float, ui: str,
                  verdict: str = "") -> list[Text]:
    """What ``memsys run`` prints when it ends: the closing table, the best (with the held-out ``verdict``
    beside it, research/loop/confirm.py), and where to look next."""
    ref = f"refs/autoresearch/{run_id}/best"
    start = records[0].objective_value if records else None
    lines = trajectory_lines(console, records, f"trajectory of {run_id} (objective {objective})")
    held_out = f"; {verdict}" if verdict else ""
    lines += wrap_lines(console, f"best {_value(best_value)} (start {_value(start)}) at commit {best_commit[:10]}{held_out}",
                        first="")
    if gains := gains_line(records):
        lines += wrap_lines(console, gains, first="")
    lines += wrap_lines(console, f"{len(records)} experiments in {elapsed_s:.0f}s; best ref {ref}", first="")
    lines.append(Text("inspect:"))
    for where in (f"{run_dir}/trajectory.jsonl", f"memsys report {run_id}", f"git log {ref}", ui):
        lines += wrap_lines(console, where, first="  ")
    return lines


def print_lines(console: Any, lines: Sequence[Text]) -> None:
    for line in lines:
        console.print(line, soft_wrap=False, overflow="fold", highlight=False)


def print_trajectory(console: Any, records: Sequence[ExperimentRecord], title: str = "") -> None:
    print_lines(console, trajectory_lines(console, records, title))
