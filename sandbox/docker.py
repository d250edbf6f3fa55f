"""Docker backend: one throw-away container per run, via the docker CLI (no SDK needed).

Two image modes:

* default (`image=None`): a *host-rootfs* image built offline. `ensure_image()` makes a
  tiny tarball holding only mount-point directories and the host's top-level symlinks
  (/bin -> usr/bin ...), `docker import`s it once and tags it by the tarball's content
  hash (`omni-memsys-sandbox:rootfs-<sha12>`). At run time the host's system directories
  (/usr, /bin, /lib*, a curated /etc), the Python installation running this code
  (`python_paths()`) and the spec's paths are bind-mounted at the same paths, read-only
  except `spec.writable`, exactly like the bwrap backend. No registry, no pull.
* `image="name:tag"`: a full image (e.g. built from sandbox/Dockerfile where a registry
  is reachable). Only the spec's paths are mounted; the host interpreter in argv[0] is
  mapped to the image's `python`.

Every run: `docker create` (root filesystem read-only, private /tmp tmpfs, all
capabilities dropped, no-new-privileges, `--network none` unless "host", memory / pids /
ulimits, `--log-driver none`), `docker start -a` supervised by `process.execute` (output
cap, wall timeout -> `docker kill`), `docker inspect` (State.OOMKilled), `docker rm -f`.
Env values never appear on a command line: the CLI gets them in its own environment and
forwards them by name (`-e KEY`); docker's own HOSTNAME is removed with `env -u`, so the
child sees exactly `spec.child_env()`. Containers are labelled with their owner; ones
left behind by a dead owner are removed at the next probe. Killing the owner does not stop a
container (the CLI is only attached to it), so each run also has a reaper: a detached process
that waits on a pipe only the owner holds open and removes the container when it reads EOF,
so an evaluation killed with kill -9 leaves no container writing into the run folder that a
resume is about to use.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
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
from sandbox.bwrap import DEFAULT_SYSTEM_PATHS, python_paths
from sandbox.process import CPU_HARD_MARGIN_S, _memory_error_in, execute

IMAGE_REPO = "omni-memsys-sandbox"
#: what `image=None` stands for in messages; the real tag carries the rootfs hash
DEFAULT_IMAGE = None
#: tag of the full image built from sandbox/Dockerfile (needs a registry)
DOCKERFILE_IMAGE = f"{IMAGE_REPO}:latest"
ROOTFS_VERSION = "1"
OWNER_LABEL = "omni-memsys.sandbox.owner"
DEFAULT_TMPFS_BYTES = 256 << 20
INFO_TIMEOUT_S = 10.0
IMPORT_TIMEOUT_S = 120.0
CREATE_TIMEOUT_S = 60.0
KILL_TIMEOUT_S = 15.0
#: how long a SIGKILL-ed container's state is read again for docker's OOM flag (see ``_state_after_exit``)
OOM_EVENT_GRACE_S = 2.0
PROBE_RUN_TIMEOUT_S = 30.0
#: how long a negative availability answer is cached (a daemon may come up later)
NEGATIVE_PROBE_TTL_S = 30.0
#: variables the docker CLI itself needs (daemon address, TLS, config dir)
CLI_ENV_PREFIXES = ("DOCKER_",)
#: docker writes these itself in every container (binding them too would clash)
DOCKER_MANAGED_PATHS = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
#: an init for PID 1 (reaps, reports a child killed by signal N as 128+N); a static tini
INIT_CANDIDATES = (
    "/usr/bin/docker-init", "/usr/libexec/docker/docker-init", "/usr/local/bin/docker-init",
    "/usr/sbin/docker-init", "/usr/bin/tini-static", "/usr/bin/tini",
)
#: empty directories of the host-rootfs image (everything else is a mount point made at run time)
ROOTFS_DIRS = ("dev", "etc", "proc", "sys", "tmp", "usr")

_counter = itertools.count()
#: the reaper (run with ``python -I -c``): block until the owner's end of the pipe closes (EOF: the
#: owner finished or died), then remove the container unless the owner said it already did
_REAPER = (
    "import os, subprocess, sys\n"
    "fd, docker, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
    "said = b''\n"
    "while True:\n"
    "    chunk = os.read(fd, 64)\n"
    "    if not chunk:\n"
    "        break\n"
    "    said += chunk\n"
    "if said != b'done':\n"
    "    subprocess.run([docker, 'rm', '-f', '-v', name], stdin=subprocess.DEVNULL,\n"
    "                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)\n"
)
_lock = threading.Lock()
#: (docker_bin, DOCKER_HOST, image or None) -> (monotonic time, ok, reason, info, image tag)
_PROBES: dict[tuple, tuple[float, bool, str, dict, str | None]] = {}
_IMAGES: dict[tuple, str] = {}
_SWEPT: set[tuple] = set()


def _first_line(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no message"


def _depth(path: str) -> int:
    return len(Path(path).parts)


def rootfs_tar(system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS) -> bytes:
    """The host-rootfs image's whole content: mount-point dirs + the host's top-level symlinks.

    Deterministic (fixed mtimes and owners, sorted), so its hash names the image.
    """
    entries: dict[str, str | None] = {name: None for name in ROOTFS_DIRS}  # None: directory
    for path in system_paths:
        if os.path.dirname(path) == "/" and os.path.islink(path):
            entries[path[1:]] = os.readlink(path)  # /bin -> usr/bin, like bwrap's --symlink
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.mtime = 0
            if entries[name] is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            else:
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entries[name]
            tar.addfile(info)
        marker = (
            f"omni-memsys sandbox host-rootfs image v{ROOTFS_VERSION}: mount points only; the host's\n"
            "system directories and Python are bind-mounted read-only at run time (sandbox/docker.py)\n"
        ).encode()
        info = tarfile.TarInfo(".omni-memsys-sandbox")
        info.size, info.mode, info.mtime = len(marker), 0o444, 0
        tar.addfile(info, io.BytesIO(marker))
    return buf.getvalue()


def rootfs_tag(tar: bytes) -> str:
    return f"{IMAGE_REPO}:rootfs-{hashlib.sha256(tar).hexdigest()[:12]}"


def find_init() -> str | None:
    """A host init binary usable inside the host-rootfs container (it lives under /usr)."""
    for path in INIT_CANDIDATES:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class DockerSandbox(Sandbox):
    """A container per run: read-only root, no caps, --network none, cgroup limits, ulimits."""

    name = "docker"

    def __init__(
        self,
        *,
        image: str | None = DEFAULT_IMAGE,
        docker_bin: str | None = None,
        user: str | int | None = None,
        cpus: float | None = None,
        tmpfs_bytes: int = DEFAULT_TMPFS_BYTES,
        translate_python: bool = True,
        system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS,
        include_python: bool = True,
        build_image: bool = True,
        probe_run: bool = True,
        limit_address_space: bool = False,
    ) -> None:
        """`image=None`: the offline host-rootfs image (built when missing if `build_image`).

        `user`: None runs as the caller's uid:gid; an int or "uid[:gid]" otherwise.
        `limit_address_space` is accepted for interface parity and ignored: memory is
        enforced by the container's memory cgroup (RSS), never by RLIMIT_AS.
        """
        self.image = image
        self.docker_bin = docker_bin or shutil.which("docker")
        self.user = user
        self.cpus = cpus
        self.tmpfs_bytes = tmpfs_bytes
        self.translate_python = translate_python
        self.system_paths = tuple(p for p in system_paths if p not in DOCKER_MANAGED_PATHS)
        self.include_python = include_python
        self.build_image = build_image
        self.probe_run = probe_run
        self.limit_address_space = limit_address_space
        self.init_path = find_init()
        self._info: dict = {}
        self._tag: str | None = image

    @property
    def host_rootfs(self) -> bool:
        return self.image is None

    # -- docker CLI -----------------------------------------------------------
    def _cli_env(self, child_env: dict[str, str]) -> dict[str, str]:
        env = dict(child_env)
        env.update({k: v for k, v in os.environ.items() if k.startswith(CLI_ENV_PREFIXES)})
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        if "HOME" in os.environ and "DOCKER_CONFIG" not in env:  # the CLI reads ~/.docker/config.json
            env["DOCKER_CONFIG"] = str(Path(os.environ["HOME"]) / ".docker")
        return env

    def _docker(
        self, *args: str, timeout: float, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [self.docker_bin, *args], capture_output=True, timeout=timeout, env=self._cli_env({}), input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    def _key(self) -> tuple:
        return (self.docker_bin, os.environ.get("DOCKER_HOST"), self.image, self.system_paths)

    # -- image ----------------------------------------------------------------
    def ensure_image(self) -> str:
        """The image tag to run; builds the host-rootfs image offline when missing (cached)."""
        if not self.host_rootfs:
            inspect = self._docker("image", "inspect", "--format", "{{.Id}}", self.image, timeout=INFO_TIMEOUT_S)
            if inspect.returncode != 0:
                raise SandboxError(
                    f"[docker] image {self.image} not found "
                    f"(docker build -f sandbox/Dockerfile -t {self.image} .): {_first_line(inspect.stderr)}"
                )
            return self.image
        key = (self.docker_bin, os.environ.get("DOCKER_HOST"), self.system_paths)
        with _lock:
            if key in _IMAGES:
                return _IMAGES[key]
        tar = rootfs_tar(self.system_paths)
        tag = rootfs_tag(tar)
        inspect = self._docker("image", "inspect", "--format", "{{.Id}}", tag, timeout=INFO_TIMEOUT_S)
        if inspect.returncode != 0:
            if not self.build_image:
                raise SandboxError(f"[docker] image {tag} not built (DockerSandbox().ensure_image())")
            built = self._docker(
                "import", "--change", f"LABEL {IMAGE_REPO}.rootfs={ROOTFS_VERSION}",
                "--message", "omni-memsys host-rootfs sandbox image", "-", tag,
                timeout=IMPORT_TIMEOUT_S, input=tar,
            )
            if built.returncode != 0:
                raise SandboxError(f"[docker] docker import of the rootfs image failed: {_first_line(built.stderr)}")
        with _lock:
            _IMAGES[key] = tag
        return tag

    # -- availability ---------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """CLI found, daemon answers, image present (built if missing), a trivial run works.

        Cached per process (negative answers for NEGATIVE_PROBE_TTL_S): cheap to call again.
        """
        key = self._key()
        with _lock:
            cached = _PROBES.get(key)
        if cached is not None and (cached[1] or time.monotonic() - cached[0] < NEGATIVE_PROBE_TTL_S):
            _, ok, reason, self._info, self._tag = cached
            return ok, reason
        ok, reason = self._probe()
        with _lock:
            _PROBES[key] = (time.monotonic(), ok, reason, self._info, self._tag)
        return ok, reason

    def _probe(self) -> tuple[bool, str]:
        if not self.docker_bin or not os.access(self.docker_bin, os.X_OK):
            return False, f"docker CLI not found ({self.docker_bin or 'not on PATH'})"
        try:
            info = self._docker("info", "--format", "{{json .}}", timeout=INFO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"docker daemon did not answer `docker info` within {INFO_TIMEOUT_S:g}s"
        except OSError as exc:
            return False, f"cannot run docker CLI: {exc}"
        if info.returncode != 0:
            return False, f"docker daemon not reachable: {_first_line(info.stderr)}"
        try:
            self._info = json.loads(info.stdout)
        except ValueError:
            return False, f"unexpected `docker info` output: {_first_line(info.stdout)}"
        if self._info.get("ServerErrors"):
            return False, f"docker daemon error: {_first_line(str(self._info['ServerErrors']))}"
        if self._info.get("OSType", "linux") != "linux":
            return False, f"docker daemon runs {self._info.get('OSType')} containers, need linux"
        self._sweep()
        try:
            self._tag = self.ensure_image()
        except (SandboxError, OSError, subprocess.SubprocessError) as exc:
            return False, str(exc)
        if self.probe_run:
            spec = SandboxSpec(argv=["true"], workdir=Path("/"), wall_timeout_s=PROBE_RUN_TIMEOUT_S)
            try:
                result = self._run(spec)
            except SandboxError as exc:
                return False, f"trivial container run failed: {exc}"
            if result.exit_code != 0:
                return False, f"trivial container run: {result.summary()}: {_first_line(result.stderr)}"
        return True, ""

    def _sweep(self) -> None:
        """Remove containers left by a dead owner on this host (once per process and daemon)."""
        key = (self.docker_bin, os.environ.get("DOCKER_HOST"))
        if key in _SWEPT:
            return
        _SWEPT.add(key)
        try:
            listed = self._docker(
                "ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format",
                f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}', timeout=INFO_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError):
            return
        stale = []
        host = socket.gethostname()
        for line in listed.stdout.decode("utf-8", "replace").splitlines():
            cid, _, owner = line.partition(" ")
            owner_host, _, pid = owner.rpartition(":")
            if owner_host != host or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                stale.append(cid)
            except PermissionError:
                pass
        if stale:
            try:
                self._docker("rm", "-f", *stale, timeout=KILL_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError):
                pass

    def guarantees(self) -> frozenset[str]:
        """What this daemon enforces (from `docker info`); empty when the backend is unavailable."""
        if not self.available()[0]:
            return frozenset()
        found = {G_NETWORK, G_READONLY, G_HIDDEN, G_PROC_ISOLATION, G_TREE_KILL}
        if self._info.get("MemoryLimit"):
            found |= {G_MEMORY, G_MEMORY_CGROUP}
        if self._info.get("PidsLimit"):
            found.add(G_PIDS)
        return frozenset(found)

    # -- command line ---------------------------------------------------------
    def _user_arg(self) -> str:
        if self.user is None:
            return f"{os.getuid()}:{os.getgid()}"
        if isinstance(self.user, int):
            return f"{self.user}:{self.user}"
        return self.user

    def _system_mounts(self) -> list[tuple[str, str]]:
        """(path, "ro") for the host system dirs and Python prefixes (host-rootfs mode only)."""
        if not self.host_rootfs:
            return []
        mounts = []
        for path in self.system_paths:
            if os.path.islink(path) and os.path.dirname(path) == "/":
                continue  # a symlink baked into the image
            if os.path.exists(path):
                mounts.append((path, "ro"))
        if self.include_python:
            for path in python_paths():
                covered = any(path == s or path.startswith(s.rstrip("/") + "/") for s in self.system_paths)
                if os.path.isdir(path) and not covered:
                    mounts.append((path, "ro"))
        return mounts

    def _mounts(self, spec: SandboxSpec) -> list[tuple[str, str]]:
        """Every bind mount, one per target (spec paths win; writable wins), parents first."""
        by_target: dict[str, str] = {}
        for path, mode in self._system_mounts():
            by_target.setdefault(path, mode)
        for path in spec.readonly:
            by_target[str(path)] = "ro"
        for path in spec.writable:
            by_target[str(path)] = "rw"
        return sorted(by_target.items(), key=lambda item: (_depth(item[0]), item[0]))

    def _command(self, spec: SandboxSpec) -> list[str]:
        argv = list(spec.argv)
        if not self.host_rootfs and self.translate_python:
            host_pythons = {sys.executable, os.path.realpath(sys.executable)}
            if argv[0] in host_pythons:
                argv[0] = "python"
        if "=" in argv[0]:
            raise SandboxError(f"[docker] program name must not contain '=': {argv[0]}")
        command = []
        if self.host_rootfs and self.init_path:
            command += [self.init_path, "--"]
        env = "/usr/bin/env" if self.host_rootfs else "env"
        if "HOSTNAME" not in spec.child_env():  # docker adds HOSTNAME=<id>; the child gets exactly child_env()
            command += [env, "-u", "HOSTNAME", "--"]
        return command + argv

    def build_argv(self, spec: SandboxSpec, container_name: str, image: str | None = None) -> list[str]:
        """The `docker create` command line for `spec` (pure: no side effects)."""
        args = [self.docker_bin or "docker", "create", "--name", container_name, "--label", f"{OWNER_LABEL}={_owner()}"]
        # docker's "none" network has only a private lo: that is our "loopback" too
        args += ["--network", "host" if spec.network == "host" else "none"]
        args += ["--read-only", "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={self.tmpfs_bytes}"]
        args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--log-driver", "none"]
        args += ["--user", self._user_arg()]
        if not self.host_rootfs:
            args.append("--init")  # the image's /sbin is a real directory: docker's init mounts there
        if spec.memory_bytes is not None:
            args += ["--memory", str(spec.memory_bytes)]
            if self._info.get("SwapLimit", True):
                args += ["--memory-swap", str(spec.memory_bytes)]
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
        for path, mode in self._mounts(spec):
            if any(c in path for c in ',"\n'):
                raise SandboxError(f"[docker] cannot mount a path containing ',', '\"' or a newline: {path}")
            args += ["--mount", f"type=bind,source={path},target={path}" + (",readonly" if mode == "ro" else "")]
        args += ["--workdir", str(spec.workdir)]
        for key in sorted(spec.child_env()):
            args += ["-e", key]  # value taken from the CLI's environment, never from argv
        return args + [image or self._tag or self.image or rootfs_tag(rootfs_tar(self.system_paths)),
                       *self._command(spec)]

    def _check_spec(self, spec: SandboxSpec) -> None:
        for path in (*spec.readonly, *spec.writable):
            if not path.exists():
                raise SandboxError(f"[docker] bind source does not exist: {path}")
        if not self.host_rootfs:
            return
        visible = [Path(p) for p, _ in self._system_mounts()]
        inside = any(spec.workdir == v or v in spec.workdir.parents for v in visible)
        if not (spec.covers(spec.workdir) or inside or spec.workdir in (Path("/"), Path("/tmp"))):
            raise SandboxError(f"[docker] workdir {spec.workdir} is not inside a writable or readonly path")
        if not (spec.workdir.is_dir() or spec.workdir in (Path("/"), Path("/tmp"))):
            raise SandboxError(f"[docker] workdir does not exist: {spec.workdir}")

    # -- run ------------------------------------------------------------------
    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.require_available()
        return self._run(spec)

    def _run(self, spec: SandboxSpec) -> SandboxResult:
        self._check_spec(spec)
        name = f"omni-sbx-{os.getpid()}-{next(_counter)}-{os.urandom(3).hex()}"
        cli_env = self._cli_env(spec.child_env())
        try:
            created = subprocess.run(
                self.build_argv(spec, name), capture_output=True, timeout=CREATE_TIMEOUT_S, env=cli_env,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._remove(name)
            raise SandboxError(f"[docker] docker create failed: {exc}") from exc
        if created.returncode != 0:
            self._remove(name)
            raise SandboxError(f"[docker] docker create failed: {_first_line(created.stderr)}")

        def kill_container() -> None:  # killing the CLI does not stop the container
            try:
                self._docker("kill", name, timeout=KILL_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError):
                pass

        reaper_w = self._start_reaper(name, cli_env)
        try:
            result = execute(
                [self.docker_bin, "start", "--attach", name],
                spec,
                backend=self.name,
                cwd=None,
                env=self._cli_env({}),
                signal_from_exit_status=True,
                on_timeout=kill_container,
                apply_rlimits=False,
            )
            state = self._state_after_exit(name, result)
        finally:
            self._remove(name)
            if reaper_w is not None:
                try:
                    os.write(reaper_w, b"done")
                finally:
                    os.close(reaper_w)
        if not state.get("StartedAt") or state.get("StartedAt", "").startswith("0001-"):
            raise SandboxError(f"[docker] container did not start: {state.get('Error') or _first_line(result.stderr)}")
        if state.get("Error") and not result.timed_out:
            raise SandboxError(f"[docker] container failed: {state['Error']}")
        # the memory cgroup's OOM kill, as docker observed it; MemoryError: refused allocation
        result.oom_killed = bool(state.get("OOMKilled")) or _memory_error_in(result.stderr)
        return result

    def _start_reaper(self, name: str, cli_env: dict[str, str]) -> int | None:
        """The write end of the reaper's pipe (None if no reaper could start: the next probe's sweep
        is then the only cleanup). Close-on-exec, so no other child of the owner holds it open."""
        r, w = os.pipe()
        try:
            subprocess.Popen([sys.executable, "-I", "-c", _REAPER, str(r), self.docker_bin, name],
                             pass_fds=(r,), start_new_session=True, env=cli_env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            os.close(w)
            return None
        finally:
            os.close(r)
        return w

    def _state_after_exit(self, name: str, result: SandboxResult) -> dict:
        """The container's state, read again for a while when it died of SIGKILL that we did not send.

        Why: docker sets ``State.OOMKilled`` from containerd's OOM event, which is separate from the exit
        event and can be handled after it (moby#18510, containerd#6323); read at once, an OOM kill under
        load can show as a bare SIGKILL and be classified as a crash. The container is removed right after,
        so this is the last chance to see the flag."""
        state = self._state(name)
        if result.timed_out or result.signal != signal.SIGKILL:
            return state
        deadline = time.monotonic() + OOM_EVENT_GRACE_S
        while not state.get("OOMKilled") and time.monotonic() < deadline:
            time.sleep(0.1)
            state = self._state(name) or state
        return state

    def _state(self, name: str) -> dict:
        try:
            proc = self._docker("inspect", "--format", "{{json .State}}", name, timeout=INFO_TIMEOUT_S)
            return json.loads(proc.stdout) if proc.returncode == 0 else {}
        except (OSError, subprocess.SubprocessError, ValueError):
            return {}

    def _remove(self, name: str) -> None:
        try:
            self._docker("rm", "-f", "-v", name, timeout=KILL_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            pass
