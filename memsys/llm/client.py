"""One LLM client for every backend: any OpenAI-compatible endpoint, including the
embedded llama.cpp server (see :mod:`memsys.llm.local`).

Why our own wrapper around the ``openai`` SDK: the benchmark runner and the
research loop need (1) a retry policy they control -- backoff on 429/5xx/timeouts,
never on 401/403 -- with failures mapped to the typed errors of
:mod:`memsys.errors` so the healer can classify them; (2) replayable replies
(:class:`~harness.reply_cache.ResponseCache`); (3) a hard cap enforced *before* a call
(:class:`~harness.llm_budget.Budget`); (4) per-call accounting
(:class:`~harness.llm_budget.UsageLog`). The SDK's own retries are switched off so
there is exactly one policy. The client is thread-safe: the SDK client is, and
every piece of shared state here has its own lock.

The API key is read from ``os.environ[cfg.api_key_env]`` at construction and only
handed to the SDK; it is never logged, cached or put in a message. Inside the
research loop's sandbox there is no network and no key: when ``$MEMSYS_LLM_UDS``
names the socket of the loop's LLM gateway (``research/gateway/service.py``), every call
goes over that socket with a placeholder key, and the gateway adds the real one.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from harness.llm_budget import Budget, UsageLog, UsageRecord, cost_usd
from harness.paths import GATEWAY_SOCKET_ENV  # the gateway's socket, when set: every call goes over it
from harness.reply_cache import ResponseCache, request_key
from harness.structured_output import excerpt, parse_json_reply, response_format_for, to_llama_cpp_format
from memsys.config import LLMConfig
from memsys.errors import (
    BudgetExceededError,
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMRateLimitError,
    LLMResponseFormatError,
    LLMServerError,
    LLMTimeoutError,
    MemsysError,
    MissingDependencyError,
)
from memsys.tokens import count_message_tokens, count_tokens

log = logging.getLogger(__name__)

#: key sent to servers that ignore it (embedded llama.cpp, loopback test servers)
PLACEHOLDER_API_KEY = "sk-local"
#: never wait longer than this for one backoff, whatever Retry-After says
MAX_BACKOFF_S = 60.0
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
#: base URL over the gateway socket when the config names none (the host part is not used to connect)
GATEWAY_BASE_URL = "http://gateway/v1"

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LLMReply:
    """One chat completion, from the server or the cache."""

    text: str
    parsed: dict[str, Any] | None  # the JSON object when JSON output was requested, else None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # wall time of chat(), retries and backoff included
    cost_usd: float  # 0.0 for cache hits: nothing was billed
    cached: bool
    model: str
    finish_reason: str | None = None
    attempts: int = 1
    tokens_estimated: bool = False  # the server sent no usage; counts are ours
    # (token, log-probability) of each reply token, when the call asked for them and the server gave them
    token_logprobs: tuple[tuple[str, float], ...] | None = None


def _token_logprobs(completion: Any) -> tuple[tuple[str, float], ...] | None:
    """(token, logprob) pairs of the first choice, from the OpenAI ``logprobs.content`` form; None when
    the server sent none (not every OpenAI-compatible server does) or sent something else."""
    try:
        content = completion.choices[0].logprobs.content
        return tuple((str(t.token), float(t.logprob)) for t in content) if content else None
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _pairs(stored: Any) -> tuple[tuple[str, float], ...] | None:
    try:
        return tuple((str(t), float(lp)) for t, lp in stored) if stored else None
    except (TypeError, ValueError):
        return None


def _reply_from_cache(hit: Mapping[str, Any], latency_s: float) -> LLMReply:
    return LLMReply(
        text=hit["text"], parsed=hit.get("parsed"), prompt_tokens=hit["prompt_tokens"],
        completion_tokens=hit["completion_tokens"], latency_s=latency_s, cost_usd=0.0, cached=True,
        model=hit["model"], finish_reason=hit.get("finish_reason"), attempts=0,
        tokens_estimated=hit.get("tokens_estimated", False), token_logprobs=_pairs(hit.get("token_logprobs")),
    )


def _cache_record(reply: LLMReply) -> dict[str, Any]:
    """What the reply cache keeps of a reply: everything but this call's latency, cost and attempts."""
    stored: dict[str, Any] = {
        "text": reply.text, "parsed": reply.parsed, "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens, "model": reply.model, "finish_reason": reply.finish_reason,
        "tokens_estimated": reply.tokens_estimated,
    }
    if reply.token_logprobs is not None:
        stored["token_logprobs"] = [list(p) for p in reply.token_logprobs]
    return stored


def is_loopback(base_url: str | None) -> bool:
    if not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


