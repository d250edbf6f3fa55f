"""Novelty gates for media: thresholds of docs/design.md section 2 and our "uncertain" policy."""

from __future__ import annotations

import numpy as np
import pytest

from memsys.media.gates import (
    AudioGate,
    CrossModalGate,
    SpeechSegment,
    VisionNoveltyGate,
    recent_text_window,
    text_without_own_caption,
)
from memsys.records import MAU, Modality


def vec_at(cos: float, ref: np.ndarray, seed: int = 0) -> np.ndarray:
    """A unit vector with the given cosine to the unit vector ``ref``."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=ref.shape)
    r -= r.dot(ref) * ref
    r /= np.linalg.norm(r)
    return (cos * ref + np.sqrt(1 - cos * cos) * r).astype(np.float32)


@pytest.fixture
def ref() -> np.ndarray:
    v = np.zeros(64, np.float32)
    v[0] = 1.0
    return v


def test_vision_gate_thresholds(ref):
    gate = VisionNoveltyGate(0.9, 0.7)
    first = gate.check(ref)
    assert first.accepted and first.verdict == "novel"
    static = gate.check(vec_at(0.95, ref))
    assert not static.accepted and static.verdict == "static" and static.score == pytest.approx(0.95, abs=1e-4)
    unsure = gate.check(vec_at(0.8, ref))
    assert unsure.accepted and unsure.verdict == "uncertain"
    novel = gate.check(vec_at(0.3, ref, seed=1))
    assert novel.accepted and novel.verdict == "novel"


def test_uncertain_does_not_move_the_reference_but_novel_does(ref):
    gate = VisionNoveltyGate(0.9, 0.7)
    gate.check(ref)
    gate.check(vec_at(0.8, ref))  # uncertain: reference stays `ref`
    assert gate.similarity(ref) == pytest.approx(1.0)
    new = vec_at(0.2, ref, seed=3)
    gate.check(new)  # novel: `new` is the reference now
    assert gate.similarity(new) == pytest.approx(1.0)
    assert gate.similarity(ref) == pytest.approx(0.2, abs=1e-4)


def test_gradual_drift_accumulates_until_a_new_scene(ref):
    """Frames drifting 0.08 cosine per step: the reference stays put, so the drift is
    eventually detected (re-anchoring on every uncertain frame would never see it)."""
    gate = VisionNoveltyGate(0.9, 0.7, keep_uncertain=False)
    gate.check(ref)
    other = vec_at(0.0, ref, seed=5)
    verdicts = []
    for step in range(1, 12):
        angle = step * 0.12
        v = (np.cos(angle) * ref + np.sin(angle) * other).astype(np.float32)
        verdicts.append(gate.check(v).verdict)
    assert "uncertain" in verdicts and "novel" in verdicts
    assert verdicts.index("novel") > verdicts.index("uncertain")


def test_vision_gate_drop_uncertain_and_commit(ref):
    gate = VisionNoveltyGate(0.9, 0.7, keep_uncertain=False)
    gate.check(ref)
    assert not gate.check(vec_at(0.8, ref)).accepted
    peek = gate.check(vec_at(0.1, ref, seed=2), commit=False)
    assert peek.verdict == "novel" and gate.similarity(ref) == pytest.approx(1.0)


def test_vision_gate_window_and_seed(ref):
    gate = VisionNoveltyGate(0.9, 0.7, window=2)
    a, b = ref, vec_at(0.0, ref, seed=4)
    gate.seed([a, b])
    assert gate.check(vec_at(0.97, a)).verdict == "static"
    assert gate.check(vec_at(0.97, b, seed=9)).verdict == "static"
    with pytest.raises(ValueError):
        VisionNoveltyGate(0.7, 0.9)


def seg(dur=1.0, prob=0.9, energy=0.1):
    return SpeechSegment(0.0, dur, prob, energy)


def test_audio_gate():
    gate = AudioGate(vad_threshold=0.5, silence_energy=0.01, min_speech_ms=500)
    assert gate.check(seg()).verdict == "speech" and gate.check(seg()).accepted
    silence = gate.check(seg(energy=0.005))
    assert silence.verdict == "silence" and not silence.accepted
    noise = gate.check(seg(prob=0.4))
    assert noise.verdict == "no_speech" and not noise.accepted
    short = gate.check(seg(dur=0.3))
    assert short.verdict == "uncertain" and short.accepted
    assert not AudioGate(keep_uncertain=False).check(seg(dur=0.3)).accepted
    assert gate.check(seg(prob=0.5)).verdict == "no_speech"  # "speech if p > 0.5"


def text_mau(i: int, text: str, modality: Modality = Modality.TEXT) -> MAU:
    return MAU(id=f"m{i}", summary=text, modality=modality)


def test_crossmodal_gate_and_window():
    maus = [text_mau(0, "we hiked to the lake and saw a red kite over the water"),
            text_mau(1, "[image] a red kite", Modality.IMAGE),
            text_mau(2, "my sister baked bread [shared an image: a loaf of sourdough bread on a board]")]
    recent = recent_text_window(maus, window=50)
    assert [mid for mid, _ in recent] == ["m2", "m0"]  # newest first, text only
    assert "sourdough" not in recent[0][1]  # a turn's own image caption is not "recent text"
    gate = CrossModalGate(reject_above=0.8, uncertain_above=0.5)
    same = gate.check("We hiked to the lake and saw a red kite over the water!", recent)
    assert same.verdict == "redundant" and not same.accepted and "m0" in same.reason
    part = gate.check("a red kite over the lake water", recent)
    assert part.accepted and part.verdict == "uncertain"
    new = gate.check("a loaf of sourdough bread on a board", recent)
    assert new.accepted and new.verdict == "novel"
    assert gate.check("", recent).accepted
    assert len(recent_text_window(maus, window=1)) == 1


def test_text_without_own_caption():
    assert text_without_own_caption("hi [shared an image: a dog] there").split() == ["hi", "there"]
