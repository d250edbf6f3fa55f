"""The futility probe's rules (research.loop.measure): when it runs, and when it stops a candidate.

The loop-level behaviour (a real reader run stopped at the probe, the probe's replies reused by the full
run) is tested end to end in test_probe_e2e.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.errors import ConfigError
from research.config import load_run_setup, resume_overrides
from research.evaluation.stats import paired_test
from research.loop.measure import probe_applies, probe_verdict


def loop_of(*overrides: str) -> SimpleNamespace:
    return SimpleNamespace(setup=load_run_setup(["mlflow=false", *overrides]))


def test_the_probe_runs_only_for_reader_objectives_on_a_larger_sample() -> None:
    assert probe_applies(loop_of()) == "small"  # the default run: reader, sample half (152) > small (50)
    assert probe_applies(loop_of("sample=full")) == "small"
    assert probe_applies(loop_of("reader=none")) is None  # the screen's reader-free run is the evaluation
    assert probe_applies(loop_of("sample=small")) is None  # nothing to save
    assert probe_applies(loop_of("sample=tiny")) is None
    assert probe_applies(loop_of("research.loop.probe_sample=null")) is None
    assert probe_applies(loop_of("research.loop.probe_sample=tiny", "sample=small")) == "tiny"
    assert probe_applies(loop_of("benchmark=memgallery")) == "small"  # 60 of Mem-Gallery's half (104)


def test_an_unknown_probe_sample_or_a_laxer_alpha_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="research.loop.probe_sample='smol' is not a sample of locomo"):
        load_run_setup(["research.loop.probe_sample=smol"])
    with pytest.raises(ConfigError, match="probe_alpha must be in"):
        load_run_setup(["research.loop.probe_alpha=0.2"])


def test_resume_may_turn_the_probe_on_or_off_but_not_change_the_sample() -> None:
    raw = {"sample": "half", "research": {"loop": {"probe_sample": "small"}}}
    assert resume_overrides(raw, ["research.loop.probe_sample=null"])["research"]["loop"]["probe_sample"] is None
    with pytest.raises(ConfigError, match="research.loop.probe_\\*"):
        resume_overrides(raw, ["sample=small"])


def scores(values: list[float]) -> dict[str, float]:
    return {f"q{i}": v for i, v in enumerate(values)}


def test_only_a_clearly_worse_candidate_is_stopped() -> None:
    best = scores([1.0] * 30)
    def verdict(cand: list[float], **kw: object) -> dict[str, object]:
        return probe_verdict(paired_test(scores(cand), best, confidence=0.95), sample="small", of=152, alpha=0.01, **kw)

    worse = verdict([0.0] * 10 + [1.0] * 20)  # 10 of 30 lost: exact p = 2^-10
    assert worse["stopped"] is True and worse["questions"] == 30 and worse["of"] == 152
    assert worse["delta"] == pytest.approx(-1 / 3) and worse["ci_high"] < 0 and worse["p_worse"] < 0.01
    # a fall the loop's alpha (0.05) would call a degradation, but not at the probe's 0.01: answered in full
    slight = verdict([0.0] * 5 + [1.0] * 25)  # p = 2^-5 = 0.031
    assert slight["stopped"] is False and slight["p_worse"] == pytest.approx(1 / 32)
    assert verdict([1.0] * 30)["stopped"] is False  # no difference
    # a gain is never stopped, however sure
    gain = paired_test(scores([1.0] * 30), scores([0.0] * 15 + [1.0] * 15))
    assert gain.p_better < 0.01 and probe_verdict(gain, sample="small", of=152, alpha=0.01)["stopped"] is False
    # too few common questions to stop on, however large the fall
    assert verdict([0.0] * 30, min_questions=31)["stopped"] is False
