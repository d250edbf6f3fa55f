"""LLMClient against a real HTTP server on 127.0.0.1 (tests/support/openai_server.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.errors import (
    BudgetExceededError,
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMRateLimitError,
    LLMResponseFormatError,
    LLMServerError,
    LLMTimeoutError,
)
from harness.structured_output import to_llama_cpp_format
from memsys.config import LLMConfig
from memsys.llm import Budget, LLMClient, ResponseCache, UsageLog, open_llm
from tests.support.openai_server import OpenAITestServer, Reply, openai_server  # noqa: F401  (fixture)

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "When did Caroline go to the support group?"}]


def make_cfg(server: OpenAITestServer, **overrides) -> LLMConfig:
    base = dict(
        backend="openai", model="test-model", base_url=server.base_url, api_key_env="MEMSYS_TEST_KEY_UNSET",
        timeout_s=2.0, max_retries=2, backoff_s=0.01, cache=True,
    )
    base.update(overrides)
    return LLMConfig(**base)


@pytest.fixture
def cache(tmp_path):
    with ResponseCache(tmp_path / "llm_cache.sqlite") as c:
        yield c


def one_line(exc: BaseException) -> bool:
    return "\n" not in str(exc) and len(str(exc)) < 400


def test_plain_chat_returns_text_tokens_cost_and_sends_config(openai_server, monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    openai_server.enqueue(Reply.ok("Seven May", prompt_tokens=1000, completion_tokens=500))
    cfg = make_cfg(openai_server, price_input_per_1m=2.0, price_output_per_1m=8.0, seed=7)
    with LLMClient(cfg) as llm:
        reply = llm.chat(MESSAGES, max_tokens=32)
    assert reply.text == "Seven May" and reply.parsed is None and not reply.cached
    assert (reply.prompt_tokens, reply.completion_tokens, reply.attempts) == (1000, 500, 1)
    assert reply.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    body = openai_server.chat_requests[0]
    assert body["model"] == "test-model" and body["messages"] == MESSAGES
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (32, 0.0, 7)
    assert "response_format" not in body
    # loopback endpoint without a key in the environment: a placeholder, never a real secret
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-local"


def test_api_key_comes_from_the_configured_variable(openai_server, monkeypatch):
    monkeypatch.setenv("MEMSYS_TEST_KEY_SET", "sk-from-env")
    with LLMClient(make_cfg(openai_server, api_key_env="MEMSYS_TEST_KEY_SET")) as llm:
        llm.chat(MESSAGES)
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_missing_key_for_a_remote_endpoint_is_an_auth_error(monkeypatch):
    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    cfg = LLMConfig(backend="openai", base_url="https://llm.example.invalid/v1", api_key_env="MEMSYS_TEST_KEY_UNSET")
    with pytest.raises(LLMAuthError, match=r"MEMSYS_TEST_KEY_UNSET"):
        LLMClient(cfg)


@pytest.mark.parametrize("first, second", [(429, 500), (503, 429)])
def test_retries_on_rate_limit_and_server_errors_then_succeeds(openai_server, first, second):
    openai_server.enqueue(Reply.error(first), Reply.error(second), Reply.ok("finally"))
    log = UsageLog()
    with LLMClient(make_cfg(openai_server), usage=log) as llm:
        reply = llm.chat(MESSAGES)
    assert reply.text == "finally" and reply.attempts == 3
    assert len(openai_server.chat_requests) == 3
    assert log.totals().retries == 2


@pytest.mark.parametrize("status, error", [(429, LLMRateLimitError), (500, LLMServerError), (502, LLMServerError)])
def test_final_failure_is_typed_after_all_retries(openai_server, status, error):
    openai_server.enqueue(*[Reply.error(status, "overloaded\nplease wait")] * 3)
    with LLMClient(make_cfg(openai_server, max_retries=2)) as llm, pytest.raises(error) as info:
        llm.chat(MESSAGES)
    assert len(openai_server.chat_requests) == 3
    assert "3 attempts" in str(info.value) and one_line(info.value)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_not_retried(openai_server, status):
    openai_server.enqueue(Reply.error(status, "bad key"), Reply.ok("never reached"))
    with LLMClient(make_cfg(openai_server)) as llm, pytest.raises(LLMAuthError, match=f"HTTP {status}"):
        llm.chat(MESSAGES)
    assert len(openai_server.chat_requests) == 1


def test_bad_request_is_not_retried(openai_server):
    openai_server.enqueue(Reply.error(400, "context too long"))
    with LLMClient(make_cfg(openai_server)) as llm, pytest.raises(LLMError, match="HTTP 400") as info:
        llm.chat(MESSAGES)
    assert type(info.value) is LLMError
    assert len(openai_server.chat_requests) == 1


def test_timeout_raises_llm_timeout_error(openai_server):
    openai_server.enqueue(Reply.slow(3.0), Reply.slow(3.0))
    with LLMClient(make_cfg(openai_server, timeout_s=0.3, max_retries=1)) as llm, pytest.raises(LLMTimeoutError) as info:
        llm.chat(MESSAGES)
    assert "timed out after 0.3 s" in str(info.value) and one_line(info.value)


def test_timeout_and_dropped_connection_are_retried(openai_server):
    openai_server.enqueue(Reply.slow(3.0), Reply.drop(), Reply.ok("made it"))
    with LLMClient(make_cfg(openai_server, timeout_s=0.3, max_retries=2)) as llm:
        assert llm.chat(MESSAGES).text == "made it"


def test_json_schema_request_and_strict_parse(openai_server):
    openai_server.enqueue(Reply.of_json({"answer": "7 May 2023", "confidence": 0.9}))
    with LLMClient(make_cfg(openai_server)) as llm:
        data = llm.chat_json(MESSAGES, SCHEMA)
    assert data == {"answer": "7 May 2023", "confidence": 0.9}
    rf = openai_server.chat_requests[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"] == SCHEMA and rf["json_schema"]["name"] == "reply"


def test_json_mode_sends_json_object(openai_server):
    openai_server.enqueue(Reply.of_json({"x": 1}))
    with LLMClient(make_cfg(openai_server)) as llm:
        reply = llm.chat(MESSAGES, json_mode=True)
    assert reply.parsed == {"x": 1}
    assert openai_server.chat_requests[0]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("Sure! The answer is 7 May 2023.", "not valid JSON"),
        ('{"answer": "7 May"', "not valid JSON"),
        ('{"answer": "7 May 2023"}', "lacks required key(s) confidence"),
        ('{"answer": 7, "confidence": 1}', "$.answer is int"),
        ('{"answer": "a", "confidence": 1, "extra": 2}', "unexpected key(s) extra"),
        ("[1, 2]", "expected an object"),
    ],
)
def test_invalid_json_reply_is_a_format_error(openai_server, cache, text, fragment):
    openai_server.enqueue(Reply.ok(text))
    with LLMClient(make_cfg(openai_server), cache=cache) as llm, pytest.raises(LLMResponseFormatError) as info:
        llm.chat_json(MESSAGES, SCHEMA)
    message = str(info.value)
    assert fragment in message and one_line(info.value)
    assert text[:15] in message  # quotes the start of the reply
    assert len(cache) == 0  # failures are never cached


def test_malformed_http_body_is_a_format_error(openai_server):
    openai_server.enqueue(Reply.raw(b'{"choices": ['), Reply.raw(b'{"choices": []}'))
    with LLMClient(make_cfg(openai_server)) as llm:
        for _ in range(2):
            with pytest.raises(LLMResponseFormatError):
                llm.chat(MESSAGES)
    assert len(openai_server.chat_requests) == 2  # not retried


def test_cache_hit_is_identical_and_makes_no_request(openai_server, cache):
    openai_server.enqueue(Reply.of_json({"answer": "a", "confidence": 1}))
    log = UsageLog()
    with LLMClient(make_cfg(openai_server), cache=cache, usage=log) as llm:
        first = llm.chat(MESSAGES, json_schema=SCHEMA)
        second = llm.chat(MESSAGES, json_schema=SCHEMA)
    assert len(openai_server.chat_requests) == 1
    assert second.cached and not first.cached and second.cost_usd == 0.0
    assert (second.text, second.parsed, second.prompt_tokens, second.completion_tokens, second.model) == (
        first.text, first.parsed, first.prompt_tokens, first.completion_tokens, first.model)
    totals = log.totals()
    assert (totals.calls, totals.cached_calls, totals.cached_prompt_tokens) == (2, 1, first.prompt_tokens)


def test_cache_key_ignores_base_url_but_not_request_fields(cache):
    with OpenAITestServer() as a, OpenAITestServer() as b:
        with LLMClient(make_cfg(a), cache=cache) as llm_a, LLMClient(make_cfg(b), cache=cache) as llm_b:
            llm_a.chat(MESSAGES)
            assert llm_b.chat(MESSAGES).cached  # same model, other URL: hit
            llm_b.chat(MESSAGES, temperature=0.5)
            llm_b.chat(MESSAGES, max_tokens=5)
        with LLMClient(make_cfg(b, model="other-model"), cache=cache) as llm_c:
            llm_c.chat(MESSAGES)
        assert (len(a.chat_requests), len(b.chat_requests)) == (1, 3)


def test_logprobs_are_asked_for_returned_and_cached_under_their_own_key(openai_server, cache, monkeypatch):
    from harness.reply_cache import request_key

    monkeypatch.delenv("MEMSYS_TEST_KEY_UNSET", raising=False)
    pairs = [('{"', -1.3), ("answer", 0.0), ('":', 0.0), (' "', 0.0), ("a", -0.7), ('"}', 0.0)]
    openai_server.enqueue(Reply.of_json({"answer": "a"}, logprobs=pairs))
    openai_server.enqueue(Reply.of_json({"answer": "a"}))
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    with LLMClient(make_cfg(openai_server), cache=cache) as llm:
        first = llm.chat(MESSAGES, json_schema=schema, logprobs=True)
        again = llm.chat(MESSAGES, json_schema=schema, logprobs=True)
        plain = llm.chat(MESSAGES, json_schema=schema)  # another request: not the logprobs reply's cache entry
    assert first.token_logprobs == tuple(pairs) and not first.cached
    assert again.cached and again.token_logprobs == first.token_logprobs
    assert not plain.cached and plain.token_logprobs is None and "logprobs" not in openai_server.chat_requests[1]
    assert openai_server.chat_requests[0]["logprobs"] is True
    # a key without logprobs is the key every reply cached before the option existed was stored under
    base = dict(model="m", messages=MESSAGES, response_format=None, temperature=0.0, max_tokens=8, seed=None)
    assert request_key(**base) == request_key(**base, logprobs=False) != request_key(**base, logprobs=True)


def test_the_embedded_backend_asks_for_logprobs_only_when_its_server_computes_them(openai_server):
    """llm.local.logprobs=false starts the server without per-token logits (memsys/llm/local.py logits_args):
    a request for them would fail there, so the client does not send it and the reply has none."""
    from memsys.config import LocalLLMConfig

    pairs = [("Seven", -0.2)]
    openai_server.enqueue(Reply.ok("Seven", logprobs=pairs), Reply.ok("Seven", logprobs=pairs))
    with LLMClient(make_cfg(openai_server, backend="local", cache=False)) as llm:
        off = llm.chat(MESSAGES, logprobs=True)
    with LLMClient(make_cfg(openai_server, backend="local", cache=False, local=LocalLLMConfig(logprobs=True))) as llm:
        on = llm.chat(MESSAGES, logprobs=True)
    assert "logprobs" not in openai_server.chat_requests[0] and off.token_logprobs is None
    assert openai_server.chat_requests[1]["logprobs"] is True and on.token_logprobs == tuple(pairs)


def test_cache_disabled_in_config_always_calls(openai_server, cache):
    with LLMClient(make_cfg(openai_server, cache=False), cache=cache) as llm:
        llm.chat(MESSAGES)
        assert not llm.chat(MESSAGES).cached
    assert len(openai_server.chat_requests) == 2


def test_budget_refuses_before_the_call(openai_server):
    budget = Budget(max_tokens=100)
    with LLMClient(make_cfg(openai_server), budget=budget) as llm:
        with pytest.raises(BudgetExceededError, match="token budget exceeded"):
            llm.chat(MESSAGES, max_tokens=256)
    assert openai_server.requests == []
    assert budget.state().used_tokens == 0 and budget.state().reserved_tokens == 0


def test_budget_books_actual_usage_and_usd_cap(openai_server):
    openai_server.enqueue(Reply.ok("a", prompt_tokens=40, completion_tokens=10))
    budget = Budget(max_usd=0.001)
    cfg = make_cfg(openai_server, price_input_per_1m=10.0, price_output_per_1m=10.0)
    with LLMClient(cfg, budget=budget) as llm:
        llm.chat(MESSAGES, max_tokens=20)
        assert budget.used_tokens == 50 and budget.used_usd == pytest.approx(50 * 10 / 1e6)
        with pytest.raises(BudgetExceededError, match="USD budget"):
            llm.chat(MESSAGES, max_tokens=100_000)
    assert len(openai_server.chat_requests) == 1


def test_failed_call_releases_its_budget_reservation(openai_server):
    openai_server.enqueue(Reply.error(401))
    budget = Budget(max_tokens=10_000)
    with LLMClient(make_cfg(openai_server), budget=budget) as llm, pytest.raises(LLMAuthError):
        llm.chat(MESSAGES)
    state = budget.state()
    assert (state.used_tokens, state.reserved_tokens) == (0, 0)


def test_concurrent_calls_from_a_thread_pool(openai_server, cache):
    openai_server.handler = lambda req: "echo " + req["messages"][-1]["content"]
    log = UsageLog()
    budget = Budget(max_tokens=1_000_000)
    with LLMClient(make_cfg(openai_server), cache=cache, usage=log, budget=budget) as llm:
        prompts = [f"question {i % 12}" for i in range(48)]  # repeats exercise concurrent cache use
        with ThreadPoolExecutor(max_workers=8) as pool:
            replies = list(pool.map(lambda p: llm.chat([{"role": "user", "content": p}]), prompts))
    assert [r.text for r in replies] == ["echo " + p for p in prompts]
    totals = log.totals()
    assert totals.calls == 48 and totals.failed_calls == 0
    assert len(openai_server.chat_requests) + totals.cached_calls == 48
    assert budget.state().reserved_tokens == 0 and budget.state().calls == len(openai_server.chat_requests)


def test_open_llm_for_an_openai_compatible_endpoint(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYS_CACHE_DIR", str(tmp_path))
    with open_llm(make_cfg(openai_server)) as llm:
        assert llm.cache is not None and llm.cache.path == tmp_path / "llm_cache.sqlite"
        llm.chat(MESSAGES)
    with pytest.raises(ConfigError, match="unknown llm.backend"):
        with open_llm(make_cfg(openai_server, backend="carrier-pigeon"), cache=None):
            pass


def test_llama_cpp_wire_format_for_schemas():
    rf = {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}}
    assert to_llama_cpp_format(rf) == {"type": "json_object", "schema": SCHEMA}
    assert to_llama_cpp_format({"type": "json_object"}) == {"type": "json_object"}
    assert to_llama_cpp_format(None) is None


def test_test_server_embeddings_are_deterministic(openai_server):
    """The shared test server's embeddings endpoint, through the real SDK (used by other suites)."""
    from openai import OpenAI

    from tests.support.openai_server import embedding_for

    client = OpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    out = client.embeddings.create(model="e", input=["alpha", "beta"])
    assert [len(d.embedding) for d in out.data] == [8, 8]
    assert out.data[0].embedding == pytest.approx(embedding_for("alpha", 8), abs=1e-6)
    client.close()
    assert threading.active_count() >= 1
