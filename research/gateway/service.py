"""The LLM gateway: the only way a sandboxed evaluation reaches the reader model.

Why: the code under evaluation (a worktree's ``memsys``, possibly hostile) runs in a
sandbox without network, yet its LLM reader must still talk to the model. The loop
(trusted, on the host) runs this small OpenAI-protocol HTTP server on one Unix
domain socket, which is bind-mounted into the sandbox; the child's
:class:`memsys.llm.client.LLMClient` routes over it when ``MEMSYS_LLM_UDS`` names
the socket. The gateway

* holds the API key: it sets ``Authorization`` itself and drops whatever the child
  sent, so the key never enters the sandbox, its environment or any file (it is
  never logged and is scrubbed from upstream error bodies);
* forces ``model`` to the configured one (a child cannot pick a pricier model);
* reserves each call's worst case on the run's :class:`~harness.llm_budget.Budget`
  *before* forwarding (HTTP 402, error type ``budget_exceeded``, when a cap would
  be passed) and books the actual ``usage`` afterwards;
* replays and stores successful replies in the host's
  :class:`~harness.reply_cache.ResponseCache` (keys namespaced by :data:`CACHE_TAG`,
  so reader replies never share keys with the researcher's own calls);
* passes the upstream's status codes and bodies back unchanged, so the child's SDK
  classifies 401/403/429/5xx as usual; an unreachable upstream is a 502.

Endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``; anything else is a
404 with an OpenAI-style error body. Streaming is refused (400).

Where the parts live: the upstream leg (kept-alive connections, TLS, proxies) in
research.gateway.upstream; request checks, error bodies and reply parsing in
research.gateway.protocol; the Unix-socket server and its handler in research.gateway.server;
the counters in research.gateway.usage. This module ties them together.

Per-evaluation accounting: ``before = gw.usage()`` ... ``gw.usage_since(before)``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from harness.errors import BudgetExceededError, ConfigError
from harness.llm_budget import Budget, Reservation, cost_usd
from harness.paths import GATEWAY_SOCKET_ENV
from harness.reply_cache import ResponseCache
from harness.structured_output import to_llama_cpp_format
from harness.tokens import count_message_tokens
from research.gateway.protocol import (
    Reply,
    completion_or_none,
    passed_headers,
    reject,
    reply_cache_key,
    usage_of,
    validated_chat_request,
)
from research.gateway.server import GatewayHandler, GatewayServer, remove_stale_socket
from research.gateway.upstream import (
    CONNECT_TIMEOUT_S,
    UPSTREAM_KEEPALIVE_S,
    UPSTREAM_MAX_IDLE,
    UpstreamPool,
    UpstreamReply,
    env_proxy,
    load_httpx,
    post_pooled,
    post_proxied,
)
from research.gateway.usage import Counters, GatewayUsage

log = logging.getLogger(__name__)

#: joins the model name in cache keys: reader replies never share keys with other callers
CACHE_TAG = "gateway-reader"
#: what the upstream understands: any OpenAI-protocol endpoint, or the embedded llama.cpp server
UPSTREAM_DIALECTS = ("openai", "llama_cpp")
#: (node, request body, headers) -> (status, headers, body) from that node's own server, or None
NodeUpstream = Callable[[str, bytes, dict[str, str]], "tuple[int, list[tuple[str, str]], bytes] | None"]
#: max_tokens forwarded (and reserved) when a request names none: the worst case must be bounded
DEFAULT_MAX_TOKENS = 1024
#: sun_path holds 108 bytes including the terminating NUL
_MAX_SOCKET_PATH_BYTES = 107


#: the gateways this process runs, by socket path: the Ray executor, which sees only a task's socket,
#: finds the gateway behind it to route nodes' calls (research.executor)
_RUNNING: dict[str, "LLMGateway"] = {}
_RUNNING_LOCK = threading.Lock()


def running_gateway(socket_path: Path | str) -> "LLMGateway | None":
    with _RUNNING_LOCK:
        return _RUNNING.get(str(socket_path))


def _checked_upstream(url: str, model: str, dialect: str, socket_path: Path) -> Any:
    """The upstream URL's parts, or ConfigError naming what a gateway cannot be built with."""
    if dialect not in UPSTREAM_DIALECTS:
        raise ConfigError(f"LLMGateway upstream_dialect must be {' | '.join(UPSTREAM_DIALECTS)}, got {dialect!r}")
    if not model:
        raise ConfigError("LLMGateway needs the model name to force on every request")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"LLMGateway upstream must be an http(s) URL, got {url!r}")
    if len(os.fsencode(socket_path)) > _MAX_SOCKET_PATH_BYTES:
        raise ConfigError(f"LLMGateway socket path is longer than {_MAX_SOCKET_PATH_BYTES} bytes: {socket_path}")
    return parts


