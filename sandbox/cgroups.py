"""Per-run cgroup v1 memory + pids groups: hard limits, OOM evidence, and a reliable tree kill.

A child group is created *below the caller's own cgroup* (read from /proc/self/cgroup)
for each controller, so limits only ever tighten what the caller already has and
usage stays accounted to the caller. The child joins the groups before exec (from
`preexec_fn`), so nothing it forks can escape them; at the end every pid still in the
group is killed and the group removed. When the controllers are not writable
(non-root, cgroup v2 only, read-only /sys) `CgroupLimits.usable()` says why and the
backends fall back to rlimits and process-group kills.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import signal
import time
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "sandbox-"
CONTROLLERS = ("memory", "pids")
#: how long `kill_all` keeps sweeping a group that is still forking
KILL_SWEEP_S = 3.0
_counter = itertools.count()


def _own_group_dir(controller: str) -> Path | None:
    """Directory of this process's v1 cgroup for `controller`, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or controller not in parts[1].split(","):
            continue
        rel = parts[2].lstrip("/")
        for mount in (CGROUP_ROOT / controller, CGROUP_ROOT / parts[1]):
            candidate = mount / rel
            if (candidate / "cgroup.procs").exists():
                return candidate
    return None


def _remove_stale(parent: Path) -> None:
    """Remove empty groups left by a creator process that died mid-run."""
    for child in parent.glob(f"{GROUP_PREFIX}*"):
        try:
            creator = int(child.name[len(GROUP_PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if creator == os.getpid() or Path(f"/proc/{creator}").exists():
            continue
        try:
            if not (child / "cgroup.procs").read_text().strip():
                child.rmdir()
        except OSError:
            pass


@lru_cache(maxsize=1)
def _probe() -> tuple[dict[str, Path], str]:
    parents: dict[str, Path] = {}
    reasons = []
    for controller in CONTROLLERS:
        parent = _own_group_dir(controller)
        if parent is None:
            reasons.append(f"no cgroup v1 '{controller}' hierarchy mounted")
            continue
        probe = parent / f"{GROUP_PREFIX}{os.getpid()}-probe"
        try:
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError as exc:
            reasons.append(f"cannot create a '{controller}' cgroup under {parent}: {exc.strerror}")
            continue
        _remove_stale(parent)
        parents[controller] = parent
    return parents, "; ".join(reasons)


class CgroupLimits:
    """One run's groups. Use: create, pass `join_files` to the child, then `close()`."""

    def __init__(self, memory_bytes: int | None, max_pids: int | None) -> None:
        parents, _ = _probe()
        self.memory_bytes = memory_bytes
        self.max_pids = max_pids
        name = f"{GROUP_PREFIX}{os.getpid()}-{next(_counter)}-{time.monotonic_ns() % 10**9}"
        self.dirs: dict[str, Path] = {}
        try:
            for controller, parent in parents.items():
                path = parent / name
                path.mkdir()
                self.dirs[controller] = path
            if "memory" in self.dirs and memory_bytes is not None:
                self._write("memory", "memory.limit_in_bytes", memory_bytes)
                # no swap either (ignored when swap accounting is off)
                self._write("memory", "memory.memsw.limit_in_bytes", memory_bytes, required=False)
            if "pids" in self.dirs and max_pids is not None:
                self._write("pids", "pids.max", max_pids)
        except OSError:
            self.close()
            raise

    @staticmethod
    def usable() -> tuple[bool, str]:
        """(True, "") when both memory and pids groups can be created here."""
        parents, reason = _probe()
        return len(parents) == len(CONTROLLERS), reason

    @property
    def join_files(self) -> list[str]:
        """`cgroup.procs` files the child writes its pid into before exec."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.dirs and self.memory_bytes is not None

    @property
    def limits_pids(self) -> bool:
        return "pids" in self.dirs and self.max_pids is not None

    def _write(self, controller: str, filename: str, value: int, required: bool = True) -> None:
        try:
            (self.dirs[controller] / filename).write_text(str(value))
        except OSError:
            if required:
                raise

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            try:
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def kill_all(self) -> bool:
        """SIGKILL every member until the group is empty; False if it did not empty in time."""
        deadline = time.monotonic() + KILL_SWEEP_S
        while True:
            members = self.pids()
            if not members:
                return True
            if time.monotonic() > deadline:
                log.warning("cgroup %s still has %d processes after kill sweep", self.name, len(members))
                return False
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    @property
    def name(self) -> str:
        return next(iter(self.dirs.values())).name if self.dirs else "-"

    def oom_kills(self) -> int:
        """Kernel OOM kills inside the memory group (0 when unknown)."""
        path = self.dirs.get("memory")
        if path is None:
            return 0
        try:
            text = (path / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def memory_failcnt(self) -> int:
        path = self.dirs.get("memory")
        try:
            return int((path / "memory.failcnt").read_text()) if path else 0
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        """Kill what is left and remove the groups (retrying while exiting tasks linger)."""
        self.kill_all()
        for controller, path in list(self.dirs.items()):
            for _ in range(200):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning("cannot remove cgroup %s: %s", path, exc.strerror)
                        break
                    time.sleep(0.005)
            self.dirs.pop(controller, None)
