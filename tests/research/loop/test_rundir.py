"""RunDir: the names of a run folder's files (pure paths), and whether a run was started there."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.errors import RunStateError
from research.loop.rundir import RunDir


def test_every_file_and_folder_of_a_run(tmp_path: Path) -> None:
    rd = RunDir.of("run-1", tmp_path)
    assert rd.root == tmp_path / "run-1" and rd.run_id == "run-1"
    names = {p.relative_to(rd.root).as_posix() for p in (rd.config, rd.state, rd.trajectory, rd.optuna_db,
                                                         rd.confirmation, rd.replay, rd.evals_root, rd.worktrees,
                                                         rd.report_dir())}
    assert names == {"config.json", "state.json", "trajectory.jsonl", "optuna.db", "confirmation.json", "replay.json",
                     "evals", "worktrees", "report"}
    assert rd.evals("exp-003") == rd.root / "evals" / "exp-003"
    assert rd.evals("exp-003", "-h1") == rd.root / "evals" / "exp-003-h1"
    assert rd.eval_run("exp-000", "run-1-exp-000-r1", "-r1") == rd.root / "evals" / "exp-000-r1" / "run-1-exp-000-r1"
    assert rd.report_dir("other run/2") == rd.root / "report-vs-other_run_2"
    assert not rd.root.exists()  # nothing is created


def test_default_root_is_the_runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(tmp_path / "elsewhere"))
    assert RunDir.of("r").root == (tmp_path / "elsewhere" / "r").resolve()


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../up", ".hidden", "a b"])
def test_names_stay_inside_the_run_folder(tmp_path: Path, bad: str) -> None:
    with pytest.raises(RunStateError):
        RunDir.of(bad, tmp_path)
    with pytest.raises(RunStateError):
        RunDir.of("r", tmp_path).evals(bad or "..", "")


def test_exists_once_any_run_file_is_written(tmp_path: Path) -> None:
    rd = RunDir.of("r", tmp_path)
    assert not rd.exists() and RunDir.known(tmp_path) == []
    (rd.worktrees / "exp-001").mkdir(parents=True)  # a folder alone is no run
    assert not rd.exists()
    rd.state.write_text("{}", encoding="utf-8")  # killed before the baseline: state, no trajectory
    assert rd.exists()
    other = RunDir.of("a", tmp_path)
    other.root.mkdir()
    other.config.write_text("{}", encoding="utf-8")
    (tmp_path / "cache").mkdir()
    assert RunDir.known(tmp_path) == ["a", "r"]
    assert RunDir.known(tmp_path / "missing") == []
