"""Answer generation from a retrieved context.

Prompt templates are files under ``prompts/<name>/`` (system.txt, constraints.txt,
user.txt with $placeholders), so the research agent edits prompts as text. The
``response_format`` switch matters: without JSON output small and large models
alike answer in long sentences and token F1 collapses (the paper's biggest single
LoCoMo gain was turning it on), so it stays a config knob the loop can rediscover.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from memsys.answer.attribution import attributed_elsewhere
from memsys.answer.hints import TYPE_HINTS, answer_type, restates_hint, type_hint
from memsys.answer.times import resolutions, resolve_answer_times
from memsys.config import AnswerConfig
from memsys.errors import ConfigError, LLMResponseFormatError
from memsys.retrieve.context import Context

PROMPTS_DIR = Path(__file__).parent / "prompts"

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
#: the reader's own abstention signal (answer.abstain = reader | both): does a memory state the answer?
SUPPORTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "supported": {"type": "boolean"}},
    "required": ["answer", "supported"],
    "additionalProperties": False,
}
#: what an abstention says (LoCoMo's own rule counts it: it contains "not mentioned")
ABSTAIN_TEXT = "Not mentioned in the conversation"


@dataclass
class Answer:
    question: str
    text: str
    evidence_ids: list[str]  # source ids of the MAUs handed to the reader
    context_tokens: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False
    raw_reply: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    answer_logprobs: list[float] | None = None  # log-probability of each token of the answer (when asked for)
    abstain_reason: str | None = None  # why a reply was replaced by the abstention text after it came


@functools.lru_cache(maxsize=32)
def load_prompt(name: str) -> tuple[str, str, Template]:
    folder = PROMPTS_DIR / name
    if not folder.is_dir():
        known = ", ".join(sorted(p.name for p in PROMPTS_DIR.iterdir() if p.is_dir()))
        raise ConfigError(f"unknown answer prompt '{name}' (known: {known})")
    read = lambda f: (folder / f).read_text(encoding="utf-8").strip()  # noqa: E731
    return read("system.txt"), read("constraints.txt"), Template(read("user.txt"))


def build_messages(question: str, context: Context, cfg: AnswerConfig, *, vision: bool = False,
                   question_image: str | None = None) -> list[dict[str, Any]]:
    """Chat messages for the reader. With ``vision`` (a multimodal reader) the memories are
    content parts with the level-3 images inline, and a question image follows the question."""
    messages = _text_messages(question, context, cfg)
    has_media = any(i.media for i in context.items)
    if not vision or not (has_media or question_image):
        return messages
    from memsys.media.image import context_to_content_parts, image_part

    text = messages[1]["content"]
    memories = render_memories(context, cfg)
    head, _, tail = text.partition(memories) if memories and memories in text else (text, "", "")
    parts: list[dict[str, Any]] = [{"type": "text", "text": head}]
    if tail or memories:
        parts += context_to_content_parts(context, vision=True, include_metadata=cfg.include_metadata,
                                          include_graph=cfg.include_graph_facts, facts_style=cfg.graph_facts_style)
        parts.append({"type": "text", "text": tail})
    if question_image:
        parts.append(image_part(question_image))
    messages[1] = {"role": "user", "content": parts}
    return messages


def render_memories(context: Context, cfg: AnswerConfig) -> str:
    """The memories block of the reader prompt, as ``cfg`` asks for it."""
    return context.render(include_metadata=cfg.include_metadata, include_graph=cfg.include_graph_facts,
                          group_by_session=cfg.group_by_session, facts_style=cfg.graph_facts_style)


def form_hint(question: str, cfg: AnswerConfig) -> str | None:
    """The expected-answer-form line the reader is given for ``question``, if any."""
    if cfg.type_hints:
        return type_hint(question)
    if cfg.image_ids and answer_type(question) == "image":
        return TYPE_HINTS["image"]
    return None


def format_hint(question: str, cfg: AnswerConfig) -> str:
    """The lines after the question: the expected answer form (``type_hints``), then the JSON reply
    instruction (``response_format``); the schema itself goes with the request (answer_question)."""
    hint = form_hint(question, cfg)
    lines = [hint] if hint else []
    if cfg.response_format and cfg.abstains_by_reader():
        lines.append('Reply with a JSON object {"answer": "...", "supported": true or false}; "supported" is false '
                     'when no memory states the answer.')
    elif cfg.response_format:
        lines.append('Reply with a JSON object {"answer": "..."}.')
    return "\n".join(lines)


def _text_messages(question: str, context: Context, cfg: AnswerConfig) -> list[dict[str, Any]]:
    system, constraints, user = load_prompt(cfg.prompt)
    position = cfg.constraints_position
    if position not in ("first", "before", "after"):
        raise ConfigError(f"answer.constraints_position must be first|before|after, got {position!r}")
    if position == "first":  # the fixed text ahead of everything that changes from question to question
        system = f"{system}\n\n{constraints}"
    hint = format_hint(question, cfg)
    memories = render_memories(context, cfg)
    text = user.substitute(
        memories=memories or "(no memories)",
        question=question.strip(),
        constraints_before=constraints if position == "before" else "",
        constraints_after=constraints if position == "after" else "",
        format_hint=hint,
    )
    text = "\n".join(line for line in text.splitlines()).strip()
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def wants_logprobs(cfg: AnswerConfig) -> bool:
    return cfg.abstains_by_confidence() or cfg.record_logprobs


def reader_request(question: str, context: Context, cfg: AnswerConfig) -> dict[str, Any]:
    """Everything that decides the reader's answer to ``question``, as data: the text messages, the
    output format, the token cap, and the confidence threshold when the answer is kept or dropped by it.
    Two configs with equal requests on every question give equal answers (the no-op screen hashes it)."""
    request: dict[str, Any] = {"messages": build_messages(question, context, cfg), "json": bool(cfg.response_format),
                               "max_tokens": int(cfg.max_tokens)}
    if _confidence_decides(context, cfg):
        request["abstain_logprob"] = float(cfg.abstain_logprob)
    if cfg.resolve_times:  # the reply's relative times are rewritten from these memories
        request["resolve_times"] = resolutions(context.items)
    if cfg.abstain_attribution:  # the reply may be dropped for whose statement it came from
        request["abstain_attribution"] = sorted(context.speakers)
    return request


_ANSWER_VALUE = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"?')


def answer_span(text: str, json_reply: bool) -> tuple[int, int]:
    """Character span of the answer inside the reply: the "answer" string of a JSON reply (which may
    be cut off at the token cap), else the whole reply."""
    if not json_reply:
        return 0, len(text)
    m = _ANSWER_VALUE.search(text)
    return (m.start(1), m.end(1)) if m else (0, 0)


def answer_logprobs(token_logprobs: Any, text: str, json_reply: bool) -> list[float] | None:
    """Log-probabilities of the reply tokens that overlap the answer's span (JSON framing left out:
    the grammar makes it near certain, so it would only dilute the answer's own confidence)."""
    if not token_logprobs:
        return None
    start, end = answer_span(text, json_reply)
    out, pos = [], 0
    for token, lp in token_logprobs:
        lo, pos = pos, pos + len(token)
        if lo < end and pos > start:
            out.append(float(lp))
    return out


