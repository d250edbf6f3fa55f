"""The judge's I/O edge: ask an OpenAI-compatible endpoint about a list of answers, through a resumable cache.

Why a cache of its own, keyed by content: judging a LoCoMo split is hundreds of questions times
``runs`` calls on a CPU model, and a judging step can be killed (a timeout, a stopped session). Every
reply is appended to a JSON-lines file (one line per reply, flushed and fsynced before the next call),
keyed by the sha256 of what was asked, so the same step run again asks only what it does not have.
The key covers the model, the protocol, the messages, the run index, the temperature, and the reply
limit / JSON mode / seed (which also change a reply); the file keeps the raw reply, and verdicts are
read from it again each time, so a fixed parser never needs the judge again.

An unparseable reply is cached like any other (it was paid for, and is the evidence), and after the
whole list is asked a :class:`JudgeReplyError` lists what could not be read: never a silent WRONG.
Transport errors are the SDK's own exceptions, raised as they come; the replies before them are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.protocol import JudgeItem, JudgeReplyError, Protocol, Verdict, get_protocol, item_messages, parse_verdict

__all__ = ["JudgeRequest", "JudgeUsage", "VerdictCache", "ask_judge", "cache_usage", "judge_requests", "request_key",
           "Verdict"]

#: how many unreadable replies a JudgeReplyError message quotes
ERRORS_QUOTED = 3


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call to make: an item, a run index, its messages and its cache key."""

    item_id: str
    run: int
    messages: tuple[dict[str, str], ...]
    key: str


def _run_seed(cfg: JudgeConfig, run: int) -> int | None:
    """Run r gets seed + r, so repeated runs at temperature > 0 are different draws, and reproducible."""
    return None if cfg.seed is None else cfg.seed + run


def request_key(cfg: JudgeConfig, protocol: Protocol, messages: Sequence[dict[str, str]], run: int) -> str:
    """sha256 of everything that decides the reply (never the endpoint's address or key)."""
    payload = {
        "model": cfg.model, "protocol": protocol.name, "messages": list(messages), "run": run,
        "temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "json_mode": cfg.json_mode,
        "seed": _run_seed(cfg, run),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def judge_requests(cfg: JudgeConfig, items: Sequence[JudgeItem]) -> list[JudgeRequest]:
    """Every call for ``items``: each item ``cfg.runs`` times, in item order then run order."""
    protocol = get_protocol(cfg.protocol)
    requests = []
    for item in items:
        messages = item_messages(protocol, item)
        for run in range(cfg.runs):
            requests.append(JudgeRequest(item.id, run, tuple(messages), request_key(cfg, protocol, messages, run)))
    return requests


@dataclass(frozen=True)
class JudgeUsage:
    """What the replies in a verdict cache cost: calls made, and their tokens as the endpoint counted them."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def cache_usage(path: str | Path) -> JudgeUsage:
    """The calls a cache file holds and their tokens (a killed step's calls included: they were paid for)."""
    calls = prompt = completion = 0
    if not Path(path).is_file():
        return JudgeUsage()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                used = json.loads(line).get("usage") or {}
                prompt += int(used.get("prompt_tokens", 0))
                completion += int(used.get("completion_tokens", 0))
            except (ValueError, TypeError, AttributeError):
                continue
            calls += 1
    return JudgeUsage(calls, prompt, completion)


class VerdictCache:
    """The judge's replies by key, in an append-only JSON-lines file (None: in memory only)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.replies: dict[str, str] = self._load() if self.path is not None else {}

    def _load(self) -> dict[str, str]:
        """Every complete line; a line cut by a kill (or otherwise unreadable) is ignored, and asked again."""
        assert self.path is not None
        if not self.path.is_file():
            return {}
        replies = {}
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                    replies[str(record["key"])] = str(record["reply"])
                except (ValueError, KeyError, TypeError):
                    continue
        return replies

    def _needs_newline(self) -> bool:
        """True when the file ends in a cut line: the next record must start on a line of its own."""
        assert self.path is not None
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return False
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"

    def add(self, request: JudgeRequest, cfg: JudgeConfig, reply: str, usage: dict[str, int] | None = None) -> None:
        """Keep one reply: one line appended, flushed and fsynced before the next call is made. ``usage``
        (the reply's prompt / completion tokens) is kept beside it: what judging cost, across resumed steps."""
        self.replies[request.key] = reply
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": request.key, "item_id": request.item_id, "run": request.run, "model": cfg.model,
                  "protocol": cfg.protocol, "reply": reply, **({"usage": usage} if usage else {})}
        prefix = "\n" if self._needs_newline() else ""
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(prefix + json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _usage(completion: Any) -> dict[str, int] | None:
    """The reply's token counts, when the endpoint sent them."""
    used = getattr(completion, "usage", None)
    if used is None:
        return None
    return {"prompt_tokens": int(getattr(used, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(used, "completion_tokens", 0) or 0)}


def _ask_one(client: Any, cfg: JudgeConfig, request: JudgeRequest) -> tuple[str, dict[str, int] | None]:
    """One chat completion through the OpenAI SDK object: the reply's text ("" when it has none) and its usage."""
    params: dict[str, Any] = {
        "model": cfg.model, "messages": list(request.messages), "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
    }
    seed = _run_seed(cfg, request.run)
    if seed is not None:
        params["seed"] = seed
    if cfg.json_mode:
        params["response_format"] = {"type": "json_object"}
    completion = client.chat.completions.create(**params)
    return completion.choices[0].message.content or "", _usage(completion)


def _read(protocol: Protocol, requests: Sequence[JudgeRequest], cache: VerdictCache,
          asked: set[str]) -> list[Verdict]:
    """Verdicts from the cached replies; a JudgeReplyError listing every unreadable one."""
    verdicts, failures = [], []
    for r in requests:
        reply = cache.replies[r.key]
        try:
            verdicts.append(Verdict(r.item_id, r.run, parse_verdict(protocol, reply), reply, r.key not in asked, r.key))
        except JudgeReplyError as exc:
            failures.append(f"{r.item_id} run {r.run}: {exc}")
    if failures:
        quoted = "; ".join(failures[:ERRORS_QUOTED])
        error = JudgeReplyError(f"{len(failures)} of {len(requests)} judge replies have no readable verdict: {quoted}")
        error.failures = failures  # type: ignore[attr-defined]
        raise error
    return verdicts


def ask_judge(client: Any, cfg: JudgeConfig, items: Sequence[JudgeItem], cache_path: str | Path | None = None) -> list[Verdict]:
    """Verdicts on ``items`` (``cfg.runs`` each, in item then run order), asking only what the cache lacks.

    ``client`` is an ``openai.OpenAI``-compatible SDK object (``client.chat.completions.create``)."""
    protocol = get_protocol(cfg.protocol)
    requests = judge_requests(cfg, items)
    cache = VerdictCache(cache_path)
    todo = list({r.key: r for r in requests if r.key not in cache.replies}.values())  # the same call once
    bar = tqdm(todo, desc=f"judge ({protocol.name})", unit="call", disable=len(todo) < cfg.progress_min_items)
    asked: set[str] = set()
    for request in bar:
        cache.add(request, cfg, *_ask_one(client, cfg, request))
        asked.add(request.key)
    return _read(protocol, requests, cache, asked)
