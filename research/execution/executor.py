"""Where evaluations run: one interface, two engines (``research.executor=local|ray``).

An executor runs the untrusted half of evaluations (research.worker: a sandbox and the answers it
wrote) and nothing else. Proposing, screening, deciding, recording and scoring stay in the driver's
process (research.evaluation.two_half scores what comes back).

- ``local`` runs each task in the calling thread: today's behaviour, the default. It checks and
  ships nothing and starts no relay.
- ``ray`` sends each task to a Ray worker: on the cluster at ``research.ray.address``, else on a
  local Ray instance sized to this machine. ``run`` says where a task started as soon as it starts
  (``on_start(node, host)``: the task is a Ray generator whose first item is its placement), so a
  progress line names the node before the evaluation ends. A task whose worker or node dies is re-run by Ray
  (``research.ray.max_retries``), on another node when one is left; if every try dies the
  evaluation fails as infrastructure (ExecutorError), never against the candidate.

What a node needs (research.execution.node): the sandbox spec names paths on the driver's filesystem. Before a
task runs, its worker checks the candidate tree and the public view by content digest and the
environment (interpreter version, installed distributions) against what the driver computed. A tree
or view that is missing or different is shipped (``research.ray.ship=auto``; ``always`` ships every
time, ``never`` fails instead): one tarball per digest in Ray's object store, unpacked and verified
under the node's cache folder (``research.ray.node_cache``). A different environment is never shipped:
the evaluation fails as infrastructure, naming the node and the difference. A node without the
driver's evaluation folder writes into a per-task folder and sends the answers back as bytes.

The reader's LLM (research.execution.relay): on a node other than the driver's (``research.ray.gateway_relay=
auto``; ``always``: on every node; ``never``: the node must see the gateway's socket), the worker
starts a relay socket that the sandbox sees in place of the gateway's, and each call goes through Ray
to the driver's one gateway, so the run's token/USD budget is counted once for the whole cluster.

A cluster therefore needs, on every node: Ray and the project's venv at the driver's path (same Python
version and distributions), the sandbox backend, and the project on the workers' import path (the
driver's ``PYTHONPATH`` or an installed package). The tree, the public view and the LLM endpoint come
from the driver.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence

from research.errors import ExecutorError
from research.execution.node import NodeFault, NodeNeeds, Shipments
from research.execution.relay import RelayTarget
from research.execution.worker import UntrustedResult, UntrustedTask, node_id, run_on_node, run_untrusted

if TYPE_CHECKING:
    from research.config import ExecutionConfig, RayConfig

log = logging.getLogger(__name__)


#: ``on_start(node, host)``: where a task started, called once when it starts
OnStart = Callable[[str, str], None]


class Executor(Protocol):
    name: str

    def run(self, task: UntrustedTask, on_start: OnStart | None = None) -> UntrustedResult: ...

    def run_all(self, tasks: Sequence[UntrustedTask]) -> Iterator[tuple[int, UntrustedResult | ExecutorError]]: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


class LocalExecutor:
    """Each task in the calling thread, one after another."""

    name = "local"

    def run(self, task: UntrustedTask, on_start: OnStart | None = None) -> UntrustedResult:
        return run_untrusted(task)  # here: nothing to announce

    def run_all(self, tasks: Sequence[UntrustedTask]) -> Iterator[tuple[int, UntrustedResult | ExecutorError]]:
        for i, task in enumerate(tasks):
            yield i, run_untrusted(task)

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "evaluations run here, one after another"


class RayExecutor:
    """Tasks as Ray tasks; ``run`` blocks (call it from several threads to run several at once)."""

    name = "ray"

    def __init__(self, cfg: "RayConfig") -> None:
        try:
            import ray
        except ImportError as exc:
            raise ExecutorError("research.executor=ray needs Ray: pip install 'omni-memsys[ray]'") from exc
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            _start_ray(ray, cfg)
        self._cfg = cfg
        self._remote = ray.remote(run_on_node).options(num_cpus=cfg.cpus_per_eval, max_retries=cfg.max_retries)
        self._placed = ray.remote(run_on_node_placed).options(num_cpus=cfg.cpus_per_eval, max_retries=cfg.max_retries)
        self._shipments = Shipments(cfg.ship, cfg.node_cache, cache_keep=cfg.node_cache_keep)
        self._bridges: dict[str, Any] = {}  # gateway socket -> research.execution.relay.GatewayBridge
        self._node_llms: list[tuple[Any, Any]] = []  # (gateway, research.execution.node_llm.NodeLLMs) routed to nodes
        self._bridge_lock = threading.Lock()

    def needs_of(self, task: UntrustedTask) -> NodeNeeds | None:
        """What a node must hold for ``task`` (digests, and the tarballs to ship): taken when the task is
        submitted, so a node gets the content the driver prepared."""
        try:
            return self._shipments.needs_of(task)
        except (OSError, RuntimeError) as exc:
            raise ExecutorError(f"{task.label or 'evaluation'}: cannot describe what a node needs: {exc}") from exc

    def run(self, task: UntrustedTask, on_start: OnStart | None = None, needs: NodeNeeds | None = None) -> UntrustedResult:
        """The task on a worker; ``on_start`` hears its node and host when it starts there."""
        if on_start is None:
            return self._get(self._submit(task, needs), task)
        stream = self._placed.remote(task, needs or self.needs_of(task), self._relay_target(task))
        try:
            node, host = self._ray.get(next(stream))
            on_start(node, host)
            return self._get(next(stream), task)
        except StopIteration as exc:
            raise ExecutorError(f"{task.label or 'evaluation'}: the Ray task ended without a result") from exc
        except self._ray.exceptions.RayError as exc:
            raise _failed(task, exc) from exc

    def _submit(self, task: UntrustedTask, needs: NodeNeeds | None = None) -> object:
        return self._remote.remote(task, needs or self.needs_of(task), self._relay_target(task))

    def _relay_target(self, task: UntrustedTask) -> Any:
        """The driver's end of the gateway relay for this task's gateway (one bridge per gateway socket)."""
        sock = task.roots.gateway_socket if task.roots is not None else None
        if sock is None or self._cfg.gateway_relay == "never":
            return None
        with self._bridge_lock:
            if str(sock) not in self._bridges:
                from research.execution.relay import GatewayBridge

                token = self._route_nodes(sock)
                self._bridges[str(sock)] = GatewayBridge(sock, self._cfg.gateway_relay, route_token=token)
            return self._bridges[str(sock)].target

    def _route_nodes(self, sock: Path) -> str | None:
        """When the gateway behind ``sock`` serves the embedded model (and research.ray.node_llm=auto),
        each node's relayed calls go to that node's own server (research.execution.node_llm); the bridge then
        names the node with the gateway's route token, which this returns."""
        from research.gateway.service import running_gateway

        gateway = running_gateway(sock)
        if gateway is None or gateway.embedded is None or self._cfg.node_llm != "auto":
            return None
        from research.execution.node_llm import NodeLLMs
        from research.execution.relay import driver_node_id

        router = NodeLLMs(gateway.embedded, driver_node_id(self._ray))
        gateway.route_to_nodes(router)
        self._node_llms.append((gateway, router))
        return gateway.route_token

    def run_all(self, tasks: Sequence[UntrustedTask]) -> Iterator[tuple[int, UntrustedResult | ExecutorError]]:
        """Every task submitted at once; results as they finish."""
        pending = {}
        for i, t in enumerate(tasks):
            try:
                pending[self._submit(t)] = i
            except ExecutorError as exc:
                yield i, exc
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                yield i, self._get(done[0], tasks[i])
            except ExecutorError as exc:
                yield i, exc

    def _get(self, ref: object, task: UntrustedTask) -> UntrustedResult:
        try:
            out = self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            raise _failed(task, exc) from exc
        if isinstance(out, NodeFault):  # the node cannot run it (environment, shipping, relay): our side
            raise ExecutorError(f"{task.label or 'evaluation'}: {out.message}")
        return out

    def describe(self) -> str:
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        cpus = self._ray.cluster_resources().get("CPU", 0)
        return f"{len(nodes)} node(s), {cpus:g} CPUs, {'own local instance' if self._owns else 'connected'}"

    def close(self) -> None:
        with self._bridge_lock:
            bridges, self._bridges = list(self._bridges.values()), {}
            routed, self._node_llms = self._node_llms, []
        for bridge in bridges:
            bridge.close()
        for gateway, router in routed:
            gateway.route_to_nodes(None)
            router.close()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def run_on_node_placed(task: UntrustedTask, needs: NodeNeeds | None,
                       relay: RelayTarget | None) -> Iterator[tuple[str, str] | UntrustedResult | NodeFault]:
    """A Ray generator task: first where it runs (node id, host), then ``run_on_node``'s result.
    A retried task yields again from the start; the driver has read the first placement by then."""
    yield node_id(), socket.gethostname()
    yield run_on_node(task, needs, relay)


