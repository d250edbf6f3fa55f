"""The one writer of bench results (harness/bench_output.py), used by benchmarks/perf and research/perf:
real files in a temporary folder."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone

from harness.bench_output import command, load_average, utc_now, write_json, write_result


def test_command_names_the_module_and_the_given_arguments():
    assert command("research.perf.bench_reader", ["--split", "dev", "llm=local"]) == \
        "python -m research.perf.bench_reader --split dev llm=local"
    assert command("benchmarks.perf.bench_abstention", []) == "python -m benchmarks.perf.bench_abstention"


def test_command_without_arguments_given_takes_the_process_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench.py", "--out", "x.json"])
    assert command("benchmarks.perf.bench_abstention", None) == "python -m benchmarks.perf.bench_abstention --out x.json"
    assert command("benchmarks.perf.bench_abstention") == "python -m benchmarks.perf.bench_abstention --out x.json"


def test_load_average_is_three_figures_to_two_decimals():
    load = load_average()
    assert isinstance(load, list) and len(load) == 3
    assert all(x >= 0 and round(x, 2) == x for x in load)


def test_utc_now_is_iso_to_the_second_in_utc():
    stamp = datetime.fromisoformat(utc_now())
    assert stamp.tzinfo is not None and stamp.utcoffset() == timedelta(0)
    assert stamp.microsecond == 0
    assert abs(datetime.now(timezone.utc) - stamp) < timedelta(minutes=1)


def test_write_json_makes_the_folder_and_writes_sorted_indented_json(tmp_path):
    out = tmp_path / "bench" / "deeper" / "result.json"
    result = {"z": 1, "a": {"y": [1, 2.5], "b": "é"}, "path": tmp_path}
    write_json(out, result)
    text = out.read_text(encoding="utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert json.loads(text) == {"z": 1, "a": {"y": [1, 2.5], "b": "é"}, "path": str(tmp_path)}
    assert list(json.loads(text)) == ["a", "path", "z"]  # sorted keys
    assert text.startswith('{\n  "a": {\n')  # indented by two
    assert [p.name for p in out.parent.iterdir()] == ["result.json"]  # no temporary file left


def test_write_json_replaces_an_earlier_result(tmp_path):
    out = tmp_path / "result.json"
    write_json(out, {"run": 1, "old": True})
    write_json(str(out), {"run": 2})
    assert json.loads(out.read_text()) == {"run": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_write_result_writes_the_json_and_the_table_beside_it_and_says_where(tmp_path, capsys):
    out = tmp_path / "bench" / "reader.json"
    table = "| variant | F1 |\n|---|---|\n| omni | 0.46 |"
    write_result(out, {"command": command("research.perf.bench_reader", []), "rows": [1]}, table)
    assert json.loads(out.read_text()) == {"command": "python -m research.perf.bench_reader", "rows": [1]}
    assert (tmp_path / "bench" / "reader.md").read_text() == table + "\n"
    assert capsys.readouterr().out == f"{table}\nwrote {out}\n"