def gateway_base_url(base_url: str | None) -> str:
    """``base_url`` routed over the gateway socket: its path kept, plain HTTP to the socket."""
    if not base_url:
        return GATEWAY_BASE_URL
    return "http://gateway" + urlsplit(base_url).path.rstrip("/")


class LLMClient:
    """Chat completions with retries, typed errors, caching, budget and usage accounting."""

    def __init__(
        self,
        cfg: LLMConfig,
        *,
        cache: ResponseCache | None = None,
        budget: Budget | None = None,
        usage: UsageLog | None = None,
        base_url: str | None = None,
        cache_tag: str | None = None,
    ) -> None:
        """``cache_tag`` joins the cache key, e.g. the hash of a local GGUF, so two
        different weight files served under one model name never share replies."""
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError("the openai package is not installed: pip install -e .") from exc
        self.cfg = cfg
        self.cache = cache if cfg.cache else None
        self.budget = budget
        self.usage = usage
        self.cache_tag = cache_tag
        self.base_url = base_url or cfg.base_url
        self.gateway_socket = os.environ.get(GATEWAY_SOCKET_ENV) or None
        http_client = None
        if self.gateway_socket:  # sandboxed: the loop's gateway holds the key and reaches the model
            try:
                import httpx2 as httpx  # the HTTP client openai>=3 is built on
            except ImportError:  # pragma: no cover - openai 1.x/2.x ship with httpx
                import httpx

            self.base_url = gateway_base_url(self.base_url)
            transport = httpx.HTTPTransport(uds=self.gateway_socket)
            http_client = httpx.Client(transport=transport, timeout=cfg.timeout_s)
        if cfg.backend == "local" and not self.base_url:
            raise ConfigError("backend=local needs the embedded server's base_url: use open_llm(cfg)")
        self._openai = openai
        self._client = openai.OpenAI(
            api_key=self._api_key(),
            base_url=self.base_url,
            timeout=cfg.timeout_s,
            max_retries=0,  # our retry policy, not the SDK's
            http_client=http_client,
        )

    def _api_key(self) -> str:
        if self.cfg.backend == "local" or self.gateway_socket:
            return PLACEHOLDER_API_KEY  # never send a real key to the embedded server or the gateway
        key = os.environ.get(self.cfg.api_key_env, "")
        if key:
            return key
        if is_loopback(self.base_url):
            return PLACEHOLDER_API_KEY
        raise LLMAuthError(f"no API key: set ${self.cfg.api_key_env} for backend '{self.cfg.backend}' at {self.base_url or 'api.openai.com'}")

    @property
    def endpoint(self) -> str:
        """host:port of the server, for messages (never the key)."""
        parts = urlsplit(str(self._client.base_url))
        return parts.netloc or str(self._client.base_url)

    # --- public API -----------------------------------------------------------
    def chat(
        self,
        messages: Sequence[Message],
        *,
        json_schema: Mapping[str, Any] | None = None,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> LLMReply:
        """One chat completion. With ``json_schema`` / ``json_mode`` the reply must be a
        JSON object (``reply.parsed``), else :class:`LLMResponseFormatError`. ``seed`` overrides the
        configured one for this call (a sampling researcher varies it per step; it is part of the
        cache key, so a replay of the same step gets the same reply). ``logprobs`` asks the server for
        each reply token's log-probability (``reply.token_logprobs``; None when the server gives none)."""
        started = time.perf_counter()
        messages = [dict(m) for m in messages]
        max_tokens = self.cfg.max_tokens if max_tokens is None else max_tokens
        temperature = self.cfg.temperature if temperature is None else temperature
        seed = self.cfg.seed if seed is None else seed
        response_format = response_format_for(json_schema, json_mode)
        model_key = self.cfg.model if not self.cache_tag else f"{self.cfg.model}@{self.cache_tag}"
        key = request_key(model=model_key, messages=messages, response_format=response_format,
                          temperature=temperature, max_tokens=max_tokens, seed=seed, logprobs=logprobs)
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            reply = _reply_from_cache(hit, time.perf_counter() - started)
        else:
            params = self._wire_params(messages, max_tokens, temperature, seed, logprobs, response_format)
            reply = self._complete(params, started, json_schema=json_schema if response_format else None,
                                   wants_json=response_format is not None, logprobs=logprobs)
            if self.cache is not None:
                self.cache.put(key, model_key, _cache_record(reply))
        self._record(reply)
        return reply

    def _wire_params(self, messages: list[dict[str, Any]], max_tokens: int, temperature: float, seed: int | None,
                     logprobs: bool, response_format: dict[str, Any] | None) -> dict[str, Any]:
        """The request as this server takes it (the cache key keeps the OpenAI form)."""
        params: dict[str, Any] = {
            "model": self.cfg.model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
        }
        if seed is not None:
            params["seed"] = seed
        if logprobs and self.cfg.backend == "local" and not self.cfg.local.logprobs:
            logprobs = False  # the embedded server runs without them (llm.local.logprobs): the reply has none
        if logprobs:
            # top_logprobs too: llama-cpp-python computes none without it, and says nothing (session 19's
            # omni run with record_logprobs came back without them); 1 is the cheapest any server accepts
            params["logprobs"], params["top_logprobs"] = True, 1
        if response_format is not None:
            params["response_format"] = (
                to_llama_cpp_format(response_format) if self.cfg.backend == "local" else response_format
            )
        return params

    def _complete(self, params: dict[str, Any], started: float, *, json_schema: Mapping[str, Any] | None,
                  wants_json: bool, logprobs: bool) -> LLMReply:
        """One call on the wire inside the budget: the worst case is reserved first, a failed call gives
        its reservation back, a finished one is charged what the server says it used."""
        messages, max_tokens = params["messages"], params["max_tokens"]
        reservation = None
        if self.budget is not None:
            prompt_estimate = count_message_tokens(messages)
            worst = cost_usd(prompt_estimate, max_tokens, self.cfg.price_input_per_1m, self.cfg.price_output_per_1m)
            reservation = self.budget.reserve(prompt_estimate, max_tokens, worst)
        try:
            completion, attempts = self._create_with_retries(params)
            text, finish_reason, model, prompt_tokens, completion_tokens, estimated = self._unpack(completion, messages)
        except MemsysError as exc:
            if reservation is not None:
                self.budget.release(reservation)  # type: ignore[union-attr]
            self._record_failure(started, getattr(exc, "attempts", 1), exc)
            raise
        cost = cost_usd(prompt_tokens, completion_tokens, self.cfg.price_input_per_1m, self.cfg.price_output_per_1m)
        if reservation is not None:
            self.budget.commit(reservation, prompt_tokens, completion_tokens, cost)  # type: ignore[union-attr]
        parsed = None
        latency = time.perf_counter() - started
        if wants_json:
            try:
                parsed = parse_json_reply(text, json_schema)
            except LLMResponseFormatError as exc:
                self._record(LLMReply(text, None, prompt_tokens, completion_tokens, latency, cost, False, model,
                                      finish_reason, attempts, estimated), ok=False, error_kind=exc.kind)
                raise
        token_logprobs = _token_logprobs(completion) if logprobs else None
        return LLMReply(text, parsed, prompt_tokens, completion_tokens, latency, cost, False, model,
                        finish_reason, attempts, estimated, token_logprobs)

    def chat_json(self, messages: Sequence[Message], schema: Mapping[str, Any], *, max_tokens: int | None = None) -> dict[str, Any]:
        """The reply as a dict that satisfies ``schema`` (sent as strict structured output)."""
        reply = self.chat(messages, json_schema=schema, max_tokens=max_tokens)
        assert reply.parsed is not None
        return reply.parsed

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ------------------------------------------------------------
    def _create_with_retries(self, params: dict[str, Any]) -> tuple[Any, int]:
        """Call the server up to 1 + max_retries times; map the last failure to a typed error."""
        oa = self._openai
        attempts_allowed = 1 + max(0, self.cfg.max_retries)
        for attempt in range(1, attempts_allowed + 1):
            retry_after: float | None = None
            try:
                return self._client.chat.completions.create(**params), attempt
            except (oa.AuthenticationError, oa.PermissionDeniedError) as exc:
                raise self._typed(LLMAuthError, f"LLM auth failed (HTTP {exc.status_code})", exc, attempt) from exc
            except oa.RateLimitError as exc:
                error: MemsysError = self._typed(LLMRateLimitError, "LLM rate-limited (HTTP 429)", exc, attempt)
                retry_after = _retry_after_s(exc)
            except oa.APITimeoutError as exc:
                error = self._typed(LLMTimeoutError, f"LLM call timed out after {self.cfg.timeout_s:g} s", exc, attempt)
            except oa.APIConnectionError as exc:
                error = self._typed(LLMServerError, "LLM connection failed", exc, attempt)
            except oa.APIResponseValidationError as exc:
                raise self._typed(LLMResponseFormatError, "malformed response body", exc, attempt) from exc
            except oa.APIStatusError as exc:
                if exc.status_code == 402:  # the host-side gateway refused: the run's budget is spent
                    raise self._typed(BudgetExceededError, "LLM budget exceeded at the gateway (HTTP 402)",
                                      exc, attempt) from exc
                if exc.status_code < 500:  # 400/404/422: the request is wrong, retrying cannot help
                    raise self._typed(LLMError, f"LLM request rejected (HTTP {exc.status_code})", exc, attempt) from exc
                error = self._typed(LLMServerError, f"LLM server error (HTTP {exc.status_code})", exc, attempt)
            except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
                raise self._typed(LLMResponseFormatError, "malformed response body", exc, attempt) from exc
            if attempt == attempts_allowed:
                raise error
            delay = min(MAX_BACKOFF_S, self.cfg.backoff_s * 2 ** (attempt - 1) * (1 + 0.25 * random.random()))
            if retry_after is not None:
                delay = min(MAX_BACKOFF_S, max(delay, retry_after))
            log.warning("%s; retry %d/%d in %.2f s", error, attempt, attempts_allowed - 1, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _typed(self, cls: type[MemsysError], what: str, exc: Exception, attempt: int) -> MemsysError:
        detail = getattr(exc, "message", None) or str(exc) or exc.__class__.__name__
        plural = "s" if attempt != 1 else ""
        err = cls(f"{what} after {attempt} attempt{plural} at {self.endpoint} model={self.cfg.model}: {excerpt(detail)}")
        err.attempts = attempt  # type: ignore[attr-defined]
        return err

    def _unpack(self, completion: Any, messages: list[dict[str, Any]]) -> tuple[str, str | None, str, int, int, bool]:
        try:
            choice = completion.choices[0]
            text = choice.message.content or ""
            finish_reason = choice.finish_reason
            model = completion.model or self.cfg.model
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMResponseFormatError(
                f"malformed chat completion from {self.endpoint}: {excerpt(completion, 80)!r}"
            ) from exc
        usage = getattr(completion, "usage", None)
        if usage is not None and usage.prompt_tokens is not None:
            return text, finish_reason, model, int(usage.prompt_tokens), int(usage.completion_tokens or 0), False
        return text, finish_reason, model, count_message_tokens(messages), count_tokens(text), True

    def _record(self, reply: LLMReply, ok: bool = True, error_kind: str | None = None) -> None:
        if self.usage is not None:
            self.usage.add(UsageRecord(
                model=reply.model, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                latency_s=reply.latency_s, cost_usd=reply.cost_usd, cached=reply.cached,
                attempts=reply.attempts, ok=ok, error_kind=error_kind,
            ))

    def _record_failure(self, started: float, attempts: int, exc: MemsysError) -> None:
        if self.usage is not None:
            self.usage.add(UsageRecord(
                model=self.cfg.model, prompt_tokens=0, completion_tokens=0, latency_s=time.perf_counter() - started,
                cost_usd=0.0, cached=False, attempts=attempts, ok=False, error_kind=exc.kind,
            ))


def _retry_after_s(exc: Any) -> float | None:
    """Seconds from a Retry-After header (numeric form only), if the server sent one."""
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


_DEFAULT_CACHE = "default"


@contextmanager
def open_llm(
    cfg: LLMConfig,
    *,
    cache: ResponseCache | str | None = _DEFAULT_CACHE,
    budget: Budget | None = None,
    usage: UsageLog | None = None,
) -> Iterator[LLMClient]:
    """An :class:`LLMClient` for ``cfg``; for ``backend=local`` the embedded server is
    started (or shared with other users in this process) for the duration.

    ``cache="default"`` opens ``cache_dir()/llm_cache.sqlite`` when ``cfg.cache`` is on
    (and closes it at exit); pass a :class:`ResponseCache` to share one, or None.
    """
    owned_cache: ResponseCache | None = None
    if cache == _DEFAULT_CACHE:
        cache = owned_cache = ResponseCache() if cfg.cache else None
    elif isinstance(cache, str):
        raise ConfigError(f"open_llm cache must be a ResponseCache, None or 'default', got {cache!r}")
    try:
        if cfg.backend == "local" and cfg.base_url:
            # attach to an embedded server another process started (the research loop hands
            # its server to each sandboxed evaluation); same request format, same cache keys
            from memsys.llm.local import model_identity
            from memsys.llm.model_files import ensure_model_file

            tag = model_identity(ensure_model_file(cfg.local))
            with LLMClient(cfg, cache=cache, budget=budget, usage=usage, base_url=cfg.base_url,
                           cache_tag=tag) as client:
                yield client
        elif cfg.backend == "local":
            from memsys.llm.local import shared_server

            with shared_server(cfg.local, alias=cfg.model) as endpoint:
                with LLMClient(cfg, cache=cache, budget=budget, usage=usage,
                               base_url=endpoint.base_url, cache_tag=endpoint.cache_tag) as client:
                    yield client
        elif cfg.backend == "openai":
            with LLMClient(cfg, cache=cache, budget=budget, usage=usage) as client:
                yield client
        else:
            raise ConfigError(f"unknown llm.backend '{cfg.backend}' (known: local, openai)")
    finally:
        if owned_cache is not None:
            owned_cache.close()
