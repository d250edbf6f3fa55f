"""Image MAUs: decoding errors, the perceptual encoder, gates, cold storage, CLIP errors."""

from __future__ import annotations

import io
import json
import sys
import types
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from harness.errors import ConfigError, MissingDependencyError, ModelError
from memsys.config import EmbedderConfig, MediaConfig, MemoryConfig
from memsys.media import MediaInputError, MediaReport, ingest_image, ingest_images, memgallery_image_path
from memsys.media.encoders import ClipImageEncoder, PerceptualImageEncoder, make_image_encoder
from memsys.media.image import decode_image
from memsys.media.ingest import ImageItem
from memsys.media.ingest_state import load_image_vector
from memsys.memory import Memory
from memsys.records import Modality
from tests.support.media import scene


def to_bytes(im: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def make_memory(tmp_path: Path, **media) -> Memory:
    cfg = MemoryConfig(embedder=EmbedderConfig(backend="hashing", cache=False))
    for k, v in media.items():
        setattr(cfg.ingest.media, k, v)
    return Memory.create(tmp_path / "store", cfg)


# ----------------------------------------------------------------------------- encoder
def test_perceptual_encoder_separates_distinct_from_near_duplicates():
    enc = PerceptualImageEncoder()
    images = [scene(s) for s in range(20)]
    vecs = enc.encode(images)
    assert vecs.shape == (20, enc.dim) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[~np.eye(20, dtype=bool)].max() < 0.7  # distinct pictures: novel
    for im, v in zip(images[:8], vecs[:8]):
        jpeg = Image.open(io.BytesIO(to_bytes(im, "JPEG", quality=60)))
        smaller = im.resize((240, 180))
        brighter = ImageEnhance.Brightness(im).enhance(1.1)
        for variant in (jpeg, smaller, brighter):
            assert float(enc.encode_one(variant) @ v) > 0.9  # near-duplicates: static
    assert not enc.semantic
    again = PerceptualImageEncoder().encode(images[:3])
    assert np.array_equal(again, vecs[:3])  # deterministic


def test_perceptual_encoder_flat_images():
    enc = PerceptualImageEncoder()
    red, blue = Image.new("RGB", (64, 64), (250, 10, 10)), Image.new("RGB", (64, 64), (10, 10, 250))
    v = enc.encode([red, blue, red.convert("L")])
    assert np.isfinite(v).all()
    assert float(v[0] @ v[1]) < 0.7 and float(v[0] @ enc.encode_one(red)) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- decoding
def test_decode_errors_are_one_line(tmp_path):
    good = to_bytes(scene(1), "JPEG")
    with pytest.raises(MediaInputError, match="not a recognised image"):
        decode_image(b"this is not an image", "x.png")
    with pytest.raises(MediaInputError, match="corrupt or truncated"):
        decode_image(good[: len(good) // 2], "half.jpg")
    dec = decode_image(to_bytes(Image.new("RGBA", (10, 8), (0, 0, 0, 0)), "PNG"))
    assert (dec.mime, dec.ext, dec.width, dec.height, dec.image.mode) == ("image/png", "png", 10, 8, "RGB")
    assert dec.image.getpixel((0, 0)) == (255, 255, 255)  # transparency flattened on white


def test_bad_items_are_reported_and_the_rest_continue(tmp_path):
    mem = make_memory(tmp_path, max_image_bytes=200_000)
    (tmp_path / "empty.png").write_bytes(b"")
    big = to_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 256, (400, 400, 3), np.uint8)), "PNG")
    assert len(big) > 200_000
    good = to_bytes(scene(3), "JPEG")
    items = [ImageItem(tmp_path / "empty.png"), ImageItem(b"\x89PNG\r\n\x1a\n garbage"), ImageItem(big),
             ImageItem(tmp_path / "missing.jpg"), ImageItem(good[:300]), ImageItem(good, "a garden with tulips")]
    report = ingest_images(mem, items)
    assert [bool(i.error) for i in report.items] == [True, True, True, True, True, False]
    assert "empty (0 bytes)" in report.items[0].error
    assert "over the 200000-byte cap" in report.items[2].error
    assert "cannot read" in report.items[3].error
    assert all("\n" not in line for line in report.lines())
    assert report.count("image") == {"items": 6, "kept": 1, "dropped": 0, "errors": 5, "maus": 1}
    assert json.loads(json.dumps(report.to_dict()))["counts"]["errors"] == 5
    assert len(mem) == 1
    with pytest.raises(MediaInputError):  # without a report the error is raised
        ingest_image(mem, b"nope")


