"""A Ray node's cache folder kept bounded: shipped content and task scratch are removed once nobody uses them.

Why: every candidate a node evaluates leaves its shipped tree under ``content/`` (one folder per
digest), and a worker killed with its node leaves its per-task scratch under ``tasks/``. A long run
on a cluster would fill the node's disk with both. Age is no proof that a folder is unused (an
evaluation with the embedded reader can run for hours), so use is proven by a lock instead: a task
holds a shared ``flock`` on the entry's lock file for as long as its sandbox may read the entry,
and the pruner removes an entry only while it holds the exclusive lock. A dead worker's locks go
with its process, so its leftovers become removable at once.

Lock files live in ``.locks/`` beside the entries and are never unlinked while in use: a lock
taken on a file that was replaced meanwhile is retried on the new file (:func:`hold`).
Standard library only: this runs in Ray workers, which never load the scorer.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

#: a staging folder (an unpack in progress) older than this belongs to a killed unpack
STAGING_STALE_S = 3600.0


class Hold:
    """A held lock on one cache entry; release (or process exit) lets the pruner remove the entry."""

    def __init__(self, fd: int):
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _lock_path(entry: Path) -> Path:
    return entry.parent / ".locks" / f"{entry.name}.lock"


def _lock(entry: Path, mode: int) -> Hold | None:
    """The lock of ``entry`` in ``mode`` (LOCK_SH or LOCK_EX, maybe | LOCK_NB); None when NB and busy."""
    path = _lock_path(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return Hold(fd)
        os.close(fd)  # the file was replaced while we waited: lock the one that is there now


def hold(entry: Path) -> Hold:
    """Mark ``entry`` in use until the hold is released (blocks only while the pruner removes it)."""
    return _lock(entry, fcntl.LOCK_SH)


def touch(entry: Path) -> None:
    """Record a use, so the pruner keeps the most recently used entries."""
    try:
        os.utime(entry)
    except FileNotFoundError:
        pass


def _try_remove(entry: Path) -> bool:
    got = _lock(entry, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if got is None:
        return False  # a task uses it
    try:
        shutil.rmtree(entry, ignore_errors=True)
        return not entry.exists()
    finally:
        got.release()


def prune(cache_root: Path, keep: int, *, now: float | None = None) -> list[str]:
    """Remove shipped content beyond the ``keep`` most recently used, unused task scratch, and staging
    left by killed unpacks; entries in use are kept whatever their age. Returns what was removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    content = cache_root / "content"
    if content.is_dir():
        entries = [p for p in content.iterdir() if p.is_dir() and not p.name.startswith(".")]
        entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for entry in entries[max(keep, 0):]:
            if _try_remove(entry):
                removed.append(f"content/{entry.name}")
        for staging in content.iterdir():
            if staging.name.startswith(".") and staging.name != ".locks" and staging.is_dir():
                if now - staging.stat().st_mtime > STAGING_STALE_S:
                    shutil.rmtree(staging, ignore_errors=True)
                    removed.append(f"content/{staging.name}")
    tasks = cache_root / "tasks"
    if tasks.is_dir():
        for entry in tasks.iterdir():
            if entry.is_dir() and not entry.name.startswith(".") and _try_remove(entry):
                removed.append(f"tasks/{entry.name}")
    return removed
