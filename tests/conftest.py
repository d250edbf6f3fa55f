"""Shared fixtures: isolated cache/runs folders, the real MiniLM embedder, LoCoMo data.

Tests use real components (FAISS, SQLite, both BM25 backends, all-MiniLM-L6-v2);
what is shared here is only what is expensive to build more than once per session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.paths import data_dir
from memsys.config import EmbedderConfig

#: variables pointed at session temp folders, so a test run never writes into the repo's runs/
_ISOLATED_VARS = ("MEMSYS_CACHE_DIR", "MEMSYS_RUNS_DIR")


@pytest.fixture(scope="session", autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """MEMSYS_CACHE_DIR and MEMSYS_RUNS_DIR in a session temp dir (set before any test runs)."""
    saved = {name: os.environ.get(name) for name in _ISOLATED_VARS}
    dirs = {
        "MEMSYS_CACHE_DIR": tmp_path_factory.mktemp("memsys-cache"),
        "MEMSYS_RUNS_DIR": tmp_path_factory.mktemp("memsys-runs"),
    }
    for name, path in dirs.items():
        os.environ[name] = str(path)
    yield dirs
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def embedder(isolated_dirs):
    """The real all-MiniLM-L6-v2 (384-d), loaded offline once per session, cached in the temp cache dir.

    ``make_embedder`` keeps one instance per process and config, so ``Memory.create(path, "omni")``
    in a test reuses this same model instead of loading a second one.
    """
    from memsys.embed import make_embedder

    return make_embedder(EmbedderConfig())


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """``locomo10.json`` under MEMSYS_DATA_DIR (default ../shared/data); skips if absent."""
    path = data_dir() / "locomo" / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"LoCoMo data not found at {path} (set MEMSYS_DATA_DIR or run scripts/fetch_data.py locomo)")
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow (end-to-end) tests first, the local-model ones first of all: ``scripts/test.sh`` spreads
    the suite over the cores (pytest-xdist), and the longest jobs started first leave no long tail
    while the short ones fill the gaps. Stable, so every worker collects the same order."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("llm"):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)
