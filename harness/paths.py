"""Where things live on disk. Environment variables override the defaults so CI,
users and sandboxes can point the same code at other folders."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: the environment variable that hands a sandboxed reader the trusted gateway's Unix socket (and no key):
#: the gateway (research/gateway/) sets it, the reader's client (memsys/llm/client.py) reads it
GATEWAY_SOCKET_ENV = "MEMSYS_LLM_UDS"


def _env_path(name: str, default: Path) -> Path:
    """``$name`` when it is set to something, else ``default``: an empty value (``MEMSYS_RUNS_DIR= cmd``)
    means "not set", not the current folder."""
    return Path(os.environ.get(name) or default).resolve()


def config_dir() -> Path:
    return _env_path("MEMSYS_CONFIG_DIR", REPO_ROOT / "configs")


def runs_dir() -> Path:
    return _env_path("MEMSYS_RUNS_DIR", REPO_ROOT / "runs")


def cache_dir() -> Path:
    """Content-hash caches (embeddings, LLM replies, built stores, model files)."""
    return _env_path("MEMSYS_CACHE_DIR", runs_dir() / "cache")


def data_dir() -> Path:
    """Benchmark data; CI points MEMSYS_DATA_DIR at ../shared/data."""
    default = REPO_ROOT.parent / "shared" / "data"
    return _env_path("MEMSYS_DATA_DIR", default)
