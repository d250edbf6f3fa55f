"""The loop's git workspace against a hostile worktree: no hook runs, only the surface is committed.

Real git in a tiny temp repo; "hostile" files are written straight into the worktree, as evaluated
code on a weak sandbox could.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import git as gitpython
import pytest

from research.errors import ForbiddenEditError, WorkspaceError
from research.workspace import Workspace

HOOKS = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "reference-transaction",
         "pre-auto-gc", "post-index-change", "post-rewrite", "prepare-commit-msg")


def run_git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", f"core.hooksPath={os.devnull}",
                          *args], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def script(path: Path, marker: Path, name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\nexit 1\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root / "memsys" / "a.py", "A = 1\n")
    write(root / "memsys" / "b.py", "B = 1\n")
    write(root / "configs" / "memory" / "naive.yaml", "top_k: 5\n")
    write(root / "benchmarks" / "metrics" / "locomo.py", "def score():\n    return 0.0\n")
    write(root / "research" / "loop.py", "# loop\n")
    write(root / ".gitignore", "runs/\n")
    run_git(tmp_path, "init", "-q", "-b", "main", str(root))
    run_git(root, "add", "-A")
    run_git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture
def ws(repo: Path, tmp_path: Path) -> Workspace:
    return Workspace(repo, "t", tmp_path / "runs" / "worktrees")


def head(path: Path) -> str:
    return run_git(path, "rev-parse", "HEAD")


# --- hooks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["dot_git_hooks", "configured_hooks_path"])
def test_no_hook_or_fsmonitor_ever_runs(repo: Path, ws: Workspace, tmp_path: Path, where: str) -> None:
    marker = tmp_path / "ran.txt"
    hooks = repo / ".git" / "hooks" if where == "dot_git_hooks" else tmp_path / "evil-hooks"
    for name in HOOKS:
        script(hooks / name, marker, name)
    if where == "configured_hooks_path":
        subprocess.run(["git", "config", "core.hooksPath", str(hooks)], cwd=repo, check=True)
    # an fsmonitor is a command git runs on status/add/reset
    script(tmp_path / "fsmonitor.sh", marker, "fsmonitor")
    subprocess.run(["git", "config", "core.fsmonitor", str(tmp_path / "fsmonitor.sh")], cwd=repo, check=True)
    # the hooks are live: a plain git command runs them
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=repo, capture_output=True)
    assert marker.exists()
    marker.unlink()

    base = ws.head_commit()
    ws.init_refs(base)
    wt = ws.create("e1", base)
    write(wt.path / "memsys" / "a.py", "A = 2\n")
    sha = ws.commit(wt, "e1: change")
    ws.move_best(sha)
    ws.diff(base, sha)
    assert ws.changed_paths(base, sha) == ["memsys/a.py"]
    r = ws.repo_at(wt.path)
    r.git.checkout(base, "--", ".")
    r.git.reset("--hard", "HEAD")
    r.git.clean("-fd")
    ws.uncommitted_changes()
    ws.remove(wt.path)
    wt2 = ws.create("e2", sha)
    ws.commit(wt2, "e2: empty")
    assert ws.cleanup() == 1
    assert not marker.exists(), marker.read_text()


# --- commits take only the surface --------------------------------------------------------------
def test_commit_takes_only_the_surface(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    write(wt.path / "memsys" / "a.py", "A = 2\n")
    write(wt.path / "memsys" / "new" / "c.py", "C = 1\n")
    (wt.path / "memsys" / "b.py").unlink()
    write(wt.path / "configs" / "memory" / "tuned.yaml", "top_k: 9\n")
    # what a hostile evaluation could leave behind
    write(wt.path / "benchmarks" / "metrics" / "locomo.py", "def score():\n    return 1.0\n")
    write(wt.path / "research" / "x.py", "import os\n")
    write(wt.path / ".gitignore", "runs/\nbenchmarks/\n")
    write(wt.path / "sitecustomize.py", "print('hi')\n")
    (wt.path / "research" / "loop.py").unlink()

    sha = ws.commit(wt, "e1: surface and more")
    assert sha == head(wt.path) != base
    assert sorted(ws.changed_paths(base, sha)) == [
        "configs/memory/tuned.yaml", "memsys/a.py", "memsys/b.py", "memsys/new/c.py"]
    assert wt.left_out == [".gitignore", "benchmarks/metrics/locomo.py", "research/loop.py", "research/x.py",
                           "sitecustomize.py"]
    # left out, not reverted: the worktree keeps the files (the loop resets them)
    assert "1.0" in (wt.path / "benchmarks" / "metrics" / "locomo.py").read_text()
    assert run_git(wt.path, "show", f"{sha}:benchmarks/metrics/locomo.py").endswith("return 0.0")


def test_earlier_staged_outside_change_is_not_committed(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    write(wt.path / "benchmarks" / "metrics" / "locomo.py", "hacked\n")
    run_git(wt.path, "add", "benchmarks/metrics/locomo.py")
    write(wt.path / "memsys" / "a.py", "A = 3\n")
    sha = ws.commit(wt, "e1")
    assert ws.changed_paths(base, sha) == ["memsys/a.py"]
    assert wt.left_out == ["benchmarks/metrics/locomo.py"]


def test_surface_only_change_commits_normally_and_empty_commits(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    write(wt.path / "memsys" / "a.py", "A = 4\n")
    sha = ws.commit(wt, "e1: a")
    assert ws.changed_paths(base, sha) == ["memsys/a.py"] and wt.left_out == []
    assert run_git(wt.path, "log", "-1", "--format=%an|%s") == "memsys-autoresearch|e1: a"
    empty = ws.commit(wt, "e1: nothing")  # failures are committed too, even without changes
    assert empty != sha and ws.changed_paths(sha, empty) == []
    with pytest.raises(gitpython.GitCommandError):
        ws.commit(wt, "e1: nothing again", allow_empty=False)


def test_mode_change_inside_surface_is_fine(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    (wt.path / "memsys" / "a.py").chmod(0o755)
    sha = ws.commit(wt, "e1: exec bit")
    assert ws.changed_paths(base, sha) == ["memsys/a.py"]


# --- symlinks ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("link", "target"), [
    ("memsys/bench", "../benchmarks"),
    ("memsys/scorer.py", "../benchmarks/metrics/locomo.py"),
    ("memsys/etc", "/etc"),
    ("memsys/up", "../../.."),
    ("configs/memory/x.yaml", "../../research/loop.py"),
    ("memsys", "benchmarks"),  # the whole surface folder swapped for a link
])
def test_symlink_out_of_the_surface_is_refused(ws: Workspace, link: str, target: str) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    p = wt.path / link
    if p.is_dir():
        for f in sorted(p.rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        p.rmdir()
    os.symlink(target, p)
    with pytest.raises(ForbiddenEditError, match=f"outside the mutable surface: .*{re.escape(link)} -> {re.escape(target)}"):
        ws.commit(wt, "e1: link")
    assert head(wt.path) == base  # the commit is undone
    assert run_git(wt.path, "diff", "--cached", "--name-only") == ""


def test_folder_above_the_surface_swapped_for_a_symlink_is_refused(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    (wt.path / "configs" / "memory" / "naive.yaml").unlink()
    (wt.path / "configs" / "memory").rmdir()
    (wt.path / "configs").rmdir()
    os.symlink("benchmarks", wt.path / "configs")
    with pytest.raises(ForbiddenEditError, match="replaced by a symlink"):
        ws.commit(wt, "e1")
    assert head(wt.path) == base


def test_symlink_chain_escaping_through_another_link_is_refused(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    os.symlink(".", wt.path / "memsys" / "here")  # fine on its own
    os.symlink("here/../../benchmarks/metrics/locomo.py", wt.path / "memsys" / "sneaky.py")  # looks like memsys/...
    with pytest.raises(ForbiddenEditError, match="memsys/sneaky.py"):
        ws.commit(wt, "e1")
    assert head(wt.path) == base


def test_symlink_inside_the_surface_is_allowed(ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    os.symlink("a.py", wt.path / "memsys" / "alias.py")
    os.symlink("../../memsys/b.py", wt.path / "configs" / "memory" / "b.py")
    sha = ws.commit(wt, "e1: links")
    assert sorted(ws.changed_paths(base, sha)) == ["configs/memory/b.py", "memsys/alias.py"]


def test_embedded_repository_in_the_surface_is_refused(ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    nested = wt.path / "memsys" / "vendored"
    write(nested / "x.py", "X = 1\n")
    run_git(tmp_path, "init", "-q", str(nested))
    run_git(nested, "add", "-A")
    run_git(nested, "commit", "-q", "-m", "nested")
    with pytest.raises(ForbiddenEditError, match=r"memsys/vendored \(mode 160000\)"):
        ws.commit(wt, "e1")
    assert head(wt.path) == base


# --- the worktree's .git -----------------------------------------------------------------------
def test_replaced_dot_git_is_refused(ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    wt = ws.create("e1", base)
    fake = tmp_path / "fake"
    run_git(tmp_path, "init", "-q", str(fake))
    (wt.path / ".git").write_text(f"gitdir: {fake / '.git'}\n", encoding="utf-8")
    with pytest.raises(ForbiddenEditError, match="was replaced"):
        ws.repo_at(wt.path)
    with pytest.raises(ForbiddenEditError):
        ws.commit(wt, "e1")
    (wt.path / ".git").unlink()
    os.symlink(fake / ".git", wt.path / ".git")
    with pytest.raises(ForbiddenEditError):
        ws.repo_at(wt.path)
    ws.remove(wt.path)
    assert not wt.path.exists()


def test_repo_at_rejects_a_folder_that_is_no_worktree(ws: Workspace, tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        ws.repo_at(tmp_path)
