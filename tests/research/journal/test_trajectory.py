"""The journal's own rules (research.journal.trajectory): resuming from what a kill left, and repeat detection."""

from __future__ import annotations

from pathlib import Path

from research.journal.trajectory import TRAJECTORY_FILE, ExperimentRecord, append_record, measured_with_key, resume_journal


def _rec(i: int, key: str, value: float | None, decision: str) -> ExperimentRecord:
    return ExperimentRecord("r", i, f"exp-{i:03d}", "llm", "base", objective_value=value, decision=decision,
                            effective_key=key)


def test_a_run_killed_before_its_first_record_resumes_with_none(tmp_path: Path) -> None:
    assert resume_journal(tmp_path) == ([], [])


def test_a_line_cut_off_by_a_kill_is_dropped_from_the_file_and_said(tmp_path: Path) -> None:
    append_record(tmp_path, _rec(0, "k0", 0.5, "baseline"))
    append_record(tmp_path, _rec(1, "k1", 0.6, "proceed"))
    path = tmp_path / TRAJECTORY_FILE
    whole = path.read_text()
    path.write_text(whole + '{"run_id": "r", "index": 2, "exp')  # the kill landed mid-write
    records, warnings = resume_journal(tmp_path)
    assert [r.index for r in records] == [0, 1]
    assert len(warnings) == 1 and "cut off mid-line" in warnings[0]
    assert path.read_text() == whole  # repaired on disk, so the next append starts a clean line
    assert resume_journal(tmp_path) == (records, [])


def test_a_repeat_is_found_only_among_measured_records() -> None:
    records = [_rec(0, "base", 0.5, "baseline"), _rec(1, "a", None, "failed"), _rec(2, "b", 0.4, "failed"),
               _rec(3, "c", 0.6, "iterate")]
    assert measured_with_key(records, "base") is records[0]
    assert measured_with_key(records, "c") is records[3]
    assert measured_with_key(records, "a") is None  # never measured: asking again is not a repeat
    assert measured_with_key(records, "b") is None  # its value is a failure's, not a measurement to reuse
    assert measured_with_key(records, "zzz") is None
