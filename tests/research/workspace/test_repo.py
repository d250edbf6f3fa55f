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

import pytest

from research.errors import ForbiddenEditError, WorkspaceError
from research.workspace.repo import Pruned, Workspace

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
    with pytest.raises(WorkspaceError, match="nothing to commit"):  # typed, one line: never a raw GitCommandError
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
    ("configs/memory/x.yaml", "../../research/loop/research_loop.py"),
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


# --- recovery after a kill -9 -----------------------------------------------------------------------
# Each test leaves git the way a killed run does, then a new Workspace (the resumed process) must go on.
def branches(repo: Path) -> list[str]:
    return run_git(repo, "branch", "--list", "autoresearch/t/*", "--format=%(refname:short)").split()


def registered(repo: Path) -> list[str]:
    """Worktree paths git has registered (``git worktree list``), the main one first."""
    out = run_git(repo, "worktree", "list", "--porcelain")
    return [line[len("worktree "):] for line in out.splitlines() if line.startswith("worktree ")]


def killed_during_worktree_add(repo: Path, ws: Workspace, exp: str, base: str) -> Path:
    """A worktree as ``git worktree add`` leaves it when killed mid-checkout: still locked "initializing"."""
    wt = ws.create(exp, base)
    write(wt.path / "memsys" / "a.py", "A = 5\n")
    admin = Path(run_git(wt.path, "rev-parse", "--absolute-git-dir"))
    (admin / "locked").write_text("initializing\n", encoding="utf-8")
    return wt.path


def resumed(repo: Path, tmp_path: Path) -> Workspace:
    return Workspace(repo, "t", tmp_path / "runs" / "worktrees")


