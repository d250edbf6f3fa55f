"""Structured (JSON) output: the request side and the strict check of the reply.

Kept apart from the client because the rules are provider facts, not transport:
OpenAI wants ``response_format={"type": "json_schema", ...}``, llama-cpp-python's
server wants ``{"type": "json_object", "schema": ...}``, and whatever the server
promises, the reply is parsed strictly and checked against the schema here, so a
model that ignores the format becomes a typed :class:`LLMResponseFormatError`
instead of a KeyError three modules later.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from harness.errors import LLMResponseFormatError


def excerpt(text: Any, limit: int = 200) -> str:
    """``text`` flattened to one line and cut to ``limit`` characters (for error messages)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def schema_problem(value: Any, schema: Mapping[str, Any], where: str = "$") -> str | None:
    """First way ``value`` violates the common subset of JSON Schema, or None.

    Covers what structured-output schemas use (type, required, properties,
    additionalProperties: false, items, enum); jsonschema is not a dependency.
    """
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        if not any(checks.get(t, lambda v: True)(value) for t in allowed):
            return f"{where} is {type(value).__name__}, expected {'/'.join(allowed)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}={excerpt(value, 40)!s} not in enum"
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            return f"{where} lacks required key(s) {', '.join(missing)}"
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return f"{where} has unexpected key(s) {', '.join(extra)}"
        for key, sub in props.items():
            if key in value and isinstance(sub, Mapping):
                problem = schema_problem(value[key], sub, f"{where}.{key}")
                if problem:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            problem = schema_problem(item, schema["items"], f"{where}[{i}]")
            if problem:
                return problem
    return None


def parse_json_reply(text: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """Strictly parse a reply as a JSON object (and check it against ``schema``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMResponseFormatError(f"reply is not valid JSON ({exc.msg} at char {exc.pos}): {excerpt(text, 80)!r}") from exc
    if not isinstance(value, dict):
        raise LLMResponseFormatError(f"reply is JSON {type(value).__name__}, expected an object: {excerpt(text, 80)!r}")
    if schema is not None:
        problem = schema_problem(value, schema)
        if problem:
            raise LLMResponseFormatError(f"reply does not match the schema ({problem}): {excerpt(text, 80)!r}")
    return value


def response_format_for(json_schema: Mapping[str, Any] | None, json_mode: bool) -> dict[str, Any] | None:
    """The OpenAI ``response_format`` for a schema (strict structured output) or plain JSON mode."""
    if json_schema is not None:
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(json_schema.get("title", "reply")))[:64]
        return {"type": "json_schema", "json_schema": {"name": name or "reply", "schema": dict(json_schema), "strict": True}}
    if json_mode:
        return {"type": "json_object"}
    return None


def to_llama_cpp_format(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The llama-cpp-python server form of a ``response_format``.

    Its server (0.3.36, measured) rejects ``type: json_schema`` with HTTP 500 ("Input
    should be 'text' or 'json_object'") and takes the schema as ``json_object`` +
    ``schema``, which it compiles to a grammar, so the reply is valid by construction.
    """
    if response_format and response_format.get("type") == "json_schema":
        return {"type": "json_object", "schema": response_format["json_schema"]["schema"]}
    return dict(response_format) if response_format else None
