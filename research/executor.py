"""Where evaluations run: one interface, two engines (``research.executor=local|ray``).

An executor runs the untrusted half of evaluations (research.worker.run_untrusted: a sandbox
and the answers it wrote) and nothing else. Proposing, screening, deciding, recording and
scoring stay in the driver's process (research.evaluate scores what comes back).

- ``local`` runs each task in the calling thread: today's behaviour, the default.
- ``ray`` sends each task to a Ray worker: on the cluster at ``research.ray.address``, else on a
  local Ray instance sized to this machine. ``run`` says where a task started as soon as it starts
  (``on_start(node, host)``: the task is a Ray generator whose first item is its placement), so a
  progress line names the node before the evaluation ends. A task whose worker or node dies is re-run by Ray
  (``research.ray.max_retries``), on another node when one is left; if every try dies the
  evaluation fails as infrastructure (ExecutorError), never against the candidate.

The sandbox spec names paths on the driver's filesystem (the tree, the public view, the venv), so
every node must see them at the same paths: one machine, or a shared filesystem.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from research.errors import ExecutorError
from research.worker import UntrustedResult, UntrustedTask, node_id, run_untrusted

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
        self._remote = ray.remote(run_untrusted).options(num_cpus=cfg.cpus_per_eval, max_retries=cfg.max_retries)
        self._placed = ray.remote(run_untrusted_placed).options(num_cpus=cfg.cpus_per_eval, max_retries=cfg.max_retries)

    def run(self, task: UntrustedTask, on_start: OnStart | None = None) -> UntrustedResult:
        """The task on a worker; ``on_start`` hears its node and host when it starts there."""
        if on_start is None:
            return self._get(self._remote.remote(task), task)
        stream = self._placed.remote(task)
        try:
            node, host = self._ray.get(next(stream))
            on_start(node, host)
            return self._get(next(stream), task)
        except StopIteration as exc:
            raise ExecutorError(f"{task.label or 'evaluation'}: the Ray task ended without a result") from exc
        except self._ray.exceptions.RayError as exc:
            raise _failed(task, exc) from exc

    def run_all(self, tasks: Sequence[UntrustedTask]) -> Iterator[tuple[int, UntrustedResult | ExecutorError]]:
        """Every task submitted at once; results as they finish."""
        pending = {self._remote.remote(t): i for i, t in enumerate(tasks)}
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                yield i, self._get(done[0], tasks[i])
            except ExecutorError as exc:
                yield i, exc

    def _get(self, ref: object, task: UntrustedTask) -> UntrustedResult:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            raise _failed(task, exc) from exc

    def describe(self) -> str:
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        cpus = self._ray.cluster_resources().get("CPU", 0)
        return f"{len(nodes)} node(s), {cpus:g} CPUs, {'own local instance' if self._owns else 'connected'}"

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def run_untrusted_placed(task: UntrustedTask) -> Iterator[tuple[str, str] | UntrustedResult]:
    """A Ray generator task: first where it runs (node id, host), then the untrusted half's result.
    A retried task yields again from the start; the driver has read the first placement by then."""
    yield node_id(), socket.gethostname()
    yield run_untrusted(task)


def _failed(task: UntrustedTask, exc: Exception) -> ExecutorError:
    first = " ".join(str(exc).split())[:300]
    return ExecutorError(f"{task.label or 'evaluation'}: the Ray task failed on every try ({type(exc).__name__}: {first})")


def _start_ray(ray: object, cfg: "RayConfig") -> None:
    """Connect to ``cfg.address``, or start a local instance with this machine's cores (or ``num_cpus``)."""
    try:
        if cfg.address:
            ray.init(address=cfg.address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            # address="local": a new instance of our own, never a cluster another process left running here
            ray.init(address="local", num_cpus=cfg.num_cpus or os.cpu_count() or 1, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError
        where = cfg.address or "a local instance"
        raise ExecutorError(f"could not start Ray on {where}: {' '.join(str(exc).split())[:300]}") from exc
    log.info("ray: %s", ray.cluster_resources())


def make_executor(cfg: "ExecutionConfig") -> Executor:
    if cfg.executor == "ray":
        return RayExecutor(cfg.ray)
    return LocalExecutor()
