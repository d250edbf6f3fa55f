"""The LLM gateway (research/gateway/service.py) between a real LLMClient and a real OpenAI-protocol server.

The upstream is tests/support/openai_server.py on 127.0.0.1; the client is the real
memsys.llm.client.LLMClient routed over the gateway's Unix socket by MEMSYS_LLM_UDS,
in this process, in a subprocess with a minimal environment, and (when bwrap runs
here) inside a BwrapSandbox with no network.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

try:
    import httpx2 as httpx  # the HTTP client openai>=3 is built on (same API as httpx)
except ImportError:  # pragma: no cover - openai 1.x/2.x ship with httpx
    import httpx
import pytest

from memsys.config import LLMConfig
from memsys.errors import ConfigError, LLMAuthError, LLMError, LLMRateLimitError, LLMServerError
from memsys.llm import Budget, LLMClient, ResponseCache
from memsys.llm.client import GATEWAY_SOCKET_ENV
from memsys.tokens import count_message_tokens
from research.gateway.service import CACHE_TAG, GatewayUsage, LLMGateway
from research.gateway.upstream import env_proxy
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

KEY = "sk-gateway-secret-0123456789"
MESSAGES = [{"role": "user", "content": "When did Caroline go to the support group?"}]
REPO = Path(__file__).resolve().parents[3]


def client_cfg(**overrides) -> LLMConfig:
    """What a sandboxed reader would use: no base_url, no key, a model name the gateway overrides."""
    base = dict(backend="openai", model="gpt-pricey", api_key_env="MEMSYS_TEST_KEY_UNSET",
                timeout_s=5.0, max_retries=0, backoff_s=0.01, cache=False)
    base.update(overrides)
    return LLMConfig(**base)


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "gw" / "llm.sock"


@pytest.fixture
def make_gateway(openai_server, sock):
    started: list[LLMGateway] = []

    def make(**kw) -> LLMGateway:
        kw.setdefault("socket_path", sock)
        kw.setdefault("api_key", KEY)
        kw.setdefault("model", "test-model")
        gw = LLMGateway(kw.pop("upstream", openai_server.base_url), **kw).start()
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.close()


@pytest.fixture
def routed(monkeypatch, sock):
    """MEMSYS_LLM_UDS set to the gateway socket (and no key in the environment)."""
    monkeypatch.setenv(GATEWAY_SOCKET_ENV, str(sock))
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    return sock


def raw_client(sock: Path) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://gateway", timeout=5.0)


def test_round_trip_forces_model_and_sets_the_gateway_key(openai_server, make_gateway, routed):
    gw = make_gateway()
    openai_server.enqueue(Reply.ok("Seven May"))
    with LLMClient(client_cfg()) as llm:
        assert llm.endpoint == "gateway"
        reply = llm.chat(MESSAGES, max_tokens=32)
    assert reply.text == "Seven May" and not reply.cached
    body = openai_server.chat_requests[0]
    assert body["model"] == "test-model"  # not the client's gpt-pricey
    assert body["messages"] == MESSAGES and body["max_tokens"] == 32
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    usage = gw.usage()
    assert (usage.requests, usage.forwarded, usage.errors, usage.cache_hits) == (1, 1, 0, 0)
    assert usage.overhead_s > 0 and usage.upstream_s > 0


def test_client_over_the_socket_keeps_the_base_url_path_and_never_sends_a_real_key(
    openai_server, make_gateway, routed, monkeypatch
):
    make_gateway()
    monkeypatch.setenv("MEMSYS_TEST_KEY_SET", "sk-real-key-in-the-child-env")
    remote = client_cfg(base_url="https://api.example.invalid/v1", api_key_env="MEMSYS_TEST_KEY_SET")
    with LLMClient(remote) as llm:
        assert str(llm._client.base_url) == "http://gateway/v1/" and llm._client.api_key == "sk-local"
        assert llm.chat(MESSAGES).text == "ok"  # over the socket, not to example.invalid
    with LLMClient(client_cfg(backend="local")) as llm:  # no embedded server needed in the sandbox
        assert llm.chat(MESSAGES).text == "ok"
    assert [r.headers["authorization"] for r in openai_server.requests] == [f"Bearer {KEY}"] * 2


def test_client_authorization_and_headers_are_dropped(openai_server, make_gateway, sock):
    make_gateway()
    with raw_client(sock) as http:
        r = http.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5},
                      headers={"Authorization": "Bearer sk-sandbox-evil", "OpenAI-Organization": "org-evil"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    headers = openai_server.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert "openai-organization" not in headers
    assert not any("evil" in v for v in headers.values())
    assert openai_server.chat_requests[0]["model"] == "test-model"


def test_missing_max_tokens_is_bounded_and_n_completions_reserved(openai_server, make_gateway, sock):
    make_gateway(default_max_tokens=77, budget=Budget(max_tokens=300))
    with raw_client(sock) as http:
        assert http.post("/v1/chat/completions", json={"messages": MESSAGES}).status_code == 200
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 100, "n": 3})
        assert r.status_code == 402 and "300 max completion" in r.json()["error"]["message"]
    assert openai_server.chat_requests[0]["max_tokens"] == 77 and len(openai_server.chat_requests) == 1


def test_usage_tokens_and_usd_are_booked_on_budget_and_counters(openai_server, make_gateway, routed):
    budget = Budget(max_tokens=100_000, max_usd=1.0)
    gw = make_gateway(budget=budget, price_input_per_1m=2.0, price_output_per_1m=8.0)
    before = gw.usage()
    openai_server.enqueue(Reply.ok("a", prompt_tokens=1000, completion_tokens=500),
                          Reply.ok("b", prompt_tokens=10, completion_tokens=5))
    with LLMClient(client_cfg()) as llm:
        llm.chat(MESSAGES, max_tokens=600)
        middle = gw.usage()
        llm.chat(MESSAGES, max_tokens=600)
    expected = (1000 * 2.0 + 500 * 8.0) / 1e6
    first = middle - before
    assert (first.prompt_tokens, first.completion_tokens) == (1000, 500)
    assert first.cost_usd == pytest.approx(expected)
    second = gw.usage_since(middle)
    assert isinstance(second, GatewayUsage)
    assert (second.requests, second.prompt_tokens, second.completion_tokens) == (1, 10, 5)
    state = budget.state()
    assert state.used_tokens == 1515 and state.calls == 2
    assert state.used_usd == pytest.approx(expected + (10 * 2.0 + 5 * 8.0) / 1e6)
    assert (state.reserved_tokens, state.reserved_usd) == (0, pytest.approx(0.0))
    assert gw.usage().to_dict()["overhead_per_request_s"] > 0


def test_usage_is_estimated_when_the_upstream_sends_none(openai_server, make_gateway, routed):
    gw = make_gateway()
    openai_server.enqueue(Reply.ok("three words here", usage=False))
    with LLMClient(client_cfg()) as llm:
        llm.chat(MESSAGES)
    usage = gw.usage()
    assert usage.prompt_tokens == count_message_tokens(MESSAGES) and usage.completion_tokens == 3


@pytest.mark.parametrize(("cap", "phrase"), [({"max_tokens": 50}, "token budget exceeded"),
                                             ({"max_usd": 1e-6}, "USD budget exceeded")])
def test_budget_refusal_is_a_402_that_never_reaches_upstream(openai_server, make_gateway, routed, cap, phrase):
    budget = Budget(**cap)
    gw = make_gateway(budget=budget, price_input_per_1m=2.0, price_output_per_1m=8.0)
    with LLMClient(client_cfg()) as llm:
        with pytest.raises(LLMError, match=r"HTTP 402") as info:
            llm.chat(MESSAGES, max_tokens=100)
    message = str(info.value)
    assert phrase in message and "\n" not in message and KEY not in message
    assert openai_server.chat_requests == []
    usage = gw.usage()
    assert (usage.rejected_budget, usage.forwarded, usage.errors) == (1, 0, 0)
    assert budget.state().refused == 1 and budget.state().reserved_tokens == 0
    with raw_client(routed) as http:
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 100})
    assert r.status_code == 402
    assert r.json()["error"]["type"] == "budget_exceeded" and phrase in r.json()["error"]["message"]


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}


def test_an_embedded_server_without_logits_never_gets_a_logprobs_request(openai_server, make_gateway, sock, tmp_path):
    """llama-cpp-python started without per-token logits answers ``logprobs`` with HTTP 500 (session 38: a reader
    run's confidence-abstention draws failed at every question). The gateway drops the two fields for such an
    upstream, and the reply, which has none, is cached as the request it was answered as."""
    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        make_gateway(cache=cache, upstream_dialect="llama_cpp", upstream_logprobs=False)
        with raw_client(sock) as http:
            asked = {"messages": MESSAGES, "max_tokens": 5, "logprobs": True, "top_logprobs": 1}
            assert http.post("/v1/chat/completions", json=asked).status_code == 200
            plain = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 5})
            assert plain.status_code == 200  # the same request as answered: from the cache
        wire = openai_server.chat_requests
        assert len(wire) == 1 and "logprobs" not in wire[0] and "top_logprobs" not in wire[0]
    make_gateway(socket_path=sock.parent / "gw2.sock")  # an upstream that has them: passed through
    with raw_client(sock.parent / "gw2.sock") as http:
        http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 5, "logprobs": True,
                                                "top_logprobs": 1})
    assert openai_server.chat_requests[1]["logprobs"] is True and openai_server.chat_requests[1]["top_logprobs"] == 1


def test_a_llama_cpp_upstream_gets_its_own_json_form_and_replies_keep_one_cache_key(
    openai_server, make_gateway, routed, tmp_path, monkeypatch
):
    """The sandboxed reader speaks OpenAI (json_schema); the embedded llama.cpp server takes only
    json_object + schema. The gateway rewrites that field on the wire, and the reply is cached under
    the child's request, so the same request to an OpenAI upstream would find it."""
    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        make_gateway(cache=cache, upstream_dialect="llama_cpp")
        openai_server.enqueue(Reply.ok('{"answer": "7 May 2023"}'))
        with LLMClient(client_cfg()) as llm:
            assert llm.chat_json(MESSAGES, SCHEMA) == {"answer": "7 May 2023"}
            assert llm.chat_json(MESSAGES, SCHEMA) == {"answer": "7 May 2023"}  # from the cache
        wire = openai_server.chat_requests
        assert len(wire) == 1 and wire[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}
    openai_server.enqueue(Reply.ok('{"answer": "x"}'))
    make_gateway(socket_path=routed.parent / "gw2.sock", upstream_dialect="openai")
    monkeypatch.setenv(GATEWAY_SOCKET_ENV, str(routed.parent / "gw2.sock"))
    with LLMClient(client_cfg()) as llm:
        llm.chat_json(MESSAGES, SCHEMA)
    assert openai_server.chat_requests[1]["response_format"]["type"] == "json_schema"  # OpenAI's form, untouched
    with pytest.raises(ConfigError, match="upstream_dialect"):
        LLMGateway(openai_server.base_url, socket_path=routed, model="m", upstream_dialect="vllm")


def test_only_the_route_token_sends_a_call_to_a_nodes_own_server_and_the_cache_stays_here(
    openai_server, make_gateway, sock, tmp_path
):
    """research.execution.node_llm: a relayed call may be answered by the embedded server of the node it came
    from, named by the bridge with the gateway's secret token. A sandbox that names a node itself
    (no token, or a guessed one) gets the gateway's own upstream; the cache and counters are the
    gateway's whichever server answered."""
    from research.gateway.route import ROUTE_HEADER

    served: list[tuple[str, dict]] = []

    def node_server(node: str, payload: bytes, headers: dict[str, str]):
        if node == "driver-node":
            return None  # the driver's node: the gateway's own upstream answers
        served.append((node, json.loads(payload)))
        body = {"choices": [{"message": {"role": "assistant", "content": f"from {node}"}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2}}
        return 200, [("content-type", "application/json")], json.dumps(body).encode()

    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        gw = make_gateway(cache=cache, upstream_dialect="llama_cpp")
        gw.route_to_nodes(node_server)

        def ask(question: str, route: str | None) -> str:
            headers = {ROUTE_HEADER: route} if route else {}
            messages = [{"role": "user", "content": question}]
            with raw_client(sock) as http:
                r = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 5}, headers=headers)
            assert r.status_code == 200
            return r.json()["choices"][0]["message"]["content"]

        assert ask("q1", f"{gw.route_token} node-b") == "from node-b"
        assert ask("q1", f"{gw.route_token} node-c") == "from node-b"  # the cache answers, wherever asked
        assert ask("q2", "not-the-token node-b") == "ok"  # forged: the gateway's own upstream
        assert ask("q3", "node-b") == "ok"
        assert ask("q4", f"{gw.route_token} driver-node") == "ok"
        assert [n for n, _ in served] == ["node-b"] and served[0][1]["model"] == "test-model"
        assert len(openai_server.chat_requests) == 3
        used = gw.usage()
        assert (used.forwarded, used.node_forwarded, used.cache_hits) == (4, 1, 1)
        gw.close()
        assert gw.route_token not in json.dumps(gw.child_env())


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.xdist_group("ray_and_local_model")  # with the other embedded-server tests: one server at a time
def test_the_sandboxed_reader_gets_json_from_the_embedded_server_through_the_gateway(sock, monkeypatch):
    """The real llama.cpp server rejects the OpenAI json_schema form with HTTP 500; through the
    gateway that evaluations open for llm=local, the reader's structured call succeeds."""
    from memsys.llm import open_llm
    from research.evaluation.reader_link import open_gateway

    monkeypatch.setenv("MEMSYS_MODELS_DIR", str(REPO / "runs" / "cache" / "models"))
    cfg = LLMConfig(backend="local", max_tokens=32, timeout_s=120)
    context = "Caroline: I went to the LGBTQ support group yesterday (7 May 2023)."
    messages = [{"role": "user", "content": f"{context}\nWhen did Caroline go to the support group? Reply in JSON."}]
    with open_llm(cfg, cache=None) as local:  # the evaluation's side: the server, then its gateway
        gw = open_gateway(cfg, local, sock.parent).start()
        monkeypatch.setenv(GATEWAY_SOCKET_ENV, str(sock))  # the sandbox's side: only the socket
        try:
            with LLMClient(client_cfg(timeout_s=120)) as reader:
                data = reader.chat_json(messages, SCHEMA, max_tokens=32)
        finally:
            gw.close()
    assert set(data) == {"answer"} and "may" in data["answer"].lower()


