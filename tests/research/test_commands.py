"""What `memsys run` prints (research/report/terminal.py, used by research/commands.py): rendered by a real rich
Console into a string, at 80 columns without a terminal, as CI logs and newcomers piping to a file see it."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from research.failures import POLICIES, Failure, FailureClass
from research.journal.trajectory import ExperimentRecord
from research.report.terminal import (
    PROGRESS_STEP,
    EventPrinter,
    print_lines,
    print_trajectory,
    summary_lines,
    trajectory_lines,
    wrap_lines,
)

WIDTH = 80
LONG_HYPOTHESIS = ("Raise memory.retrieval.top_k from 5 to 12 and merge dense and BM25 candidates by set union, so that "
                   "multi-hop questions whose two supporting turns sit in different sessions get both of them into the "
                   "reader's context [without] losing the single-hop precision; expected +2 points of evidence recall")
TEST = {"n": 152, "mean_delta": 0.031, "ci_low": 0.012, "ci_high": 0.049, "p_better": 0.002, "p_worse": 0.998}


def failure(cls: FailureClass, message: str, stage: str) -> dict:
    p = POLICIES[cls]
    return Failure(cls, p.severity, p.is_infrastructure, message, suggested_fix=p.suggested_fix).to_dict() | {"stage": stage}


def record(index: int, decision: str, value: float | None = None, **kw) -> ExperimentRecord:
    best_before = kw.pop("best_before", 0.40 if index else None)
    return ExperimentRecord(
        run_id="run-t", index=index, experiment_id=f"exp-{index:03d}", proposer=kw.pop("proposer", "llm" if index else "baseline"),
        parent_commit="c0", decision=decision, objective="recall_at_10", objective_value=value, best_before=best_before,
        delta=None if value is None or best_before is None else round(value - best_before, 6), **kw)


@pytest.fixture
def records() -> list[ExperimentRecord]:
    return [
        record(0, "baseline", 0.40),
        record(1, "proceed", 0.431, proposer="hybrid", hypothesis=LONG_HYPOTHESIS, discovery_type="hyperparameter_tuning",
               proposed_type="architectural_change", config_overrides=["memory.retrieval.top_k=12",
                                                                       "memory.retrieval.merge=set_union"],
               test=TEST, lesson="a deeper union of dense and BM25 candidates helps the multi-hop questions most"),
        record(2, "rejected", hypothesis="Raise top_k to 12 again", discovery_type="hyperparameter_tuning",
               failure=failure(FailureClass.IDENTICAL_CONDITIONS, "proposal repeats exp-001 (same changes, same parent "
                               "commit); skipped without evaluating", "propose")),
        record(3, "rejected", hypothesis="Rename a local variable in the answer prompt builder for clarity",
               discovery_type="prompt_engineering", edits=[{"path": "memsys/answer.py", "search": "a", "replace": "b"}],
               failure=failure(FailureClass.NO_EFFECT, "screen: 152 questions, no retrieved context changed", "screen")),
        record(4, "failed", hypothesis="Use a spaCy parser for dates", discovery_type="data_pipeline_repair",
               failure=failure(FailureClass.DEPENDENCY, "ModuleNotFoundError: No module named 'spacy'", "evaluate"),
               healing=[{"attempt": 1, "action": "revert_import_edit", "result": "failed again"}]),
        record(5, "iterate", 0.4301, proposer="optuna", hypothesis="optuna trial 4: top_k=11",
               config_overrides=["memory.retrieval.top_k=11"], discovery_type="hyperparameter_tuning",
               best_before=0.431, lesson=""),
    ]


def render(width: int = WIDTH, terminal: bool = False) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=terminal, color_system=None if not terminal else "standard"), buf


def flat(text: str) -> str:
    return "".join(text.split())


# --- the closing table ------------------------------------------------------------------
def test_closing_table_fits_80_columns_and_keeps_hypotheses_whole(records):
    console, buf = render()
    print_trajectory(console, records, "trajectory of run-t (objective recall_at_10)")
    out = buf.getvalue()
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert all(line == line.rstrip() for line in lines)  # no padding to the width in a log file
    assert "\x1b[" not in out  # no colour codes without a terminal
    for r in records[1:]:  # every hypothesis, every word, in order (wrapped, never cut)
        assert " ".join(r.hypothesis.split()) in " ".join(line.strip() for line in lines)
    assert "[without]" in out  # square brackets are text, not rich markup
    header = lines[1].split()
    assert header == ["exp", "proposer", "decision", "value", "delta", "type"]
    rows = {line.split()[0]: line.split() for line in lines if re.match(r"^exp-\d{3} ", line)}
    assert rows["exp-000"] == ["exp-000", "baseline", "baseline", "0.4000", "-"]
    assert rows["exp-001"] == ["exp-001", "hybrid", "proceed", "0.4310", "+0.0310", "HP/AC"]  # classified/proposed
    assert rows["exp-002"] == ["exp-002", "llm", "rejected", "-", "HP"]
    assert rows["exp-005"][1:] == ["optuna", "iterate", "0.4301", "-0.0009", "HP"]
    # one column layout for every row: the decision starts under its header
    at = lines[1].index("decision")
    assert all(line[at:].startswith(rows[line[:7]][2]) for line in lines if line[:7] in rows)


def test_closing_table_names_rejections_changes_and_lessons(records):
    console, buf = render()
    print_trajectory(console, records)
    out = " ".join(line.strip() for line in buf.getvalue().splitlines())
    assert "rejected, repeat: proposal repeats exp-001" in out
    assert "rejected, no effect (screened): screen: 152 questions" in out
    assert "unclassified" not in out and "identical_conditions" not in out
    assert "dependency: ModuleNotFoundError: No module named 'spacy'" in out
    assert "overrides memory.retrieval.top_k=12 memory.retrieval.merge=set_union" in out
    assert "edits memsys/answer.py" in out
    assert "lesson: a deeper union of dense and BM25 candidates helps the multi-hop questions most" in out
    assert "HP hyperparameter tuning" in out and "X/Y: classified X, proposed as Y" in out


def test_closing_summary_of_memsys_run(records, tmp_path):
    console, buf = render()
    ui = f"mlflow ui --backend-store-uri sqlite:///{tmp_path}/runs/mlflow.db --host 127.0.0.1 --port 5000"
    print_lines(console, summary_lines(console, records, run_id="run-t", run_dir=tmp_path / "runs" / "run-t",
                                       objective="recall_at_10", best_value=0.431 + 1e-12, best_commit="0123456789abcdef",
                                       elapsed_s=1234.4, ui=ui))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[0] == "trajectory of run-t (objective recall_at_10)"
    assert "best 0.4310 (start 0.4000) at commit 0123456789" in lines
    assert "6 experiments in 1234s; best ref refs/autoresearch/run-t/best" in lines
    tail = lines[lines.index("inspect:"):]
    assert "  memsys report run-t" in tail and "  git log refs/autoresearch/run-t/best" in tail
    assert flat(ui) in flat("".join(tail))


def test_narrow_and_unbreakable_text_still_fits(records):
    token = "memsys/" + "very_long_module_name_" * 6 + ".py"
    records[1].hypothesis = f"Edit {token} to cache the embeddings"
    for width in (40, 80, 120):
        console, buf = render(width)
        print_trajectory(console, records, "t")
        lines = buf.getvalue().splitlines()
        assert max(len(line) for line in lines) <= width
        assert flat(records[1].hypothesis) in flat(buf.getvalue())  # folded, every character kept


def test_wrap_lines_indents_continuations_and_keeps_every_character():
    console, _ = render(30)
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu " + "x" * 45
    lines = [line.plain for line in wrap_lines(console, text, first="> ", indent="  ")]
    assert lines[0].startswith("> alpha") and all(line.startswith("  ") for line in lines[1:])
    assert max(len(line) for line in lines) <= 30
    assert flat("".join(lines)).replace(">", "") == flat(text)


# --- the printer --------------------------------------------------------------------------
def test_stage_lines_name_the_stage():
    console, buf = render()
    printer = EventPrinter(console)
    for stage, detail in [("propose", "llm researcher, mode new"), ("screen", "152 questions, reader-free"),
                          ("apply", ""), ("evaluate", "152 questions in the bwrap sandbox"), ("check", "disjoint slice"),
                          ("decide", "proceed"), ("record", "")]:
        printer("stage", {"experiment": "exp-003", "stage": stage, "detail": detail})
    assert buf.getvalue().splitlines() == [
        "exp-003 propose: llm researcher, mode new", "exp-003 screen: 152 questions, reader-free", "exp-003 apply",
        "exp-003 evaluate: 152 questions in the bwrap sandbox", "exp-003 check: disjoint slice", "exp-003 decide: proceed",
        "exp-003 record"]


def test_progress_is_throttled_without_a_terminal():
    console, buf = render()
    printer = EventPrinter(console)
    printer("stage", {"experiment": "exp-003", "stage": "evaluate", "detail": "152 questions"})
    for done in range(1, 153):
        printer("progress", {"experiment": "exp-003", "stage": "evaluate", "done": done, "total": 152})
    printer("progress", {"experiment": "exp-003", "stage": "evaluate", "done": 152, "total": 152})  # repeated: once
    lines = buf.getvalue().splitlines()[1:]
    assert len(lines) <= 1 / PROGRESS_STEP + 1
    assert lines[0] == "exp-003 evaluate: 16/152 questions" and lines[-1] == "exp-003 evaluate: 152/152 questions"
    done = [int(re.search(r"(\d+)/152", line)[1]) for line in lines]
    assert all(b - a >= PROGRESS_STEP * 152 for a, b in zip(done, done[1:-1]))
    # a small total: every step may print, and a new evaluation (stage event) starts over
    printer("stage", {"experiment": "exp-004", "stage": "evaluate", "detail": ""})
    for done in (1, 2, 3):
        printer("progress", {"experiment": "exp-004", "stage": "evaluate", "done": done, "total": 3})
    assert buf.getvalue().splitlines()[-3:] == [f"exp-004 evaluate: {n}/3 questions" for n in (1, 2, 3)]


def test_progress_on_a_terminal_is_one_live_line_then_the_total():
    console, buf = render(terminal=True)
    printer = EventPrinter(console)
    for done in range(1, 41):
        printer("progress", {"experiment": "exp-001", "stage": "evaluate", "done": done, "total": 40})
    printer("experiment", {"record": record(1, "iterate", 0.41, hypothesis="h"), "best": 0.42})
    printer.close()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert plain.count("exp-001 evaluate: 40/40 questions\n") == 1  # the final count as a line of its own
    assert "exp-001 iterate 0.4100" in plain


def test_experiment_event_shows_decision_value_delta_ci_and_lesson(records):
    console, buf = render()
    printer = EventPrinter(console)
    for r in records:
        printer("experiment", {"record": r, "best": 0.431})
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[0] == "exp-000 baseline 0.4000"
    assert "exp-001 proceed 0.4310 Δ +0.0310 CI [+0.0120, +0.0490]; p 0.002; n 152" in lines
    text = " ".join(line.strip() for line in lines)
    assert "lesson: a deeper union of dense and BM25 candidates helps the multi-hop questions most" in text
    assert " ".join(LONG_HYPOTHESIS.split()) in text
    assert "exp-002 rejected: repeat, not evaluated" in lines
    assert "exp-003 rejected: no effect (screened), not evaluated" in lines
    assert "exp-004 failed" in lines and "dependency: ModuleNotFoundError: No module named 'spacy'" in text
    assert "exp-005 iterate 0.4301 Δ -0.0009" in lines  # no paired test recorded: no CI


def test_unknown_events_and_missing_fields_are_ignored():
    console, buf = render()
    printer = EventPrinter(console)
    printer("a_future_event", {"anything": 1})
    printer("progress", {"experiment": "exp-001", "done": 3})  # no total: nothing to scale by
    printer("progress", {"experiment": "exp-001", "done": "x", "total": None})
    printer("experiment", {})
    assert buf.getvalue() == ""
    printer("stage", {})
    printer("heal", {"experiment": "exp-001"})
    printer("sandbox", {"backend": "bwrap", "guarantees": ["no network", "read-only scorer"], "weak": False})
    printer("confirmed", {"line": "recall_at_10: dev 0.4000 -> 0.4310 | test (full) 0.3900 -> 0.4200"})
    out = buf.getvalue().splitlines()
    assert out[0] == "? ?" and out[1].startswith("  heal exp-001 #?")
    assert out[2] == "sandbox bwrap: no network, read-only scorer"
    assert out[3].startswith("held-out recall_at_10: dev 0.4000")


def test_trajectory_lines_of_no_records():
    console, _ = render()
    lines = [line.plain for line in trajectory_lines(console, [], "empty run")]
    assert lines[0] == "empty run" and lines[1].split() == ["exp", "proposer", "decision", "value", "delta", "type"]


def test_executor_and_node_lines():
    console, buf = render()
    printer = EventPrinter(console)
    printer("executor", {"executor": "ray", "detail": "3 node(s), 2 CPUs, connected"})
    printer("started", {"experiment": "exp-002", "stage": "screen", "node": "8c5d99567391abcdef", "host": "box"})
    printer("placed", {"experiment": "exp-002", "stage": "screen", "node": "8c5d99567391abcdef", "host": "box",
                       "untrusted_s": 26.44})
    printer("started", {"experiment": "exp-003"})  # fields missing: still one line, never an error
    printer("placed", {"experiment": "exp-003"})
    assert buf.getvalue().splitlines() == ["executor ray: 3 node(s), 2 CPUs, connected",
                                           "exp-002 screen on node 8c5d99567391: started on box",
                                           "exp-002 screen: ran on node 8c5d99567391 (box) in 26.4 s",
                                           "exp-003 ? on node ?: started on ?",
                                           "exp-003 ?: ran on node ? (?)"]
