"""Mem-Gallery image mode: with the image files on disk, image rounds become image MAUs and a
vision reader receives the pictures; without them the run says it used captions."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.config import load_eval_setup
from harness.paths import data_dir
from memsys.llm.client import LLMClient
from research.evaluation.fixed import run_in_process
from tests.support.openai_server import OpenAITestServer, Reply

TOPIC = "AI_Robotics_Automation_Future_Tech"
BASE = ["benchmark=memgallery", "split=dev", "sample=tiny", "memory=omni", "memory.graph.enabled=false",
        "memory.pyramid.level3_media=true", "mlflow=false", "workers=1"]


@pytest.fixture
def gallery_with_images(tmp_path, monkeypatch) -> Path:
    src = data_dir() / "mem-gallery" / "benchmark" / "data" / "dialog"
    if not src.is_dir():
        pytest.skip(f"Mem-Gallery dialogs not found at {src}")
    root = tmp_path / "data"
    dialog = root / "mem-gallery" / "benchmark" / "data" / "dialog"
    shutil.copytree(src, dialog)
    rng = np.random.default_rng(0)
    n = 0
    text = (dialog / f"{TOPIC}.json").read_text()
    for ref in sorted(set(re.findall(r'"(\.\./image/[^"]+)"', text))):
        path = (dialog / ref).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), np.uint8)).save(path)
        n += 1
    assert n > 0, "the topic references no images"
    monkeypatch.setenv("MEMSYS_DATA_DIR", str(root))
    return root


def test_images_on_disk_reach_a_vision_reader(gallery_with_images):
    overrides = [*BASE, "reader=llm", "run_id=t-mg-images"]
    setup = load_eval_setup(overrides)
    cfg = replace(setup.llm, backend="openai", base_url=None, cache=False, max_retries=0, supports_vision=True)
    with OpenAITestServer(lambda req: Reply.of_json({"answer": "D1:IMG_001"})) as srv:
        with LLMClient(replace(cfg, base_url=srv.base_url)) as llm:
            res = run_in_process(setup, overrides, llm=llm)
        bodies = srv.chat_requests
    assert res.metrics["image_mode"] == "images" and res.n_errors == 0
    parts = [p for b in bodies for m in b["messages"] if isinstance(m["content"], list) for p in m["content"]]
    images = [p for p in parts if p.get("type") == "image_url"]
    assert images and all(p["image_url"]["url"].startswith("data:image/") for p in images)
    assert "Mem-Gallery image mode: images" in res.table


def test_without_image_files_the_run_states_caption_mode():
    if not (data_dir() / "mem-gallery").is_dir():
        pytest.skip("Mem-Gallery data not found")
    overrides = [*BASE, "reader=none", "run_id=t-mg-captions"]
    res = run_in_process(load_eval_setup(overrides), overrides)
    assert res.metrics["image_mode"] == "captions"
    assert "Mem-Gallery image mode: captions" in res.table
