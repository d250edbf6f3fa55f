"""``memsys run`` as a user starts it: the real CLI in a process group of its own, killed as ``kill -9 -<pgid>``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.paths import REPO_ROOT
from tests.support.loop import git


class Life:
    """One ``memsys run`` process (the first start, or a resume), output to a log file."""

    def __init__(self, args: list[str], log: Path):
        self.log = log
        self.started = time.time()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "launcher.main", "run", *args], cwd=REPO_ROOT,
                                         env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> bool:
        """SIGKILL to the whole process group; False if the run had already exited."""
        if not self.alive():
            return False
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        return True

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"memsys run still running after {timeout:.0f}s; output:\n{self.tail()}")

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])


def orphans(run_dir: Path) -> list[int]:
    """Processes still working in the run folder (sandboxed evaluations run in a session of their own)."""
    found = []
    root = str(run_dir.resolve())
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "cwd").startswith(root):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def end_orphans(run_dir: Path) -> list[int]:
    pids = orphans(run_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def rev(repo: Path, ref: str) -> str | None:
    out = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], cwd=repo, capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def worktree_paths(repo: Path) -> list[str]:
    out = git(repo, "worktree", "list", "--porcelain")
    return [line[len("worktree "):] for line in out.splitlines() if line.startswith("worktree ")]