def _failed(task: UntrustedTask, exc: Exception) -> ExecutorError:
    first = " ".join(str(exc).split())[:300]
    return ExecutorError(f"{task.label or 'evaluation'}: the Ray task failed on every try ({type(exc).__name__}: {first})")


def _start_ray(ray: Any, cfg: "RayConfig", *, pause_s: float = 1.0) -> None:
    """Connect to ``cfg.address``, or start a local instance with this machine's cores (or ``num_cpus``).

    A cluster connection that fails as a connection (Ray's client proxy forks a server per client, and that
    fork can die at birth while gRPC threads run) is tried ``cfg.connect_attempts`` times, with a growing
    pause: such a failure says nothing about the cluster, and a run should not end on it."""
    attempts = cfg.connect_attempts if cfg.address else 1
    for attempt in range(1, attempts + 1):
        try:
            if cfg.address:
                ray.init(address=cfg.address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                # address="local": a new instance of our own, never a cluster another process left running here
                ray.init(address="local", num_cpus=cfg.num_cpus or os.cpu_count() or 1, include_dashboard=False,
                         log_to_driver=False, logging_level=logging.WARNING)
            break
        except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError
            where = cfg.address or "a local instance"
            reason = " ".join(str(exc).split())[:300]
            if attempt < attempts and isinstance(exc, ConnectionError):
                log.warning("ray: connecting to %s failed (attempt %d of %d), trying again: %s",
                            where, attempt, attempts, reason[:160])
                ray.shutdown()
                time.sleep(pause_s * attempt)
                continue
            tried = f" after {attempt} attempts" if attempt > 1 else ""
            raise ExecutorError(f"could not start Ray on {where}{tried}: {reason}") from exc
    log.info("ray: %s", ray.cluster_resources())


def make_executor(cfg: "ExecutionConfig") -> Executor:
    if cfg.executor == "ray":
        return RayExecutor(cfg.ray)
    return LocalExecutor()
