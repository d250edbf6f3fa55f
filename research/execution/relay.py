"""The driver's LLM gateway, reachable from a sandbox on any Ray node; one budget for the cluster.

The gateway (research/gateway/service.py) listens on a Unix socket on the driver's machine and does all the
accounting: it reserves each call's worst case on the run's budget before forwarding, books the
actual usage after, and counts what the evaluation's classification later checks (a reader that
blames the budget or the endpoint is believed only if the gateway saw it). A sandbox on another node
cannot reach that socket, and a second gateway per node would split the budget. So each worker that
runs a reader on another node starts a :class:`NodeRelay`: a Unix socket in a private folder of the
task, mounted into the sandbox exactly where the gateway's folder was (the sandbox still has no
network: no TCP port is opened inside it). Each HTTP request the relay reads travels through Ray to
the driver, whose :class:`GatewayBridge` replays it on the gateway's own socket, so the one gateway
answers, counts and books every call of the cluster.

Why through Ray and not a TCP listener on the driver: the cluster's Ray connections already join every
node to the driver, so there is no port to open, no firewall rule, no secret token to create, pass and
keep out of logs, and no plaintext API traffic on a new port. The bridge *pulls*: a small async actor
(the mailbox) holds requests until a thread of the driver takes them and posts the replies, so the
driver never listens on anything. That also works when the driver is not a cluster node (a Ray Client
at ``ray://head:10001``), where an actor pinned to "the driver's node" could not reach its socket.
The cost is two Ray calls per LLM call (milliseconds, against the seconds of a model's reply).

With the embedded model (``llm.backend=local``) the gateway need not send a relayed call to the
driver's own server: the bridge names the node the call came from (with the gateway's route token,
which no sandbox holds), and that node's own server answers (research.execution.node_llm), so K nodes run K
models while the cache and the budget stay in the one gateway.

When the relay fails (the driver or the mailbox is gone), it answers 502 and counts the failure; the
worker then reports the evaluation as an infrastructure failure, because the gateway saw no such
error and would otherwise let the candidate take the blame.

This module imports only the standard library and Ray: it runs in workers, which never load the
scorer or the system under test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import logging
import os
import shutil
import socket
import socketserver
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from research.gateway.route import ROUTE_HEADER

log = logging.getLogger(__name__)

RELAY_MODES = ("auto", "always", "never")
#: the largest request body relayed (the gateway's own limit is 4 MiB)
MAX_REQUEST_BYTES = 8 << 20
#: how long the driver's thread waits for requests before it checks whether to stop
TAKE_WAIT_S = 0.5
#: how long a relayed call may take end to end (the gateway's upstream timeout is 600 s)
CALL_TIMEOUT_S = 900.0
#: driver threads replaying requests on the gateway at once
BRIDGE_THREADS = 16
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}


@dataclass(frozen=True)
class RelayRequest:
    method: str
    path: str
    body: bytes
    node: str | None = None  # the Ray node whose relay read it (set by the relay, never by the sandbox)


@dataclass(frozen=True)
class RelayReply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True)
class RelayTarget:
    """What a worker needs to relay to the driver's gateway (pickled into the task)."""

    mailbox: Any  # the bridge's actor handle
    socket_name: str  # the gateway socket's file name, kept so the sandbox's variable stays valid
    mode: str  # auto | always
    driver_node: str | None  # the driver's Ray node; None: the driver is no node (Ray Client)

    def wanted_on(self, node: str) -> bool:
        return self.mode == "always" or self.driver_node is None or node != self.driver_node


