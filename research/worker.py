"""What an executor's worker runs: the untrusted half of one evaluation, in a sandbox, and nothing else.

A worker (this process for ``executor=local``, a Ray worker for ``executor=ray``) starts the sandbox
the driver specified and hands back what the sandbox wrote: the answers file's bytes and the
sandbox's exit record. It never sees gold and never scores: the driver reads and scores the
answers it gets back (research.evaluate). This module imports only the generic sandbox package,
so a worker process never loads the scorer (an import-linter contract keeps it that way).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import SandboxResult, SandboxSpec


@dataclass
class UntrustedTask:
    """One sandboxed run: the backend (a ``sandbox.Sandbox``, pickled to the worker), its spec, and
    where the sandboxed code writes its answers (under one of the spec's writable folders)."""

    sandbox: Any
    spec: SandboxSpec
    answers_path: Path
    label: str = ""  # what progress lines call it (experiment id, sweep config)


@dataclass
class UntrustedResult:
    sandbox: SandboxResult
    answers: bytes | None  # the answers file as the sandbox left it; None when it wrote none
    node: str  # the Ray node id, or "local"
    host: str
    pid: int
    wall_s: float


def node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return "local"


def run_untrusted(task: UntrustedTask) -> UntrustedResult:
    """Run the sandbox and collect its answers (bytes travel back through the executor)."""
    started = time.perf_counter()
    result = task.sandbox.run(task.spec)
    try:
        answers: bytes | None = Path(task.answers_path).read_bytes()
    except FileNotFoundError:
        answers = None
    return UntrustedResult(result, answers, node_id(), socket.gethostname(), os.getpid(),
                           time.perf_counter() - started)
