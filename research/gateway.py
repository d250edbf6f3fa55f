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
* reserves each call's worst case on the run's :class:`~memsys.llm.budget.Budget`
  *before* forwarding (HTTP 402, error type ``budget_exceeded``, when a cap would
  be passed) and books the actual ``usage`` afterwards;
* replays and stores successful replies in the host's
  :class:`~memsys.llm.cache.ResponseCache` (keys namespaced by :data:`CACHE_TAG`,
  so reader replies never share keys with the researcher's own calls);
* passes the upstream's status codes and bodies back unchanged, so the child's SDK
  classifies 401/403/429/5xx as usual; an unreachable upstream is a 502.

Endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``; anything else is a
404 with an OpenAI-style error body. Streaming is refused (400).

Upstream leg: stdlib :mod:`http.client` (``HTTPConnection``/``HTTPSConnection`` by the
URL's scheme) over kept-alive connections, because an httpx client cost ~1 ms of CPU per
call, half the gateway's overhead. Idle connections wait in a small pool keyed by
``(scheme, host, port)``: a handler thread takes one per call and puts it back, so a
child's sequential calls reuse one connection and a new child process (a new handler
thread) reuses a warm one instead of paying a TCP/TLS handshake. A pooled connection the
upstream has closed is noticed before reuse (readable while idle) and replaced; if one
dies anyway between the check and the send (reset, broken pipe, or closed with no status
line), the call is retried once on a fresh connection, as it was not answered. A timeout
is never retried (504), nor an error once the status line has arrived (502). TLS trusts
the system store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured) plus certifi's bundle when
installed, as httpx did.