class _Mailbox:
    """Requests from the nodes' relays wait here until the driver takes them and posts the replies."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future] = {}
        self._next = 0

    async def call(self, request: RelayRequest) -> RelayReply:
        rid, self._next = self._next, self._next + 1
        future = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        self._queue.put_nowait((rid, request))
        try:
            return await future
        finally:
            self._waiting.pop(rid, None)

    async def take(self, wait_s: float) -> list[tuple[int, RelayRequest]]:
        try:
            first = await asyncio.wait_for(self._queue.get(), wait_s)
        except asyncio.TimeoutError:
            return []
        batch = [first]
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def answer(self, rid: int, reply: RelayReply) -> None:
        future = self._waiting.get(rid)
        if future is not None and not future.done():
            future.set_result(reply)


def _error_reply(status: int, message: str) -> RelayReply:
    body = {"error": {"message": message, "type": "relay_error", "param": None, "code": "relay_error"}}
    return RelayReply(status, (("Content-Type", "application/json"),), json.dumps(body).encode())


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("gateway", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def replay_on_gateway(socket_path: Path, request: RelayRequest, timeout_s: float = CALL_TIMEOUT_S,
                      route_token: str | None = None) -> RelayReply:
    """One request on the gateway's socket, as a sandbox on this machine would send it; with the
    gateway's ``route_token``, naming the node it came from (so that node's own model may answer)."""
    conn = _UnixHTTPConnection(str(socket_path), timeout_s)
    try:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(request.body))}
        if route_token and request.node:
            headers[ROUTE_HEADER] = f"{route_token} {request.node}"
        conn.request(request.method, request.path, body=request.body or None, headers=headers)
        response = conn.getresponse()
        body = response.read()
        kept = tuple((k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP)
        return RelayReply(response.status, kept, body)
    except (OSError, http.client.HTTPException) as exc:
        return _error_reply(502, f"gateway relay: the driver's gateway did not answer ({type(exc).__name__})")
    finally:
        conn.close()


class GatewayBridge:
    """Driver side: takes the relays' requests from the mailbox and replays them on the gateway."""

    def __init__(self, socket_path: Path, mode: str, route_token: str | None = None) -> None:
        import ray

        self._ray = ray
        self.socket_path = Path(socket_path)
        self._route_token = route_token
        driver_node = driver_node_id(ray)
        options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000}
        if driver_node is not None:  # next to the driver: the mailbox dies only with the driver's node
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(driver_node, soft=True)
        self._mailbox = ray.remote(_Mailbox).options(**options).remote()
        self.target = RelayTarget(self._mailbox, self.socket_path.name, mode, driver_node)
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=BRIDGE_THREADS, thread_name_prefix="gateway-bridge")
        self._thread = threading.Thread(target=self._serve, name="gateway-bridge", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._ray.get(self._mailbox.take.remote(TAKE_WAIT_S))
            except Exception as exc:  # noqa: BLE001 - the mailbox or Ray is gone: the relays see 502s
                if not self._stop.is_set():
                    log.warning("gateway bridge stopped: %s", " ".join(str(exc).split())[:200])
                return
            for rid, request in batch:
                self._pool.submit(self._answer, rid, request)

    def _answer(self, rid: int, request: RelayRequest) -> None:
        reply = replay_on_gateway(self.socket_path, request, route_token=self._route_token)
        try:
            self._mailbox.answer.remote(rid, reply)
        except Exception:  # noqa: BLE001 - shutting down
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TAKE_WAIT_S * 4)
        self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            self._ray.kill(self._mailbox)
        except Exception:  # noqa: BLE001 - Ray already shut down
            pass


def driver_node_id(ray: Any) -> str | None:
    """The Ray node this driver runs on; None when it joined as a Ray Client (it is no node)."""
    return None if _is_client(ray) else ray.get_runtime_context().get_node_id()


def _is_client(ray: Any) -> bool:
    try:
        return bool(ray.util.client.ray.is_connected())
    except Exception:  # noqa: BLE001 - no client support in this Ray
        return False


class _RelayServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("sandbox", 0)  # AF_UNIX peers have no address


class _RelayHandler(BaseHTTPRequestHandler):
    relay: "NodeRelay"
    protocol_version = "HTTP/1.1"
    timeout = CALL_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("relay: " + format, *args)

    def _relay(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if self.headers.get("Transfer-Encoding") or not 0 <= length <= MAX_REQUEST_BYTES:
            self.close_connection = True
            return self._send(_error_reply(400, "gateway relay: send a Content-Length of at most "
                                                f"{MAX_REQUEST_BYTES} bytes"))
        body = self.rfile.read(length) if length else b""
        self._send(self.relay.forward(RelayRequest(self.command, self.path, body)))

    def _send(self, reply: RelayReply) -> None:
        self.send_response_only(reply.status)
        for name, value in reply.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        try:
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay


class NodeRelay:
    """Node side: a Unix socket the sandbox sees as the gateway's, forwarding through the mailbox."""

    def __init__(self, target: RelayTarget) -> None:
        self.target = target
        self.failures = 0
        self.calls = 0
        self.node: str | None = None  # this worker's Ray node, learnt at the first call
        self._lock = threading.Lock()
        # a short private folder: a Unix socket path holds at most 107 bytes, task folders are longer
        self.folder = Path(tempfile.mkdtemp(prefix="memsys-relay-"))
        self.socket_path = self.folder / target.socket_name
        relay = self

        class Handler(_RelayHandler):
            pass

        Handler.relay = relay
        self._server = _RelayServer(str(self.socket_path), Handler)
        os.chmod(self.socket_path, 0o666)  # a sandboxed child may run as another uid
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="gateway-relay", daemon=True)
        self._thread.start()

    def forward(self, request: RelayRequest) -> RelayReply:
        import ray

        with self._lock:
            self.calls += 1
        if self.node is None and ray.is_initialized():
            self.node = ray.get_runtime_context().get_node_id()
        try:
            return ray.get(self.target.mailbox.call.remote(dataclasses.replace(request, node=self.node)),
                           timeout=CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the driver, its mailbox or Ray is gone
            with self._lock:
                self.failures += 1
            return _error_reply(502, f"gateway relay: the driver did not answer ({type(exc).__name__})")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "NodeRelay":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
