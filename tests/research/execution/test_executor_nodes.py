"""research.executor=ray on a head plus one worker node: what a node needs, shipped and checked by hash,
and the reader's calls relayed to the driver's one gateway, whose budget holds across the cluster.

Real pieces: Ray 2.60 (ray.cluster_utils.Cluster on this machine; the head runs no evaluation, so every
task runs on a node other than the driver's), the process and bwrap sandboxes, the LLM gateway with
the real memsys LLMClient inside the sandbox, the OpenAI-protocol test server on 127.0.0.1, LoCoMo tiny.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from memsys.llm import Budget
from research.config import RayConfig
from research.errors import ExecutorError
from research.evaluation.two_half import EvalJob, _check_endpoint_claim, evaluate
from research.execution.node import TaskRoots
from research.execution.worker import UntrustedTask
from research.failures import FailureClass, classify_result
from research.gateway.service import LLMGateway
from sandbox import SandboxSpec, make_sandbox
from sandbox.bwrap import BwrapSandbox
from tests.support.openai_server import OpenAITestServer

ray = pytest.importorskip("ray")
# one worker starts the one cluster; in one group with the embedded-model tests, because this module's node
# starts a llama.cpp server too, and two on 2 cores nearly double each test
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_and_local_model")]

REPO = Path(__file__).resolve().parents[3]
CODE_DIRS = ("configs", "harness", "memsys")
#: a reader as memsys.predict runs one: the real LLMClient over the gateway socket named by MEMSYS_LLM_UDS,
#: a MEMSYS_ERROR line on a typed error
READER = """
import json, sys
from memsys.config import LLMConfig
from memsys.errors import MemsysError
from memsys.llm import LLMClient
req = json.load(open(sys.argv[1]))
out = open(req["out_dir"] + "/answers.jsonl", "w")
cfg = LLMConfig(backend="openai", model="any", api_key_env="MEMSYS_NO_KEY", max_retries=0, cache=False, timeout_s=300)  # the first call may wait for the node to load its model
try:
    with LLMClient(cfg) as llm:
        for i in range(req["calls"]):
            out.write(llm.chat([{"role": "user", "content": f"question {i} of {req['name']}"}], max_tokens=20).text + "\\n")
            out.flush()
except MemsysError as exc:
    print(f"MEMSYS_ERROR kind={exc.kind} message={exc}", file=sys.stderr)
    sys.exit(1)