def test_cache_hit_skips_upstream_and_is_not_shared_with_other_callers(
    openai_server, make_gateway, routed, tmp_path, monkeypatch
):
    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        budget = Budget()
        gw = make_gateway(cache=cache, budget=budget, price_input_per_1m=1.0)
        openai_server.enqueue(Reply.error(500), Reply.ok("first answer"), Reply.ok("never served"))
        with LLMClient(client_cfg()) as llm:
            with pytest.raises(LLMServerError):
                llm.chat(MESSAGES, max_tokens=16)
            assert len(cache) == 0  # failures are not stored
            a = llm.chat(MESSAGES, max_tokens=16)
            b = llm.chat(MESSAGES, max_tokens=16)
        assert a.text == b.text == "first answer"
        assert len(openai_server.chat_requests) == 2 and len(cache) == 1
        usage = gw.usage()
        assert (usage.cache_hits, usage.forwarded, usage.requests) == (1, 2, 3)
        assert budget.state().calls == 1  # the hit booked nothing
        # the researcher's own client on the same cache file keys without the gateway tag: a miss
        direct = client_cfg(model="test-model", base_url=openai_server.base_url, cache=True)
        monkeypatch.delenv(GATEWAY_SOCKET_ENV)
        with LLMClient(direct, cache=cache) as own:
            assert own.chat(MESSAGES, max_tokens=16).text == "never served"
        assert len(cache) == 2
    assert CACHE_TAG == "gateway-reader"