class LLMGateway:
    """OpenAI-protocol HTTP server on a Unix socket that forwards to one upstream model."""

    def __init__(
        self,
        upstream_base_url: str,
        *,
        socket_path: Path,
        api_key: str | None = None,
        model: str,
        budget: Budget | None = None,
        price_input_per_1m: float = 0.0,
        price_output_per_1m: float = 0.0,
        cache: ResponseCache | None = None,
        timeout_s: float = 600.0,
        max_request_bytes: int = 4 << 20,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        cache_tag: str | None = None,
        upstream_dialect: str = "openai",
        embedded: Any = None,
        prompt_cap: int | None = None,
        upstream_logprobs: bool = True,
    ) -> None:
        """``cache_tag`` (e.g. the local GGUF's identity) joins the cache namespace, so two
        weight files served under one model name never share replies. ``upstream_dialect``
        "llama_cpp": the upstream is the embedded llama-cpp-python server, which rejects the
        OpenAI ``json_schema`` response format; the child speaks OpenAI whatever the upstream
        (it cannot know), so the gateway rewrites that one field on the wire (the cache key keeps
        the child's form, as the direct client's does). ``embedded`` (a
        research.execution.node_llm.EmbeddedModel) says the upstream is the embedded model, which a Ray node
        can serve itself: :meth:`route_to_nodes` then sends a node's calls to its own server. ``prompt_cap``: a
        request whose prompt has more tokens is refused (413) before the cache and the upstream, so a reader
        objective is scored at the run's context budget (benchmarks.config.reader_prompt_cap). ``upstream_logprobs``
        False: the upstream is an embedded server started without per-token logits (``llm.local.logprobs``), which
        answers a request for log-probabilities with HTTP 500; the gateway drops that request's ``logprobs`` and
        ``top_logprobs`` before the cache key and the upstream, so the reply has none (as the in-process client
        does) and the cache keeps it as the request it was answered as."""
        parts = _checked_upstream(upstream_base_url, model, upstream_dialect, Path(socket_path))
        self.socket_path = Path(socket_path)
        self.upstream_base_url = upstream_base_url.rstrip("/")
        self.upstream_host = parts.hostname or parts.netloc  # for messages: never userinfo or query
        if parts.port:
            self.upstream_host = f"{self.upstream_host}:{parts.port}"
        self.model = model
        self.budget = budget
        self.price_input_per_1m = price_input_per_1m
        self.price_output_per_1m = price_output_per_1m
        self.cache = cache
        self.timeout_s = timeout_s
        self.max_request_bytes = max_request_bytes
        self.default_max_tokens = default_max_tokens
        self.upstream_dialect = upstream_dialect
        self.embedded = embedded
        self.prompt_cap = prompt_cap
        self.upstream_logprobs = upstream_logprobs
        # the relay bridge's proof that a request came from a node (research.execution.relay): never in a sandbox
        self.route_token = secrets.token_hex(16)
        self._node_upstream: NodeUpstream | None = None
        self._cache_model = f"{model}@{CACHE_TAG}" + (f":{cache_tag}" if cache_tag else "")
        self.__api_key = api_key or ""
        self._chat_url = f"{self.upstream_base_url}/chat/completions"
        self._chat_target = f"{parts.path.rstrip('/')}/chat/completions" + (f"?{parts.query}" if parts.query else "")
        self._upstream_key = (parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        self.models_body = json.dumps({
            "object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "gateway"}],
        }).encode()
        self.counters = Counters()
        self._pool: UpstreamPool | None = None
        self._http: Any = None  # an httpx client, only when a proxy is in the way (see research.gateway.upstream)
        self._server: GatewayServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:  # the key stays out of reprs and logs
        return f"LLMGateway(upstream={self.upstream_host!r}, model={self.model!r}, socket={str(self.socket_path)!r})"

    # --- lifecycle ------------------------------------------------------------
    def start(self) -> "LLMGateway":
        if self._server is not None:
            return self
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_socket(self.socket_path)
        gateway = self

        class Handler(GatewayHandler):
            owner = gateway

        server = GatewayServer(str(self.socket_path), Handler)
        try:
            os.chmod(self.socket_path, 0o666)  # a sandboxed child may run as another uid
            scheme, host, port = self._upstream_key
            connect_timeout = min(CONNECT_TIMEOUT_S, self.timeout_s)
            if env_proxy(scheme, host):
                httpx = load_httpx()
                self._http = httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s, connect=connect_timeout),
                    limits=httpx.Limits(max_keepalive_connections=UPSTREAM_MAX_IDLE,
                                        keepalive_expiry=UPSTREAM_KEEPALIVE_S),
                )
            else:
                self._pool = UpstreamPool(scheme, host, port, connect_timeout_s=connect_timeout,
                                          timeout_s=self.timeout_s)
        except BaseException:
            server.server_close()
            self.socket_path.unlink(missing_ok=True)
            raise
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="llm-gateway", daemon=True
        )
        self._thread.start()
        with _RUNNING_LOCK:
            _RUNNING[str(self.socket_path)] = self
        log.info("LLM gateway on %s -> %s model=%s%s", self.socket_path, self.upstream_host, self.model,
                 " (via the environment's proxy)" if self._http is not None else "")
        return self

    def close(self) -> None:
        with _RUNNING_LOCK:
            if _RUNNING.get(str(self.socket_path)) is self:
                del _RUNNING[str(self.socket_path)]
        self._node_upstream = None
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            server.drop_connections()
            try:
                if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                    self.socket_path.unlink()
            except FileNotFoundError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> "LLMGateway":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- accounting -----------------------------------------------------------
    def usage(self) -> GatewayUsage:
        return self.counters.snapshot()

    def usage_since(self, before: GatewayUsage) -> GatewayUsage:
        """What happened since ``before = gateway.usage()`` (one evaluation's share)."""
        return self.usage() - before

    def child_env(self) -> dict[str, str]:
        """The environment a sandboxed child needs to reach this gateway (no key in it)."""
        return {GATEWAY_SOCKET_ENV: str(self.socket_path)}

    # --- request handling (called from handler threads) -------------------------
    def answer_chat(self, raw: bytes, upstream_timer: list[float], node: str | None = None) -> Reply:
        """The answer to one chat-completions request body."""
        body, messages, max_tokens, choices, temperature = validated_chat_request(
            raw, model=self.model, default_max_tokens=self.default_max_tokens)
        if not self.upstream_logprobs and ("logprobs" in body or "top_logprobs" in body):
            body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
        prompt_estimate = count_message_tokens(messages) if self.prompt_cap is not None or self.budget is not None else 0
        if self.prompt_cap is not None and prompt_estimate > self.prompt_cap:
            self.counters.add(rejected_prompt=1)
            raise reject(413, f"LLM gateway: the prompt has {prompt_estimate} tokens, over this run's reader budget of "
                              f"{self.prompt_cap} (its context budget plus the fixed instructions)", "prompt_over_budget")

        key = None
        if self.cache is not None:
            key = reply_cache_key(self._cache_model, body, messages, max_tokens, temperature)
            hit = self._cache_get(key)
            if hit is not None:
                used = hit.get("usage") if isinstance(hit.get("usage"), dict) else {}
                self.counters.add(cache_hits=1, cached_prompt_tokens=int(used.get("prompt_tokens") or 0),
                                  cached_completion_tokens=int(used.get("completion_tokens") or 0))
                return Reply(200, json.dumps(hit).encode())

        reservation: Reservation | None = None
        if self.budget is not None:
            completion_cap = max_tokens * choices  # n completions may each run to max_tokens
            worst = cost_usd(prompt_estimate, completion_cap, self.price_input_per_1m, self.price_output_per_1m)
            try:
                reservation = self.budget.reserve(prompt_estimate, completion_cap, worst)
            except BudgetExceededError as exc:
                self.counters.add(rejected_budget=1)
                raise reject(402, f"LLM gateway: {exc}", "budget_exceeded") from None
        booked = False
        try:
            response = self._forward(body, upstream_timer, node)
            reply = Reply(response.status, self._scrub(response.content), passed_headers(response.headers))
            if response.status != 200:
                return reply  # passed through unchanged; counted as an error by the handler
            completion = completion_or_none(response.content)
            if completion is None:  # the child's client reports the malformed body
                self.counters.add(errors=1)
                return reply
            prompt_tokens, completion_tokens = usage_of(completion, messages)
            cost = cost_usd(prompt_tokens, completion_tokens, self.price_input_per_1m, self.price_output_per_1m)
            if reservation is not None:
                self.budget.commit(reservation, prompt_tokens, completion_tokens, cost)  # type: ignore[union-attr]
            booked = True
            self.counters.add(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost_usd=cost)
            if key is not None:
                self._cache_put(key, completion)
            return reply
        finally:
            if reservation is not None and not booked:
                self.budget.release(reservation)  # type: ignore[union-attr]

    def route_to_nodes(self, upstream: "NodeUpstream | None") -> None:
        """Calls that a relay brings from a Ray node go to ``upstream(node, payload, headers)`` (its
        own embedded server) unless it returns None; the cache, budget and counters stay here."""
        self._node_upstream = upstream

    def _forward(self, body: dict[str, Any], upstream_timer: list[float], node: str | None = None) -> UpstreamReply:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "memsys-llm-gateway"}
        if self.__api_key:
            headers["Authorization"] = f"Bearer {self.__api_key}"
        if self.upstream_dialect == "llama_cpp" and isinstance(body.get("response_format"), dict):
            body = {**body, "response_format": to_llama_cpp_format(body["response_format"])}
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.counters.add(forwarded=1)
        started = time.perf_counter()
        try:
            on_node = self._node_upstream(node, payload, headers) if node and self._node_upstream else None
            if on_node is not None:
                self.counters.add(node_forwarded=1)
                return UpstreamReply(*on_node)
            if self._pool is not None:
                return post_pooled(self._pool, self._chat_target, self.upstream_host, payload, headers)
            if self._http is not None:
                return post_proxied(self._http, self._chat_url, self.upstream_host, payload, headers)
            raise reject(502, "LLM gateway: not started or already closed")
        finally:
            upstream_timer[0] += time.perf_counter() - started

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        try:
            return self.cache.get(key)  # type: ignore[union-attr]
        except Exception as exc:  # a broken cache must not stop the evaluation
            log.warning("LLM gateway cache lookup failed: %s", exc)
            return None

    def _cache_put(self, key: str, completion: dict[str, Any]) -> None:
        try:
            self.cache.put(key, self._cache_model, completion)  # type: ignore[union-attr]
        except Exception as exc:
            log.warning("LLM gateway cache write failed: %s", exc)

    def _scrub(self, content: bytes) -> bytes:
        """The upstream body with the API key blanked (some providers echo it in auth errors)."""
        key = self.__api_key.encode()
        return content.replace(key, b"***") if key and key in content else content

