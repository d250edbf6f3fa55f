"""The shared parts of the reader-run compositions (research/perf/reader_runs.py)."""

from __future__ import annotations

import json

import pytest

from memsys.answer.generate import ABSTAIN_TEXT
from research.perf.reader_runs import abstained, named, paired, presets, read_run


def test_named_and_presets_parse_the_command_line_and_reject_a_bare_name():
    assert named("omni=bench-1,naive_rag=/tmp/run") == {"omni": "bench-1", "naive_rag": "/tmp/run"}
    assert presets("omni=omni:answer.abstain=off;memory.retrieval.top_k=8,n=naive_rag:,naive") == {
        "omni": ("omni", ["memory.answer.abstain=off", "memory.retrieval.top_k=8"]), "n": ("naive_rag", []),
        "naive": ("naive", [])}
    with pytest.raises(SystemExit, match="'omni': expected name=value"):
        named("omni")


def test_read_run_reads_a_finished_run_and_names_an_unfinished_or_damaged_one(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "predictions.jsonl").write_text(json.dumps({"question_id": "q1"}) + "\n")
    run_dir, rows = read_run(str(tmp_path / "done"))
    assert run_dir == tmp_path / "done" and rows == [{"question_id": "q1"}]
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "predictions.jsonl").write_text('{"question_id": "q1"}\n{"question_id": "q')
    with pytest.raises(SystemExit, match=r"predictions.jsonl:2: not a JSON row .*damaged"):
        read_run(str(tmp_path / "torn"))
    (tmp_path / "killed").mkdir()
    with pytest.raises(SystemExit, match="killed: no predictions.jsonl"):
        read_run(str(tmp_path / "killed"))


def test_an_abstained_row_keeps_its_identity_and_loses_its_context():
    row = {"question_id": "q1", "category": "5", "prediction": "Ohio", "context_ids": ["D1:1"], "context_tokens": 40,
           "prompt_tokens": 300, "scores": {"f1": 0.0}}
    out = abstained(row, {"f1": 1.0})
    assert out["question_id"] == "q1" and out["prediction"] == ABSTAIN_TEXT and out["scores"] == {"f1": 1.0}
    assert out["context_ids"] == [] and out["prompt_tokens"] == 0 and out["abstained"] is True
    assert row["prediction"] == "Ohio"  # the run's own row is not changed


def test_paired_reports_the_shared_questions_only():
    assert paired({"a": 1.0}, {"b": 0.0}) is None
    d = paired({"a": 1.0, "b": 1.0, "c": 0.5}, {"a": 0.0, "b": 1.0, "c": 0.5, "d": 0.0})
    assert d["n"] == 3 and d["delta"] == pytest.approx(1 / 3, abs=1e-4) and d["ci"][0] <= d["delta"] <= d["ci"][1]
