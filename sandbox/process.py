"""Process backend, and the supervised-child runner every local backend shares.

`execute` starts a child in a new session with rlimits (and optionally a private
network namespace, cgroups and a non-root uid) applied in `preexec_fn`, captures
stdout/stderr up to a cap while always draining the pipes, enforces the wall
timeout and kills the whole tree at the end. `ProcessSandbox` is `execute` on the
command itself: resource limits and network, but no filesystem isolation (see README).
"""

from __future__ import annotations

import collections
import ctypes
import fcntl
import logging
import os
import resource
import selectors
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import lru_cache

from sandbox.base import (
    G_MEMORY,
    G_MEMORY_CGROUP,
    G_NETWORK,
    G_PIDS,
    G_TREE_KILL,
    Sandbox,
    SandboxError,
    SandboxResult,
    SandboxSpec,
)
from sandbox.cgroups import CgroupLimits

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
#: after the child exits, how long descendants may keep its pipes open before they are killed
ORPHAN_GRACE_S = 0.5
#: how long to keep draining the pipes after a kill
DRAIN_AFTER_KILL_S = 1.0
#: supervision tick when the child is silent (exit and orphan checks)
TICK_S = 0.25
#: RLIMIT_CPU hard limit = soft + this: SIGXCPU first, SIGKILL if it is ignored
CPU_HARD_MARGIN_S = 1

_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40
_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _unshare_network(loopback: bool) -> None:
    """In the child: a private network namespace (no interfaces up), optionally with lo up."""
    if _libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
    if loopback:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            flags = _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags))


@lru_cache(maxsize=1)
def network_namespace_available() -> tuple[bool, str]:
    """Whether this process may create network namespaces (root, or CAP_SYS_ADMIN)."""
    try:
        proc = subprocess.run(
            ["true"], preexec_fn=lambda: _unshare_network(True), capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"cannot create a network namespace ({type(exc).__name__}: {exc}); needs root"
    return proc.returncode == 0, "" if proc.returncode == 0 else "network namespace probe failed"


def rlimits_for(spec: SandboxSpec, limit_address_space: bool = True) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples for the spec's limits. RLIMIT_NPROC is ignored for root.

    RLIMIT_AS caps virtual memory, which some libraries reserve far beyond what they
    touch (torch + sentence-transformers: ~1.2 GB virtual for ~0.5 GB resident); with
    a memory cgroup in place it can be turned off (`limit_address_space=False`).
    """
    limits = [(resource.RLIMIT_CORE, 0, 0)]  # no core files filling the disk
    if spec.memory_bytes is not None and limit_address_space:
        limits.append((resource.RLIMIT_AS, spec.memory_bytes, spec.memory_bytes))
    if spec.cpu_seconds is not None:
        limits.append((resource.RLIMIT_CPU, spec.cpu_seconds, spec.cpu_seconds + CPU_HARD_MARGIN_S))
    if spec.max_file_bytes is not None:
        limits.append((resource.RLIMIT_FSIZE, spec.max_file_bytes, spec.max_file_bytes))
    if spec.max_open_files is not None:
        limits.append((resource.RLIMIT_NOFILE, spec.max_open_files, spec.max_open_files))
    if spec.max_pids is not None:
        limits.append((resource.RLIMIT_NPROC, spec.max_pids, spec.max_pids))
    return limits


class _Capture:
    """Keeps the first and the last cap/2 bytes of a stream; counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())

    def text(self) -> tuple[str, bool]:
        tail = b"".join(self.tail)[-self.tail_cap :]
        head = bytes(self.head).decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(tail)
        if dropped <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace"), False
        marker = f"\n[... sandbox: {dropped} bytes of output dropped ...]\n"
        return head + marker + tail.decode("utf-8", "replace"), True


def make_cgroup(spec: SandboxSpec, enabled: bool, backend: str) -> CgroupLimits | None:
    """This run's cgroups when enabled and usable here, else None."""
    if not (enabled and CgroupLimits.usable()[0]):
        return None
    try:
        return CgroupLimits(spec.memory_bytes, spec.max_pids)
    except OSError as exc:
        raise SandboxError(f"[{backend}] cannot create the run's cgroup: {exc}") from exc