# ----------------------------------------------------------------------------- ingestion
def test_image_mau_fields_cold_storage_and_dedup(tmp_path):
    mem = make_memory(tmp_path)
    data = to_bytes(scene(5), "JPEG", quality=90)
    ts = datetime(2024, 6, 17, 10, 30)
    report = MediaReport()
    mau = ingest_image(mem, data, "A red kite flying over a sandy beach", timestamp=ts, session_id="D1",
                       image_id="D1:IMG_001", speaker="Julian", report=report)
    assert mau is not None and mau.modality == Modality.IMAGE
    assert mau.summary == "[image D1:IMG_001] A red kite flying over a sandy beach"
    assert mau.timestamp == ts and mau.session_id == "D1" and mau.source_id == "D1:IMG_001"
    assert mau.details["mime"] == "image/jpeg" and mau.details["caption_source"] == "given"
    assert mem.store.cold.get(mau.pointer) == data  # raw bytes in the cold tier
    vec = load_image_vector(mem.store.cold, mau.details["image_vec_pointer"])
    assert vec.shape == (PerceptualImageEncoder().dim,)
    assert float(vec @ PerceptualImageEncoder().encode_one(Image.open(io.BytesIO(data)))) > 0.999
    assert report.items[0].bytes_stored == len(data) + 2 * vec.size  # float16 vector
    # same bytes again: the same pointer would result; the item is a duplicate, nothing new is stored
    again = ingest_image(mem, data, "another caption", report=report)
    assert again is None and report.items[1].decision.verdict == "duplicate"
    assert mem.store.cold.put(data, "jpg") == mau.pointer
    # the summary is embedded in text space: a text query finds the image
    hits = mem.retrieve("kite beach").candidates
    assert hits and hits[0].mau.id == mau.id


def test_vision_gate_on_image_stream(tmp_path):
    mem = make_memory(tmp_path)
    report = MediaReport()
    base = scene(7)
    ingest_image(mem, to_bytes(base), "a picnic table", report=report)
    ingest_image(mem, to_bytes(base, "JPEG", quality=50), "a picnic table again", report=report)  # near-dup
    shifted = base.transform(base.size, Image.AFFINE, (1, 0, 12, 0, 1, 0))  # same scene, moved 12 px
    ingest_image(mem, to_bytes(shifted), "the picnic table from the side", report=report)
    ingest_image(mem, to_bytes(scene(8)), "a harbour with boats", report=report)
    verdicts = [i.decision.verdict for i in report.items]
    assert verdicts == ["novel", "static", "uncertain", "novel"]
    assert [bool(i.mau_ids) for i in report.items] == [True, False, True, True]
    uncertain = mem.store.get(report.items[2].mau_ids[0])
    assert uncertain.details["novelty"] == "uncertain"


def test_uncertain_images_dropped_when_configured(tmp_path):
    mem = make_memory(tmp_path, image_uncertain="drop")
    base = scene(7)
    assert ingest_image(mem, to_bytes(base), "x") is not None
    shifted = base.transform(base.size, Image.AFFINE, (1, 0, 12, 0, 1, 0))
    assert ingest_image(mem, to_bytes(shifted), "y") is None


def test_crossmodal_redundant_caption(tmp_path):
    mem = make_memory(tmp_path)
    mem.add_turn("Ana", "We walked along the harbour and watched the fishing boats come in", session_id="S1")
    report = MediaReport()
    redundant = ingest_image(mem, to_bytes(scene(11)), "we walked along the harbour and watched fishing boats come in",
                             report=report)
    assert redundant is None and report.items[0].decision.verdict == "redundant"
    kept = ingest_image(mem, to_bytes(scene(12)), "a bowl of ramen with a soft-boiled egg", report=report)
    assert kept is not None and report.items[1].decision.verdict == "novel"
    off = make_memory(tmp_path / "off", crossmodal=False)
    off.add_turn("Ana", "We walked along the harbour and watched the fishing boats come in")
    assert ingest_image(off, to_bytes(scene(11)), "we walked along the harbour and watched fishing boats come in")


def test_captioner_callable_and_its_failure(tmp_path):
    mem = make_memory(tmp_path)
    calls = []

    def captioner(data: bytes, mime: str) -> str:
        calls.append(mime)
        return "  a lighthouse on a rocky coast\n"

    mau = ingest_image(mem, to_bytes(scene(20)), captioner=captioner)
    assert mau.summary == "[image] a lighthouse on a rocky coast" and mau.details["caption_source"] == "captioner"
    assert calls == ["image/png"]
    ingest_image(mem, to_bytes(scene(20), "JPEG"), captioner=captioner)  # static: no captioner call
    assert len(calls) == 1

    def broken(data: bytes, mime: str) -> str:
        raise TimeoutError("vision endpoint timed out")

    report = MediaReport()
    mau = ingest_image(mem, to_bytes(scene(21)), captioner=broken, report=report)
    assert mau is not None and "(no caption)" in mau.summary
    assert "captioner failed" in report.items[0].notes[0]


def test_reopened_store_keeps_gate_state(tmp_path):
    mem = make_memory(tmp_path)
    data = to_bytes(scene(30))
    ingest_image(mem, data, "a snowy cabin")
    mem.save()
    mem.close()
    reopened = Memory.open(tmp_path / "store")
    report = MediaReport()
    assert ingest_image(reopened, data, "a snowy cabin", report=report) is None
    assert report.items[0].decision.verdict == "duplicate"
    assert ingest_image(reopened, to_bytes(scene(30), "JPEG", quality=70), "cabin", report=report) is None
    assert report.items[1].decision.verdict == "static"  # the reference vector came back from the cold tier


