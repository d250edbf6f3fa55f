"""Fixtures of the loop tests: a throwaway repo for the loop to edit and a runs folder of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.workspace.repo import make_scratch_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_scratch_repo(tmp_path / "repo")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "runs"
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(d))
    return d  # MEMSYS_CACHE_DIR stays the session cache of tests/conftest.py (stores built once)