def test_token_logprobs_pass_the_gateway_and_its_cache_keeps_them_under_their_own_key(
    openai_server, make_gateway, routed, tmp_path
):
    """answer.abstain=confidence inside the sandbox: the reader's logprobs request reaches the upstream,
    a repeat is answered by the cache with the same logprobs, and the plain request is another entry."""
    pairs = [("Seven", -0.2), (" May", -1.4)]
    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        gw = make_gateway(cache=cache)
        openai_server.enqueue(Reply.ok("Seven May", logprobs=pairs), Reply.ok("Seven May"))
        with LLMClient(client_cfg()) as llm:
            first = llm.chat(MESSAGES, max_tokens=16, logprobs=True)
            again = llm.chat(MESSAGES, max_tokens=16, logprobs=True)
            plain = llm.chat(MESSAGES, max_tokens=16)
        assert first.token_logprobs == again.token_logprobs == tuple(pairs) and plain.token_logprobs is None
        assert [r.get("logprobs") for r in openai_server.chat_requests] == [True, None]
        assert gw.usage().cache_hits == 1 and len(cache) == 2


@pytest.mark.parametrize(("status", "error"), [(401, LLMAuthError), (403, LLMAuthError),
                                               (429, LLMRateLimitError), (500, LLMServerError)])
