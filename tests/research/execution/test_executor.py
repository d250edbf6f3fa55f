"""research.executor: the untrusted half on a real Ray (one node, and a head with two worker nodes on this
machine), answers travelling back as bytes, and a dead node's evaluation re-run on the other node.

Real pieces: Ray 2.60 (local instance / ray.cluster_utils.Cluster), the process sandbox running a
small Python program that writes an answers file the way memsys.predict does.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from harness.errors import ConfigError
from research.config import ExecutionConfig, RayConfig
from research.errors import ExecutorError
from research.execution.executor import LocalExecutor, RayExecutor, make_executor
from research.execution.worker import UntrustedTask
from research.failures import KIND_TO_CLASS, FailureClass
from sandbox import SandboxSpec, make_sandbox

ray = pytest.importorskip("ray")

#: writes "<label>\n" as its answers, records where it started, then waits ``seconds``
PROGRAM = ("import os, sys, time; out, seconds = sys.argv[1], float(sys.argv[2]); "
           "open(os.path.join(out, 'started'), 'a').write(str(os.getppid()) + '\\n'); time.sleep(seconds); "
           "open(os.path.join(out, 'answers.jsonl'), 'w').write(os.path.basename(out) + '\\n')")


def task(tmp: Path, name: str, seconds: float = 0.0) -> UntrustedTask:
    out = tmp / name
    out.mkdir(parents=True, exist_ok=True)
    spec = SandboxSpec(argv=[sys.executable, "-c", PROGRAM, str(out), str(seconds)], workdir=out, writable=[out],
                       wall_timeout_s=120)
    return UntrustedTask(make_sandbox("process"), spec, out / "answers.jsonl", name)


def test_local_executor_runs_here_in_order(tmp_path):
    ex = make_executor(ExecutionConfig())
    assert isinstance(ex, LocalExecutor)
    results = list(ex.run_all([task(tmp_path, "a"), task(tmp_path, "b")]))
    assert [i for i, _ in results] == [0, 1]
    assert [r.answers for _, r in results] == [b"a\n", b"b\n"] and {r.node for _, r in results} == {"local"}
    assert all(r.sandbox.ok for _, r in results)


def test_bad_executor_name_fails_at_compose_time():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="research.executor must be local | ray"):
        ExecutionConfig(executor="slurm")
    assert KIND_TO_CLASS[ExecutorError.kind] is FailureClass.INFRASTRUCTURE


class _FlakyClientRay:
    """Stands in for the ``ray`` module at connect time (a third-party library, not our code): its client
    proxy answers the first ``failures`` joins the way Ray 2.60's does when the per-client server it forks
    dies at birth (seen in CI: "Starting Ray client server failed")."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionAbortedError) -> None:
        self.failures, self.error, self.inits, self.shutdowns = failures, error, [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        if len(self.inits) <= self.failures:
            raise self.error("Initialization failure from server: Starting Ray client server failed.")

    def shutdown(self):
        self.shutdowns += 1

    def cluster_resources(self):
        return {"CPU": 2.0}


def test_a_client_join_that_fails_as_a_connection_is_tried_again():
    from research.execution.executor import _start_ray

    flaky = _FlakyClientRay(failures=2)
    _start_ray(flaky, RayConfig(address="ray://127.0.0.1:10001", connect_attempts=3), pause_s=0.0)
    assert len(flaky.inits) == 3 and flaky.shutdowns == 2
    assert {i["address"] for i in flaky.inits} == {"ray://127.0.0.1:10001"}


def test_a_join_that_keeps_failing_says_how_often_it_tried_and_why():
    from research.execution.executor import _start_ray

    flaky = _FlakyClientRay(failures=5)
    with pytest.raises(ExecutorError, match=r"ray://h:1 after 3 attempts: .*Starting Ray client server failed"):
        _start_ray(flaky, RayConfig(address="ray://h:1", connect_attempts=3), pause_s=0.0)
    assert len(flaky.inits) == 3
    # an error that is not a connection's (a bad address, a version mismatch) is not retried
    wrong = _FlakyClientRay(failures=5, error=ValueError)
    with pytest.raises(ExecutorError, match=r"could not start Ray on ray://h:1: "):
        _start_ray(wrong, RayConfig(address="ray://h:1", connect_attempts=3), pause_s=0.0)
    assert len(wrong.inits) == 1
    with pytest.raises(ConfigError, match="connect_attempts >= 1"):
        RayConfig(connect_attempts=0)


@pytest.mark.slow
def test_ray_local_instance_returns_the_answers(tmp_path):
    ex = RayExecutor(RayConfig(num_cpus=2))
    try:
        results = dict(ex.run_all([task(tmp_path, "a", 1.0), task(tmp_path, "b", 1.0)]))
        assert results[0].answers == b"a\n" and results[1].answers == b"b\n"
        assert results[0].node != "local" and results[0].node == results[1].node  # one node
        assert "1 node(s), 2 CPUs" in ex.describe()
    finally:
        ex.close()
    assert not ray.is_initialized()


#: waits (at most 60 s) for a file "go" the driver writes, then answers "went" (or "no go" when it never came)
WAIT_FOR_GO = ("import os, sys, time; out = sys.argv[1]; end = time.monotonic() + 60\n"
               "while not os.path.exists(os.path.join(out, 'go')) and time.monotonic() < end: time.sleep(0.05)\n"
               "open(os.path.join(out, 'answers.jsonl'), 'w').write('went' if os.path.exists(os.path.join(out, 'go')) "
               "else 'no go')")


@pytest.mark.slow
def test_ray_names_the_node_when_the_task_starts(tmp_path):
    """The sandboxed program cannot finish before the driver has heard where it started: it waits for
    the file the start callback writes."""
    out = tmp_path / "wait"
    out.mkdir()
    spec = SandboxSpec(argv=[sys.executable, "-c", WAIT_FOR_GO, str(out)], workdir=out, writable=[out], wall_timeout_s=120)
    started: list[tuple[str, str]] = []

    def on_start(node: str, host: str) -> None:
        started.append((node, host))
        (out / "go").write_text("")

    ex = RayExecutor(RayConfig(num_cpus=1))
    try:
        result = ex.run(UntrustedTask(make_sandbox("process"), spec, out / "answers.jsonl", "wait"), on_start=on_start)
        plain = ex.run(task(tmp_path, "plain"))  # without a callback: the plain task, as before
    finally:
        ex.close()
    assert result.answers == b"went"
    assert started == [(result.node, result.host)] and result.node != "local"
    assert plain.answers == b"plain\n" and plain.node == result.node


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})  # the head runs no evaluation
    nodes = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    yield c, nodes
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@pytest.mark.slow
def test_two_nodes_share_the_work_and_a_dead_node_is_retried_elsewhere(tmp_path, cluster):
    c, nodes = cluster
    ex = RayExecutor(RayConfig(address=c.address, max_retries=2))
    assert "3 node(s), 2 CPUs" in ex.describe()
    both = dict(ex.run_all([task(tmp_path, "a", 2.0), task(tmp_path, "b", 2.0)]))
    assert {both[0].answers, both[1].answers} == {b"a\n", b"b\n"}
    assert both[0].node != both[1].node  # one CPU per node: the two ran at once, on different nodes

    # kill the node that runs the evaluation, mid-run: Ray runs it again on the node that is left (the
    # loop's path: the task announces where it started, then its result comes from the retry)
    slow = task(tmp_path, "slow", 6.0)
    result: dict = {}
    placed: list[str] = []
    worker = threading.Thread(target=lambda: result.update(r=ex.run(slow, on_start=lambda n, h: placed.append(n))))
    worker.start()
    started = slow.answers_path.parent / "started"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    victim = next(n for n in nodes if _runs_task(n))
    # a dying node's processes go in no set order: kill the sandboxed program first, as happens when the
    # node's own teardown reaches it before its raylet, so the worker outlives it and must not report it
    for child in _task_worker(victim).children(recursive=True):
        child.kill()
    c.remove_node(victim, allow_graceful=False)
    worker.join(timeout=120)
    assert result["r"].answers == b"slow\n"
    survivor = next(n for n in nodes if n is not victim)
    assert result["r"].node == survivor.node_id
    assert len(started.read_text().split()) == 2  # it started twice: once per node
    assert placed[0] == victim.node_id  # the first start was announced; the result names the survivor


def _task_worker(node):
    """The node's worker process that runs our task, or None (ours is the only task)."""
    import psutil

    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    return next((p for p in raylet.children(recursive=True)
                 if p.name().startswith("ray::run_on_node") or "run_on_node" in " ".join(p.cmdline())), None)


def _runs_task(node) -> bool:
    return _task_worker(node) is not None
