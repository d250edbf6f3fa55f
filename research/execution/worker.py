"""What an executor's worker runs: the untrusted half of one evaluation, in a sandbox, and nothing else.

A worker (this process for ``executor=local``, a Ray worker for ``executor=ray``) starts the sandbox
the driver specified and hands back what the sandbox wrote: the answers file's bytes and the
sandbox's exit record. It never sees gold and never scores: the driver reads and scores the
answers it gets back (research.evaluation.two_half). This module imports only the generic sandbox package and
the worker's own helpers (research.execution.node, research.execution.relay: standard library and Ray), so a worker
process never loads the scorer (an import-linter contract keeps it that way).

On a Ray node, :func:`run_on_node` first makes the node fit the task (research.execution.node: the tree, the
public view and the environment checked by hash, what is missing shipped) and, when the reader needs
the driver's gateway from another node, starts a relay to it (research.execution.relay). A node that cannot run
the task returns a :class:`~research.execution.node.NodeFault`, which the executor turns into an infrastructure
error.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from research.execution.node import NodeFault, NodeNeeds, TaskRoots, prepare_on_node
from research.execution.relay import NodeRelay, RelayTarget
from sandbox import SandboxResult, SandboxSpec


@dataclass
class UntrustedTask:
    """One sandboxed run: the backend (a ``sandbox.Sandbox``, pickled to the worker), its spec, and
    where the sandboxed code writes its answers (under one of the spec's writable folders)."""

    sandbox: Any
    spec: SandboxSpec
    answers_path: Path
    label: str = ""  # what progress lines call it (experiment id, sweep config)
    roots: TaskRoots | None = None  # what the spec's paths are, for an executor that checks its nodes


@dataclass
class UntrustedResult:
    sandbox: SandboxResult
    answers: bytes | None  # the answers file as the sandbox left it; None when it wrote none
    node: str  # the Ray node id, or "local"
    host: str
    pid: int
    wall_s: float
    shipped: tuple[str, ...] = ()  # what the node lacked and got from the driver (tree, public)
    relayed: bool = False  # the reader reached the driver's gateway through a relay on this node


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


def killed_with_its_node(result: SandboxResult, *, grace_s: float = 3.0, poll_s: float = 0.1) -> bool:
    """Whether a sandbox that died of a SIGKILL the sandbox did not send died with this Ray node.

    When a node goes, its processes die in no set order: the sandboxed child can be killed first,
    and this worker would then hand back a SIGKILL that the driver charges to the candidate. A
    worker's parent is its raylet (``RAY_RAYLET_PID``); if the raylet is gone, or goes within
    ``grace_s``, the kill was the node's. A candidate that kills itself on a live node waits
    ``grace_s`` once and is reported as it ended."""
    if result.signal != signal.SIGKILL or result.timed_out or result.oom_killed:
        return False
    raylet = os.environ.get("RAY_RAYLET_PID", "")
    if not raylet.isdigit():
        return False
    deadline = time.monotonic() + grace_s
    while os.getppid() == int(raylet):  # a dead parent's children are re-parented at once
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def run_on_node(task: UntrustedTask, needs: NodeNeeds | None, relay: RelayTarget | None) -> UntrustedResult | NodeFault:
    """``run_untrusted`` on a Ray node, after fitting the node to the task (research.execution.node) and, when
    the reader must reach the driver's gateway from here, behind a relay (research.execution.relay).

    A sandbox killed along with its node ends this worker instead of returning: Ray then sees a dead
    worker and re-runs the task elsewhere (``research.ray.max_retries``), as for any node loss."""
    out = _run_fitted(task, needs, relay)
    if isinstance(out, UntrustedResult) and killed_with_its_node(out.sandbox):
        print(f"memsys worker: the sandbox of {task.label or 'an evaluation'} died with node {node_id()[:12]}; "
              "exiting so that Ray re-runs it", file=sys.stderr, flush=True)
        os._exit(1)
    return out


def _run_fitted(task: UntrustedTask, needs: NodeNeeds | None, relay: RelayTarget | None) -> UntrustedResult | NodeFault:
    if needs is None or task.roots is None:
        return run_untrusted(task)
    node = node_id()
    where = f"{node[:12]} ({socket.gethostname()})"
    with ExitStack() as stack:
        gateway_relay = None
        if relay is not None and task.roots.gateway_socket is not None and relay.wanted_on(node):
            gateway_relay = stack.enter_context(NodeRelay(relay))
        placed = prepare_on_node(task, needs, where, gateway_relay.folder if gateway_relay else None)
        if isinstance(placed, NodeFault):
            return placed
        stack.callback(placed.release)  # last: the scratch is gone before the pruner may look at it
        if placed.scratch is not None:
            stack.callback(shutil.rmtree, placed.scratch, True)
        out = run_untrusted(replace(task, spec=placed.spec, answers_path=placed.answers_path))
        if gateway_relay is not None and gateway_relay.failures:
            return NodeFault(f"node {where}: {gateway_relay.failures} of {gateway_relay.calls} LLM calls could not "
                             "reach the driver's gateway through the relay")
        out.shipped, out.relayed = placed.shipped, gateway_relay is not None
        return out
