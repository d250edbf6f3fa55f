"""Docker backend: one throw-away container per run (`docker run --rm`), via the docker CLI.

The image is built from `sandbox/Dockerfile` (project installed, non-root user). The
spec's paths are mounted at the same paths inside the container, so argv and
PYTHONPATH written for the host work unchanged; the host interpreter in argv[0] is
mapped to the image's `python`. Env values never appear on a command line: the CLI
gets them in its own environment and forwards them by name (`-e KEY`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
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
from sandbox.process import CPU_HARD_MARGIN_S, execute

DEFAULT_IMAGE = "omni-memsys-sandbox:latest"
DEFAULT_USER = "1000:1000"
DEFAULT_TMPFS_BYTES = 256 << 20
INFO_TIMEOUT_S = 5.0
KILL_TIMEOUT_S = 15.0
#: `docker run` exit status when the daemon could not create or start the container
DOCKER_RUN_ERROR = 125
#: variables the docker CLI itself needs (daemon address, TLS, config dir)
CLI_ENV_PREFIXES = ("DOCKER_",)
_counter = itertools.count()


def _first_line(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no message"


class DockerSandbox(Sandbox):
    """`docker run --rm` with --network, --memory, --pids-limit, ulimits, read-only root, no caps."""

    name = "docker"

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        docker_bin: str | None = None,
        user: str | None = DEFAULT_USER,
        cpus: float | None = None,
        tmpfs_bytes: int = DEFAULT_TMPFS_BYTES,
        translate_python: bool = True,
    ) -> None:
        self.image = image
        self.docker_bin = docker_bin or shutil.which("docker")
        self.user = user
        self.cpus = cpus
        self.tmpfs_bytes = tmpfs_bytes
        self.translate_python = translate_python
        self._probe: tuple[bool, str] | None = None

    # -- availability ---------------------------------------------------------
    def _docker(self, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([self.docker_bin, *args], capture_output=True, timeout=timeout, env=self._cli_env({}))

    def available(self) -> tuple[bool, str]:
        """The CLI exists, the daemon answers `docker info` quickly, and the image is built."""
        if self._probe is not None:
            return self._probe
        if not self.docker_bin:
            return False, "docker CLI not found on PATH"
        try:
            info = self._docker("info", "--format", "{{.ServerVersion}}", timeout=INFO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"docker daemon did not answer `docker info` within {INFO_TIMEOUT_S:g}s"
        except OSError as exc:
            return False, f"cannot run docker CLI: {exc}"
        if info.returncode != 0:
            return False, f"docker daemon not reachable: {_first_line(info.stderr)}"
        image = self._docker("image", "inspect", "--format", "{{.Id}}", self.image, timeout=INFO_TIMEOUT_S)
        if image.returncode != 0:
            self._probe = (
                False,
                f"image {self.image} not built (docker build -f sandbox/Dockerfile -t {self.image} .)",
            )
            return self._probe
        self._probe = (True, "")  # cache only answers from a live daemon
        return self._probe

    def guarantees(self) -> frozenset[str]:
        return frozenset(
            {G_NETWORK, G_READONLY, G_HIDDEN, G_MEMORY, G_MEMORY_CGROUP, G_PIDS, G_PROC_ISOLATION, G_TREE_KILL}
        )

    # -- command line ---------------------------------------------------------
    def _cli_env(self, child_env: dict[str, str]) -> dict[str, str]:
        env = dict(child_env)
        env.update({k: v for k, v in os.environ.items() if k.startswith(CLI_ENV_PREFIXES)})
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        if "HOME" in os.environ:  # the CLI reads ~/.docker/config.json
            env.setdefault("DOCKER_CONFIG", str(Path(os.environ["HOME"]) / ".docker"))
        return env

    def _image_argv(self, argv: tuple[str, ...]) -> list[str]:
        host_pythons = {sys.executable, os.path.realpath(sys.executable)}
        if self.translate_python and argv[0] in host_pythons:
            return ["python", *argv[1:]]
        return list(argv)

    def build_argv(self, spec: SandboxSpec, container_name: str) -> list[str]:
        """The full `docker run` command line for `spec` (pure: no side effects)."""
        args = [self.docker_bin or "docker", "run", "--rm", "--name", container_name, "--init"]
        # docker's "none" network has only a private lo: that is our "loopback" too
        args += ["--network", "host" if spec.network == "host" else "none"]
        args += ["--read-only", "--tmpfs", f"/tmp:rw,size={self.tmpfs_bytes}"]
        args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        if self.user:
            args += ["--user", self.user]
        if spec.memory_bytes is not None:
            args += ["--memory", str(spec.memory_bytes), "--memory-swap", str(spec.memory_bytes)]
        if spec.max_pids is not None:
            args += ["--pids-limit", str(spec.max_pids)]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        args += ["--ulimit", "core=0:0"]
        if spec.cpu_seconds is not None:
            args += ["--ulimit", f"cpu={spec.cpu_seconds}:{spec.cpu_seconds + CPU_HARD_MARGIN_S}"]
        if spec.max_file_bytes is not None:
            args += ["--ulimit", f"fsize={spec.max_file_bytes}:{spec.max_file_bytes}"]
        if spec.max_open_files is not None:
            args += ["--ulimit", f"nofile={spec.max_open_files}:{spec.max_open_files}"]
        mounts = [(p, "ro") for p in spec.readonly] + [(p, "rw") for p in spec.writable]
        for path, mode in sorted(mounts, key=lambda item: len(item[0].parts)):
            if "," in str(path) or ":" in str(path):
                raise SandboxError(f"[docker] cannot mount a path containing ',' or ':': {path}")
            args += ["--mount", f"type=bind,source={path},target={path}" + (",readonly" if mode == "ro" else "")]
        args += ["--workdir", str(spec.workdir)]
        for key in sorted(spec.child_env()):
            args += ["-e", key]  # value taken from the CLI's environment, never from argv
        return args + [self.image, *self._image_argv(spec.argv)]

    # -- run ------------------------------------------------------------------
    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.require_available()
        name = f"sandbox-{os.getpid()}-{next(_counter)}-{time.monotonic_ns() % 10**9}"

        def kill_container() -> None:  # killing the CLI does not stop the container
            try:
                self._docker("kill", name, timeout=KILL_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError):
                pass

        result = execute(
            self.build_argv(spec, name),
            spec,
            backend=self.name,
            cwd=None,
            env=self._cli_env(spec.child_env()),
            signal_from_exit_status=True,
            on_timeout=kill_container,
            apply_rlimits=False,
        )
        if result.exit_code == DOCKER_RUN_ERROR:
            raise SandboxError(f"[docker] docker run failed: {_first_line(result.stderr)}")
        return result
