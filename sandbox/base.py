"""The one sandbox interface: a run specification, a run result, and the backend ABC.

Every backend (process, bwrap, docker) takes the same `SandboxSpec` and returns the
same `SandboxResult`, so the research loop never branches on the backend. This
package is generic: it imports no project package (stdlib only; the optional
`docker` SDK is imported lazily by the docker backend).
"""

from __future__ import annotations

import abc
import math
import os
import signal as _signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Network = Literal["none", "loopback", "host"]
NETWORK_MODES: tuple[str, ...] = ("none", "loopback", "host")

#: environment every child gets unless the spec's env overrides it; nothing else is inherited
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
DEFAULT_LANG = "C.UTF-8"
#: stdout and stderr are each captured up to this many bytes by default
DEFAULT_OUTPUT_CAP_BYTES = 1 << 20
DEFAULT_WALL_TIMEOUT_S = 600.0

# Names of the guarantees a backend can give (see `Sandbox.guarantees`, README table).
G_NETWORK = "network_isolation"  # network="none" cannot reach any host socket, loopback included
G_READONLY = "readonly_paths"  # writes into spec.readonly fail, even as root
G_HIDDEN = "hidden_paths"  # paths not listed in the spec are invisible
G_PIDS = "pids_limit"  # spec.max_pids is enforced
G_MEMORY = "memory_limit"  # spec.memory_bytes is enforced (RLIMIT_AS at least)
G_MEMORY_CGROUP = "memory_cgroup"  # ... and by a cgroup, so OOM kills are observed, not guessed
G_TREE_KILL = "tree_kill"  # every descendant dies at the end, even one that called setsid()
G_PROC_ISOLATION = "pid_namespace"  # the child cannot see or signal host processes


class SandboxError(Exception):
    """A sandboxed run could not be started or supervised (not: the child failed)."""

    def __str__(self) -> str:  # one line, always
        return " ".join(super().__str__().split())


class SandboxUnavailableError(SandboxError):
    """The backend cannot run on this machine (missing binary, no daemon, no privileges)."""


def _paths(values: Iterable[str | os.PathLike[str]], what: str) -> tuple[Path, ...]:
    out = []
    for value in values:
        path = Path(value)
        if not path.is_absolute():
            raise SandboxError(f"SandboxSpec.{what}: path must be absolute: {value}")
        out.append(Path(os.path.normpath(path)))
    return tuple(out)


def _positive_or_none(name: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise SandboxError(f"SandboxSpec.{name} must be > 0 or None, got {value!r}")


@dataclass(frozen=True)
class SandboxSpec:
    """What to run and within which limits.

    `env` is exactly what the child gets, plus PATH/HOME/LANG defaults when absent
    (see `child_env`): nothing is inherited from the parent implicitly, so API keys
    reach the child only when the caller puts them here. Lists are stored as tuples.
    """

    argv: Sequence[str]
    workdir: Path
    writable: Sequence[Path] = ()
    readonly: Sequence[Path] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network: Network = "none"
    wall_timeout_s: float = DEFAULT_WALL_TIMEOUT_S
    memory_bytes: int | None = None
    cpu_seconds: int | None = None
    max_file_bytes: int | None = None
    max_open_files: int | None = None
    max_pids: int | None = None
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES

    def __post_init__(self) -> None:
        argv = tuple(str(a) for a in self.argv)
        if not argv or not argv[0]:
            raise SandboxError("SandboxSpec.argv must name a program")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "workdir", _paths([self.workdir], "workdir")[0])
        object.__setattr__(self, "writable", _paths(self.writable, "writable"))
        object.__setattr__(self, "readonly", _paths(self.readonly, "readonly"))
        env = {str(k): str(v) for k, v in dict(self.env).items()}
        if any(not k or "=" in k or "\0" in k + v for k, v in env.items()):
            raise SandboxError("SandboxSpec.env: names must be non-empty without '=' or NUL")
        object.__setattr__(self, "env", env)
        if self.network not in NETWORK_MODES:
            raise SandboxError(f"SandboxSpec.network must be one of {NETWORK_MODES}, got {self.network!r}")
        if not (math.isfinite(self.wall_timeout_s) and self.wall_timeout_s > 0):
            raise SandboxError(f"SandboxSpec.wall_timeout_s must be > 0, got {self.wall_timeout_s!r}")
        for name in ("memory_bytes", "cpu_seconds", "max_file_bytes", "max_open_files", "max_pids"):
            _positive_or_none(name, getattr(self, name))
        if self.output_cap_bytes < 2:
            raise SandboxError(f"SandboxSpec.output_cap_bytes must be >= 2, got {self.output_cap_bytes}")

    def child_env(self) -> dict[str, str]:
        """The child's complete environment: minimal PATH/HOME/LANG, then `env` on top."""
        base = {"PATH": DEFAULT_PATH, "HOME": str(self.workdir), "LANG": DEFAULT_LANG}
        base.update(self.env)
        return base

    def covers(self, path: Path) -> bool:
        """True when `path` lies inside one of the writable or readonly paths."""
        return any(path == p or p in path.parents for p in (*self.writable, *self.readonly))


@dataclass
class SandboxResult:
    """How a sandboxed run ended. Output is decoded UTF-8 (invalid bytes replaced) and capped.

    `exit_code` is None when the child was killed by a signal (then `signal` is set).
    When the output exceeded the cap, the head and the tail are kept (tracebacks and
    the final `MEMSYS_ERROR` line live at the end) with a marker line in between.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    oom_killed: bool
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    backend: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return _signal.Signals(self.signal).name
        except ValueError:
            return f"SIG{self.signal}"

    def summary(self) -> str:
        """One line for logs: how it ended and how long it took."""
        if self.timed_out:
            how = "timed out"
        elif self.oom_killed:
            how = "oom-killed"
        elif self.signal is not None:
            how = f"killed by {self.signal_name}"
        else:
            how = f"exit {self.exit_code}"
        return f"[{self.backend}] {how} after {self.duration_s:.2f}s"


class Sandbox(abc.ABC):
    """A way to run an untrusted command under limits. Subclasses set `name`."""

    name: str = "abstract"

    @abc.abstractmethod
    def available(self) -> tuple[bool, str]:
        """(True, "") when `run` can work here, else (False, one-line reason)."""

    @abc.abstractmethod
    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run `spec.argv` to completion or to its wall timeout; never raises for a child failure."""

    def guarantees(self) -> frozenset[str]:
        """What this backend enforces on this machine (the G_* names); see README."""
        return frozenset()

    def require_available(self) -> None:
        ok, reason = self.available()
        if not ok:
            raise SandboxUnavailableError(f"sandbox backend {self.name!r} unavailable: {reason}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