"""
#: answers = the view file the request names, as the sandbox read it
ECHO_VIEW = "import json, sys; r = json.load(open(sys.argv[1])); open(r['out_dir'] + '/answers.jsonl', 'w').write(open(r['view_path']).read())"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # the driver's node runs no evaluation; its Ray Client server lets a driver join as a client (ray://)
    port = _free_port()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "ray_client_server_port": port})
    c.client_port = port
    worker = c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c, worker
    ray.shutdown()
    c.shutdown()


def _executor(c, **kw):
    from research.execution.executor import RayExecutor

    return RayExecutor(RayConfig(address=c.address, **kw))


def _task(tmp: Path, name: str, program: str, request: dict, *, gateway: LLMGateway | None = None,
          sandbox: str = "process") -> UntrustedTask:
    """A task shaped like an evaluation's: the repo's code folders, a public view with its request."""
    work = tmp / name
    public, out = work / "public", work / "out"
    public.mkdir(parents=True)
    out.mkdir()
    (public / "view.json").write_text(json.dumps({"view": name}))
    req = public / "request.json"
    req.write_text(json.dumps({"view_path": str(public / "view.json"), "out_dir": str(out), "name": name, **request}))
    env = {"PYTHONPATH": str(REPO), "HOME": str(out)}
    readonly = [REPO / d for d in CODE_DIRS] + [public, Path(sys.prefix), Path(sys.base_prefix)]
    if gateway is not None:
        env.update(gateway.child_env())
        readonly.append(gateway.socket_path.parent)
    # 300 s: a real reader on a node shares 2 cores with whatever else runs; 120 s timed out once beside a quickstart
    spec = SandboxSpec(argv=[sys.executable, "-c", program, str(req)], workdir=out, writable=[out], readonly=readonly,
                       env=env, network="none", wall_timeout_s=300)
    roots = TaskRoots(REPO, CODE_DIRS, work, public, req, gateway.socket_path if gateway is not None else None)
    return UntrustedTask(make_sandbox(sandbox), spec, out / "answers.jsonl", name, roots)


def test_two_readers_on_another_node_share_the_drivers_budget_through_the_relay(cluster, tmp_path):
    c, worker = cluster
    cap = 100  # each call reserves ~30 tokens (prompt + max_tokens=20) and books ~6: about 14 calls of 60 asked
    budget = Budget(max_tokens=cap)
    sock_dir = Path(tempfile.mkdtemp(prefix="memsys-gw-"))
    ex = _executor(c)
    try:
        with OpenAITestServer() as server, LLMGateway(server.base_url, socket_path=sock_dir / "llm.sock",
                                                      api_key="sk-test", model="test-model", budget=budget) as gw:
            before = gw.usage()
            tasks = [_task(tmp_path, name, READER, {"calls": 30}, gateway=gw) for name in ("a", "b")]
            results = dict(ex.run_all(tasks))
            used = gw.usage() - before
            assert budget.used_tokens <= cap and used.prompt_tokens + used.completion_tokens == budget.used_tokens
            assert used.forwarded == len(server.chat_requests) < 60 and used.rejected_budget == 2
            answered = sum(results[i].answers.count(b"ok\n") for i in (0, 1))
            assert 0 < answered == used.forwarded  # every call that reached the model was the sandboxes', relayed
            for i in (0, 1):
                r = results[i]
                assert r.node == worker.node_id and r.relayed and r.shipped == ()
                assert not r.sandbox.ok  # refused at some call: the budget, shared by both, is spent
                failure = classify_result(r.sandbox, result_status="missing", metrics=None, parent_metrics=None,
                                          code_changed=True, edited_paths=[])
                failure = _check_endpoint_claim(failure, gw, before, True)  # the gateway saw the refusals
                assert failure.cls is FailureClass.INFRASTRUCTURE and failure.is_infrastructure
                assert failure.message.startswith("budget"), failure.message
    finally:
        ex.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_a_public_view_that_differs_on_the_node_is_shipped_and_never_is_an_infrastructure_error(cluster, tmp_path):
    c, worker = cluster
    auto, never = _executor(c), _executor(c, ship="never")
    try:
        task = _task(tmp_path, "view", ECHO_VIEW, {})
        same = auto.run(task)
        assert same.answers == b'{"view": "view"}' and same.shipped == () and not same.relayed
        needs = auto.needs_of(task)  # what the driver prepared ...
        strict = never.needs_of(task)
        (task.roots.public / "view.json").write_text('{"view": "stale"}')  # ... and what the node's copy now holds
        shipped = auto.run(task, needs=needs)
        assert shipped.node == worker.node_id and shipped.shipped == ("public",)
        assert shipped.answers == b'{"view": "view"}'  # the sandbox read the driver's view, not the node's
        with pytest.raises(ExecutorError, match=r"the public at .* is different .* research.ray.ship=never"):
            never.run(task, needs=strict)
    finally:
        auto.close()
        never.close()


@pytest.mark.skipif(not BwrapSandbox().available()[0], reason="bwrap unavailable")
def test_an_evaluation_shipped_to_the_node_scores_as_the_local_one(cluster, runs, locomo_path):
    from benchmarks.config import load_eval_setup

    c, worker = cluster
    base = ["benchmark=locomo", "split=dev", "sample=tiny", "memory=naive", "reader=none", "mlflow=false", "workers=1"]

    def run(run_id: str, executor):
        setup = load_eval_setup([*base, f"run_id={run_id}"])
        # the hashing embedder: this is about shipping the tree and the view, not about MiniLM on a cold node
        job = EvalJob(setup, REPO, "naive", runs / run_id / "untrusted",
                      memory_overrides=["memory.embedder.backend=hashing", "memory.embedder.cache=false"])
        return evaluate(job, BwrapSandbox(), executor=executor)

    local = run("ship-local", None)
    ex = _executor(c, ship="always")
    try:
        remote = run("ship-ray", ex)
    finally:
        ex.close()
    assert local.ok and remote.ok, (local.failure, remote.failure)
    assert remote.placement["executor_node"] == worker.node_id and remote.placement["shipped"] == ["tree", "public"]
    stable = lambda m: {k: v for k, v in m.items() if k != "wall_s"}  # noqa: E731
    assert stable(remote.result["metrics"]) == stable(local.result["metrics"])
    assert remote.objective_value == local.objective_value


def _llama_servers_of(model_path: Path) -> list[int]:
    """Pids of llama.cpp servers serving ``model_path`` with this module's small context."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if str(model_path).encode() in cmd and b"--n_ctx" in cmd and cmd[cmd.index(b"--n_ctx") + 1] == b"1536":
            pids.append(int(proc.name))
    return pids


def _embedded(monkeypatch):
    from memsys.config import LLMConfig, LocalLLMConfig
    from memsys.llm.model_files import ensure_model_file
    from research.execution.node_llm import EmbeddedModel

    monkeypatch.setenv("MEMSYS_MODELS_DIR", str(REPO / "runs" / "cache" / "models"))  # assembled once per clone
    path = ensure_model_file(LocalLLMConfig()).path  # the nodes of this machine find it at the same path
    return EmbeddedModel.of(LLMConfig(backend="local", local=LocalLLMConfig(gguf_path=str(path), n_ctx=1536)))


