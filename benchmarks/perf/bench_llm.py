"""Speed of the embedded local LLM and of the response cache, on this machine.

Why: every benchmark and research budget (questions per hour, how large a context
the reader can afford, whether compression at write time is affordable) follows
from these numbers, and they differ per machine. Measures:

- prompt (prefill) and generation tokens/s of the local model;
- seconds per LoCoMo-style question with ~1,000- and ~2,000-token contexts built
  from real LoCoMo turns (each question gets its own window, so llama.cpp's
  prefix reuse cannot hide the prefill cost as it would for a shared context);
- how often the reply parses as JSON with a schema, with JSON mode alone, and with
  only an instruction in the prompt;
- cache-hit latency through ``LLMClient.chat`` and of the raw SQLite lookup.

Usage: ``python benchmarks/perf/bench_llm.py [--model-size 1.5b] [--questions 3]``.
Writes ``runs/bench/llm.json`` and prints the same JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

from harness.bench_output import write_json  # noqa: E402
from harness.errors import LLMResponseFormatError  # noqa: E402
from harness.paths import data_dir, runs_dir  # noqa: E402
from harness.reply_cache import request_key  # noqa: E402
from harness.tokens import count_tokens, tokenizer_name  # noqa: E402
from memsys.config import LLMConfig, LocalLLMConfig  # noqa: E402
from memsys.llm import LLMClient, ResponseCache  # noqa: E402
from memsys.llm.local import shared_server  # noqa: E402

SYSTEM = "You answer questions about a conversation. Use only the conversation. Answer in a few words."
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
FILLER = "The quick brown fox jumps over the lazy dog while the band plays on. "


def load_turns(conversation: dict[str, Any]) -> list[dict[str, str]]:
    """Turns of one LoCoMo conversation in order, each with its session date."""
    turns = []
    n = 1
    while f"session_{n}" in conversation:
        date = conversation.get(f"session_{n}_date_time", "")
        for turn in conversation[f"session_{n}"]:
            turns.append({"id": turn["dia_id"], "line": f"[{date}] {turn['speaker']}: {turn['text']}"})
        n += 1
    return turns


def window(turns: list[dict[str, str]], start: int, target_tokens: int) -> str:
    lines: list[str] = []
    total = 0
    for turn in turns[start:] + turns[:start]:
        lines.append(turn["line"])
        total += count_tokens(turn["line"]) + 1
        if total >= target_tokens:
            break
    return "\n".join(lines)


def pick_questions(sample: dict[str, Any], turns: list[dict[str, str]], n: int) -> list[tuple[str, str, int]]:
    """n questions whose first evidence turns are far apart (distinct windows)."""
    index = {t["id"]: i for i, t in enumerate(turns)}
    chosen: list[tuple[str, str, int]] = []
    used: set[int] = set()
    for qa in sample["qa"]:
        if qa.get("category") not in (1, 2, 4) or not qa.get("evidence"):
            continue
        pos = index.get(qa["evidence"][0])
        if pos is None or any(abs(pos - u) < 40 for u in used):
            continue
        used.add(pos)
        chosen.append((qa["question"], str(qa.get("answer")), max(0, pos - 5)))
        if len(chosen) == n:
            break
    return chosen


def ask(client: LLMClient, context: str, question: str, **kw: Any):
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Conversation:\n{context}\n\nQuestion: {question}"},
    ]
    return client.chat(messages, **kw)


def prefill_rate(client: LLMClient, reps: int) -> dict[str, Any]:
    """Prefill tokens/s from max_tokens=1 calls on a ~600-token prompt with a unique prefix."""
    rates, sizes = [], []
    for _ in range(reps):
        nonce = uuid.uuid4().hex  # first tokens differ: no KV prefix reuse from the last call
        text = f"{nonce}\n" + FILLER * 40
        reply = client.chat([{"role": "user", "content": text}], max_tokens=1)
        rates.append(reply.prompt_tokens / reply.latency_s)
        sizes.append(reply.prompt_tokens)
    return {"tokens_per_s": round(statistics.median(rates), 1), "prompt_tokens": sizes[0], "reps": reps}


def generation_rate(base_url: str, model: str, reps: int, max_tokens: int = 128) -> dict[str, Any]:
    """Decode tokens/s from the gaps between streamed chunks (one chunk per token)."""
    from openai import OpenAI

    oa = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=300)
    rates, counts = [], []
    for _ in range(reps):
        stream = oa.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0.0, stream=True,
            messages=[{"role": "user", "content": f"{uuid.uuid4().hex[:8]} Count from 1 to 200, comma separated."}],
        )
        stamps = [time.perf_counter() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
        if len(stamps) > 2:
            rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
            counts.append(len(stamps))
    oa.close()
    return {"tokens_per_s": round(statistics.median(rates), 1), "tokens_per_reply": counts[0], "reps": reps}


def locomo_questions(client: LLMClient, sample: dict[str, Any], turns: list, target: int, n: int) -> dict[str, Any]:
    rows = []
    for question, gold, start in pick_questions(sample, turns, n):
        context = window(turns, start, target)
        reply = ask(client, context, question, max_tokens=48)
        rows.append({
            "question": question, "gold": gold, "answer": reply.text.strip()[:120],
            "seconds": round(reply.latency_s, 2), "prompt_tokens_model": reply.prompt_tokens,
            "context_tokens_cl100k": count_tokens(context), "completion_tokens": reply.completion_tokens,
        })
    secs = [r["seconds"] for r in rows]
    return {"seconds_per_question_median": round(statistics.median(secs), 2), "seconds_max": max(secs),
            "n": len(rows), "questions": rows}


def json_validity(client: LLMClient, sample: dict[str, Any], turns: list, n: int) -> dict[str, Any]:
    """Share of replies that parse as the requested object, per way of asking."""
    asked = pick_questions(sample, turns, n)
    suffix = ' Reply only with JSON like {"answer": "..."}.'
    modes = {
        "json_schema": {"json_schema": ANSWER_SCHEMA},
        "json_object_no_schema": {"json_mode": True},
        "prompt_only": {},
    }
    out: dict[str, Any] = {}
    for name, kw in modes.items():
        ok = 0
        for question, _, start in asked:
            context = window(turns, start, 250)
            try:
                reply = ask(client, context, question + suffix, max_tokens=48, **kw)
                data = reply.parsed if reply.parsed is not None else json.loads(reply.text)
                ok += isinstance(data, dict) and "answer" in data
            except (LLMResponseFormatError, ValueError):
                pass
        out[name] = f"{ok}/{len(asked)}"
    return out


def cache_hits(client_cfg: LLMConfig, base_url: str, cache_tag: str, n: int = 200) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ResponseCache(Path(tmp) / "bench.sqlite") as cache:
        client = LLMClient(replace(client_cfg, cache=True), cache=cache, base_url=base_url, cache_tag=cache_tag)
        messages = [{"role": "user", "content": "Say hi."}]
        miss = client.chat(messages, max_tokens=8)
        for i in range(2000):  # a realistically filled table, not a one-row one
            cache.put(request_key(model="filler", messages=[{"role": "user", "content": str(i)}],
                                  response_format=None, temperature=0.0, max_tokens=8, seed=0), "filler",
                      {"text": "x" * 200, "parsed": None, "prompt_tokens": 1, "completion_tokens": 1, "model": "f"})
        through_client = []
        for _ in range(n):
            started = time.perf_counter()
            hit = client.chat(messages, max_tokens=8)
            through_client.append(time.perf_counter() - started)
            assert hit.cached and hit.text == miss.text
        key = request_key(model="filler", messages=[{"role": "user", "content": "7"}], response_format=None,
                          temperature=0.0, max_tokens=8, seed=0)
        raw = []
        for _ in range(n):
            started = time.perf_counter()
            cache.get(key)
            raw.append(time.perf_counter() - started)
        client.close()
    ms = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
    p95 = lambda xs: round(sorted(xs)[int(0.95 * len(xs))] * 1000, 3)  # noqa: E731
    return {"chat_hit_ms_median": ms(through_client), "chat_hit_ms_p95": p95(through_client),
            "sqlite_get_ms_median": ms(raw), "hits": n, "miss_s": round(miss.latency_s, 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-size", default="1.5b", choices=["1.5b", "0.5b"])
    parser.add_argument("--questions", type=int, default=3, help="questions per context size")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of the throughput probes")
    parser.add_argument("--json-questions", type=int, default=5)
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--out", default=str(runs_dir() / "bench" / "llm.json"))
    args = parser.parse_args(argv)

    local = LocalLLMConfig(model_size=args.model_size, n_threads=args.n_threads)
    model_name = {"1.5b": "qwen2.5-coder-1.5b-instruct", "0.5b": "qwen2.5-coder-0.5b-instruct"}[args.model_size]
    cfg = LLMConfig(backend="local", model=model_name, local=local, cache=False, timeout_s=600, max_retries=0)
    data = json.loads((data_dir() / "locomo" / "locomo10.json").read_text())
    sample = data[0]
    turns = load_turns(sample["conversation"])
    load_before = os.getloadavg()

    started = time.perf_counter()
    with shared_server(local, alias=cfg.model) as endpoint:
        ready_s = time.perf_counter() - started
        client = LLMClient(cfg, base_url=endpoint.base_url, cache_tag=endpoint.cache_tag)
        warm = client.chat([{"role": "user", "content": "Hello"}], max_tokens=4)  # pages the weights in
        result: dict[str, Any] = {
            "benchmark": "llm",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": "python benchmarks/perf/bench_llm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": load_before},
            "model": {"size": args.model_size, "name": cfg.model, "file": endpoint.model.path.name,
                      "sha256": endpoint.model.sha256, "n_ctx": local.n_ctx, "n_threads": local.n_threads},
            "server_ready_s": round(ready_s, 2),
            "first_call_s": round(warm.latency_s, 2),
            "prompt": prefill_rate(client, args.reps),
            "generation": generation_rate(endpoint.base_url, cfg.model, args.reps),
            "locomo_1000": locomo_questions(client, sample, turns, 1000, args.questions),
            "locomo_2000": locomo_questions(client, sample, turns, 2000, args.questions),
            "json_output_valid": json_validity(client, sample, turns, args.json_questions),
            "cache": cache_hits(cfg, endpoint.base_url, endpoint.cache_tag),
            "context_tokenizer": tokenizer_name(),
        }
        client.close()
    result["machine"]["loadavg_after"] = os.getloadavg()
    write_json(Path(args.out), result)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
