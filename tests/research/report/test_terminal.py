"""research/report/terminal.py at 80 columns (issue #48): an experiment's overrides are one line of the levers
that moved from its parent, not a TPE draw's 47 overrides; the closing table and summary fit the console.

Rendered by a real rich Console into a string, as CI logs and newcomers piping to a file see it.
"""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from research.journal.trajectory import ExperimentRecord
from research.levers.study import field_levers, overrides_of
from research.report.terminal import (
    changed_levers,
    overrides_line,
    parent_record,
    print_lines,
    trajectory_lines,
)
from tests.support.records import make_record

WIDTH = 80
#: what a TPE draw changes from its parent in these tests (the other levers keep the parent's value)
MOVED = ("retrieval.top_k", "retrieval.merge", "pyramid.theta", "graph.enabled", "answer.max_tokens")


def rec(index: int, decision: str = "iterate", *, commit: str, parent: str, overrides: list[str] | None = None,
        **kw) -> ExperimentRecord:
    r = make_record(index, decision, kw.pop("value", 0.4), "hyperparameter_tuning", kw.pop("best_before", 0.4),
                    run_id="run-t", proposer=kw.pop("proposer", "optuna"), objective="context_recall", commit=commit,
                    config_overrides=list(overrides or []), **kw)
    r.parent_commit = parent
    return r


def tpe_draw(moved: tuple[str, ...] = ()) -> list[str]:
    """A TPE draw over the real lever catalogue (research.levers.study): one override per field lever."""
    values = {}
    for lv in field_levers():
        bump = lv.id in moved
        if lv.kind == "bool":
            values[lv.id] = bump
        elif lv.kind == "choice":
            values[lv.id] = lv.choices[1 if bump else 0]
        elif lv.kind == "int":
            values[lv.id] = int(lv.low) + (3 if bump else 0)
        else:
            values[lv.id] = round(float(lv.low) + (0.05 if bump else 0.0), 3)
    return overrides_of(values)


def tpe_run() -> list[ExperimentRecord]:
    """baseline; a TPE draw off it (every value new to the journal); a TPE draw off that one moving MOVED."""
    base = rec(0, "baseline", commit="c0", parent="c0", proposer="baseline", hypothesis="baseline: the starting configuration")
    first = rec(1, "proceed", commit="c1", parent="c0", value=0.45, overrides=tpe_draw(),
                hypothesis="TPE sample of the config space (step seed 1)")
    second = rec(2, "iterate", commit="c2", parent="c1", value=0.44, best_before=0.45, overrides=tpe_draw(MOVED),
                 hypothesis="TPE sample of the config space (step seed 2)", lesson="the union did not help here")
    return [base, first, second]


def render(lines) -> list[str]:
    console = Console(width=WIDTH, record=True, file=io.StringIO())
    print_lines(console, lines)
    return console.export_text().splitlines()


def block(lines: list[str], exp: str) -> list[str]:
    """The lines of one experiment in the closing table: its row and what is printed below it."""
    start = next(n for n, line in enumerate(lines) if line.startswith(exp + " "))
    end = next((n for n in range(start + 1, len(lines)) if re.match(r"^(exp-\d{3} |type: )", lines[n])), len(lines))
    return lines[start:end]


# --- changed_levers: pure, on hand-made records ------------------------------------------------------------------
def test_changed_levers_are_the_overrides_that_differ_from_the_parents():
    parent = rec(1, commit="c1", parent="c0", overrides=["retrieval.top_k=20", "pyramid.theta=0.4", "retrieval.merge=rrf",
                                                          "graph.enabled=true", "answer.max_tokens=64"])
    child = rec(2, commit="c2", parent="c1", overrides=[
        "retrieval.dense_k=40",  # the parent does not set it: new value alone
        "retrieval.top_k=31", "memory.pyramid.theta=0.35",  # moved ("memory." or not, the same lever)
        "retrieval.merge=rrf", "graph.enabled=True", "answer.max_tokens = 64.0",  # unchanged, however written
    ])
    assert changed_levers(child, parent) == ["retrieval.top_k=20→31", "memory.pyramid.theta=0.4→0.35",
                                             "retrieval.dense_k=40"]
    assert changed_levers(child, None) == ["retrieval.dense_k=40", "retrieval.top_k=31", "memory.pyramid.theta=0.35",
                                           "retrieval.merge=rrf", "graph.enabled=True", "answer.max_tokens=64.0"]
    assert changed_levers(rec(3, commit="c3", parent="c1"), parent) == []  # a code edit: no overrides


def test_parent_record_is_the_parent_commits_record_with_its_ancestry():
    base = rec(0, "baseline", commit="c0", parent="c0")
    one = rec(1, "proceed", commit="c1", parent="c0", overrides=["retrieval.top_k=20", "pyramid.theta=0.4"])
    two = rec(2, "proceed", commit="c2", parent="c1", overrides=["retrieval.top_k=25"])
    refused = rec(3, "rejected", commit="c2", parent="c2")  # a refused edit keeps its parent's commit
    child = rec(4, commit="c4", parent="c2", overrides=["retrieval.top_k=25", "pyramid.theta=0.5", "graph.hops=2"])
    records = [base, one, two, refused, child]
    parent = parent_record(child, records)
    assert parent is not None and parent.experiment_id == "exp-002"
    assert parent.config_overrides == ["retrieval.top_k=20", "pyramid.theta=0.4", "retrieval.top_k=25"]
    assert two.config_overrides == ["retrieval.top_k=25"]  # the journal's record is left as it is
    assert changed_levers(child, parent) == ["pyramid.theta=0.4→0.5", "graph.hops=2"]
    assert parent_record(base, records) is None  # the baseline is its own parent commit
    assert parent_record(rec(5, commit="c5", parent="elsewhere"), records) is None


