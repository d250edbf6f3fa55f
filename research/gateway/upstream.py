"""The LLM gateway's upstream leg: how a checked chat request reaches the model's server.

Stdlib :mod:`http.client` (``HTTPConnection``/``HTTPSConnection`` by the
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
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import select
import socket
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from research.gateway.protocol import reject

#: the gateway's logger, whichever of its modules logs (its records kept this name when it was split)
log = logging.getLogger("research.gateway")

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


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """What the upstream answered, whichever way the call went (pooled connection, proxy, a node's own server)."""

    status: int
    headers: list[tuple[str, str]]  # lower-cased names
    content: bytes


class UpstreamPool:
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


def env_proxy(scheme: str, host: str) -> str | None:
    """The proxy the environment names for this upstream (None: connect directly)."""
    if _is_loopback(host):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return proxy


def load_httpx() -> Any:
    """The httpx module (imported only when a proxy sends the upstream leg through httpx)."""
    try:
        import httpx2 as httpx  # the HTTP client openai>=3 is built on (same API as httpx)
    except ImportError:  # pragma: no cover - openai 1.x/2.x ship with httpx
        import httpx
    return httpx


def post_pooled(pool: UpstreamPool, target: str, upstream_host: str, payload: bytes,
                headers: dict[str, str]) -> UpstreamReply:
    """POST to ``target`` over a kept-alive connection; once more on a fresh one if a reused one was dead.
    ``upstream_host`` names the upstream in error messages."""
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
            conn.request("POST", target, body=payload, headers=headers)
            response = conn.getresponse()
            answered = True
            content = response.read()
            reply = UpstreamReply(response.status, [(k.lower(), v) for k, v in response.getheaders()], content)
        except TimeoutError as exc:  # connect or read: never retried (the upstream may be working on it)
            if conn is not None:
                pool.discard(conn)
            raise reject(504, f"LLM gateway: upstream {upstream_host} timed out "
                              f"({type(exc).__name__})") from None
        except (OSError, http.client.HTTPException) as exc:
            if conn is not None:
                pool.discard(conn)
            if reused and not answered and isinstance(exc, _STALE_ERRORS):
                log.debug("LLM gateway: kept-alive upstream connection was stale (%s); reconnecting",
                          type(exc).__name__)
                conn, reused = None, False
                continue
            message = f"LLM gateway: upstream {upstream_host} unreachable ({type(exc).__name__})"
            raise reject(502, message) from None
        except BaseException:
            if conn is not None:
                pool.discard(conn)
            raise
        if response.will_close:  # http.client has closed the socket; do not pool a dead connection
            pool.discard(conn)
        else:
            pool.give(conn)
        return reply


def post_proxied(client: Any, url: str, upstream_host: str, payload: bytes, headers: dict[str, str]) -> UpstreamReply:
    """POST to ``url`` with the httpx ``client`` that goes through the environment's proxy."""
    httpx = load_httpx()
    try:
        response = client.post(url, content=payload, headers=headers)
    except httpx.TimeoutException as exc:
        raise reject(504, f"LLM gateway: upstream {upstream_host} timed out ({type(exc).__name__})") from None
    except httpx.HTTPError as exc:
        message = f"LLM gateway: upstream {upstream_host} unreachable ({type(exc).__name__})"
        raise reject(502, message) from None
    return UpstreamReply(response.status_code, list(response.headers.items()), response.content)
