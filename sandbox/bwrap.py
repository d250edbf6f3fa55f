"""Bubblewrap backend: namespaces + read-only binds + tmpfs + rlimits + cgroup v1 limits.

The child sees a fresh root containing only: the system directories (read-only), the
Python installation running this code (read-only, so `sys.executable` works inside),
the spec's readonly/writable paths, a private /tmp (tmpfs), /proc of its own pid
namespace and a minimal /dev. It runs in new user/ipc/pid/net/uts/cgroup namespaces
(network kept only for network="host"); bwrap's new network namespace already has
`lo` up (checked with bwrap 0.8), so "none" and "loopback" both mean a private
loopback only: no host socket, including the host's 127.0.0.1, is reachable.
As root, all capabilities are dropped and /proc/sys is re-bound read-only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sandbox.base import (
    G_HIDDEN,
    G_MEMORY,
    G_MEMORY_CGROUP,
    G_NETWORK,
    G_PIDS,
    G_PROC_ISOLATION,
    G_READONLY,
    G_TREE_KILL,
    Sandbox,
    SandboxError,
    SandboxResult,
    SandboxSpec,
)
from sandbox.cgroups import CgroupLimits
from sandbox.process import execute, make_cgroup

#: only what programs need from /etc: not shadow files, ssh keys, apt or cron configuration
DEFAULT_ETC_PATHS: tuple[str, ...] = tuple(
    "/etc/" + name
    for name in (
        "alternatives", "ca-certificates", "ca-certificates.conf", "fonts", "gai.conf", "group",
        "host.conf", "hosts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias", "localtime",
        "mime.types", "nsswitch.conf", "os-release", "passwd", "pki", "protocols", "resolv.conf",
        "services", "ssl", "timezone",
    )
)
#: bound read-only when they exist; top-level symlinks (/bin -> usr/bin) are recreated as symlinks
DEFAULT_SYSTEM_PATHS: tuple[str, ...] = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", *DEFAULT_ETC_PATHS,
)
#: size of the private /tmp (tmpfs pages also count against the memory cgroup)
DEFAULT_TMPFS_BYTES = 256 << 20
PROBE_TIMEOUT_S = 10.0


def python_paths() -> list[str]:
    """The running interpreter's prefixes, so `sys.executable` and the venv work inside."""
    seen: list[str] = []
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        real = os.path.realpath(prefix)
        for path in (prefix, real):
            if path not in seen:
                seen.append(path)
    return seen


def _depth(path: str) -> int:
    return len(Path(path).parts)