def _exited(pid: int) -> bool:
    """True once the child has exited, without reaping it (so its pgid stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_tree(pid: int, cgroup: CgroupLimits | None) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is not None:
        cgroup.kill_all()


def _make_preexec(
    spec: SandboxSpec,
    network: str | None,
    cgroup: CgroupLimits | None,
    user: int | None,
    group: int | None,
    limit_address_space: bool,
    apply_rlimits: bool,
):
    limits = rlimits_for(spec, limit_address_space) if apply_rlimits else []
    join_files = cgroup.join_files if cgroup else []

    def preexec() -> None:  # runs in the forked child: syscalls only, no locks, no logging
        pid = str(os.getpid()).encode()
        for path in join_files:  # first: everything after this is accounted and killable
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if network is not None:
            _unshare_network(loopback=network == "loopback")
        for res, soft, hard in limits:
            resource.setrlimit(res, (soft, hard))
        if user is not None:
            os.setgroups([])
            os.setgid(group if group is not None else user)
            os.setuid(user)
        # last (a credential change clears it): the evaluation dies with the process that started it, so a
        # loop killed with kill -9 leaves no orphan writing into its run folder while it is resumed
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return preexec


def _status(returncode: int, signal_from_exit_status: bool) -> tuple[int | None, int | None]:
    if returncode < 0:
        return None, -returncode
    # bwrap (like a shell) reports a child killed by signal N as exit status 128 + N
    if signal_from_exit_status and returncode > 128 and (returncode - 128) in _FATAL_SIGNALS:
        return None, returncode - 128
    return returncode, None


_FATAL_SIGNALS = {
    int(s)
    for s in (
        signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
        signal.SIGFPE, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE,
    )
}


def _memory_error_in(stderr: str) -> bool:
    return any(line.startswith("MemoryError") for line in stderr.splitlines()[-20:])


class _Pipes:
    """The child's stdout and stderr, read without blocking into their captures: a child that fills
    a pipe nobody reads would hang, so the pipes are drained even past the cap."""

    def __init__(self, proc: subprocess.Popen, cap: int) -> None:
        self.stdout, self.stderr = _Capture(cap), _Capture(cap)
        self._captures = {proc.stdout.fileno(): self.stdout, proc.stderr.fileno(): self.stderr}
        self._sel = selectors.DefaultSelector()
        for fd in self._captures:
            os.set_blocking(fd, False)
            self._sel.register(fd, selectors.EVENT_READ)

    @property
    def open(self) -> bool:
        return bool(self._sel.get_map())

    def pump(self, timeout: float) -> None:
        for key, _ in self._sel.select(timeout):
            try:
                data = os.read(key.fd, READ_CHUNK)
            except BlockingIOError:
                continue
            if data:
                self._captures[key.fd].feed(data)
            else:
                self._sel.unregister(key.fd)

    def drain(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while self.open and time.monotonic() < until:
            self.pump(0.05)

    def close(self) -> None:
        self._sel.close()


def _spawn(argv: Sequence[str], *, backend: str, cwd: str | None, env: dict[str, str],
           preexec: Callable[[], None]) -> subprocess.Popen:
    """The child in a session of its own (its tree is one process group to kill), or a SandboxError."""
    try:
        return subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec, close_fds=True)
    except FileNotFoundError as exc:
        raise SandboxError(f"[{backend}] program not found: {exc.filename or argv[0]}") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"[{backend}] could not start {argv[0]}: {exc}") from exc


def _supervise(proc: subprocess.Popen, pipes: _Pipes, deadline: float) -> bool:
    """Read the pipes until they close or the deadline passes; True when it passed. A child that has
    exited while descendants still hold its pipes gets ORPHAN_GRACE_S, then the caller kills them."""
    exited_at: float | None = None
    while pipes.open:
        now = time.monotonic()
        if now >= deadline:
            return True
        if exited_at is None and _exited(proc.pid):
            exited_at = now
        if exited_at is not None and now - exited_at > ORPHAN_GRACE_S:
            return False
        pipes.pump(min(deadline - now, TICK_S))
    if exited_at is not None:
        return False
    # the pipes closed but the child may still be running (it closed them itself)
    remaining = deadline - time.monotonic()
    while not _exited(proc.pid) and remaining > 0:
        time.sleep(min(remaining, TICK_S))
        remaining = deadline - time.monotonic()
    return not _exited(proc.pid)


def _oom_killed(cgroup: CgroupLimits | None, spec: SandboxSpec, timed_out: bool, sig: int | None, stderr: str) -> bool:
    """The cgroup's OOM count when there is one; else a SIGKILL nobody here sent under a memory limit
    (most likely the OOM killer), or Python's own MemoryError at the end of stderr."""
    if cgroup and cgroup.oom_kills() > 0:
        return True
    if not timed_out and sig == signal.SIGKILL and spec.memory_bytes is not None:
        if cgroup is None or not cgroup.limits_memory or cgroup.memory_failcnt() > 0:
            return True
    return _memory_error_in(stderr)


