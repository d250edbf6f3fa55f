"""The embedded local LLM: llama.cpp's OpenAI-compatible server as a subprocess.

Why a server process rather than in-process ``llama_cpp.Llama``: the same
:class:`~memsys.llm.client.LLMClient` then talks to the local model and to any remote
endpoint, with the same retries, cache and accounting; a crash in native code
cannot take the benchmark down; and the thread pool of the runner queues requests
on the server instead of contending for one model object.

One server per (model file, n_ctx, n_threads, port) is shared by all users in a
process (:func:`shared_server` is reference-counted) and stopped when the last
user leaves, or at interpreter exit. The child also watches its parent and exits
if the parent dies (a SIGKILLed test run must not leave a 1 GB server behind).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from memsys.config import LocalLLMConfig
from memsys.errors import LLMTimeoutError, MissingDependencyError, ModelError
from memsys.llm.model_files import ModelFile, ensure_model_file
from memsys.paths import cache_dir

#: modules ``llama-cpp-python[server]`` brings; checked with find_spec, nothing is imported
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
_INSTALL_HINT = "pip install -e '.[local-llm]'"
_STOP_GRACE_S = 10.0

# Runs in the child: exit when the parent goes away, then hand over to llama_cpp.server.
_CHILD_BOOTSTRAP = """
import os, runpy, sys, threading, time
parent = os.getppid()
def _watch():
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(1.0)
threading.Thread(target=_watch, daemon=True).start()
sys.argv = ["llama_cpp.server"] + sys.argv[1:]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def check_server_installed() -> None:
    """Raise MissingDependencyError unless llama-cpp-python and its server extra are importable."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise MissingDependencyError(f"llama-cpp-python is not installed: {_INSTALL_HINT}")
    missing = [m for m in _SERVER_MODULES[1:] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependencyError(
            f"llama-cpp-python's server extra is not installed (missing {', '.join(missing)}): {_INSTALL_HINT}"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_identity(model: ModelFile) -> str:
    """A short tag that changes with the weights; it joins the LLM cache key."""
    if model.sha256:
        return model.sha256[:16]
    st = model.path.stat()
    raw = f"{model.path.name}:{st.st_size}:{st.st_mtime_ns}"
    return "file-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    model_path: Path
    alias: str  # the model name clients send; llama.cpp otherwise expects the file path
    n_ctx: int
    n_threads: int
    port: int = 0
    startup_timeout_s: float = 180.0
    # more ``llama_cpp.server`` flags, as (flag, value, ...): a bench tries a server setting with them
    # (research/perf/bench_reader_speed.py) before it becomes a field of its own
    extra_args: tuple[str, ...] = ()


class LocalServer:
    """One ``llama_cpp.server`` child process on 127.0.0.1."""

    def __init__(self, settings: ServerSettings, log_dir: Path | None = None) -> None:
        self.settings = settings
        self.port = settings.port or free_port()
        self.log_dir = log_dir or cache_dir() / "logs"
        self.log_path = self.log_dir / f"llama_server-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        s = self.settings
        return [
            sys.executable, "-c", _CHILD_BOOTSTRAP,
            "--model", str(s.model_path), "--model_alias", s.alias,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(s.n_ctx), "--n_threads", str(s.n_threads), "--n_threads_batch", str(s.n_threads),
            "--verbose", "False", *s.extra_args,
        ]

    def start(self) -> "LocalServer":
        check_server_installed()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,  # our Ctrl-C handling stops it; it must not see the signal twice
            )
        deadline = started + self.settings.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ModelError(f"local LLM server exited with code {code} during start-up: {self._log_tail()} (log {self.log_path})")
            if self._ready():
                self.startup_s = time.perf_counter() - started
                return self
            if time.perf_counter() > deadline:
                self.stop()
                raise LLMTimeoutError(
                    f"local LLM server not ready after {self.settings.startup_timeout_s:g} s (log {self.log_path})"
                )
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2.0) as resp:
                return resp.status == 200 and bool(json.load(resp).get("data"))
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _log_tail(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no log"
        return " | ".join(lines[-2:])[-300:] or "empty log"

    def stop(self) -> None:
        """Terminate, wait, then kill: llama.cpp frees the model on SIGTERM within a second."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=_STOP_GRACE_S)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> "LocalServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- process-wide sharing -------------------------------------------------------
_registry_lock = threading.Lock()
_registry: dict[ServerSettings, tuple[LocalServer, int]] = {}


def _stop_all() -> None:
    with _registry_lock:
        servers = [srv for srv, _ in _registry.values()]
        _registry.clear()
    for srv in servers:
        srv.stop()


atexit.register(_stop_all)


@dataclass(frozen=True, slots=True)
class LocalEndpoint:
    """What a client needs from a running local server."""

    base_url: str
    model: ModelFile
    cache_tag: str
    server: LocalServer


def logits_args(logprobs: bool) -> tuple[str, ...]:
    """The server flag for ``llm.local.logprobs``: without it llama-cpp-python keeps the logits of every
    prompt token (its ``logits_all`` default), which no answer needs unless it reads log-probabilities."""
    return ("--logits_all", "true" if logprobs else "false")


@contextmanager
def shared_server(cfg: LocalLLMConfig, alias: str) -> Iterator[LocalEndpoint]:
    """Start (or join) the process's server for ``cfg``; stop it when the last user leaves."""
    check_server_installed()  # before the 1 GB assembly, so a missing extra fails fast
    model = ensure_model_file(cfg)
    settings = ServerSettings(model.path, alias, cfg.n_ctx, cfg.n_threads, cfg.port, cfg.startup_timeout_s,
                              logits_args(cfg.logprobs))
    with _registry_lock:
        entry = _registry.get(settings)
        if entry is None or not entry[0].running:
            server = LocalServer(settings).start()  # under the lock: concurrent callers wait, not race
            _registry[settings] = (server, 1)
        else:
            server = entry[0]
            _registry[settings] = (server, entry[1] + 1)
    try:
        yield LocalEndpoint(base_url=server.base_url, model=model, cache_tag=model_identity(model), server=server)
    finally:
        with _registry_lock:
            current = _registry.get(settings)
            last = current is not None and current[0] is server and current[1] <= 1
            if last:
                del _registry[settings]
            elif current is not None and current[0] is server:
                _registry[settings] = (server, current[1] - 1)
        if last:
            server.stop()