def test_overrides_line_is_one_line_of_the_width():
    parent = rec(1, commit="c1", parent="c0", overrides=tpe_draw())
    child = rec(2, commit="c2", parent="c1", overrides=tpe_draw(MOVED))
    line = overrides_line(child, parent, 76)
    assert len(line) <= 76 and line.startswith("overrides retrieval.top_k=2→5 ")
    assert line.endswith(" more, 42 unchanged)")
    assert overrides_line(child, parent, 500) == ("overrides retrieval.top_k=2→5 retrieval.merge=set_union→rrf "
                                                  "pyramid.theta=0.0→0.05 graph.enabled=false→true "
                                                  "answer.max_tokens=16→19 (42 unchanged)")
    assert overrides_line(parent, parent, 76) == "overrides: all 47 as in the parent"
    assert overrides_line(child, None, 20) == "overrides retrieval.top_k=5 (+46 more)"  # the first always


# --- the closing table ---------------------------------------------------------------------------------------------
def test_a_tpe_draw_shows_one_line_of_changed_levers_at_80_columns():
    records = tpe_run()
    assert len(records[2].config_overrides) == 47
    lines = render(trajectory_lines(Console(width=WIDTH), records, "trajectory of run-t (objective context_recall)"))
    assert max(len(line) for line in lines) <= WIDTH
    assert len(lines) < 15  # not a screen of overrides
    second = block(lines, "exp-002")
    changes = [line for line in second if "overrides" in line]
    assert changes == [next(line for line in second if line.startswith("    overrides retrieval.top_k=2→5 "))]
    assert "42 unchanged" in changes[0] and "retrieval.dense_k" not in "\n".join(second)
    assert "    lesson: the union did not help here" in second
    first = block(lines, "exp-001")  # off the baseline: nothing known of the parent's values, still one line
    changes = [line for line in first if "overrides" in line]
    assert len(changes) == 1 and re.search(r" \(\+4\d more\)$", changes[0])
    # the record keeps the whole draw (trajectory.jsonl and the HTML report show it)
    assert records[2].config_overrides == tpe_draw(MOVED)


def test_overrides_and_edits_share_a_line_only_when_both_fit():
    base = rec(0, "baseline", commit="c0", parent="c0")
    small = rec(1, commit="c1", parent="c0", overrides=["retrieval.top_k=12"],
                edits=[{"path": "memsys/answer.py", "search": "a", "replace": "b"}])
    big = rec(2, commit="c2", parent="c0", overrides=tpe_draw(), edits=[{"path": "memsys/answer.py", "search": "a",
                                                                         "replace": "b"}])
    lines = render(trajectory_lines(Console(width=WIDTH), [base, small, big]))
    assert "    overrides retrieval.top_k=12; edits memsys/answer.py" in block(lines, "exp-001")
    second = block(lines, "exp-002")
    assert sum("overrides" in line for line in second) == 1 and "    edits memsys/answer.py" in second


def test_not_taken_is_whole_in_the_decision_column():
    lines = render(trajectory_lines(Console(width=WIDTH), [*tpe_run(), rec(3, "not_taken", commit="c3", parent="c1")]))
    assert block(lines, "exp-003")[0].split()[:3] == ["exp-003", "optuna", "not_taken"]


@pytest.mark.parametrize("width", [40, 80, 120])
def test_the_closing_table_fits_any_console(width):
    console = Console(width=width, record=True, file=io.StringIO())
    print_lines(console, trajectory_lines(console, tpe_run(), "t"))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width and "…" not in "\n".join(lines)


def test_memsys_run_closing_summary_at_COLUMNS_80(monkeypatch, tmp_path):
    """What cmd_run prints at the end (research.commands.print_summary), on a console sized by COLUMNS."""
    from research.commands import print_summary

    monkeypatch.setenv("COLUMNS", "80")
    console = Console(record=True, file=io.StringIO())
    assert console.width == 80
    records = tpe_run()
    loop = SimpleNamespace(records=records, run_id="run-t", run_dir=tmp_path / "runs" / "run-t",
                           setup=SimpleNamespace(eval=SimpleNamespace(objective="context_recall")),
                           state=SimpleNamespace(best_value=0.45, best_commit="c1" * 10, elapsed_s=812.0,
                                           confirmation=None))
    print_summary(console, loop)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in "\n".join(lines)
    assert sum("overrides" in line for line in lines) == 2  # one per TPE draw
    assert "best 0.4500 (start 0.4000) at commit c1c1c1c1c1" in lines
    assert "3 experiments in 812s; best ref refs/autoresearch/run-t/best" in lines
