"""The early stop's rules (research.loop.measure): on which nested samples a candidate is answered first.

When it stops a candidate is research.loop.pruning's (tests/research/loop/test_pruning.py); the loop-level
behaviour (a real reader run stopped on a nested sample, its replies reused by the full run, a kill in the
middle) is tested end to end in test_probe_e2e.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.errors import ConfigError
from research.config import load_run_setup, resume_overrides
from research.loop.measure import probe_samples


def loop_of(*overrides: str) -> SimpleNamespace:
    return SimpleNamespace(setup=load_run_setup(["mlflow=false", *overrides]))


def test_the_nested_samples_apply_only_to_reader_objectives_and_only_when_smaller_than_the_run() -> None:
    assert probe_samples(loop_of()) == ["tiny", "small"]  # the default run: reader, sample half (152)
    assert probe_samples(loop_of("sample=full")) == ["tiny", "small"]
    assert probe_samples(loop_of("reader=none")) == []  # the screen's reader-free run is the evaluation
    assert probe_samples(loop_of("sample=small")) == ["tiny"]
    assert probe_samples(loop_of("sample=tiny")) == []  # nothing to save
    assert probe_samples(loop_of("research.loop.probe_samples=[]")) == []
    assert probe_samples(loop_of("research.loop.probe_samples=[small,tiny,small]")) == ["tiny", "small"]  # by size
    assert probe_samples(loop_of("benchmark=memgallery")) == ["tiny", "small"]  # Mem-Gallery's half is 104


def test_an_unknown_sample_or_a_threshold_outside_0_1_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="research.loop.probe_samples: 'smol' is not a sample of locomo"):
        load_run_setup(["research.loop.probe_samples=[tiny,smol]"])
    with pytest.raises(ConfigError, match="probe_p must be in"):
        load_run_setup(["research.loop.probe_p=1.5"])
    with pytest.raises(ConfigError, match="probe_min_questions must be >= 2"):
        load_run_setup(["research.loop.probe_min_questions=1"])


def test_resume_may_turn_the_early_stop_on_or_off_but_not_change_the_sample() -> None:
    raw = {"sample": "half", "research": {"loop": {"probe_samples": ["tiny", "small"]}}}
    assert resume_overrides(raw, ["research.loop.probe_samples=[]"])["research"]["loop"]["probe_samples"] == []
    with pytest.raises(ConfigError, match="research.loop.probe_\\*"):
        resume_overrides(raw, ["sample=small"])
