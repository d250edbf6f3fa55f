"""What a killed run leaves in git, found without trusting git's own listing.

A ``kill -9`` can stop git half-way through ``git worktree add`` (the admin folder is locked
"initializing", the checkout is partial, ``.git`` may not be written yet), leave a worktree
that ``git branch -D`` refuses to delete ("checked out at ..."), or leave a ``*.lock`` file
beside a ref that every later update of that ref trips over. ``git worktree list`` skips
broken entries and ``git worktree prune`` keeps locked ones, so the admin folders under
``<common git dir>/worktrees/`` are read directly here. Plain file reads; the Workspace
decides what to remove and runs git.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from research.errors import WorkspaceError

#: a shared lock (``packed-refs.lock``) older than this is a killed git's: git holds it for milliseconds
#: (and itself waits ``core.packedRefsTimeout``, 1 s by default, before giving up)
STALE_SHARED_LOCK_S = 30.0
#: locks shared by every ref update of the repository
SHARED_LOCKS = ("packed-refs.lock",)
_HEAD_REF_PREFIX = "ref: refs/heads/"


@dataclass(frozen=True)
class AdminEntry:
    """One ``<common>/worktrees/<name>`` folder: where its worktree is and which branch it holds."""

    admin: Path
    path: Path | None  # the worktree folder (None: git never wrote the ``gitdir`` record)
    branch: str | None  # short branch name checked out there (None: detached or unreadable)
    locked: bool


def admin_entries(common_dir: Path) -> list[AdminEntry]:
    """Every worktree git knows of (also locked, half-created or already deleted ones)."""
    root = Path(common_dir) / "worktrees"
    if not root.is_dir():
        return []
    out = []
    for admin in sorted(root.iterdir()):
        if not admin.is_dir():
            continue
        path = None
        record = _read(admin / "gitdir")  # "<worktree>/.git"
        if record:
            path = Path(record).parent
        head = _read(admin / "HEAD")
        branch = head[len(_HEAD_REF_PREFIX):] if head and head.startswith(_HEAD_REF_PREFIX) else None
        out.append(AdminEntry(admin, path, branch, (admin / "locked").exists()))
    return out


def inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or below it (both resolved; symlinked temp folders compare equal)."""
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except OSError:
        return False


def force_rmtree(path: Path) -> None:
    """Remove a file, symlink or folder tree, also one whose permissions were taken away.

    Code that ran in a worktree may have made folders read-only; a symlink is removed, never
    followed. Missing is fine. Raises ``WorkspaceError`` if something stays.
    """
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    if not path.exists():
        return
    try:
        shutil.rmtree(path)
    except OSError:
        try:  # folders made read-only or unreadable: give them back to us and try once more
            _make_writable(path)
            shutil.rmtree(path)
        except OSError as exc:
            raise WorkspaceError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    if path.exists():
        raise WorkspaceError(f"cannot remove {path}: it came back while being removed")


def stale_ref_locks(common_dir: Path, ref_folders: tuple[str, ...], *, now: float | None = None) -> list[Path]:
    """Lock files a killed git left: every ``*.lock`` under the given ref folders (refs only this run
    writes, e.g. ``refs/autoresearch/<run>``), and shared locks older than ``STALE_SHARED_LOCK_S``."""
    common = Path(common_dir)
    found: list[Path] = []
    for folder in ref_folders:
        base = common / folder
        if base.is_dir():
            found += sorted(p for p in base.rglob("*.lock") if p.is_file())
    now = time.time() if now is None else now
    for name in SHARED_LOCKS:
        p = common / name
        try:
            if now - p.stat().st_mtime > STALE_SHARED_LOCK_S:
                found.append(p)
        except FileNotFoundError:
            pass
    return found


def wait_for_shared_locks(common_dir: Path, *, poll_s: float = 0.2) -> None:
    """Wait until each shared lock is gone or older than ``stale_s`` (then ``stale_ref_locks`` takes it for a
    killed git's). Why: a resume started right after a kill finds the killed ``git branch -D``'s
    ``packed-refs.lock`` seconds old, too young to be called stale, and every branch deletion then fails;
    a live git releases it within milliseconds, so waiting costs nothing unless the lock is a dead one."""
    common, stale_s = Path(common_dir), STALE_SHARED_LOCK_S
    deadline = time.time() + stale_s
    while time.time() < deadline:
        young = False
        for name in SHARED_LOCKS:
            try:
                young |= time.time() - (common / name).stat().st_mtime <= stale_s
            except FileNotFoundError:
                pass
        if not young:
            return
        time.sleep(poll_s)


def _make_writable(root: Path) -> None:
    os.chmod(root, stat.S_IRWXU)
    for folder, subfolders, _ in os.walk(root):  # top-down: each folder is opened after its chmod
        for name in subfolders:
            sub = os.path.join(folder, name)
            if not os.path.islink(sub):
                os.chmod(sub, stat.S_IRWXU)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None
