"""A real, scriptable OpenAI-compatible HTTP server for tests.

Why: tests of code that calls an LLM must exercise the real client stack (the
``openai`` SDK, HTTP, timeouts, retries) without a model or a network. This is a
stdlib ``ThreadingHTTPServer`` on ``127.0.0.1`` (random free port) that speaks the
parts of the OpenAI protocol we use and replays a *script* of replies and faults.

Endpoints
    ``POST /v1/chat/completions``  next scripted item, else the default handler
    ``GET  /v1/models``            one model, ``server.model``
    ``POST /v1/embeddings``        deterministic unit vectors (sha256 of the text),
                                   float or base64 encoding, ``dimensions`` honoured
    anything else                  404 with an OpenAI-style error body

Scripting chat replies (consumed first-in first-out, one per chat request)::

    with OpenAITestServer() as srv:          # or the ``openai_server`` pytest fixture
        srv.enqueue(
            Reply.error(429),                # status + OpenAI error body
            Reply.error(500, "boom"),
            Reply.slow(2.0, "late"),         # sleeps before answering (client timeouts)
            Reply.raw(b'{"choices": [', status=200),  # invalid / truncated body
            Reply.drop(),                    # closes the connection without answering
            Reply.of_json({"answer": "x"}),  # content = json.dumps(obj)
            "plain text",                    # a str is Reply.ok(str); a dict is Reply.of_json(dict)
        )
        client = OpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        ...
        assert len(srv.chat_requests) == 7   # request bodies, in arrival order
        srv.requests                          # every request: method, path, headers, body

When the script is empty, ``handler(request_json) -> Reply | str | dict`` answers
(pass it to the constructor or set ``srv.handler``); the default handler replies
``"ok"``, or ``{}`` when the request asked for JSON output. Usage numbers are
word counts (prompt: words of all message contents; completion: words of the
reply) unless a Reply sets them; ``Reply(usage=False)`` omits usage. Streaming is
not supported (400).
"""

from __future__ import annotations

import base64
import hashlib
import json
import queue
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Mapping

__all__ = ["OpenAITestServer", "Reply", "RecordedRequest", "Handler", "openai_server", "embedding_for"]

_ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout", "timeout"),
    409: ("invalid_request_error", "conflict"),
    422: ("invalid_request_error", "unprocessable"),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass
class Reply:
    """One scripted answer to a chat-completions request."""

    text: str | None = "ok"  # assistant content
    status: int = 200
    error: str | None = None  # message in the OpenAI error body when status >= 400
    delay_s: float = 0.0  # wait before answering
    raw_body: bytes | None = None  # sent verbatim (with ``status``) instead of a completion
    disconnect: bool = False  # close the socket without any response
    finish_reason: str = "stop"
    prompt_tokens: int | None = None  # None: word count of the request's messages
    completion_tokens: int | None = None  # None: word count of ``text``
    usage: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    # (token, logprob) pairs sent when the request asks for logprobs; None: ``text`` cut into words and
    # punctuation, each at log-probability -0.1 (the pieces always join back into ``text``)
    logprobs: list[tuple[str, float]] | None = None

    @classmethod
    def ok(cls, text: str, **kw: Any) -> "Reply":
        return cls(text=text, **kw)

    @classmethod
    def of_json(cls, obj: Any, **kw: Any) -> "Reply":
        return cls(text=json.dumps(obj), **kw)

    @classmethod
    def error(cls, status: int, message: str | None = None, **kw: Any) -> "Reply":
        return cls(text=None, status=status, error=message or f"scripted HTTP {status}", **kw)

    @classmethod
    def slow(cls, delay_s: float, text: str = "ok", **kw: Any) -> "Reply":
        return cls(text=text, delay_s=delay_s, **kw)

    @classmethod
    def raw(cls, body: bytes, status: int = 200, **kw: Any) -> "Reply":
        return cls(text=None, status=status, raw_body=body, **kw)

    @classmethod
    def drop(cls) -> "Reply":
        return cls(text=None, disconnect=True)


Handler = Callable[[dict[str, Any]], "Reply | str | dict[str, Any]"]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    raw: bytes
    received_at: float


def _as_reply(item: "Reply | str | Mapping[str, Any]") -> Reply:
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply.ok(item)
    if isinstance(item, Mapping):
        return Reply.of_json(dict(item))
    raise TypeError(f"cannot script a reply from {type(item).__name__}")


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # multimodal content parts
        return sum(_words(p.get("text", "")) for p in value if isinstance(p, dict))
    return 0


def default_handler(request: dict[str, Any]) -> Reply:
    """``"ok"``, or ``{}`` for requests that ask for JSON output."""
    wants_json = (request.get("response_format") or {}).get("type") in ("json_object", "json_schema")
    return Reply.ok("{}" if wants_json else "ok")


def embedding_for(text: str, dim: int) -> list[float]:
    """The deterministic unit vector the server returns for ``text`` (for assertions)."""
    values: list[float] = []
    counter = 0
    while len(values) < dim:
        block = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend(b / 127.5 - 1.0 for b in block)
        counter += 1
    values = values[:dim]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