# ----------------------------------------------------------------------------- Mem-Gallery image mode
def test_memgallery_image_path(tmp_path):
    rnd = {"round": "D1:1", "image_id": ["D1:IMG_001"],
           "input_image": ["../image/Baking/D1_IMG_001.jpg"], "image_caption": ["a bakery counter"]}
    assert memgallery_image_path(rnd, tmp_path) is None  # offline: no images
    img_dir = tmp_path / "mem-gallery" / "benchmark" / "data" / "image" / "Baking"
    img_dir.mkdir(parents=True)
    target = img_dir / "D1_IMG_001.jpg"
    target.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 33169\n")
    assert memgallery_image_path(rnd, tmp_path) is None  # an LFS pointer is not the picture
    target.write_bytes(to_bytes(scene(1), "JPEG"))
    assert memgallery_image_path(rnd, tmp_path) == target
    assert memgallery_image_path(rnd, tmp_path / "mem-gallery") == target
    assert memgallery_image_path({"round": "D1:2", "user": "hi"}, tmp_path) is None


# ----------------------------------------------------------------------------- CLIP
def test_clip_encoder_without_open_clip(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # import fails as when not installed
    with pytest.raises(MissingDependencyError, match="open_clip is not installed"):
        ClipImageEncoder("ViT-B-32", "/models/none.pt")
    with pytest.raises(MissingDependencyError):
        make_image_encoder(MediaConfig(image_encoder="clip", clip_checkpoint="/nowhere/clip.pt"))
    with pytest.raises(ConfigError, match="unknown media.image_encoder"):
        make_image_encoder(MediaConfig(image_encoder="siglip"))


def fake_open_clip(dim: int = 8, fail: bool = False) -> types.ModuleType:
    """Stands in for the open_clip SDK (not installed offline): never our code under test."""
    import torch

    class Visual(torch.nn.Module):
        output_dim = dim

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = Visual()
            self.proj = torch.nn.Linear(3, dim)

        def encode_image(self, x):
            return self.proj(x.mean(dim=(2, 3)))

    def create(name, pretrained=None, device="cpu"):
        if fail:
            raise RuntimeError("checkpoint has unexpected keys")

        def preprocess(im):
            return torch.from_numpy(np.asarray(im.resize((16, 16)), np.float32) / 255.0).permute(2, 0, 1)

        return Model(), None, preprocess

    mod = types.ModuleType("open_clip")
    mod.create_model_and_transforms = create
    return mod


def test_clip_encoder_checkpoint_errors_and_interface(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "open_clip", fake_open_clip())
    with pytest.raises(ModelError, match="needs a checkpoint file"):
        ClipImageEncoder("ViT-B-32", None)
    with pytest.raises(ModelError, match="CLIP checkpoint not found"):
        ClipImageEncoder("ViT-B-32", tmp_path / "missing.pt")
    ckpt = tmp_path / "vit-b-32.pt"
    ckpt.write_bytes(b"weights")
    enc = ClipImageEncoder("ViT-B-32", ckpt)
    vecs = enc.encode([scene(1), scene(2)])
    assert enc.semantic and enc.dim == 8 and vecs.shape == (2, 8)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    monkeypatch.setitem(sys.modules, "open_clip", fake_open_clip(fail=True))
    with pytest.raises(ModelError, match="cannot load CLIP ViT-B-32"):
        ClipImageEncoder("ViT-B-32", ckpt)


def test_a_custom_encoder_can_be_passed(tmp_path):
    class Constant:
        name, dim, semantic = "constant", 4, False

        def encode(self, images):
            return np.array([[1, 0, 0, 0]] * len(images), np.float32)

    mem = make_memory(tmp_path)
    report = MediaReport()
    ingest_image(mem, to_bytes(scene(1)), "one", encoder=Constant(), report=report)
    ingest_image(mem, to_bytes(scene(2)), "two", encoder=Constant(), report=report)
    assert [i.decision.verdict for i in report.items] == ["novel", "static"]


def test_bad_gate_config_fails_loudly(tmp_path):
    mem = make_memory(tmp_path, vision_accept_below=0.95, vision_reject_above=0.9)
    with pytest.raises(ConfigError, match="vision_accept_below"):
        ingest_image(mem, to_bytes(scene(1)), "x")
    bad = make_memory(tmp_path / "b", image_uncertain="maybe")
    with pytest.raises(ConfigError, match="image_uncertain"):
        ingest_image(bad, to_bytes(scene(1)), "x")


def test_caption_overlap_flags_uncertain_but_the_picture_still_becomes_the_reference(tmp_path):
    mem = make_memory(tmp_path)
    mem.add_turn("Ana", "a red kite over the sandy beach near the old pier")
    report = MediaReport()
    mau = ingest_image(mem, to_bytes(scene(40)), "a red kite over the sandy beach", report=report)
    assert mau.details["novelty"] == "uncertain" and mau.details["vision"] == "novel"
    ingest_image(mem, to_bytes(scene(40), "JPEG", quality=80), "kite", report=report)
    assert report.items[1].decision.verdict == "static"
