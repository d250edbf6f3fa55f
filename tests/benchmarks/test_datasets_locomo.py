"""LoCoMo loader: counts measured on the real file, and one-line errors on broken files."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.datasets import category_names, iter_turns, load_benchmark
from benchmarks.datasets.locomo import LOCOMO_SHA256, load_locomo, parse_locomo
from harness.errors import DatasetError
from harness.paths import data_dir

REAL = data_dir() / "locomo" / "locomo10.json"
needs_data = pytest.mark.skipif(not REAL.is_file(), reason=f"LoCoMo data not at {REAL}")


# --- the real file -------------------------------------------------------------
@needs_data
def test_counts_match_the_release():
    b = load_locomo()
    stats = b.stats()
    assert b.name == "locomo"
    assert stats["conversations"] == 10
    assert stats["sessions"] == 272
    assert stats["turns"] == 5882
    assert stats["image_turns"] == 1226  # turns with a blip_caption
    assert stats["questions"] == 1986
    assert {c: stats[f"questions_{c}"] for c in "12345"} == {"1": 282, "2": 321, "3": 96, "4": 841, "5": 446}
    assert b.sha256 == LOCOMO_SHA256
    assert b.version == LOCOMO_SHA256[:12]
    assert [c.id for c in b.conversations] == [
        "conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48", "conv-49", "conv-50",
    ]


@needs_data
def test_records_are_typed_and_consistent():
    b = load_locomo()
    conv = b.conversation("conv-26")
    assert conv.speakers == ("Caroline", "Melanie")
    first = conv.sessions[0]
    assert (first.id, first.index, first.date_text) == ("session_1", 1, "1:56 pm on 8 May, 2023")
    assert first.date == datetime(2023, 5, 8, 13, 56)
    turn = conv.turn("D1:5")
    assert turn.session_id == "session_1" and turn.speaker == "Caroline"
    assert turn.image_caption == "a photo of a dog walking past a wall with a painting of a woman"
    assert turn.image_path is None and turn.timestamp == first.date
    assert [s.index for s in conv.sessions] == list(range(1, 20))
    for c in b.conversations:
        ids = [t.id for t in iter_turns(c)]
        assert len(ids) == len(set(ids)), c.id
        known = set(ids)
        for q in c.questions:
            assert set(q.evidence) <= known, q.id  # every evidence id resolves after repair
            assert q.id.startswith(f"{c.id}:q")
    q0 = conv.questions[0]
    assert (q0.id, q0.answer, q0.category, q0.evidence) == ("conv-26:q0", "7 May 2023", "2", ("D1:3",))
    assert q0.session_ids == ("session_1",)


@needs_data
def test_answers_are_strings_and_adversarial_answers_are_kept():
    b = load_locomo()
    by_id = {q.id: q for q in b.questions}
    assert by_id["conv-26:q1"].question == "When did Melanie paint a sunrise?"
    assert by_id["conv-26:q1"].answer == "2022"  # an int in the file
    adversarial = [q for q in b.questions if q.category == "5"]
    assert all(q.adversarial_answer for q in adversarial)
    assert sum(1 for q in adversarial if q.answer == "") == 444
    assert by_id["conv-26:q167"].answer == "No"  # one of two category-5 items with a real answer
    assert all(q.answer for q in b.questions if q.category != "5")
    assert category_names(b) == {
        "1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial",
    }


@needs_data
def test_malformed_evidence_is_repaired_and_noted():
    b = load_locomo()
    by_id = {q.id: q for q in b.questions}
    assert by_id["conv-26:q37"].evidence == ("D8:6", "D9:17")  # "D8:6; D9:17"
    assert by_id["conv-43:q18"].evidence[4] == "D11:26"  # "D:11:26"
    assert by_id["conv-50:q69"].evidence == ("D30:5",)  # "D30:05"
    assert by_id["conv-49:q31"].evidence == ("D9:1", "D4:4", "D4:6")  # space-separated
    assert by_id["conv-42:q88"].evidence == ("D1:18", "D1:20")  # ["D1:18", "D1:20", "D"]
    assert len(b.notes) == 9
    assert all("\n" not in n for n in b.notes)


@needs_data
def test_load_is_cached_until_the_file_changes(tmp_path):
    """(Parse speed is a figure, not a test: a wall-clock bound failed on a loaded machine.)"""
    assert parse_locomo(REAL) == parse_locomo(REAL)
    copy = tmp_path / "locomo10.json"
    copy.write_bytes(REAL.read_bytes())
    first = load_locomo(copy)
    assert load_locomo(copy) is first  # cached
    os.utime(copy, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert load_locomo(copy) is not first  # a changed mtime reloads
    assert load_benchmark("locomo", copy) == first


# --- broken files --------------------------------------------------------------
def _sample(**qa_overrides) -> dict:
    qa = {"question": "Where?", "answer": "Paris", "evidence": ["D1:1"], "category": 4}
    qa.update(qa_overrides)
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I live in Paris."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!"},
            ],
        },
        "qa": [qa],
    }


def _write(tmp_path: Path, data, name: str = "locomo10.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _error(tmp_path: Path, data, **kwargs) -> str:
    with pytest.raises(DatasetError) as info:
        load_locomo(_write(tmp_path, data), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("locomo10.json")
    return message


def test_minimal_valid_file(tmp_path):
    b = load_locomo(_write(tmp_path, [_sample()]))
    assert b.stats()["turns"] == 2 and b.questions[0].answer == "Paris"


def test_not_json(tmp_path):
    assert "not valid JSON" in _error(tmp_path, "[{'sample_id': ")


def test_wrong_top_level(tmp_path):
    assert _error(tmp_path, {"samples": []}) == "locomo10.json: expected a list of samples, got object"


def test_missing_turn_text_names_file_and_record(tmp_path):
    data = [_sample()]
    del data[0]["conversation"]["session_1"][1]["text"]
    assert _error(tmp_path, data) == "locomo10.json: sample 0 (conv-x) session_1 turn 1 (D1:2): missing 'text'"


def test_wrong_type(tmp_path):
    data = [_sample()]
    data[0]["conversation"]["session_1"][0]["speaker"] = 7
    assert _error(tmp_path, data).endswith("session_1 turn 0 (D1:1): 'speaker' must be string, got integer")


def test_missing_keys(tmp_path):
    data = [_sample()]
    del data[0]["qa"]
    assert _error(tmp_path, data) == "locomo10.json: sample 0 (conv-x): missing 'qa'"
    data = [_sample()]
    del data[0]["sample_id"]
    assert _error(tmp_path, data) == "locomo10.json: sample 0: missing 'sample_id'"
    data = [_sample()]
    del data[0]["conversation"]["session_1_date_time"]
    assert "session_1: missing 'session_1_date_time'" in _error(tmp_path, data)


def test_unknown_category(tmp_path):
    assert _error(tmp_path, [_sample(category=6)]).endswith("qa 0: unknown category 6 (expected 1-5)")


def test_empty_gold_needs_lenient(tmp_path):
    assert "empty gold answer for category 4" in _error(tmp_path, [_sample(answer="  ")])
    b = load_locomo(_write(tmp_path, [_sample(answer="")], name="lenient.json"), lenient=True)
    assert b.questions[0].answer == ""
    # adversarial questions may have no answer at all
    b = load_locomo(_write(tmp_path, [_sample(answer=None, category=5, adversarial_answer="Rome")], "adv.json"))
    assert (b.questions[0].answer, b.questions[0].adversarial_answer) == ("", "Rome")


def test_bad_date_and_duplicate_turn(tmp_path):
    data = [_sample()]
    data[0]["conversation"]["session_1_date_time"] = "someday"
    assert "session_1: bad session_1_date_time" in _error(tmp_path, data)
    data = [_sample()]
    data[0]["conversation"]["session_1"][1]["dia_id"] = "D1:1"
    assert "duplicate dia_id 'D1:1'" in _error(tmp_path, data)


def test_bool_is_not_a_number(tmp_path):
    assert "'answer' must be string or integer or number, got boolean" in _error(tmp_path, [_sample(answer=True)])


def test_missing_data_points_to_fetch_script(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYS_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match=r"set MEMSYS_DATA_DIR or run: python scripts/fetch_data.py locomo"):
        load_locomo()
    with pytest.raises(DatasetError, match="unknown benchmark 'squad'"):
        load_benchmark("squad")