def test_upstream_errors_pass_through_unchanged(openai_server, make_gateway, routed, status, error):
    gw = make_gateway(budget=Budget(max_tokens=10_000))
    openai_server.enqueue(Reply.error(status, f"upstream says {status}"))
    with LLMClient(client_cfg()) as llm:
        with pytest.raises(error, match=rf"HTTP {status}.*upstream says {status}"):
            llm.chat(MESSAGES)
    assert len(openai_server.chat_requests) == 1
    assert gw.usage().errors == 1 and gw.budget.state().reserved_tokens == 0


def test_retry_after_header_reaches_the_client(openai_server, make_gateway, sock):
    make_gateway()
    openai_server.enqueue(Reply.error(429, headers={"Retry-After": "3"}))
    with raw_client(sock) as http:
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


def test_key_echoed_by_the_upstream_is_scrubbed_and_never_logged(openai_server, make_gateway, routed, caplog):
    caplog.set_level(logging.DEBUG)
    gw = make_gateway()
    openai_server.enqueue(Reply.error(401, f"Incorrect API key provided: {KEY}"))
    with LLMClient(client_cfg()) as llm:
        with pytest.raises(LLMAuthError) as info:
            llm.chat(MESSAGES)
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert KEY not in caplog.text and KEY not in repr(gw)


