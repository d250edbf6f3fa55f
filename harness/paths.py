"""Where things live on disk. Environment variables override the defaults so CI,
users and sandboxes can point the same code at other folders."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def config_dir() -> Path:
    return Path(os.environ.get("MEMSYS_CONFIG_DIR", REPO_ROOT / "configs")).resolve()


def runs_dir() -> Path:
    return Path(os.environ.get("MEMSYS_RUNS_DIR", REPO_ROOT / "runs")).resolve()


def cache_dir() -> Path:
    """Content-hash caches (embeddings, LLM replies, built stores, model files)."""
    return Path(os.environ.get("MEMSYS_CACHE_DIR", runs_dir() / "cache")).resolve()


def data_dir() -> Path:
    """Benchmark data; CI points MEMSYS_DATA_DIR at ../shared/data."""
    default = REPO_ROOT.parent / "shared" / "data"
    return Path(os.environ.get("MEMSYS_DATA_DIR", default)).resolve()
