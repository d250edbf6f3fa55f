"""Structured config (memsys.config): paper defaults, presets, loud failures on typos."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.paths import config_dir
from memsys.config import MemoryConfig, load_memory_config, to_container, validate
from memsys.retrieve.merge import MERGERS

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "memory").glob("*.yaml"))


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_omni_preset_has_the_paper_defaults_and_what_issue_14_measured_best():
    cfg = load_memory_config("omni")
    assert cfg.name == "omni"
    assert (cfg.retrieval.top_k, cfg.retrieval.dense_k, cfg.retrieval.sparse_k) == (40, 20, 20)
    r = cfg.retrieval
    assert (r.merge, r.speaker_first, r.speaker_lift, r.time_lift) == ("rrf", False, 15, 10)
    assert (cfg.ingest.index_text.dense, cfg.ingest.index_text.sparse) == ("speaker_date", "speaker")
    assert cfg.pyramid.enabled and cfg.pyramid.theta == 0.4 and cfg.pyramid.budget_tokens == 6000
    assert cfg.embedder.model == "all-MiniLM-L6-v2" and cfg.embedder.dim == 384
    assert cfg.answer.response_format is True


def test_schema_defaults_are_the_paper_defaults_too():
    cfg = MemoryConfig()
    assert (cfg.retrieval.top_k, cfg.retrieval.merge, cfg.pyramid.theta, cfg.pyramid.budget_tokens,
            cfg.embedder.dim) == (20, "set_union", 0.4, 6000, 384)
    assert (cfg.ingest.text.window, cfg.ingest.text.reject_above, cfg.ingest.text.uncertain_above) == (50, 0.8, 0.5)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_loads_and_names_a_known_merge(preset):
    cfg = load_memory_config(preset)
    assert isinstance(cfg, MemoryConfig) and cfg.name == preset
    assert cfg.retrieval.merge in MERGERS
    assert cfg.retrieval.sparse_backend in ("bm25s", "rank_bm25")


def test_naive_preset_is_the_weak_starting_point():
    cfg = load_memory_config("naive")
    assert (cfg.retrieval.top_k, cfg.retrieval.merge, cfg.pyramid.enabled) == (5, "dense_only", False)


def test_valid_overrides_apply():
    cfg = load_memory_config("omni", ["memory.pyramid.theta=0.25", "memory.retrieval.merge=rrf"])
    assert cfg.pyramid.theta == 0.25 and cfg.retrieval.merge == "rrf"


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("memory.retrieval.topk=5", "topk"),  # typo of an existing key
        ("+memory.retrieval.topk=5", "topk"),  # forced add: the schema still refuses it
        ("memory.retrieval.top_k=many", "top_k"),  # wrong type
        ("memory.pyramid.enabled=maybe", "enabled"),
        ("memory=nosuchpreset", "nosuchpreset"),
        ("memory.retrieval", "memory.retrieval"),  # malformed override
    ],
)
def test_bad_overrides_fail_loudly(override, fragment):
    with pytest.raises(ConfigError) as info:
        load_memory_config("omni", [override])
    assert fragment in one_line(info.value)


def test_unknown_preset_fails_loudly():
    with pytest.raises(ConfigError) as info:
        load_memory_config("omnii")
    assert "omnii" in one_line(info.value)


@pytest.fixture
def config_copy(tmp_path, monkeypatch):
    dst = tmp_path / "configs"
    shutil.copytree(config_dir(), dst)
    monkeypatch.setenv("MEMSYS_CONFIG_DIR", str(dst))
    return dst


def test_unknown_key_in_a_preset_file_fails_loudly(config_copy):
    (config_copy / "memory" / "typo.yaml").write_text("name: typo\nretrieval:\n  topk: 5\n")
    with pytest.raises(ConfigError) as info:
        load_memory_config("typo")
    message = one_line(info.value)
    assert "topk" in message and "typo" in message


def test_wrong_type_and_unknown_section_in_a_preset_file(config_copy):
    (config_copy / "memory" / "badtype.yaml").write_text("pyramid:\n  budget_tokens: lots\n")
    with pytest.raises(ConfigError, match="budget_tokens"):
        load_memory_config("badtype")
    (config_copy / "memory" / "badsection.yaml").write_text("retreival:\n  top_k: 5\n")
    with pytest.raises(ConfigError, match="retreival"):
        load_memory_config("badsection")


def test_validate_dicts_and_round_trip():
    cfg = load_memory_config("omni")
    assert validate(MemoryConfig, to_container(cfg)) == cfg
    with pytest.raises(ConfigError, match="colour"):
        validate(MemoryConfig, {"pyramid": {"colour": "red"}})
    with pytest.raises(ConfigError, match="theta"):
        validate(MemoryConfig, {"pyramid": {"theta": "high"}})