def test_unreachable_upstream_is_a_502(make_gateway, routed):
    with socket.socket() as placeholder:  # bound, never listening: connections are refused
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
        gw = make_gateway(upstream=f"http://127.0.0.1:{port}/v1", budget=Budget(max_tokens=10_000))
        with LLMClient(client_cfg()) as llm:
            with pytest.raises(LLMServerError, match=r"HTTP 502.*unreachable") as info:
                llm.chat(MESSAGES)
    assert "\n" not in str(info.value)
    assert gw.usage().errors == 1 and gw.budget.state().reserved_tokens == 0


def test_request_validation_413_400_and_404(openai_server, make_gateway, sock):
    gw = make_gateway(max_request_bytes=1000)
    with raw_client(sock) as http:
        big = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2000}]})
        assert big.status_code == 413 and "exceeds" in big.json()["error"]["message"]
    with raw_client(sock) as http:
        bad = http.post("/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
        stream = http.post("/v1/chat/completions", json={"messages": MESSAGES, "stream": True})
        assert stream.status_code == 400 and "stream" in stream.json()["error"]["message"]
        missing = http.get("/v1/nope")
        assert missing.status_code == 404
        assert set(missing.json()["error"]) >= {"message", "type", "code"}
        assert http.post("/v1/embeddings", json={"input": "x"}).status_code == 404
        models = http.get("/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["test-model"]
    assert openai_server.requests == []
    usage = gw.usage()
    assert (usage.requests, usage.errors, usage.forwarded) == (6, 5, 0)


def test_stale_socket_file_is_replaced_and_live_or_foreign_files_refused(openai_server, make_gateway, sock, routed):
    sock.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()  # the file stays, nobody listens: what a crashed loop leaves behind
    assert sock.exists()
    gw = make_gateway()
    assert oct(sock.stat().st_mode & 0o777) == oct(0o666)
    with LLMClient(client_cfg()) as llm:
        assert llm.chat(MESSAGES).text == "ok"
    with pytest.raises(ConfigError, match="another server is listening"):
        LLMGateway(openai_server.base_url, socket_path=sock, model="m").start()
    with raw_client(sock) as http:  # a kept-alive connection dies with the gateway
        assert http.get("/v1/models").status_code == 200
        gw.close()
        with pytest.raises(httpx.TransportError):
            http.get("/v1/models")
    assert not sock.exists()
    sock.write_text("not a socket")
    with pytest.raises(ConfigError, match="not a socket"):
        LLMGateway(openai_server.base_url, socket_path=sock, model="m").start()


def test_concurrent_calls_are_counted_exactly(openai_server, make_gateway, routed):
    budget = Budget(max_tokens=1_000_000)
    gw = make_gateway(budget=budget)
    with LLMClient(client_cfg()) as llm:
        threads = [threading.Thread(target=lambda: [llm.chat(MESSAGES, max_tokens=8) for _ in range(5)])
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    usage = gw.usage()
    assert (usage.requests, usage.forwarded, usage.errors) == (30, 30, 0)
    words = len(MESSAGES[0]["content"].split())
    assert usage.prompt_tokens == 30 * words and usage.completion_tokens == 30
    assert budget.state().used_tokens == 30 * (words + 1) and budget.state().reserved_tokens == 0


class RawUpstream:
    """A minimal HTTP/1.1 upstream on 127.0.0.1 whose connection handling is scripted.

    mode: ``keepalive`` (well behaved), ``close_after_reply`` (answers, then closes the
    connection without saying ``Connection: close``), ``drop_second``/``reset_second``
    (answers a connection's first request; closes / resets it on the second, unanswered),
    ``truncate`` (status and headers, then half a body, then close).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self.requests = 0
        self.closed_by_peer = 0  # connections the gateway closed (EOF read here)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _read_request(self, stream) -> bool:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = stream.read(1)
            if not chunk:
                return False
            head += chunk
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        stream.read(length)
        with self._lock:
            self.requests += 1
        return True

    def _serve(self, conn: socket.socket) -> None:
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "test-model",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "raw ok"},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()
        reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        stream = conn.makefile("rb")
        served = 0
        try:
            while self._read_request(stream):
                if served and self.mode in ("drop_second", "reset_second"):
                    if self.mode == "reset_second":  # RST instead of FIN
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if self.mode == "truncate":
                    conn.sendall(reply + body[: len(body) // 2])
                    return
                conn.sendall(reply + body)
                served += 1
                if self.mode == "close_after_reply":
                    return
            with self._lock:
                self.closed_by_peer += 1
        except OSError:
            pass
        finally:
            stream.close()
            conn.close()

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def raw_upstream():
    made: list[RawUpstream] = []

    def make(mode: str) -> RawUpstream:
        made.append(RawUpstream(mode))
        return made[-1]

    yield make
    for upstream in made:
        upstream.close()


def chat(http: httpx.Client) -> httpx.Response:
    return http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 5})


def test_kept_alive_upstream_connection_is_reused_across_calls_and_children(raw_upstream, make_gateway, sock):
    upstream = raw_upstream("keepalive")
    gw = make_gateway(upstream=upstream.base_url)
    for _ in range(2):  # two children, one after the other (a new handler thread each)
        with raw_client(sock) as http:
            assert [chat(http).json()["choices"][0]["message"]["content"] for _ in range(3)] == ["raw ok"] * 3
    assert (upstream.connections, upstream.requests) == (1, 6)
    gw.close()  # cuts the idle upstream connection too
    deadline = time.monotonic() + 5
    while upstream.closed_by_peer < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.closed_by_peer == 1


@pytest.mark.parametrize("mode", ["close_after_reply", "drop_second", "reset_second"])
@pytest.mark.parametrize("idle_check", [True, False], ids=["idle-check", "race"])
def test_stale_kept_alive_connection_is_replaced_and_the_call_succeeds(
    raw_upstream, make_gateway, sock, monkeypatch, mode, idle_check
):
    if not idle_check:  # the upstream closes between the idle check and the send: only the retry saves the call
        monkeypatch.setattr("research.gateway.upstream._readable", lambda _sock: False)
    upstream = raw_upstream(mode)
    budget = Budget(max_tokens=10_000)
    gw = make_gateway(upstream=upstream.base_url, budget=budget)
    with raw_client(sock) as http:
        for _ in range(4):
            r = chat(http)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "raw ok"
    usage = gw.usage()
    assert (usage.requests, usage.forwarded, usage.errors, usage.completion_tokens) == (4, 4, 0, 8)
    assert budget.state().calls == 4 and budget.state().reserved_tokens == 0
    assert upstream.connections == 4  # one fresh connection per call after the first
    if mode != "close_after_reply":
        assert upstream.requests == 4 + 3  # each reused connection got (and dropped) one request


def test_a_dead_fresh_connection_or_a_half_answered_call_is_not_retried(raw_upstream, make_gateway, sock):
    upstream = raw_upstream("truncate")
    gw = make_gateway(upstream=upstream.base_url, budget=Budget(max_tokens=10_000))
    with raw_client(sock) as http:
        r = chat(http)
    assert r.status_code == 502 and "IncompleteRead" in r.json()["error"]["message"]
    assert upstream.requests == 1 and gw.usage().errors == 1 and gw.budget.state().reserved_tokens == 0


def test_upstream_timeout_is_a_504_and_never_retried(openai_server, make_gateway, sock):
    gw = make_gateway(timeout_s=0.3, budget=Budget(max_tokens=10_000))
    openai_server.enqueue(Reply.ok("warm"), Reply.slow(2.0, "late"), Reply.ok("after"))
    with raw_client(sock) as http:
        assert chat(http).status_code == 200  # the next call reuses the kept-alive connection
        late = chat(http)
        assert late.status_code == 504 and "timed out" in late.json()["error"]["message"]
        assert len(openai_server.chat_requests) == 2
        assert chat(http).json()["choices"][0]["message"]["content"] == "after"  # on a fresh connection
    assert gw.usage().errors == 1 and gw.budget.state().reserved_tokens == 0


def test_a_proxy_in_the_environment_routes_a_remote_upstream_through_httpx(make_gateway, monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
                 "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https", "api.example.com") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert env_proxy("https", "api.example.com") == "http://proxy.internal:3128"
    assert env_proxy("http", "api.example.com") is None  # HTTPS_PROXY covers https only
    assert env_proxy("https", "127.0.0.1") is None and env_proxy("https", "localhost") is None
    remote = make_gateway(upstream="https://api.example.com/v1")
    assert remote._http is not None and remote._pool is None
    remote.close()
    monkeypatch.setenv("NO_PROXY", "example.com")
    assert env_proxy("https", "api.example.com") is None


CHILD = textwrap.dedent("""
    import json, os
    from memsys.config import LLMConfig
    from memsys.llm.client import LLMClient
    cfg = LLMConfig(backend="openai", model="gpt-pricey", cache=False, max_retries=0, timeout_s=10.0)
    with LLMClient(cfg) as llm:
        reply = llm.chat([{"role": "user", "content": "hello from the child"}], max_tokens=8)
    print(json.dumps({"text": reply.text, "env": sorted(os.environ)}))
""")


def test_client_in_a_subprocess_with_a_minimal_environment(openai_server, make_gateway, sock, tmp_path):
    gw = make_gateway()
    openai_server.enqueue(Reply.ok("hi child"))
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "MEMSYS_CACHE_DIR": str(tmp_path / "cache"), **gw.child_env()}
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["text"] == "hi child"
    assert "OPENAI_API_KEY" not in out["env"] and GATEWAY_SOCKET_ENV in out["env"]
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert openai_server.chat_requests[0]["model"] == "test-model"


def _bwrap_usable() -> bool:
    if not shutil.which("bwrap"):
        return False
    from sandbox.bwrap import BwrapSandbox

    return BwrapSandbox(use_cgroups=False).available()[0]


@pytest.mark.skipif(not _bwrap_usable(), reason="bwrap not installed or not usable here")
@pytest.mark.parametrize("mount", ["writable", "readonly"])
def test_client_in_bwrap_without_network_reaches_the_gateway(openai_server, make_gateway, sock, tmp_path, mount):
    from sandbox.base import SandboxSpec
    from sandbox.bwrap import BwrapSandbox

    gw = make_gateway()
    openai_server.enqueue(Reply.ok("hi sandbox"))
    probe = CHILD + textwrap.dedent(f"""
        import socket
        try:  # the host's loopback (where the upstream listens) must be out of reach
            socket.create_connection(("127.0.0.1", {openai_server.port}), timeout=2).close()
            print("LOOPBACK_REACHABLE")
        except OSError:
            print("LOOPBACK_BLOCKED")
    """)
    spec = SandboxSpec(
        argv=[sys.executable, "-c", probe], workdir=REPO, network="none", wall_timeout_s=120,
        readonly=[REPO] + ([sock.parent] if mount == "readonly" else []),
        writable=[sock.parent] if mount == "writable" else [],
        env={"MEMSYS_CACHE_DIR": "/tmp/cache", **gw.child_env()},
    )
    result = BwrapSandbox(use_cgroups=False).run(spec)
    assert result.ok, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert json.loads(lines[-2])["text"] == "hi sandbox"
    assert lines[-1] == "LOOPBACK_BLOCKED"
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_prompt_over_the_runs_reader_budget_is_refused_before_the_cache_and_the_upstream(
    openai_server, make_gateway, routed, tmp_path
):
    """reader_at_budget (benchmarks.config.reader_prompt_cap): the cap is counted on the trusted side, so a
    memory that hands its reader more context than the budget gets no answer for that question."""
    short = count_message_tokens(MESSAGES)
    long = [{"role": "user", "content": "Caroline went to the support group. " * 40 + MESSAGES[0]["content"]}]
    with ResponseCache(tmp_path / "llm_cache.sqlite") as cache:
        gw = make_gateway(cache=cache, prompt_cap=short + 5)
        openai_server.enqueue(Reply.ok("Seven May"))
        with LLMClient(client_cfg()) as llm:
            assert llm.chat(MESSAGES, max_tokens=16).text == "Seven May"
            with pytest.raises(LLMError, match="HTTP 413"):
                llm.chat(long, max_tokens=16)
    assert len(openai_server.chat_requests) == 1  # the long prompt never left the gateway
    used = gw.usage()
    assert used.rejected_prompt == 1 and used.errors == 1
    # the evaluated code provoked the refusal: it cannot then pass off a crash as the endpoint's failure
    from research.evaluation.two_half import _check_endpoint_claim
    from research.failures import FailureClass, _failure

    claimed = _failure(FailureClass.API_ERROR, "LLM server error (HTTP 500)", code_changed=True)
    assert _check_endpoint_claim(claimed, gw, GatewayUsage(), True).cls is FailureClass.RUNTIME_ERROR


def test_upstream_traits_follow_the_llm_config():
    """Both gateways (reader and judge) read how to speak to their endpoint from the one llm config."""
    from research.evaluation.reader_link import upstream_traits

    embedded = client_cfg(backend="local")
    assert upstream_traits(embedded) == {"upstream_dialect": "llama_cpp", "upstream_logprobs": False}
    embedded.local.logprobs = True
    assert upstream_traits(embedded)["upstream_logprobs"] is True
    assert upstream_traits(client_cfg(backend="openai")) == {"upstream_dialect": "openai", "upstream_logprobs": True}
