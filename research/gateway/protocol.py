"""The OpenAI protocol as the LLM gateway speaks it: request checks, error bodies, reply parsing.

Why a module of its own: what a sandboxed child may send and what it gets back is the gateway's
contract with the child's SDK. Errors are OpenAI-style bodies whose ``type`` the SDK classifies, only
a few upstream headers reach the child, and the ``usage`` booked on the budget is read from the reply
(or estimated when the upstream sends none); which request fields shape the reply decides its
cache key. The server (research.gateway.server), the upstream leg
(research.gateway.upstream) and the gateway itself (research.gateway) all answer in these terms.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Protocol

from harness.reply_cache import request_key
from harness.tokens import count_message_tokens, count_tokens

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


class GatewayOwner(Protocol):
    """What the socket server (research/gateway/server.py) asks of the gateway that owns it: declared here
    so the server needs no import of the gateway that starts it."""

    max_request_bytes: int
    route_token: str
    counters: Any
    models_body: bytes

    def answer_chat(self, raw: bytes, upstream_timer: list[float], node: str | None = None) -> "Reply": ...


class Reply(Exception):
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


def reject(status: int, message: str, etype: str | None = None) -> Reply:
    return Reply(status, _error_body(status, message, etype))


def validated_chat_request(
    raw: bytes, *, model: str, default_max_tokens: int
) -> tuple[dict[str, Any], list[dict[str, Any]], int, int, float]:
    """A chat request body, checked field by field (a 400 names the first bad one), with ``model``
    forced on it: (body, messages, max_tokens, n, temperature)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise reject(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise reject(400, "request body must be a JSON object")
    if body.get("stream"):
        raise reject(400, "streaming is not supported by the LLM gateway")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise reject(400, "'messages' must be a non-empty list of objects")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = body["max_tokens"] = default_max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise reject(400, f"'max_tokens' must be a non-negative integer, got {max_tokens!r}")
    choices = body.get("n", 1)
    if isinstance(choices, bool) or not isinstance(choices, int) or not 1 <= choices <= 16:
        raise reject(400, f"'n' must be an integer from 1 to 16, got {choices!r}")
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise reject(400, f"'temperature' must be a number, got {temperature!r}")
    body["model"] = model  # the child cannot choose the model
    return body, messages, max_tokens, choices, temperature


def reply_cache_key(cache_model: str, body: dict[str, Any], messages: list[Any], max_tokens: int, temperature: float) -> str:
    """The reply cache's key for a checked request: ``cache_model`` (the gateway's namespace) plus every field
    that shapes the reply."""
    model_key = cache_model
    extras = {k: v for k, v in body.items() if k not in _KEYED_FIELDS and k not in _UNKEYED_FIELDS}
    if extras:  # stop, top_p, tools, ...: they shape the reply, so they join the key
        canonical = json.dumps(extras, sort_keys=True, separators=(",", ":"), default=str)
        model_key += "+" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return request_key(
        model=model_key, messages=messages, response_format=body.get("response_format"),
        temperature=temperature, max_tokens=max_tokens, seed=body.get("seed"),
    )


def completion_or_none(content: bytes) -> dict[str, Any] | None:
    try:
        completion = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(completion, dict) and isinstance(completion.get("choices"), list) and completion["choices"]:
        return completion
    return None


def usage_of(completion: Mapping[str, Any], messages: list[Any]) -> tuple[int, int]:
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


def passed_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The reply headers the child sees, from the upstream's (lower-cased names)."""
    out = {"Content-Type": "application/json"}
    content_type = None
    for name, value in headers:
        if name == "content-type" and content_type is None:
            content_type = out["Content-Type"] = value
        elif name in _PASSED_HEADERS or name.startswith(_PASSED_PREFIXES):
            out[name] = value
    return out