@pytest.mark.llm
def test_a_worker_nodes_reader_is_answered_by_that_nodes_own_embedded_server(cluster, tmp_path, monkeypatch):
    """research.ray.node_llm=auto: the worker node starts its own llama.cpp server and answers its
    readers; the driver's upstream (the test server standing in for the driver's model) is never
    asked, yet the driver's gateway counts and books every call. Closing the executor stops it."""
    c, worker = cluster
    embedded = _embedded(monkeypatch)
    sock_dir = Path(tempfile.mkdtemp(prefix="memsys-gw-"))
    ex = _executor(c)
    try:
        with OpenAITestServer() as driver_model, LLMGateway(
                driver_model.base_url, socket_path=sock_dir / "llm.sock", model="qwen2.5-coder-1.5b-instruct",
                upstream_dialect="llama_cpp", embedded=embedded, budget=Budget(max_tokens=10_000)) as gw:
            (_, r), = ex.run_all([_task(tmp_path, "own", READER, {"calls": 2}, gateway=gw)])
            used = gw.usage()
            assert r.sandbox.ok and r.node == worker.node_id and r.relayed, r.sandbox
            assert driver_model.chat_requests == []
            assert used.forwarded == used.node_forwarded == 2 and used.errors == 0 and used.completion_tokens > 0
            assert len([a for a in r.answers.decode().splitlines() if a.strip()]) == 2
            assert _llama_servers_of(Path(embedded.local["gguf_path"]))  # the node's server is up ...
    finally:
        ex.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    for _ in range(50):  # ... until the executor closes: its child sees the actor go
        if not _llama_servers_of(Path(embedded.local["gguf_path"])):
            break
        time.sleep(0.2)
    assert not _llama_servers_of(Path(embedded.local["gguf_path"]))


def test_a_node_that_cannot_serve_the_drivers_weights_fails_as_infrastructure(cluster, tmp_path, monkeypatch):
    """Other weights on the node (by sha256) must never answer for the driver's model: the call is a
    502 the gateway saw, so the evaluation's failure is the infrastructure's, not the candidate's."""
    import dataclasses

    c, worker = cluster
    embedded = dataclasses.replace(_embedded(monkeypatch), sha256="0" * 64)
    sock_dir = Path(tempfile.mkdtemp(prefix="memsys-gw-"))
    ex = _executor(c)
    try:
        with OpenAITestServer() as driver_model, LLMGateway(
                driver_model.base_url, socket_path=sock_dir / "llm.sock", model="m", upstream_dialect="llama_cpp",
                embedded=embedded) as gw:
            before = gw.usage()
            (_, r), = ex.run_all([_task(tmp_path, "bad", READER, {"calls": 1}, gateway=gw)])
            assert not r.sandbox.ok and r.node == worker.node_id and driver_model.chat_requests == []
            failure = classify_result(r.sandbox, result_status="missing", metrics=None, parent_metrics=None,
                                      code_changed=True, edited_paths=[])
            failure = _check_endpoint_claim(failure, gw, before, True)
            assert failure.is_infrastructure, failure
        driver_only = _executor(c, node_llm="driver")  # the old route still works: the driver's model answers
        try:
            with OpenAITestServer() as driver_model, LLMGateway(
                    driver_model.base_url, socket_path=sock_dir / "llm2.sock", model="m", upstream_dialect="llama_cpp",
                    embedded=embedded) as gw:
                (_, r), = driver_only.run_all([_task(tmp_path, "driver", READER, {"calls": 1}, gateway=gw)])
                assert r.sandbox.ok and len(driver_model.chat_requests) == 1 and gw.usage().node_forwarded == 0
        finally:
            driver_only.close()
    finally:
        ex.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


CLIENT_DRIVER = """
import json, sys, tempfile
from pathlib import Path
from research.config import RayConfig
from research.execution.executor import RayExecutor
from research.gateway.service import LLMGateway
from tests.research.execution.test_executor_nodes import READER, _task
from tests.support.openai_server import OpenAITestServer

address, tmp = sys.argv[1], Path(sys.argv[2])
ex = RayExecutor(RayConfig(address=address))
try:
    with OpenAITestServer() as server, LLMGateway(server.base_url, api_key="sk-test", model="test-model",
            socket_path=Path(tempfile.mkdtemp(prefix="memsys-gw-")) / "llm.sock") as gw:
        (_, r), = ex.run_all([_task(tmp, "client", READER, {"calls": 3}, gateway=gw)])
        print(json.dumps({"ok": r.sandbox.ok, "relayed": r.relayed, "node": r.node, "answers": r.answers.decode(),
                          "forwarded": gw.usage().forwarded, "served": len(server.chat_requests)}))
finally:
    ex.close()
"""


def test_a_driver_joined_as_a_ray_client_relays_its_readers_through_the_mailbox(cluster, tmp_path):
    """research.ray.address=ray://...: the driver is no cluster node, so no actor can sit beside its
    gateway socket; the relay's mailbox is pulled by the driver over the client connection instead."""
    c, worker = cluster
    address = f"ray://127.0.0.1:{c.client_port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CLIENT_DRIVER, address, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["relayed"] and got["node"] == worker.node_id
    assert got["answers"].splitlines() == ["ok"] * 3 and got["forwarded"] == got["served"] == 3