class OpenAITestServer:
    """Threaded HTTP server on 127.0.0.1 with a FIFO script of chat replies."""

    def __init__(self, handler: Handler | None = None, *, model: str = "test-model", embedding_dim: int = 8) -> None:
        self.handler: Handler = handler or default_handler
        self.model = model
        self.embedding_dim = embedding_dim
        self._script: "queue.Queue[Reply]" = queue.Queue()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------
    def start(self) -> "OpenAITestServer":
        server = self

        class _Handler(_OpenAIRequestHandler):
            owner = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # a handler sleeping in a delay must not block stop()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that are waiting out a delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "OpenAITestServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- addresses --------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as the OpenAI ``base_url``."""
        return f"{self.url}/v1"

    # --- script and records -----------------------------------------------------
    def enqueue(self, *items: "Reply | str | Mapping[str, Any]") -> None:
        for item in items:
            self._script.put(_as_reply(item))

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        return self._script.qsize()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat-completions requests received, in order."""
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    def clear(self) -> None:
        """Forget recorded requests and unconsumed script items."""
        with self._lock:
            self._requests.clear()
        while not self._script.empty():
            self._script.get_nowait()

    # --- used by the request handler -------------------------------------------
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        try:
            return self._script.get_nowait()
        except queue.Empty:
            return _as_reply(self.handler(body))


class _OpenAIRequestHandler(BaseHTTPRequestHandler):
    owner: OpenAITestServer
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    # --- plumbing ---------------------------------------------------------------
    def _read(self) -> RecordedRequest:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        req = RecordedRequest(
            method=self.command, path=self.path.split("?")[0],
            headers={k.lower(): v for k, v in self.headers.items()}, body=body, raw=raw, received_at=time.time(),
        )
        self.owner._record(req)
        return req

    def _send(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True

    def _error(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        etype, code = _ERROR_TYPES.get(status, ("server_error", "server_error"))
        body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
        self._send(status, json.dumps(body).encode(), headers)

    # --- routes -----------------------------------------------------------------
    def do_GET(self) -> None:
        req = self._read()
        if req.path.rstrip("/") == "/v1/models":
            data = [{"id": self.owner.model, "object": "model", "created": 0, "owned_by": "test"}]
            self._send(200, json.dumps({"object": "list", "data": data}).encode())
        else:
            self._error(404, f"no route GET {req.path}")

    def do_POST(self) -> None:
        req = self._read()
        if req.path == "/v1/chat/completions":
            self._chat(req)
        elif req.path == "/v1/embeddings":
            self._embeddings(req)
        else:
            self._error(404, f"no route POST {req.path}")

    def _chat(self, req: RecordedRequest) -> None:
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("stream"):
            self._error(400, "streaming is not supported by the test server")
            return
        reply = self.owner._next_reply(body)
        if reply.delay_s and self.owner._stopping.wait(reply.delay_s):
            self.close_connection = True
            return
        if reply.disconnect:
            self.close_connection = True
            self.connection.close()
            return
        if reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply.headers)
            return
        if reply.status >= 400:
            self._error(reply.status, reply.error or f"HTTP {reply.status}", reply.headers)
            return
        text = reply.text or ""
        completion: dict[str, Any] = {
            "id": f"chatcmpl-test-{len(self.owner.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.owner.model),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reply.finish_reason,
                "logprobs": _logprobs(reply, text) if body.get("logprobs") else None,
            }],
        }
        if reply.usage:
            prompt = reply.prompt_tokens
            if prompt is None:
                prompt = sum(_words(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict))
            completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else _words(text)
            completion["usage"] = {
                "prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            }
        self._send(reply.status, json.dumps(completion).encode(), reply.headers)

    def _embeddings(self, req: RecordedRequest) -> None:
        body = req.body if isinstance(req.body, dict) else {}
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs]
        dim = int(body.get("dimensions") or self.owner.embedding_dim)
        as_base64 = body.get("encoding_format") == "base64"  # the openai SDK asks for base64 by default
        data = []
        for i, text in enumerate(texts):
            vec = embedding_for(text, dim)
            emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode() if as_base64 else vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        n = sum(len(t.split()) for t in texts)
        payload = {"object": "list", "data": data, "model": body.get("model", self.owner.model),
                   "usage": {"prompt_tokens": n, "total_tokens": n}}
        self._send(200, json.dumps(payload).encode())


def _logprobs(reply: Reply, text: str) -> dict[str, Any]:
    pairs = reply.logprobs if reply.logprobs is not None else [(t, -0.1) for t in re.findall(r"\s*\w+|\s*[^\w\s]+|\s+", text)]
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []} for t, lp in pairs]}


try:  # a ready-made fixture: ``from tests.support.openai_server import openai_server``
    import pytest

    @pytest.fixture
    def openai_server() -> Iterator[OpenAITestServer]:
        """A started :class:`OpenAITestServer`, stopped after the test."""
        with OpenAITestServer() as server:
            yield server

except ImportError:  # pragma: no cover - the module also works outside pytest
    pass