def execute(
    argv: Sequence[str],
    spec: SandboxSpec,
    *,
    backend: str,
    cwd: str | None,
    network: str | None = None,
    cgroup: CgroupLimits | None = None,
    user: int | None = None,
    group: int | None = None,
    signal_from_exit_status: bool = False,
    limit_address_space: bool = True,
    env: dict[str, str] | None = None,
    on_timeout: Callable[[], None] | None = None,
    apply_rlimits: bool = True,
) -> SandboxResult:
    """Run `argv` with the spec's env and limits; supervise, capture, time out, kill the tree.

    `network` is None (share the caller's network) or "none"/"loopback" (private
    namespace). The cgroup, if given, is owned by the caller (who closes it). `env`
    replaces `spec.child_env()` for the launched program (the docker CLI needs its own);
    `on_timeout` runs before the tree is killed (the docker backend kills its container).
    `apply_rlimits=False` leaves the launched program unlimited (the docker CLI: the
    container enforces the limits).
    """
    start = time.monotonic()
    preexec = _make_preexec(spec, network, cgroup, user, group, limit_address_space, apply_rlimits)
    proc = _spawn(argv, backend=backend, cwd=cwd, env=spec.child_env() if env is None else env, preexec=preexec)
    pipes = _Pipes(proc, spec.output_cap_bytes)
    try:
        timed_out = _supervise(proc, pipes, start + spec.wall_timeout_s)
        if timed_out and on_timeout is not None:
            on_timeout()
        _kill_tree(proc.pid, cgroup)  # every descendant dies at the end: on timeout, and leftovers after a normal exit
        pipes.drain(DRAIN_AFTER_KILL_S)
        proc.wait()
    finally:
        if proc.returncode is None:
            _kill_tree(proc.pid, cgroup)
            proc.wait()
        pipes.close()
        proc.stdout.close()
        proc.stderr.close()
    duration = time.monotonic() - start

    exit_code, sig = _status(proc.returncode, signal_from_exit_status)
    stdout, stdout_truncated = pipes.stdout.text()
    stderr, stderr_truncated = pipes.stderr.text()
    return SandboxResult(
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        oom_killed=_oom_killed(cgroup, spec, timed_out, sig, stderr),
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=stdout_truncated,
        stderr_truncated=stderr_truncated,
        duration_s=duration,
        backend=backend,
    )


class ProcessSandbox(Sandbox):
    """Plain subprocess with rlimits, a private network namespace when permitted, and cgroups.

    Gives no filesystem isolation: the child sees and (as root) may write everything
    the caller can. `user`/`group` drop the child to another uid (e.g. 65534 nobody) so
    ordinary file permissions and RLIMIT_NPROC apply. With `require_network_isolation`,
    network="none" fails instead of running with the host network when no namespace
    can be created (non-root). `limit_address_space=False` skips RLIMIT_AS (memory is
    then enforced by the cgroup only).
    """

    name = "process"

    def __init__(
        self,
        *,
        use_cgroups: bool = True,
        user: int | None = None,
        group: int | None = None,
        require_network_isolation: bool = False,
        limit_address_space: bool = True,
    ) -> None:
        self.use_cgroups = use_cgroups
        self.limit_address_space = limit_address_space
        self.user = user
        self.group = group
        self.require_network_isolation = require_network_isolation
        self._warned_network = False

    def available(self) -> tuple[bool, str]:
        return True, ""

    def _cgroups_usable(self) -> bool:
        return self.use_cgroups and CgroupLimits.usable()[0]

    def guarantees(self) -> frozenset[str]:
        found = set()
        if self.limit_address_space or self._cgroups_usable():
            found.add(G_MEMORY)
        if network_namespace_available()[0]:
            found.add(G_NETWORK)
        if self._cgroups_usable():
            found |= {G_PIDS, G_MEMORY_CGROUP, G_TREE_KILL}
        if self.user not in (None, 0):
            found.add(G_PIDS)  # RLIMIT_NPROC applies to non-root uids
        return frozenset(found)

    def _network_mode(self, spec: SandboxSpec) -> str | None:
        if spec.network == "host":
            return None
        ok, reason = network_namespace_available()
        if ok:
            return spec.network
        if self.require_network_isolation:
            raise SandboxError(f"[process] network={spec.network!r} needs a network namespace: {reason}")
        if not self._warned_network:
            log.warning("process sandbox cannot restrict the network (%s); child uses the host network", reason)
            self._warned_network = True
        return None

    def run(self, spec: SandboxSpec) -> SandboxResult:
        if not spec.workdir.is_dir():
            raise SandboxError(f"[process] workdir does not exist: {spec.workdir}")
        network = self._network_mode(spec)
        cgroup = make_cgroup(spec, self.use_cgroups, self.name)
        try:
            return execute(
                spec.argv,
                spec,
                backend=self.name,
                cwd=str(spec.workdir),
                network=network,
                cgroup=cgroup,
                user=self.user,
                group=self.group,
                limit_address_space=self.limit_address_space,
            )
        finally:
            if cgroup is not None:
                cgroup.close()