class BwrapSandbox(Sandbox):
    """Run each spec inside `bwrap`. See the module docstring for what the child can see."""

    name = "bwrap"

    def __init__(
        self,
        *,
        bwrap_path: str | None = None,
        system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS,
        include_python: bool = True,
        tmpfs_bytes: int = DEFAULT_TMPFS_BYTES,
        use_cgroups: bool = True,
        user: int | None = None,
        group: int | None = None,
        limit_address_space: bool = True,
    ) -> None:
        self.limit_address_space = limit_address_space
        self.bwrap_path = bwrap_path or shutil.which("bwrap")
        self.system_paths = tuple(system_paths)
        self.include_python = include_python
        self.tmpfs_bytes = tmpfs_bytes
        self.use_cgroups = use_cgroups
        self.user = user
        self.group = group
        self._probe: tuple[bool, str] | None = None

    # -- availability ---------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """Found on PATH and a trivial sandboxed `true` actually runs (result cached)."""
        if self._probe is None:
            self._probe = self._run_probe()
        return self._probe

    def _run_probe(self) -> tuple[bool, str]:
        if not self.bwrap_path:
            return False, "bwrap not found on PATH (apt-get install --no-install-recommends bubblewrap)"
        spec = SandboxSpec(argv=["true"], workdir=Path("/"), wall_timeout_s=PROBE_TIMEOUT_S)
        try:
            proc = subprocess.run(
                self.build_argv(spec), env=spec.child_env(), capture_output=True, timeout=PROBE_TIMEOUT_S
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"bwrap probe failed: {type(exc).__name__}: {exc}"
        if proc.returncode != 0:
            lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            return False, f"bwrap probe exited {proc.returncode}: {lines[-1] if lines else 'no message'}"
        return True, ""

    def _cgroups_usable(self) -> bool:
        return self.use_cgroups and CgroupLimits.usable()[0]

    def guarantees(self) -> frozenset[str]:
        found = {G_NETWORK, G_READONLY, G_HIDDEN, G_PROC_ISOLATION, G_TREE_KILL}
        if self.limit_address_space:
            found.add(G_MEMORY)
        if self._cgroups_usable():
            found |= {G_PIDS, G_MEMORY, G_MEMORY_CGROUP}
        if self.user not in (None, 0):
            found.add(G_PIDS)
        return frozenset(found)

    # -- command line ---------------------------------------------------------
    def _system_args(self) -> list[str]:
        args: list[str] = []
        for path in self.system_paths:
            if os.path.islink(path) and os.path.dirname(path) == "/":
                args += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path):
                args += ["--ro-bind", path, path]  # follows a symlinked source (/etc/localtime)
        if self.include_python:
            for path in python_paths():
                if os.path.isdir(path) and not any(
                    path == s or path.startswith(s.rstrip("/") + "/") for s in self.system_paths
                ):
                    args += ["--ro-bind", path, path]
        return args

    def build_argv(self, spec: SandboxSpec) -> list[str]:
        """The full bwrap command line for `spec` (pure: no side effects)."""
        if not self.bwrap_path:
            raise SandboxError("[bwrap] bwrap not found on PATH")
        args = [self.bwrap_path, "--unshare-all"]
        if spec.network == "host":
            args.append("--share-net")
        args += ["--die-with-parent", "--new-session"]
        privileged = os.geteuid() == 0 and self.user in (None, 0)
        if privileged:
            args += ["--cap-drop", "ALL"]
        # the private /tmp first: a checkout or venv under /tmp (git clone . /tmp/x) is bound on top of it
        args += ["--size", str(self.tmpfs_bytes), "--tmpfs", "/tmp"]
        args += self._system_args()
        args += ["--proc", "/proc", "--dev", "/dev"]
        if privileged:  # uid 0 without capabilities may still write sysctls: make them read-only
            args += ["--ro-bind-try", "/proc/sys", "/proc/sys"]
            args += ["--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        binds = [(str(p), "--ro-bind") for p in spec.readonly] + [(str(p), "--bind") for p in spec.writable]
        # parents before children, so a readonly dir inside a writable one stays readonly
        for path, flag in sorted(binds, key=lambda item: _depth(item[0])):
            args += [flag, path, path]
        args += ["--chdir", str(spec.workdir), "--"]
        return args + list(spec.argv)

    def _check_spec(self, spec: SandboxSpec) -> None:
        if not (spec.workdir.is_dir() or spec.workdir in (Path("/"), Path("/tmp"))):
            raise SandboxError(f"[bwrap] workdir does not exist: {spec.workdir}")
        for path in (*spec.readonly, *spec.writable):
            if not path.exists():
                raise SandboxError(f"[bwrap] bind source does not exist: {path}")
        visible = [Path(p) for p in self.system_paths]
        if self.include_python:
            visible += [Path(p) for p in python_paths()]
        inside_system = any(spec.workdir == v or v in spec.workdir.parents for v in visible)
        if not (spec.covers(spec.workdir) or inside_system or spec.workdir in (Path("/"), Path("/tmp"))):
            raise SandboxError(f"[bwrap] workdir {spec.workdir} is not inside a writable or readonly path")

    # -- run ------------------------------------------------------------------
    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.require_available()
        self._check_spec(spec)
        cgroup = make_cgroup(spec, self.use_cgroups, self.name)
        try:
            result = execute(
                self.build_argv(spec),
                spec,
                backend=self.name,
                cwd=None,
                cgroup=cgroup,
                user=self.user,
                group=self.group,
                signal_from_exit_status=True,
                limit_address_space=self.limit_address_space,
            )
        finally:
            if cgroup is not None:
                cgroup.close()
        first = result.stderr.lstrip().partition("\n")[0]
        if result.exit_code == 1 and first.startswith("bwrap: "):
            # bwrap could not set the sandbox up (bad bind, no namespaces): our side, not the child's
            raise SandboxError(f"[bwrap] sandbox setup failed: {first}")
        return result
