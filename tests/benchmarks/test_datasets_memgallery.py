"""Mem-Gallery loader: counts measured on the real topic files, and one-line errors on broken ones."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.datasets import category_names, iter_turns, load_benchmark
from benchmarks.datasets.memgallery import load_memgallery
from harness.errors import DatasetError
from harness.paths import data_dir

REAL = data_dir() / "mem-gallery" / "benchmark" / "data" / "dialog"
needs_data = pytest.mark.skipif(not REAL.is_dir(), reason=f"Mem-Gallery data not at {REAL}")

TOPIC = "AI_Robotics_Automation_Future_Tech"


# --- the real files ------------------------------------------------------------
@needs_data
def test_counts_match_the_release():
    b = load_memgallery()
    stats = b.stats()
    assert b.name == "memgallery"
    assert stats["conversations"] == 20
    assert stats["sessions"] == 240
    assert stats["turns"] == 3962
    assert stats["image_turns"] == 1003
    assert stats["questions"] == 1711
    assert {c: stats[f"questions_{c}"] for c in category_names(b)} == {
        "AR": 184, "CD": 81, "FR": 219, "KR": 81, "MR": 206, "TR": 123, "TTL": 337, "VR": 174, "VS": 306,
    }
    assert len(b.files) == 20 and len(b.sha256) == 64
    assert sum(1 for q in b.questions if q.question_image) == 487
    assert b.notes == ()  # every clue resolves


@needs_data
def test_rounds_become_turns_with_the_reply():
    conv = load_memgallery().conversation(TOPIC)
    assert conv.speakers == ("Julian Vance", "assistant")
    s1 = conv.sessions[0]
    assert (s1.id, s1.index, s1.date_text, s1.date) == ("D1", 1, "2024-06-17", datetime(2024, 6, 17))
    t = conv.turn("D1:3")
    assert t.speaker == "Julian Vance" and t.text == "Can it play a role in the medical field?"
    assert t.response.startswith("Absolutely. AI already assists doctors")
    assert t.response_speaker == "assistant"
    assert t.image_id == "D1:IMG_001"
    assert t.image_caption.startswith("Futuristic hospital operating room")
    assert t.image_path is None  # images are Git LFS objects, absent here
    assert t.dialogue_text.startswith("Julian Vance: Can it play")
    assert "\nassistant: Absolutely." in t.dialogue_text


@needs_data
def test_round_ids_are_unique_and_clues_resolve():
    b = load_memgallery()
    for c in b.conversations:
        ids = [t.id for t in iter_turns(c)]
        assert len(ids) == len(set(ids)), c.id  # round ids never repeat across sessions
        assert all(t.id.startswith(f"{t.session_id}:") for t in iter_turns(c))
        for q in c.questions:
            assert set(q.evidence) <= set(ids)
            assert set(q.session_ids) <= {s.id for s in c.sessions}
    q = b.conversation(TOPIC).questions[0]
    assert (q.id, q.category, q.answer, q.evidence, q.session_ids) == (
        f"{TOPIC}:q0", "VS", "D1:IMG_002", ("D1:4",), ("D1",),
    )
    visual = next(q for q in b.questions if q.question_image)
    assert visual.question_image.startswith("../image/") and visual.question_image_caption
    assert visual.question_image_path is None


@needs_data
def test_cached_and_dispatch(tmp_path):
    first = load_memgallery()
    assert load_memgallery() is first
    assert load_benchmark("mem-gallery") is first
    # the mem-gallery root resolves to its dialog folder
    assert load_memgallery(REAL.parent.parent.parent) is first


# --- images on disk ------------------------------------------------------------
def _topic(**qa_overrides) -> dict:
    qa = {"point": "FR", "question": "What?", "answer": "Tea", "session_id": ["D1"], "clue": ["D1:1"]}
    qa.update(qa_overrides)
    return {
        "character_profile": {"name": "Ana"},
        "multi_session_dialogues": [
            {
                "session_id": "D1",
                "date": "2024-06-17",
                "dialogues": [
                    {"round": "D1:1", "user": "I drink tea.", "assistant": "Nice."},
                    {
                        "round": "D1:2",
                        "user": "Look at this.",
                        "assistant": "A cat.",
                        "image_id": ["D1:IMG_001"],
                        "input_image": ["../image/T/D1_IMG_001.jpg"],
                        "image_caption": ["a cat"],
                    },
                ],
            }
        ],
        "human-annotated QAs": [qa],
    }


def _folder(tmp_path: Path, topic, name: str = "T.json") -> Path:
    dialog = tmp_path / "benchmark" / "data" / "dialog"
    dialog.mkdir(parents=True, exist_ok=True)
    (dialog / name).write_text(topic if isinstance(topic, str) else json.dumps(topic))
    return dialog


def test_image_path_only_for_real_files(tmp_path):
    dialog = _folder(tmp_path, _topic())
    image = dialog.parent / "image" / "T" / "D1_IMG_001.jpg"
    image.parent.mkdir(parents=True)
    image.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 3\n")
    assert load_memgallery(dialog).conversations[0].turn("D1:2").image_path is None  # an LFS pointer
    image.write_bytes(b"\xff\xd8\xff" + bytes(2000))
    turn = load_memgallery(dialog).conversations[0].turn("D1:2")
    assert turn.image_path == str(image.resolve())
    assert turn.image_caption == "a cat" and turn.image_id == "D1:IMG_001"


# --- broken files --------------------------------------------------------------
def _error(tmp_path: Path, topic, **kwargs) -> str:
    with pytest.raises(DatasetError) as info:
        load_memgallery(_folder(tmp_path, topic), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("T.json")
    return message


def test_minimal_valid_folder(tmp_path):
    b = load_memgallery(_folder(tmp_path, _topic()))
    assert b.stats()["turns"] == 2 and b.questions[0].evidence == ("D1:1",)


def test_not_json(tmp_path):
    assert "T.json: not valid JSON" in _error(tmp_path, '{"multi_session_dialogues": [')


def test_missing_key_names_file_and_record(tmp_path):
    topic = _topic()
    del topic["multi_session_dialogues"][0]["dialogues"][1]["assistant"]
    assert _error(tmp_path, topic) == "T.json: session 0 (D1) round 1 (D1:2): missing 'assistant'"
    topic = _topic()
    del topic["human-annotated QAs"]
    assert _error(tmp_path, topic) == "T.json: missing 'human-annotated QAs'"


def test_wrong_types(tmp_path):
    topic = _topic()
    topic["multi_session_dialogues"][0]["dialogues"] = {"round": "D1:1"}
    assert _error(tmp_path, topic) == "T.json: session 0 (D1): 'dialogues' must be list, got object"
    assert _error(tmp_path, _topic(clue=[3])) == "T.json: qa 0: 'clue' entries must be strings, got integer"
    assert _error(tmp_path, []) == "T.json: expected an object, got list"


def test_unknown_category(tmp_path):
    assert "qa 0: unknown category (point) 'XX'" in _error(tmp_path, _topic(point="XX"))


def test_empty_gold_needs_lenient(tmp_path):
    assert "qa 0: empty gold answer for category FR" in _error(tmp_path, _topic(answer=""))
    assert load_memgallery(_folder(tmp_path / "ok", _topic(answer="")), lenient=True).questions[0].answer == ""


def test_integer_answer_becomes_text(tmp_path):
    assert load_memgallery(_folder(tmp_path, _topic(answer=3))).questions[0].answer == "3"


def test_duplicate_round_and_bad_session_reference(tmp_path):
    topic = _topic()
    topic["multi_session_dialogues"][0]["dialogues"][1]["round"] = "D1:1"
    assert "duplicate round id 'D1:1'" in _error(tmp_path, topic)
    assert "qa 0: session_id ['D9'] not in this topic" in _error(tmp_path, _topic(session_id=["D9"]))


def test_two_images_in_a_round_is_an_error(tmp_path):
    topic = _topic()
    topic["multi_session_dialogues"][0]["dialogues"][1]["image_id"] = ["D1:IMG_001", "D1:IMG_002"]
    assert "'image_id' has 2 entries" in _error(tmp_path, topic)


def test_unknown_clue_is_dropped_and_noted(tmp_path):
    b = load_memgallery(_folder(tmp_path, _topic(clue=["D1:1", "D7:7"])))
    assert b.questions[0].evidence == ("D1:1",)
    assert b.notes and "D7:7" in b.notes[0]


def test_missing_folder_points_to_fetch_script(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYS_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match=r"set MEMSYS_DATA_DIR or run: python scripts/fetch_data.py memgallery"):
        load_memgallery()


def test_cache_sees_a_changed_file(tmp_path):
    dialog = _folder(tmp_path, _topic())
    first = load_memgallery(dialog)
    shutil.copy(dialog / "T.json", dialog / "U.json")
    assert len(load_memgallery(dialog).conversations) == 2 and len(first.conversations) == 1