def test_locked_worktree_of_a_killed_run_no_longer_blocks_its_branch(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    path = killed_during_worktree_add(repo, ws, "exp-005", base)
    # the stuck state of issue #13: prune keeps a locked worktree, so its branch cannot be deleted
    run_git(repo, "worktree", "prune")
    with pytest.raises(subprocess.CalledProcessError) as err:
        run_git(repo, "branch", "-D", "autoresearch/t/exp-005")
    assert "checked out at" in err.value.stderr

    ws2 = resumed(repo, tmp_path)
    wt = ws2.create("exp-005", base)  # recreated from base: the killed attempt's files are gone
    assert head(wt.path) == base and (wt.path / "memsys" / "a.py").read_text() == "A = 1\n"
    assert not (Path(run_git(wt.path, "rev-parse", "--absolute-git-dir")) / "locked").exists()
    assert run_git(wt.path, "status", "--porcelain") == ""
    assert registered(repo) == [str(repo), str(path)]
    assert ws2.cleanup() == 1
    assert registered(repo) == [str(repo)] and branches(repo) == []


@pytest.mark.parametrize("left", ["folder_deleted", "dot_git_missing", "head_not_written", "read_only_folders"])
def test_prune_removes_whatever_a_killed_worktree_add_left(repo: Path, ws: Workspace, tmp_path: Path, left: str) -> None:
    base = ws.head_commit()
    path = killed_during_worktree_add(repo, ws, "exp-002", base)
    admin = Path(run_git(path, "rev-parse", "--absolute-git-dir"))
    if left == "folder_deleted":
        subprocess.run(["rm", "-rf", str(path)], check=True)
    elif left == "dot_git_missing":
        (path / ".git").unlink()
    elif left == "head_not_written":  # git writes a null HEAD first, the branch later
        (admin / "HEAD").write_text("0" * 40 + "\n", encoding="utf-8")
    else:  # evaluated code took the write bit away
        (path / "memsys").chmod(0o500)
        path.chmod(0o500)

    ws2 = resumed(repo, tmp_path)
    pruned = ws2.prune()
    assert pruned.worktrees == ["exp-002"] and pruned.branches == ["autoresearch/t/exp-002"]
    assert registered(repo) == [str(repo)] and not admin.exists() and not path.exists()
    assert branches(repo) == []
    assert not any((tmp_path / "runs" / "worktrees").iterdir())
    assert ws2.prune() == Pruned()  # again: nothing left, nothing raised
    wt = ws2.create("exp-002", base)
    assert head(wt.path) == base


def test_folder_and_branch_without_a_registered_worktree(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    # killed after `git worktree add -b` created the branch, before the worktree was registered
    base = ws.head_commit()
    run_git(repo, "branch", "autoresearch/t/exp-003", base)
    write(tmp_path / "runs" / "worktrees" / "exp-003" / "memsys" / "a.py", "A = 9\n")
    write(tmp_path / "runs" / "worktrees" / "exp-004" / "junk.txt", "x\n")
    wt = ws.create("exp-003", base)
    assert head(wt.path) == base and (wt.path / "memsys" / "a.py").read_text() == "A = 1\n"
    sha = ws.commit(wt, "exp-003: empty")
    assert run_git(repo, "rev-parse", "autoresearch/t/exp-003") == sha
    pruned = ws.prune()
    assert sorted(pruned.worktrees) == ["exp-003", "exp-004"]
    assert pruned.branches == ["autoresearch/t/exp-003"] and branches(repo) == []


def test_prune_keeps_the_branches_of_journaled_experiments(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    for exp in ("exp-001", "exp-002"):
        wt = ws.create(exp, base)
        write(wt.path / "memsys" / "a.py", f"A = '{exp}'\n")
        ws.commit(wt, exp)
    ws.remove(ws.worktrees_dir / "exp-001")  # finished normally: its branch is its history
    ws.remove(ws.worktrees_dir / "exp-001")  # removing again is fine
    pruned = resumed(repo, tmp_path).prune(keep_branches=["exp-002"])
    assert pruned.worktrees == ["exp-002"] and pruned.branches == []
    assert branches(repo) == ["autoresearch/t/exp-001", "autoresearch/t/exp-002"]
    assert registered(repo) == [str(repo)]


def test_a_worktree_outside_the_run_holding_its_branch_is_left_alone(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    mine = tmp_path / "my-checkout"  # the user inspects an experiment in a worktree of their own
    run_git(repo, "worktree", "add", "-q", "-b", "autoresearch/t/exp-001", str(mine), base)
    assert ws.prune() == Pruned()
    assert mine.is_dir() and branches(repo) == ["autoresearch/t/exp-001"]
    with pytest.raises(WorkspaceError, match=r"checked out at .*my-checkout, outside this run") as err:
        ws.create("exp-001", base)
    assert "\n" not in str(err.value)
    # once that folder is gone, its record is the killed run's to clean up
    subprocess.run(["rm", "-rf", str(mine)], check=True)
    assert head(ws.create("exp-001", base).path) == base


def test_refs_are_idempotent_and_survive_a_stale_lock(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    base = ws.head_commit()
    ws.init_refs(base)
    wt = ws.create("exp-001", base)
    write(wt.path / "memsys" / "a.py", "A = 7\n")
    sha = ws.commit(wt, "exp-001")
    ws.move_best(sha)
    ws.move_best(sha)
    assert ws.best_commit() == sha
    # killed inside `git update-ref`: the lock file stays, and plain git refuses every later update
    lock = repo / ".git" / "refs" / "autoresearch" / "t" / "best.lock"
    lock.write_text(base + "\n", encoding="utf-8")
    with pytest.raises(subprocess.CalledProcessError):
        run_git(repo, "update-ref", "refs/autoresearch/t/best", base)
    ws2 = resumed(repo, tmp_path)
    ws2.move_best(base)
    assert ws2.best_commit() == base and not lock.exists()
    lock.write_text(base + "\n", encoding="utf-8")
    assert ws2.prune().locks == [str(lock)] and not lock.exists()
    ws2.init_refs(base)  # a killed start runs it again
    ws2.init_refs(base)
    assert ws2.best_commit() == base == run_git(repo, "rev-parse", "refs/autoresearch/t/base")


def test_unrecoverable_git_failures_are_typed_one_line_errors(repo: Path, ws: Workspace, tmp_path: Path) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(WorkspaceError, match="no best commit for run t"):
        ws.best_commit()
    for call in (lambda: ws.move_best(missing), lambda: ws.init_refs(missing), lambda: ws.create("exp-001", missing),
                 lambda: ws.diff(missing, ws.head_commit())):
        with pytest.raises(WorkspaceError) as err:
            call()
        assert err.value.kind == "workspace" and "\n" not in str(err.value) and "0123456789ab" in str(err.value)
    assert registered(repo) == [str(repo)] and branches(repo) == []


def test_reading_commits_and_restoring_a_worktree(repo: Path, ws: Workspace) -> None:
    base = ws.head_commit()
    wt = ws.create("exp-001", base)
    write(wt.path / "memsys" / "a.py", "A = 2\n")
    sha = ws.commit(wt, "exp-001")
    assert ws.head_of(wt) == sha
    assert ws.file_at(sha, "memsys/a.py") == "A = 2" and ws.file_at(base, "memsys/a.py") == "A = 1"
    assert ws.tree_id(sha, "memsys") != ws.tree_id(base, "memsys")
    assert ws.tree_id(sha, "configs") == ws.tree_id(base, "configs")
    with pytest.raises(WorkspaceError, match="memsys/nope.py"):
        ws.file_at(sha, "memsys/nope.py")
    write(wt.path / "memsys" / "a.py", "A = 3\n")
    write(wt.path / "memsys" / "new.py", "N = 1\n")
    ws.restore(wt)  # back to HEAD, untracked files gone
    assert (wt.path / "memsys" / "a.py").read_text() == "A = 2\n" and not (wt.path / "memsys" / "new.py").exists()
    ws.restore(wt, base)  # base's files on the experiment's branch
    assert (wt.path / "memsys" / "a.py").read_text() == "A = 1\n" and ws.head_of(wt) == sha


def test_a_resume_right_after_a_kill_waits_out_the_killed_gits_packed_refs_lock(
        repo: Path, ws: Workspace, tmp_path: Path, monkeypatch) -> None:
    """Found by tests/research/test_resume_kill.py: killed inside ``git branch -D``, git leaves
    ``packed-refs.lock``, and a resume a second later found it too young to be called a dead git's, so every
    branch deletion failed. It waits until the lock is old enough (a live git holds it for milliseconds)."""
    import time

    from research.workspace import stale_worktrees

    base = ws.head_commit()
    run_git(repo, "branch", "autoresearch/t/exp-001", base)
    write(tmp_path / "runs" / "worktrees" / "exp-001" / "junk.txt", "x\n")
    lock = repo / ".git" / "packed-refs.lock"
    lock.write_text("", encoding="utf-8")  # fresh: the kill was just now
    with pytest.raises(subprocess.CalledProcessError):
        run_git(repo, "branch", "-D", "autoresearch/t/exp-001")
    monkeypatch.setattr(stale_worktrees, "STALE_SHARED_LOCK_S", 4.0)
    started = time.monotonic()
    pruned = resumed(repo, tmp_path).prune()
    assert pruned.branches == ["autoresearch/t/exp-001"] and branches(repo) == [] and not lock.exists()
    assert time.monotonic() - started < 15
