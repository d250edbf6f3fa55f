"""Pyramid level 3 with media under the token budget, and reader content parts."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import wave
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from memsys.config import MemoryConfig, PyramidConfig
from memsys.media import context_to_content_parts, ingest_audio, ingest_image, ingest_video
from memsys.media.video import write_test_video
from memsys.memory import Memory
from memsys.records import Modality, Turn
from tests.support.media import scene

pytest.importorskip("av")

QUERIES = ["kite on the beach", "what did the harbour look like", "the meeting tomorrow morning",
           "walk through the old town", "ramen for dinner", "what happened?"]
BUDGETS = [0, 15, 60, 200, 766, 900, 1200, 1600, 2500, 4000, 6000]




def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def speech_wav(path: Path) -> Path | None:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        return None
    out = subprocess.run([espeak, "--stdout", "The meeting starts at nine tomorrow morning."],
                         check=True, capture_output=True, timeout=60).stdout
    with wave.open(io.BytesIO(out)) as w:
        rate, x = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")
    pad = np.zeros(rate // 2, "<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(np.concatenate([pad, x, pad]).tobytes())
    return path


@pytest.fixture(scope="module")
def memory(tmp_path_factory, embedder) -> Memory:
    """Real MiniLM embedder; text turns, three images, a 3-scene video, speech if espeak-ng exists."""
    root = tmp_path_factory.mktemp("pyramid")
    mem = Memory.create(root / "store", "omni", overrides=["memory.pyramid.level3_media=true"], embedder=embedder)
    ts = datetime(2024, 6, 17, 12, 0)
    mem.add([Turn("D1:1", "Ana", "We spent the afternoon at the beach flying a kite.", ts, "D1"),
             Turn("D1:2", "Ben", "Then we had ramen for dinner near the harbour.", ts, "D1"),
             Turn("D1:3", "Ana", "Tomorrow we walk through the old town.", ts, "D1")])
    ingest_image(mem, png(scene(1)), "a red kite over a sandy beach", image_id="D1:IMG_001", timestamp=ts)
    ingest_image(mem, png(scene(2)), "fishing boats moored in a small harbour", image_id="D1:IMG_002", timestamp=ts)
    ingest_image(mem, png(scene(3)), "a bowl of ramen with a soft-boiled egg", image_id="D1:IMG_003", timestamp=ts)
    video = write_test_video(root / "town.mp4", [np.asarray(scene(s)) for s in (4, 5, 6)], 1.0, fps=10)
    assert len(ingest_video(mem, video, 2.0, caption="walk through the old town", timestamp=ts)) == 3
    wav = speech_wav(root / "meeting.wav")
    if wav is not None:
        assert ingest_audio(mem, wav, lambda x, sr: "the meeting starts at nine tomorrow morning")
    return mem


def test_level3_never_exceeds_the_budget(memory):
    cost = memory.cfg.pyramid.modality_tokens
    media_seen = set()
    for q in QUERIES:
        for budget in BUDGETS:
            ctx = memory.context(q, budget_tokens=budget)
            assert ctx.total_tokens <= budget, (q, budget, ctx.total_tokens)
            for item in ctx.items:
                for part in item.media:
                    assert item.level == 3 and part.tokens == cost[part.modality.value]
                    media_seen.add(part.modality)
    assert {Modality.IMAGE, Modality.VIDEO} <= media_seen


def test_media_needs_room_in_the_budget(memory):
    small = memory.context("kite on the beach", budget_tokens=700)  # below one image (765)
    assert not any(p.modality == Modality.IMAGE for i in small.items for p in i.media)
    big = memory.context("kite on the beach", budget_tokens=6000)
    kite = next(i for i in big.items if i.mau.source_id == "D1:IMG_001")
    assert kite.level == 3 and kite.media[0].mime == "image/png"
    assert Path(kite.media[0].path).read_bytes() == memory.store.cold.get(kite.mau.pointer)


def test_video_level3_is_the_keyframe(memory):
    ctx = memory.context("walk through the old town", budget_tokens=6000)
    scenes = [i for i in ctx.items if i.mau.modality == Modality.VIDEO and i.media]
    assert scenes
    part = scenes[0].media[0]
    assert part.mime == "image/jpeg" and part.pointer == scenes[0].mau.details["keyframe_pointer"]
    assert Image.open(part.path).format == "JPEG"


def test_custom_modality_costs(memory):
    cheap = replace(memory.cfg, pyramid=replace(memory.cfg.pyramid, modality_tokens={"image": 50, "video": 80, "audio": 20}))
    mem = Memory(memory.store, cheap, memory.embedder)
    ctx = mem.context("kite on the beach", budget_tokens=1200)
    assert ctx.total_tokens <= 1200
    costs = {p.modality.value: p.tokens for i in ctx.items for p in i.media}
    assert costs and all(costs[m] == {"image": 50, "video": 80, "audio": 20}[m] for m in costs)


def test_content_parts_for_vision_and_text_readers(memory):
    ctx = memory.context("kite on the beach", budget_tokens=6000)
    n_visual = sum(1 for i in ctx.items for p in i.media if p.modality in (Modality.IMAGE, Modality.VIDEO))
    parts = context_to_content_parts(ctx, vision=True)
    images = [p for p in parts if p["type"] == "image_url"]
    assert len(images) == n_visual > 0
    for p in images:
        head, b64 = p["image_url"]["url"].split(",", 1)
        assert head.startswith("data:image/") and head.endswith(";base64")
        Image.open(io.BytesIO(base64.b64decode(b64))).load()
    text = "\n".join(p["text"] for p in parts if p["type"] == "text")
    assert "a red kite over a sandy beach" in text
    assert all(parts[i]["type"] != "text" or parts[i + 1]["type"] != "text" for i in range(len(parts) - 1))
    plain = context_to_content_parts(ctx, vision=False)
    assert [p["type"] for p in plain] == ["text"]
    assert "a red kite over a sandy beach" in plain[0]["text"] and "base64" not in plain[0]["text"]


def test_audio_parts_only_when_asked(memory):
    ctx = memory.context("the meeting tomorrow morning", budget_tokens=6000)
    if not any(p.modality == Modality.AUDIO for i in ctx.items for p in i.media):
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng): no speech MAUs in this store")
    assert not [p for p in context_to_content_parts(ctx, vision=True) if p["type"] == "input_audio"]
    audio = [p for p in context_to_content_parts(ctx, vision=True, audio=True) if p["type"] == "input_audio"]
    assert audio and base64.b64decode(audio[0]["input_audio"]["data"])[:4] == b"RIFF"


def test_large_images_are_downscaled_and_missing_files_noted(tmp_path, embedder):
    mem = Memory.create(tmp_path / "store", MemoryConfig(pyramid=PyramidConfig(level3_media=True)), embedder=embedder)
    big = Image.fromarray(np.random.default_rng(0).integers(0, 256, (1500, 3000, 3), np.uint8))
    ingest_image(mem, png(big), "a very wide noisy panorama")
    ctx = mem.context("wide panorama", budget_tokens=2000)
    parts = context_to_content_parts(ctx, vision=True, max_side=512)
    url = next(p for p in parts if p["type"] == "image_url")["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert max(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size) == 512
    Path(ctx.items[0].media[0].path).unlink()
    parts = context_to_content_parts(ctx, vision=True)
    assert not [p for p in parts if p["type"] == "image_url"]
    assert "[image unavailable: FileNotFoundError]" in parts[0]["text"]