def _confidence_decides(context: Context, cfg: AnswerConfig) -> bool:
    """Whether the reply's token confidence can drop it: always under confidence and or_confidence;
    under and_confidence only where retrieval doubted."""
    if cfg.abstain == "and_confidence":
        return context.doubt is not None
    return cfg.abstains_by_confidence()


def _confidence(logprobs: list[float] | None) -> float | None:
    return sum(logprobs) / len(logprobs) if logprobs else None


def answer_question(llm: Any, question: str, context: Context, cfg: AnswerConfig, *,
                    question_image: str | None = None) -> Answer:
    """Ask the reader. ``llm`` is a memsys.llm.LLMClient (or anything with its ``chat``)."""
    if context.abstain_reason:  # retrieval decided: the reader is not asked
        return Answer(question=question, text=ABSTAIN_TEXT, evidence_ids=[], context_tokens=0,
                      raw_reply=f"abstained: {context.abstain_reason}")
    vision = bool(getattr(getattr(llm, "cfg", None), "supports_vision", False))
    messages = build_messages(question, context, cfg, vision=vision, question_image=question_image)
    t0 = time.perf_counter()
    extra = {"logprobs": True} if wants_logprobs(cfg) else {}  # absent otherwise: cached replies keep their keys
    if cfg.response_format:
        reader_abstains = cfg.abstains_by_reader()
        schema = SUPPORTED_SCHEMA if reader_abstains else ANSWER_SCHEMA
        reply = llm.chat(messages, json_schema=schema, max_tokens=cfg.max_tokens, **extra)
        parsed = reply.parsed or {}
        value = parsed.get("answer")
        if value is None:
            raise LLMResponseFormatError(f"reader reply has no 'answer' key: {reply.text[:80]!r}")
        text = value if isinstance(value, str) else str(value)
        if reader_abstains and parsed.get("supported") is False:
            text = ABSTAIN_TEXT
    else:
        reply = llm.chat(messages, max_tokens=cfg.max_tokens, **extra)
        text = reply.text
    logprobs = answer_logprobs(getattr(reply, "token_logprobs", None), reply.text, bool(cfg.response_format)) \
        if extra else None
    if _confidence_decides(context, cfg):
        if logprobs is None:  # the endpoint gave none: the lever cannot act, and must not look as if it did
            raise ConfigError(f"answer.abstain={cfg.abstain} needs token log-probabilities, and the reader's "
                              "endpoint sends none: use another answer.abstain (embedded model: llm.local.logprobs=true)")
        confidence = _confidence(logprobs)
        if confidence is not None and confidence < cfg.abstain_logprob:
            text = ABSTAIN_TEXT
    reason = None
    if (hint := form_hint(question, cfg)) and restates_hint(text, hint):  # the hint copied, not an answer
        text, reason = ABSTAIN_TEXT, "the reply restates the answer-form hint"
    if cfg.resolve_times and text != ABSTAIN_TEXT:
        text = resolve_answer_times(text, context.items)
    if cfg.abstain_attribution and text != ABSTAIN_TEXT:  # judged on the answer as it will be scored
        if reason := attributed_elsewhere(question, text, context.items, context.speakers):
            text = ABSTAIN_TEXT
    return Answer(
        question=question,
        text=text.strip(),
        evidence_ids=context.source_ids,
        context_tokens=context.total_tokens,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cost_usd=reply.cost_usd,
        latency_s=time.perf_counter() - t0,
        cached=reply.cached,
        raw_reply=reply.text,
        answer_logprobs=logprobs,
        abstain_reason=reason,
    )