Proxies: when ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` (lower case too) name a proxy
for the upstream's scheme and ``NO_PROXY`` does not exempt its host, the upstream leg
uses httpx instead (it speaks CONNECT tunnels, proxy auth and NO_PROXY rules; a host that
only reaches a hosted API through an egress proxy must keep working, and a proxy's
round trip dwarfs the client's CPU anyway). A loopback upstream (the embedded llama.cpp
server) is always reached directly.

Per-evaluation accounting: ``before = gw.usage()`` ... ``gw.usage_since(before)``.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import os
import secrets
import select
import socket
import socketserver
import ssl
import stat
import threading
import time
import urllib.request
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from memsys.errors import BudgetExceededError, ConfigError
from memsys.llm.budget import Budget, Reservation, cost_usd
from memsys.llm.cache import ResponseCache, request_key
from memsys.llm.structured import to_llama_cpp_format
from memsys.tokens import count_message_tokens, count_tokens
from research.relay import ROUTE_HEADER

log = logging.getLogger(__name__)

#: joins the model name in cache keys: reader replies never share keys with other callers
CACHE_TAG = "gateway-reader"
#: what the upstream understands: any OpenAI-protocol endpoint, or the embedded llama.cpp server
UPSTREAM_DIALECTS = ("openai", "llama_cpp")
#: (node, request body, headers) -> (status, headers, body) from that node's own server, or None
NodeUpstream = Callable[[str, bytes, dict[str, str]], "tuple[int, list[tuple[str, str]], bytes] | None"]
#: max_tokens forwarded (and reserved) when a request names none: the worst case must be bounded
DEFAULT_MAX_TOKENS = 1024
#: a connection idle (or stalled mid-request) this long is closed
IDLE_TIMEOUT_S = 60.0
#: connecting to the upstream (TCP + TLS) may take at most this long (capped by timeout_s)
CONNECT_TIMEOUT_S = 10.0
#: an idle upstream connection older than this is closed rather than reused
UPSTREAM_KEEPALIVE_S = 30.0
#: idle upstream connections kept for reuse, at most
UPSTREAM_MAX_IDLE = 32
#: errors that show a reused kept-alive connection was dead before the upstream answered
#: (RemoteDisconnected is a ConnectionResetError and a BadStatusLine)
_STALE_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.BadStatusLine,
                 ssl.SSLEOFError, ssl.SSLZeroReturnError)
#: sun_path holds 108 bytes including the terminating NUL
_MAX_SOCKET_PATH_BYTES = 107
#: request fields that shape the reply and are keyed by request_key itself
_KEYED_FIELDS = {"model", "messages", "response_format", "temperature", "max_tokens", "max_completion_tokens", "seed"}
#: request fields that never shape the reply (left out of the cache key)
_UNKEYED_FIELDS = {"stream", "user", "metadata", "store"}
#: upstream response headers passed back (the rest are hop-by-hop or describe the upstream's encoding)
_PASSED_HEADERS = ("retry-after", "retry-after-ms", "x-request-id")
_PASSED_PREFIXES = ("x-ratelimit-",)
_ERROR_TYPES = {
    400: "invalid_request_error", 402: "budget_exceeded", 404: "invalid_request_error",
    411: "invalid_request_error", 413: "invalid_request_error", 502: "upstream_error", 504: "upstream_timeout",
}


@dataclass(frozen=True, slots=True)
class GatewayUsage:
    """A snapshot of the gateway's counters (subtract two for one evaluation's share)."""

    requests: int = 0  # HTTP requests answered, any path
    forwarded: int = 0  # chat requests sent upstream
    node_forwarded: int = 0  # of those, answered by the embedded server of the node that asked (research.node_llm)
    cache_hits: int = 0  # chat requests answered from the cache
    rejected_budget: int = 0  # refused with 402 before reaching upstream
    errors: int = 0  # answers with status >= 400 other than budget refusals (upstream's included)
    prompt_tokens: int = 0  # booked from forwarded successful calls
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # the usage recorded with replies answered from the cache (not billed)
    cached_completion_tokens: int = 0
    cost_usd: float = 0.0
    upstream_s: float = 0.0  # time spent waiting for upstream
    overhead_s: float = 0.0  # time spent in the gateway itself (waits for upstream and the child's body excluded)

    @property
    def overhead_per_request_s(self) -> float:
        return self.overhead_s / self.requests if self.requests else 0.0

    def __sub__(self, other: "GatewayUsage") -> "GatewayUsage":
        return GatewayUsage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["overhead_per_request_s"] = self.overhead_per_request_s
        return out


class _Counters:
    """Thread-safe accumulation behind :meth:`LLMGateway.usage`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {f.name: f.default for f in fields(GatewayUsage)}

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                self._values[name] += delta

    def snapshot(self) -> GatewayUsage:
        with self._lock:
            return GatewayUsage(**self._values)


class _GatewayServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False  # close() must not wait for a child that keeps a connection open

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        with self._open_lock:
            self._open.add(conn)
        # AF_UNIX peers have no address; BaseHTTPRequestHandler wants a (host, port) tuple
        return conn, ("sandbox", 0)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """End keep-alive connections, so no request is served after close()."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Reply(Exception):
    """An answer decided before forwarding (error or cache hit), raised to unwind."""

    def __init__(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})


def _error_body(status: int, message: str, etype: str | None = None, code: str | None = None) -> bytes:
    etype = etype or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": " ".join(message.split()), "type": etype, "param": None, "code": code or etype}}
    return json.dumps(body).encode()


def _reject(status: int, message: str, etype: str | None = None) -> _Reply:
    return _Reply(status, _error_body(status, message, etype))


@dataclass(frozen=True, slots=True)
class _UpstreamReply:
    status: int
    headers: list[tuple[str, str]]  # lower-cased names
    content: bytes


class _UpstreamPool:
    """Kept-alive ``http.client`` connections to one upstream, shared by the handler threads.

    A thread :meth:`take` s a connection for one exchange and :meth:`give` s it back (LIFO,
    so sequential calls reuse the same socket); :meth:`close` cuts idle and busy ones alike.
    """

    def __init__(self, scheme: str, host: str, port: int, *, connect_timeout_s: float, timeout_s: float) -> None:
        self.key = (scheme, host, port)
        self._connect_timeout_s = connect_timeout_s
        self._timeout_s = timeout_s
        self._tls: ssl.SSLContext | None = _tls_context() if scheme == "https" else None
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # (connection, idle since)
        self._busy: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def new(self) -> http.client.HTTPConnection:
        _, host, port = self.key
        if self._tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=self._connect_timeout_s, context=self._tls)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._connect_timeout_s)
        with self._lock:
            if self._closed:
                raise ConnectionAbortedError("LLM gateway closed")
            self._busy.add(conn)
        return conn

    def connect(self, conn: http.client.HTTPConnection) -> None:
        """Open ``conn`` within the connect timeout, then wait up to ``timeout_s`` per read."""
        if self._closed:  # close() cut this connection while its thread was about to use it
            raise ConnectionAbortedError("LLM gateway closed")
        conn.connect()  # TCP_NODELAY is set by http.client
        conn.sock.settimeout(self._timeout_s)

    def take(self) -> http.client.HTTPConnection | None:
        """A live idle connection, or None (the caller then makes a :meth:`new` one)."""
        now = time.monotonic()
        while True:
            with self._lock:
                if self._closed or not self._idle:
                    return None
                conn, since = self._idle.pop()
                self._busy.add(conn)
            if now - since <= UPSTREAM_KEEPALIVE_S and conn.sock is not None and not _readable(conn.sock):
                return conn
            self.discard(conn)  # expired, or closed by the upstream (EOF readable) while idle

    def give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._busy.discard(conn)
            if not self._closed and conn.sock is not None and len(self._idle) < UPSTREAM_MAX_IDLE:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def discard(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._busy.discard(conn)
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [c for c, _ in self._idle] + list(self._busy)
            self._idle.clear()
            self._busy.clear()
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:  # wakes a handler thread blocked reading this socket
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            conn.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._busy)


def _readable(sock: socket.socket) -> bool:
    """True when an idle connection has something to read: EOF (closed by the peer) or stray bytes."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()  # system store; SSL_CERT_FILE / SSL_CERT_DIR honoured
    try:
        import certifi  # what httpx trusted: keeps hosts with a bare system store working
    except ImportError:  # pragma: no cover - certifi ships with the openai SDK's dependencies
        return context
    try:
        context.load_verify_locations(cafile=certifi.where())
    except (OSError, ssl.SSLError):  # pragma: no cover
        pass
    return context


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _env_proxy(scheme: str, host: str) -> str | None:
    """The proxy the environment names for this upstream (None: connect directly)."""
    if _is_loopback(host):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return proxy


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
    ) -> None:
        """``cache_tag`` (e.g. the local GGUF's identity) joins the cache namespace, so two
        weight files served under one model name never share replies. ``upstream_dialect``
        "llama_cpp": the upstream is the embedded llama-cpp-python server, which rejects the
        OpenAI ``json_schema`` response format; the child speaks OpenAI whatever the upstream
        (it cannot know), so the gateway rewrites that one field on the wire (the cache key keeps
        the child's form, as the direct client's does). ``embedded`` (a
        research.node_llm.EmbeddedModel) says the upstream is the embedded model, which a Ray node
        can serve itself: :meth:`route_to_nodes` then sends a node's calls to its own server."""
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
        # the relay bridge's proof that a request came from a node (research.relay): never in a sandbox
        self.route_token = secrets.token_hex(16)
        self._node_upstream: NodeUpstream | None = None
        self._cache_model = f"{model}@{CACHE_TAG}" + (f":{cache_tag}" if cache_tag else "")
        self.__api_key = api_key or ""
        self._chat_url = f"{self.upstream_base_url}/chat/completions"
        self._chat_target = f"{parts.path.rstrip('/')}/chat/completions" + (f"?{parts.query}" if parts.query else "")
        self._upstream_key = (parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        self._models_body = json.dumps({
            "object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "gateway"}],
        }).encode()
        self._counters = _Counters()
        self._pool: _UpstreamPool | None = None
        self._http: Any = None  # an httpx client, only when a proxy is in the way (see the module docstring)
        self._server: _GatewayServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:  # the key stays out of reprs and logs
        return f"LLMGateway(upstream={self.upstream_host!r}, model={self.model!r}, socket={str(self.socket_path)!r})"

    # --- lifecycle ------------------------------------------------------------
    def start(self) -> "LLMGateway":
        if self._server is not None:
            return self
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_socket()
        gateway = self

        class Handler(_GatewayHandler):
            owner = gateway

        server = _GatewayServer(str(self.socket_path), Handler)
        try:
            os.chmod(self.socket_path, 0o666)  # a sandboxed child may run as another uid
            scheme, host, port = self._upstream_key
            connect_timeout = min(CONNECT_TIMEOUT_S, self.timeout_s)
            if _env_proxy(scheme, host):
                httpx = _httpx()
                self._http = httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s, connect=connect_timeout),
                    limits=httpx.Limits(max_keepalive_connections=UPSTREAM_MAX_IDLE,
                                        keepalive_expiry=UPSTREAM_KEEPALIVE_S),
                )
            else:
                self._pool = _UpstreamPool(scheme, host, port, connect_timeout_s=connect_timeout,
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

    def _remove_stale_socket(self) -> None:
        """Unlink a socket file nobody listens on; refuse a live one or a non-socket file."""
        try:
            mode = os.lstat(self.socket_path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ConfigError(f"LLMGateway socket path exists and is not a socket: {self.socket_path}")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(self.socket_path))
        except OSError:
            self.socket_path.unlink(missing_ok=True)  # stale: left by a process that died
            return
        finally:
            probe.close()
        raise ConfigError(f"another server is listening on {self.socket_path}")

    # --- accounting -----------------------------------------------------------
    def usage(self) -> GatewayUsage:
        return self._counters.snapshot()

    def usage_since(self, before: GatewayUsage) -> GatewayUsage:
        """What happened since ``before = gateway.usage()`` (one evaluation's share)."""
        return self.usage() - before

    def child_env(self) -> dict[str, str]:
        """The environment a sandboxed child needs to reach this gateway (no key in it)."""
        from memsys.llm.client import GATEWAY_SOCKET_ENV

        return {GATEWAY_SOCKET_ENV: str(self.socket_path)}

    # --- request handling (called from handler threads) -------------------------
    def _validated(self, raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], int, int, float]:
        """The request body, checked field by field (a 400 names the first bad one); the model is ours."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _reject(400, "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _reject(400, "request body must be a JSON object")
        if body.get("stream"):
            raise _reject(400, "streaming is not supported by the LLM gateway")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _reject(400, "'messages' must be a non-empty list of objects")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is None:
            max_tokens = body["max_tokens"] = self.default_max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise _reject(400, f"'max_tokens' must be a non-negative integer, got {max_tokens!r}")
        choices = body.get("n", 1)
        if isinstance(choices, bool) or not isinstance(choices, int) or not 1 <= choices <= 16:
            raise _reject(400, f"'n' must be an integer from 1 to 16, got {choices!r}")
        temperature = body.get("temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise _reject(400, f"'temperature' must be a number, got {temperature!r}")
        body["model"] = self.model  # the child cannot choose the model
        return body, messages, max_tokens, choices, temperature

    def _chat(self, raw: bytes, upstream_timer: list[float], node: str | None = None) -> _Reply:
        """The answer to one chat-completions request body."""
        body, messages, max_tokens, choices, temperature = self._validated(raw)

        key = None
        if self.cache is not None:
            key = self._cache_key(body, messages, max_tokens, temperature)
            hit = self._cache_get(key)
            if hit is not None:
                used = hit.get("usage") if isinstance(hit.get("usage"), dict) else {}
                self._counters.add(cache_hits=1, cached_prompt_tokens=int(used.get("prompt_tokens") or 0),
                                   cached_completion_tokens=int(used.get("completion_tokens") or 0))
                return _Reply(200, json.dumps(hit).encode())

        reservation: Reservation | None = None
        if self.budget is not None:
            prompt_estimate = count_message_tokens(messages)
            completion_cap = max_tokens * choices  # n completions may each run to max_tokens
            worst = cost_usd(prompt_estimate, completion_cap, self.price_input_per_1m, self.price_output_per_1m)
            try:
                reservation = self.budget.reserve(prompt_estimate, completion_cap, worst)
            except BudgetExceededError as exc:
                self._counters.add(rejected_budget=1)
                raise _reject(402, f"LLM gateway: {exc}", "budget_exceeded") from None
        booked = False
        try:
            response = self._forward(body, upstream_timer, node)
            reply = _Reply(response.status, self._scrub(response.content), _passed_headers(response.headers))
            if response.status != 200:
                return reply  # passed through unchanged; counted as an error by the handler
            completion = _completion_or_none(response.content)
            if completion is None:  # the child's client reports the malformed body
                self._counters.add(errors=1)
                return reply
            prompt_tokens, completion_tokens = _usage_of(completion, messages)
            cost = cost_usd(prompt_tokens, completion_tokens, self.price_input_per_1m, self.price_output_per_1m)
            if reservation is not None:
                self.budget.commit(reservation, prompt_tokens, completion_tokens, cost)  # type: ignore[union-attr]
            booked = True
            self._counters.add(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost_usd=cost)
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

    def _forward(self, body: dict[str, Any], upstream_timer: list[float], node: str | None = None) -> _UpstreamReply:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "memsys-llm-gateway"}
        if self.__api_key:
            headers["Authorization"] = f"Bearer {self.__api_key}"
        if self.upstream_dialect == "llama_cpp" and isinstance(body.get("response_format"), dict):
            body = {**body, "response_format": to_llama_cpp_format(body["response_format"])}
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self._counters.add(forwarded=1)
        started = time.perf_counter()
        try:
            on_node = self._node_upstream(node, payload, headers) if node and self._node_upstream else None
            if on_node is not None:
                self._counters.add(node_forwarded=1)
                return _UpstreamReply(*on_node)
            if self._pool is not None:
                return self._exchange(self._pool, payload, headers)
            if self._http is not None:
                return self._exchange_httpx(payload, headers)
            raise _reject(502, "LLM gateway: not started or already closed")
        finally:
            upstream_timer[0] += time.perf_counter() - started

    def _exchange(self, pool: _UpstreamPool, payload: bytes, headers: dict[str, str]) -> _UpstreamReply:
        """POST over a kept-alive connection; once more on a fresh one if a reused one was dead."""
        conn = pool.take()
        reused = conn is not None
        while True:
            answered = False
            try:
                if conn is None:
                    conn = pool.new()
                if conn.sock is None:  # new, or closed after a "Connection: close" reply
                    reused = False
                    pool.connect(conn)
                conn.request("POST", self._chat_target, body=payload, headers=headers)
                response = conn.getresponse()
                answered = True
                content = response.read()
                reply = _UpstreamReply(response.status, [(k.lower(), v) for k, v in response.getheaders()], content)
            except TimeoutError as exc:  # connect or read: never retried (the upstream may be working on it)
                if conn is not None:
                    pool.discard(conn)
                raise _reject(504, f"LLM gateway: upstream {self.upstream_host} timed out "
                                   f"({type(exc).__name__})") from None
            except (OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    pool.discard(conn)
                if reused and not answered and isinstance(exc, _STALE_ERRORS):
                    log.debug("LLM gateway: kept-alive upstream connection was stale (%s); reconnecting",
                              type(exc).__name__)
                    conn, reused = None, False
                    continue
                message = f"LLM gateway: upstream {self.upstream_host} unreachable ({type(exc).__name__})"
                raise _reject(502, message) from None
            except BaseException:
                if conn is not None:
                    pool.discard(conn)
                raise
            if response.will_close:  # http.client has closed the socket; do not pool a dead connection
                pool.discard(conn)
            else:
                pool.give(conn)
            return reply

    def _exchange_httpx(self, payload: bytes, headers: dict[str, str]) -> _UpstreamReply:
        httpx = _httpx()
        try:
            response = self._http.post(self._chat_url, content=payload, headers=headers)
        except httpx.TimeoutException as exc:
            raise _reject(504, f"LLM gateway: upstream {self.upstream_host} timed out ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            message = f"LLM gateway: upstream {self.upstream_host} unreachable ({type(exc).__name__})"
            raise _reject(502, message) from None
        return _UpstreamReply(response.status_code, list(response.headers.items()), response.content)

    def _cache_key(self, body: dict[str, Any], messages: list[Any], max_tokens: int, temperature: float) -> str:
        model_key = self._cache_model
        extras = {k: v for k, v in body.items() if k not in _KEYED_FIELDS and k not in _UNKEYED_FIELDS}
        if extras:  # stop, top_p, tools, ...: they shape the reply, so they join the key
            canonical = json.dumps(extras, sort_keys=True, separators=(",", ":"), default=str)
            model_key += "+" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
        return request_key(
            model=model_key, messages=messages, response_format=body.get("response_format"),
            temperature=temperature, max_tokens=max_tokens, seed=body.get("seed"),
        )

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


def _completion_or_none(content: bytes) -> dict[str, Any] | None:
    try:
        completion = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(completion, dict) and isinstance(completion.get("choices"), list) and completion["choices"]:
        return completion
    return None


def _usage_of(completion: Mapping[str, Any], messages: list[Any]) -> tuple[int, int]:
    """(prompt, completion) tokens from the reply's usage, estimated when absent."""
    usage = completion.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        completion_tokens = usage.get("completion_tokens")
        return usage["prompt_tokens"], completion_tokens if isinstance(completion_tokens, int) else 0
    try:
        text = completion["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        text = ""
    return count_message_tokens(messages), count_tokens(text if isinstance(text, str) else str(text))


def _passed_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The reply headers the child sees, from the upstream's (lower-cased names)."""
    out = {"Content-Type": "application/json"}
    content_type = None
    for name, value in headers:
        if name == "content-type" and content_type is None:
            content_type = out["Content-Type"] = value
        elif name in _PASSED_HEADERS or name.startswith(_PASSED_PREFIXES):
            out[name] = value
    return out


def _httpx() -> Any:
    """The httpx module (imported only when a proxy sends the upstream leg through httpx)."""
    try:
        import httpx2 as httpx  # the HTTP client openai>=3 is built on (same API as httpx)
    except ImportError:  # pragma: no cover - openai 1.x/2.x ship with httpx
        import httpx
    return httpx


class _GatewayHandler(BaseHTTPRequestHandler):
    owner: LLMGateway
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread
    timeout = IDLE_TIMEOUT_S
    server_version = "memsys-llm-gateway"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # request lines only, never headers
        log.debug("gateway: " + format, *args)

    def _send(self, reply: _Reply) -> None:
        """Status line, headers and body in one write (one wakeup of the child, not two)."""
        self.log_request(reply.status)
        lines = [f"{self.protocol_version} {reply.status} {self.responses.get(reply.status, ('',))[0]}"]
        headers = {"Content-Type": "application/json", **reply.headers, "Content-Length": str(len(reply.payload))}
        if self.close_connection:
            headers["Connection"] = "close"
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        try:
            self.wfile.write(head + reply.payload)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):  # the child gave up
            self.close_connection = True

    def _answer(self, route: Any) -> None:
        started = time.perf_counter()
        self._body_wait_s = 0.0
        upstream_timer = [0.0]
        try:
            reply = route(upstream_timer)
        except _Reply as decided:
            reply = decided
        except Exception as exc:  # a gateway bug must answer, not hang the child
            log.exception("LLM gateway: unexpected error")
            reply = _reject(500, f"LLM gateway internal error ({type(exc).__name__})")
        # counted before the child sees the answer, so a snapshot taken after its last call is complete;
        # overhead: headers parsed -> reply handed to the socket, minus waiting for upstream and for the body
        failed = 1 if reply.status >= 400 and reply.status != 402 else 0  # budget refusals have their own counter
        overhead = time.perf_counter() - started - upstream_timer[0] - self._body_wait_s
        self.owner._counters.add(requests=1, errors=failed, upstream_s=upstream_timer[0], overhead_s=overhead)
        self._send(reply)

    def _not_found(self, _timer: list[float]) -> _Reply:
        self._drain()
        return _reject(404, f"no route {self.command} {self.path.split('?')[0]} (the LLM gateway serves "
                            "POST /v1/chat/completions and GET /v1/models)")

    def _drain(self) -> None:
        """Read (and drop) a body we do not use, so the connection stays usable; close if too big."""
        length = self._content_length()
        if length is None or length > self.owner.max_request_bytes:
            self.close_connection = True
        elif length:
            self.rfile.read(length)

    def _content_length(self) -> int | None:
        try:
            value = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return None
        return value if value >= 0 else None

    def _post_chat(self, upstream_timer: list[float]) -> _Reply:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return _reject(411, "chunked request bodies are not supported: send Content-Length")
        length = self._content_length()
        if length is None:
            self.close_connection = True
            return _reject(400, "invalid Content-Length")
        if length > self.owner.max_request_bytes:
            self.close_connection = True  # the unread body would be parsed as the next request
            return _reject(413, f"request body of {length} bytes exceeds the gateway limit of "
                                f"{self.owner.max_request_bytes} bytes")
        reading = time.perf_counter()
        raw = self.rfile.read(length)  # the child may still be writing it: not gateway time
        self._body_wait_s = time.perf_counter() - reading
        if len(raw) < length:
            self.close_connection = True
            return _reject(400, "request body shorter than its Content-Length")
        return self.owner._chat(raw, upstream_timer, self._origin_node())

    def _origin_node(self) -> str | None:
        """The Ray node a relayed request came from, believed only with the gateway's route token
        (which only the driver's relay bridge holds): a sandbox cannot pick another node's server."""
        token, _, node = (self.headers.get(ROUTE_HEADER) or "").partition(" ")
        if node and hmac.compare_digest(token, self.owner.route_token):
            return node.strip()
        return None

    def _get_models(self, _timer: list[float]) -> _Reply:
        return _Reply(200, self.owner._models_body)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def do_POST(self) -> None:
        self._answer(self._post_chat if self._path() == "/v1/chat/completions" else self._not_found)

    def do_GET(self) -> None:
        self._answer(self._get_models if self._path() == "/v1/models" else self._not_found)

    def do_PUT(self) -> None:
        self._answer(self._not_found)

    do_DELETE = do_PATCH = do_PUT
