"""The LLM gateway's HTTP side: a threading Unix-socket server and the handler that answers on it.

Why a handler of its own making: each answer goes out in one write (status line, headers and body:
one wakeup of the child, not two), the gateway's own time is measured apart from the waits for the
child's body and for the upstream, a gateway bug still answers (500) instead of hanging the child,
and close() cuts kept-alive connections so no request is served after it. The handler only frames
HTTP; what a chat request means is decided by :meth:`research.gateway.service.LLMGateway.answer_chat`.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import socketserver
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from research.gateway.protocol import GatewayOwner, Reply, reject
from research.gateway.route import ROUTE_HEADER

#: the gateway's logger, whichever of its modules logs (its records kept this name when it was split)
log = logging.getLogger("research.gateway")

#: a connection idle (or stalled mid-request) this long is closed
IDLE_TIMEOUT_S = 60.0


class GatewayServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
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


def remove_stale_socket(socket_path: Path) -> None:
    """Unlink a socket file nobody listens on; refuse a live one or a non-socket file."""
    try:
        mode = os.lstat(socket_path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"LLMGateway socket path exists and is not a socket: {socket_path}")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(socket_path))
    except OSError:
        socket_path.unlink(missing_ok=True)  # stale: left by a process that died
        return
    finally:
        probe.close()
    raise ConfigError(f"another server is listening on {socket_path}")


class GatewayHandler(BaseHTTPRequestHandler):
    """Frames one gateway's HTTP; :meth:`research.gateway.service.LLMGateway.start` subclasses it with ``owner`` set."""

    owner: GatewayOwner
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread
    timeout = IDLE_TIMEOUT_S
    server_version = "memsys-llm-gateway"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # request lines only, never headers
        log.debug("gateway: " + format, *args)

    def _send(self, reply: Reply) -> None:
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
        except Reply as decided:
            reply = decided
        except Exception as exc:  # a gateway bug must answer, not hang the child
            log.exception("LLM gateway: unexpected error")
            reply = reject(500, f"LLM gateway internal error ({type(exc).__name__})")
        # counted before the child sees the answer, so a snapshot taken after its last call is complete;
        # overhead: headers parsed -> reply handed to the socket, minus waiting for upstream and for the body
        failed = 1 if reply.status >= 400 and reply.status != 402 else 0  # budget refusals have their own counter
        overhead = time.perf_counter() - started - upstream_timer[0] - self._body_wait_s
        self.owner.counters.add(requests=1, errors=failed, upstream_s=upstream_timer[0], overhead_s=overhead)
        self._send(reply)

    def _not_found(self, _timer: list[float]) -> Reply:
        self._drain()
        return reject(404, f"no route {self.command} {self.path.split('?')[0]} (the LLM gateway serves "
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

    def _post_chat(self, upstream_timer: list[float]) -> Reply:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return reject(411, "chunked request bodies are not supported: send Content-Length")
        length = self._content_length()
        if length is None:
            self.close_connection = True
            return reject(400, "invalid Content-Length")
        if length > self.owner.max_request_bytes:
            self.close_connection = True  # the unread body would be parsed as the next request
            return reject(413, f"request body of {length} bytes exceeds the gateway limit of "
                               f"{self.owner.max_request_bytes} bytes")
        reading = time.perf_counter()
        raw = self.rfile.read(length)  # the child may still be writing it: not gateway time
        self._body_wait_s = time.perf_counter() - reading
        if len(raw) < length:
            self.close_connection = True
            return reject(400, "request body shorter than its Content-Length")
        return self.owner.answer_chat(raw, upstream_timer, self._origin_node())

    def _origin_node(self) -> str | None:
        """The Ray node a relayed request came from, believed only with the gateway's route token
        (which only the driver's relay bridge holds): a sandbox cannot pick another node's server."""
        token, _, node = (self.headers.get(ROUTE_HEADER) or "").partition(" ")
        if node and hmac.compare_digest(token, self.owner.route_token):
            return node.strip()
        return None

    def _get_models(self, _timer: list[float]) -> Reply:
        return Reply(200, self.owner.models_body)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def do_POST(self) -> None:
        self._answer(self._post_chat if self._path() == "/v1/chat/completions" else self._not_found)

    def do_GET(self) -> None:
        self._answer(self._get_models if self._path() == "/v1/models" else self._not_found)

    def do_PUT(self) -> None:
        self._answer(self._not_found)

    do_DELETE = do_PATCH = do_PUT
