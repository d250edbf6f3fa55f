"""Folders named by environment variables (harness.paths)."""

from __future__ import annotations

from harness.paths import REPO_ROOT, cache_dir, data_dir, runs_dir


def test_a_set_variable_moves_the_folder_and_an_empty_one_means_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(tmp_path / "r"))
    monkeypatch.delenv("MEMSYS_CACHE_DIR", raising=False)
    assert runs_dir() == tmp_path / "r" and cache_dir() == tmp_path / "r" / "cache"
    monkeypatch.setenv("MEMSYS_RUNS_DIR", "")  # `MEMSYS_RUNS_DIR= cmd` is not "runs go to the current folder"
    monkeypatch.setenv("MEMSYS_DATA_DIR", "")
    monkeypatch.chdir(tmp_path)
    assert runs_dir() == REPO_ROOT / "runs" and data_dir() == REPO_ROOT.parent / "shared" / "data"
