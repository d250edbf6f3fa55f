"""The reader's speed against the bound this CPU allows (issue #50): seconds a question, measured and bounded.

Why: a question costs the embedded reader its prompt tokens at the server's prompt rate plus its reply
tokens at its generation rate. Time above that bound is time the cores did not spend on the model:
requests queueing behind each other, threads fighting over the cores, work nobody reads. This bench
puts the two side by side, per variant and on the same questions, with F1 beside them, so a change that
buys speed shows what it cost in answers.

Per variant:

- **measured**: seconds a question of the answering phase (wall time from the first question asked to
  the last answer, over the questions), and the mean latency the questions report (what ``memsys eval``
  calls ``seconds_per_question``; with W workers at one server it counts each question's wait behind the
  other workers' calls);
- **bound**: the mean over the questions of prompt tokens / prompt rate + completion tokens / generation
  rate, both rates measured on the same server in the same run (llama-cpp-python's server returns usage
  but no timings, so calibration calls measure them before and after each variant: a ``max_tokens=1``
  call on a fresh ~1,500-token prompt of LoCoMo turns, and the gaps between the streamed tokens of a
  64-token reply);
- **ratio** measured / bound;
- **shared prefix**: the tokens at the start of each request that equal the previous request's (the
  server keeps their KV cache and evaluates only the rest: llama-cpp-python's prefix match), and the bound
  without them. A layout that puts the fixed instructions first (``answer.constraints_position=first``)
  makes them a shared prefix, so its measured time can fall below the bound that counts every token;
- F1 (and LoCoMo's all_honest), each variant paired against the reference with the loop's test
  (``research.evaluation.stats.paired_test``), and how many answers are identical to the reference's.

The questions are answered in this process by the code ``memsys eval`` runs in its sandbox
(``memsys.predict.answer_one``: retrieval, then the reader) against an embedded server this bench starts,
with the reply cache off. Stores come from the store cache (built once if missing, never timed); each
store answers one untimed retrieval first, so the query embedder is loaded before the clock starts.

Usage::

    python -m research.perf.bench_reader_speed [--benchmark locomo] [--split dev] [--sample tiny]
        [--variants "omni,naive_rag"] [--reference omni] [--workers 1] [--out runs/bench/reader_speed.json]

A variant is ``name=preset:override;override`` or a preset name. An override ``workers=N`` sets its worker
threads; ``llm.<key>=v`` its reader config (``llm.local.n_threads=1``); ``server.<flag>=v`` a flag of
``llama_cpp.server`` (``server.logits_all=false``, ``server.flash_attn=true``); anything else is a memory
override (``memory.answer.response_format=false``). Consecutive variants with the same server share it
(and its calibration calls); a variant with other server settings gets a server of its own.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from harness.bench_output import command, load_average, utc_now, write_json
from harness.paths import runs_dir

DEFAULT_VARIANTS = "omni"
#: the calibration prompt's size in the reader's own tokens (about an ``omni`` prompt's at B = 1,500)
CALIBRATION_PROMPT_TOKENS = 1500
GENERATION_TOKENS = 64


@dataclass(frozen=True)
class Variant:
    name: str
    preset: str
    memory: tuple[str, ...] = ()  # memory.* overrides
    llm: tuple[str, ...] = ()  # llm.* overrides
    server: tuple[str, ...] = ()  # extra llama_cpp.server flags: ("--flag", "value", ...)
    workers: int | None = None

    @property
    def server_key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.llm, self.server


def parse_variants(text: str) -> list[Variant]:
    """``a,b=omni:workers=2;server.logits_all=false`` -> variants (commas split variants, ';' overrides)."""
    out: list[Variant] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, rest = item.partition("=")
        if not eq:
            out.append(Variant(item, item))
            continue
        preset, _, ovs = rest.partition(":")
        memory: list[str] = []
        llm: list[str] = []
        server: list[str] = []
        workers = None
        for ov in filter(None, (o.strip() for o in ovs.split(";"))):
            key, eq2, value = ov.partition("=")
            if not eq2:
                raise SystemExit(f"variant {name!r}: override {ov!r} is not key=value")
            if key == "workers":
                workers = int(value)
            elif key.startswith("llm."):
                llm.append(ov)
            elif key.startswith("server."):
                server += [f"--{key[len('server.'):]}", value]
            elif key.startswith("memory."):
                memory.append(ov)
            else:
                raise SystemExit(f"variant {name!r}: override {ov!r} is none of workers=, llm.*, server.*, memory.*")
        out.append(Variant(name, preset, tuple(memory), tuple(llm), tuple(server), workers))
    if not out:
        raise SystemExit("no variants")
    if len({v.name for v in out}) != len(out):
        raise SystemExit(f"variant names repeat in {text!r}")
    return out


# --------------------------------------------------------------------------- the server and its rates
def llm_config(overrides: Sequence[str]) -> Any:
    """The reader's LLMConfig as ``llm=local`` composes it, with ``overrides``; the reply cache off."""
    from memsys.config import LLMConfig, compose, validate

    cfg = compose("memsys", ["llm=local", *overrides])
    llm = validate(LLMConfig, cfg.llm, where="llm config")
    return replace(llm, cache=False, max_retries=0)


@dataclass
class Calibration:
    """Rates measured on one server: prompt tokens/s and generation tokens/s, each call recorded."""

    prompt: list[dict[str, Any]] = field(default_factory=list)
    generation: list[dict[str, Any]] = field(default_factory=list)
    grammar: list[dict[str, Any]] = field(default_factory=list)  # generation under the reader's JSON grammar

    def merged(self, other: "Calibration") -> "Calibration":
        """Both calibrations' calls: the rates of the span between them (their medians)."""
        return Calibration(self.prompt + other.prompt, self.generation + other.generation, self.grammar + other.grammar)

    @property
    def prompt_rate(self) -> float:
        return statistics.median(c["tokens_per_s"] for c in self.prompt)

    @property
    def generation_rate(self) -> float:
        return statistics.median(c["tokens_per_s"] for c in self.generation)

    def to_json(self) -> dict[str, Any]:
        return {"prompt_tokens_per_s": round(self.prompt_rate, 2),
                "generation_tokens_per_s": round(self.generation_rate, 2),
                "grammar_generation_tokens_per_s": (round(statistics.median(c["tokens_per_s"] for c in self.grammar), 2)
                                                    if self.grammar else None),
                "prompt_calls": self.prompt, "generation_calls": self.generation, "grammar_calls": self.grammar}


def calibration_text(view: Any, tokens: int) -> str:
    """About ``tokens`` tokens of the view's own turns (real dialogue, as the reader reads it)."""
    from memsys.tokens import count_tokens

    lines, total = [], 0
    for conv in view.conversations:
        for t in conv.turns():
            line = f"{t.speaker}: {t.text}"
            lines.append(line)
            total += count_tokens(line) + 1
            if total >= tokens:
                return "\n".join(lines)
    return "\n".join(lines)


def measure_prompt_rate(client: Any, text: str, when: str) -> dict[str, Any]:
    """One ``max_tokens=1`` call on ``text`` behind a fresh nonce (no prefix of it is in the KV cache)."""
    nonce = uuid.uuid4().hex
    reply = client.chat([{"role": "user", "content": f"{nonce}\n{text}\n\nSay OK."}], max_tokens=1)
    return {"when": when, "prompt_tokens": reply.prompt_tokens, "seconds": round(reply.latency_s, 3),
            "tokens_per_s": round(reply.prompt_tokens / reply.latency_s, 2)}


#: the reader's JSON output as the embedded server takes it (memsys.answer.generate.ANSWER_SCHEMA, compiled to a grammar)
GRAMMAR_FORMAT = {"type": "json_object", "schema": {"type": "object", "properties": {"answer": {"type": "string"}},
                                                    "required": ["answer"], "additionalProperties": False}}


def measure_generation_rate(base_url: str, model: str, when: str, max_tokens: int = GENERATION_TOKENS,
                            grammar: bool = False) -> dict[str, Any]:
    """Decode tokens/s from the gaps between streamed chunks (one chunk a token), the first one (prefill) left
    out; with ``grammar`` the reply is held to the reader's JSON schema, as the reader's is."""
    from openai import OpenAI

    oa = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=600)
    ask = f"{uuid.uuid4().hex[:8]} Count from 1 to 200, comma separated."
    extra: dict[str, Any] = {}
    if grammar:
        ask += ' Reply with a JSON object {"answer": "..."} whose answer is that list.'
        extra["response_format"] = GRAMMAR_FORMAT
    try:
        stream = oa.chat.completions.create(model=model, max_tokens=max_tokens, temperature=0.0, stream=True,
                                            messages=[{"role": "user", "content": ask}], **extra)
        stamps = [time.perf_counter() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    finally:
        oa.close()
    if len(stamps) < 3:
        raise SystemExit(f"generation calibration streamed {len(stamps)} tokens; cannot measure a rate")
    return {"when": when, "tokens": len(stamps), "seconds": round(stamps[-1] - stamps[0], 3), "grammar": grammar,
            "tokens_per_s": round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 2)}


def calibrate(cal: Calibration, client: Any, base_url: str, text: str, when: str, reps: int) -> None:
    for _ in range(reps):
        cal.prompt.append(measure_prompt_rate(client, text, when))
        cal.generation.append(measure_generation_rate(base_url, client.cfg.model, when))
        cal.grammar.append(measure_generation_rate(base_url, client.cfg.model, when, grammar=True))
    print(f"[bench_reader_speed] calibration ({when}): prompt {cal.prompt[-1]['tokens_per_s']:.1f} tokens/s "
          f"({cal.prompt[-1]['prompt_tokens']} tokens), generation {cal.generation[-1]['tokens_per_s']:.1f} tokens/s "
          f"({cal.grammar[-1]['tokens_per_s']:.1f} under the JSON grammar)", flush=True)


# --------------------------------------------------------------------------- answering
def message_text(messages: Any) -> str:
    """A request's messages as one string in the order the chat template lays them out (roles included)."""
    parts = []
    for m in messages:
        content = m.get("content", "") if isinstance(m, dict) else str(m)
        if not isinstance(content, str):  # content parts: their text, in order
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{m.get('role', '') if isinstance(m, dict) else ''}>{content}")
    return "\n".join(parts)


def shared_prefix(previous: str, text: str) -> str:
    """The start ``text`` has in common with ``previous``: what the server need not evaluate again."""
    return os.path.commonprefix([previous, text])


class TimedReader:
    """The reader's client, with the wall time of each call kept per question (the calling thread's), and
    the tokens each call shares at its start with the call before it (the server's reusable prefix)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cfg = client.cfg
        self._local = threading.local()
        self.calls: dict[str, list[float]] = {}
        self.shared_tokens: dict[str, int] = {}
        self._last_text = ""
        self._lock = threading.Lock()

    def ask_for(self, question_id: str) -> None:
        self._local.qid = question_id

    def chat(self, messages: Any, **kw: Any) -> Any:
        from memsys.tokens import count_tokens

        qid = getattr(self._local, "qid", "?")
        text = message_text(messages)
        with self._lock:  # with W workers the previous request is whichever reached the server last
            prefix, self._last_text = shared_prefix(self._last_text, text), text
            self.shared_tokens[qid] = self.shared_tokens.get(qid, 0) + (count_tokens(prefix) if prefix else 0)
        t0 = time.perf_counter()
        reply = self.client.chat(messages, **kw)
        with self._lock:
            self.calls.setdefault(qid, []).append(time.perf_counter() - t0)
        return reply


def answer_variant(v: Variant, view: Any, reader: TimedReader, workers: int, bound_of: Any) -> tuple[list[dict[str, Any]], float]:
    """Every question of the view answered by variant ``v``; returns (records, answering wall seconds)."""
    from harness.views import PredictRequest
    from memsys.predict import answer_one, build_or_open_store, load_memory_config

    req = PredictRequest(view_path="", out_dir="", memory_preset=v.preset, memory_overrides=v.memory,
                         reader="llm", workers=workers)
    memory_cfg = load_memory_config(req)
    n_total = len(view.question_ids)
    records: list[dict[str, Any]] = []
    wall = 0.0
    for conv in view.conversations:
        mem, _ = build_or_open_store(view, conv, memory_cfg)
        try:
            mem.retrieve("warm up")  # the query embedder loads here, not inside the first timed question
            started = time.perf_counter()

            def one(q: Any) -> dict[str, Any]:
                reader.ask_for(q.id)
                t0 = time.perf_counter()
                rec = answer_one(req, memory_cfg, q, mem, None, reader, None)
                rec.update(started_s=round(t0 - started, 3), finished_s=round(time.perf_counter() - started, 3),
                           conversation=conv.id)
                return rec

            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                futures = [pool.submit(one, q) for q in conv.questions]
                for fut in as_completed(futures):
                    rec = fut.result()
                    rec["reader_s"] = round(sum(reader.calls.get(rec["question_id"], [])), 3)
                    rec["reader_calls"] = len(reader.calls.get(rec["question_id"], []))
                    rec["shared_prefix_tokens"] = reader.shared_tokens.get(rec["question_id"], 0)
                    rec["bound_s"] = round(bound_of(rec), 3)
                    records.append(rec)
                    print(f"[bench_reader_speed] {v.name} {len(records)}/{n_total} {rec['question_id']}: "
                          f"{rec['latency_s']:.1f} s (reader {rec['reader_s']:.1f} s, bound {rec['bound_s']:.1f} s) "
                          f"prompt {rec.get('prompt_tokens', 0)} reply {rec.get('completion_tokens', 0)} tokens"
                          f"{' ERROR ' + str(rec['error'])[:80] if rec.get('error') else ''}", flush=True)
            wall += time.perf_counter() - started
        finally:
            mem.close()
    return records, wall


# --------------------------------------------------------------------------- scoring and the table
def scored_rows(bench: Any, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trusted scorer's rows for these answers (as ``memsys eval`` scores them)."""
    from benchmarks.scoring import score_answers
    from harness.views import Answer

    answers = {}
    for r in records:
        answers[r["question_id"]] = Answer(
            question_id=r["question_id"], answer=r.get("answer", ""), retrieved_ids=tuple(r.get("retrieved_ids", ())),
            context_ids=tuple(r.get("context_ids", ())), context_tokens=int(r.get("context_tokens", 0)),
            levels=tuple(r.get("levels", ())), latency_s=float(r.get("latency_s", 0.0)),
            retrieval_ms=float(r.get("retrieval_ms", 0.0)), prompt_tokens=int(r.get("prompt_tokens", 0)),
            completion_tokens=int(r.get("completion_tokens", 0)), error=r.get("error"),
            input_sha256=r.get("input_sha256", ""))
    return score_answers(bench, answers, with_reader=True, context_budget_tokens=6000)


def objectives(benchmark: str) -> tuple[str, ...]:
    return ("f1_cat1_4", "all_honest") if benchmark == "locomo" else ("f1",)


def summarize(records: list[dict[str, Any]], wall_s: float, cal: Calibration, metrics: dict[str, Any],
              benchmark: str) -> dict[str, Any]:
    n = len(records)
    ok = [r for r in records if not r.get("error")]
    bound = statistics.mean(r["bound_s"] for r in records) if records else None
    # the bound when the server evaluates only what a request does not share with the one before it
    unshared = (statistics.mean(r["bound_s"] - r.get("shared_prefix_tokens", 0) / cal.prompt_rate for r in records)
                if records else None)
    measured = wall_s / n if n else None
    mean = lambda key: statistics.mean(r.get(key, 0) for r in ok) if ok else None  # noqa: E731
    return {
        "n": n, "n_errors": n - len(ok),
        "measured_s_per_q": measured, "latency_s_per_q": mean("latency_s"), "reader_call_s_per_q": mean("reader_s"),
        "retrieval_ms_per_q": mean("retrieval_ms"), "bound_s_per_q": bound,
        "ratio": measured / bound if measured and bound else None,
        "shared_prefix_tokens_per_q": mean("shared_prefix_tokens"), "bound_unshared_s_per_q": unshared,
        "ratio_unshared": measured / unshared if measured and unshared else None,
        "latency_ratio": (mean("latency_s") or 0) / bound if bound else None,
        "prompt_tokens_per_q": mean("prompt_tokens"), "completion_tokens_per_q": mean("completion_tokens"),
        "reader_calls_per_q": mean("reader_calls"),
        "prompt_tokens_per_s": cal.prompt_rate, "generation_tokens_per_s": cal.generation_rate,
        "answering_wall_s": wall_s,
        **{k: metrics.get(k) for k in (*objectives(benchmark), "f1_cat5")},
    }


def compare(rows: dict[str, list[dict[str, Any]]], answers: dict[str, dict[str, str]], reference: str,
            benchmark: str) -> dict[str, dict[str, Any]]:
    from research.evaluation.stats import paired_test, per_question

    out: dict[str, dict[str, Any]] = {}
    for name, vrows in rows.items():
        if name == reference or reference not in rows:
            continue
        ref_answers = answers[reference]
        same = sum(1 for q, a in answers[name].items() if ref_answers.get(q) == a)
        out[name] = {"identical_answers": same, "n": len(answers[name])}
        for obj in objectives(benchmark):
            cand, ref = per_question(obj, vrows), per_question(obj, rows[reference])
            if set(cand) & set(ref):
                out[name][obj] = paired_test(cand, ref).to_dict()
    return out


def _fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return f"{x:,.{digits}f}" if abs(x) < 10_000 else f"{x:,.0f}"
    return str(x)


def render(result: dict[str, Any]) -> str:
    ref = result["reference"]
    obj = objectives(result["benchmark"])
    head = ["variant", "workers", "n", "measured s/q", "latency s/q", "bound s/q", "ratio", "shared prefix tok/q",
            "bound w/o prefix s/q", "prompt tok/q", "reply tok/q", "prompt tok/s", "gen tok/s", *obj, f"{obj[0]} vs {ref}", "same answers"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for name, v in result["variants"].items():
        s = v["summary"]
        p = result["paired"].get(name, {})
        t = p.get(obj[0])
        vs = "reference" if name == ref else (
            f"{t['mean_delta']:+.3f} [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}]" if t else "-")
        same = "-" if name == ref else f"{p.get('identical_answers', '-')}/{p.get('n', '-')}"
        lines.append("| " + " | ".join([
            name, str(v["workers"]), str(s["n"]), _fmt(s["measured_s_per_q"]), _fmt(s["latency_s_per_q"]),
            _fmt(s["bound_s_per_q"]), _fmt(s["ratio"], 2), _fmt(s.get("shared_prefix_tokens_per_q"), 0),
            _fmt(s.get("bound_unshared_s_per_q")), _fmt(s["prompt_tokens_per_q"], 0),
            _fmt(s["completion_tokens_per_q"]), _fmt(s["prompt_tokens_per_s"]), _fmt(s["generation_tokens_per_s"]),
            *(_fmt(s.get(o), 3) for o in obj), vs, same]) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="locomo")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sample", default="tiny")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--reference", default=None, help="default: the first variant")
    ap.add_argument("--workers", type=int, default=1, help="worker threads of a variant that sets none")
    ap.add_argument("--calibration-reps", type=int, default=1, help="calibration calls of each kind, before and after")
    ap.add_argument("--calibration-tokens", type=int, default=CALIBRATION_PROMPT_TOKENS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    variants = parse_variants(args.variants)
    reference = args.reference or variants[0].name
    if reference not in {v.name for v in variants}:
        raise SystemExit(f"--reference {reference!r} is not one of the variants")
    out = args.out or runs_dir() / "bench" / "reader_speed.json"

    from benchmarks.datasets import load_benchmark
    from benchmarks.runner import aggregate
    from benchmarks.splits import load_benchmark_config, select
    from benchmarks.views import public_view
    from memsys.llm.client import LLMClient
    from memsys.llm.local import LocalServer, ServerSettings, logits_args, model_identity
    from memsys.llm.model_files import ensure_model_file

    bench = select(load_benchmark(args.benchmark), args.split, args.sample, load_benchmark_config(args.benchmark))
    view = public_view(bench)
    text = calibration_text(view, args.calibration_tokens)
    result: dict[str, Any] = {
        "command": command("research.perf.bench_reader_speed", argv), "when": utc_now(),
        "machine": platform.platform(), "load_before": load_average(), "benchmark": args.benchmark,
        "split": args.split, "sample": args.sample, "questions": view.question_ids, "reference": reference,
        "variants": {}, "paired": {},
    }
    rows: dict[str, list[dict[str, Any]]] = {}
    answers: dict[str, dict[str, str]] = {}
    i = 0
    while i < len(variants):  # one server for each run of consecutive variants with the same server settings
        group = [variants[i]]
        while i + len(group) < len(variants) and variants[i + len(group)].server_key == group[0].server_key:
            group.append(variants[i + len(group)])
        i += len(group)
        cfg = llm_config(group[0].llm)
        model = ensure_model_file(cfg.local)
        settings = ServerSettings(model.path, cfg.model, cfg.local.n_ctx, cfg.local.n_threads,
                                  startup_timeout_s=cfg.local.startup_timeout_s,
                                  extra_args=logits_args(cfg.local.logprobs) + group[0].server)  # as memsys starts it
        with LocalServer(settings) as server:
            client = LLMClient(cfg, base_url=server.base_url, cache_tag=model_identity(model))
            client.chat([{"role": "user", "content": "Hello"}], max_tokens=4)  # pages the weights in
            # a calibration before the group and after each variant: a variant's bound takes the two around
            # it, so a host whose speed drifts during the run (28 -> 37 prompt tokens/s in session 41) moves
            # each variant's bound with it
            points = [Calibration()]
            calibrate(points[0], client, server.base_url, text, "before", args.calibration_reps)
            done: list[tuple[Variant, list[dict[str, Any]], float, int]] = []
            for v in group:
                workers = v.workers or args.workers
                print(f"[bench_reader_speed] {v.name}: {v.preset} {' '.join(v.memory + v.llm + v.server)} "
                      f"workers={workers}, {len(view.question_ids)} questions (load {load_average()})", flush=True)
                rate = {"p": points[-1].prompt_rate, "g": points[-1].generation_rate}  # the bound shown while it runs
                bound_of = lambda r, rate=rate: (r.get("prompt_tokens", 0) / rate["p"]  # noqa: E731
                                                 + r.get("completion_tokens", 0) / rate["g"])
                records, wall = answer_variant(v, view, TimedReader(client), workers, bound_of)
                done.append((v, records, wall, workers))
                points.append(Calibration())
                calibrate(points[-1], client, server.base_url, text, f"after {v.name}", args.calibration_reps)
            client.close()
        for k, (v, records, wall, workers) in enumerate(done):  # the bound with the calibrations around the variant
            cal = points[k].merged(points[k + 1])
            for r in records:
                r["bound_s"] = r.get("prompt_tokens", 0) / cal.prompt_rate + r.get("completion_tokens", 0) / cal.generation_rate
            records.sort(key=lambda r: view.question_ids.index(r["question_id"]))
            rows[v.name] = scored_rows(bench, records)
            answers[v.name] = {r["question_id"]: r.get("answer", "") for r in records}
            metrics = aggregate(bench.name, rows[v.name], True)
            result["variants"][v.name] = {
                "preset": v.preset, "memory_overrides": list(v.memory), "llm_overrides": list(v.llm),
                "server_args": list(v.server), "workers": workers, "server_command": server.command()[3:],
                "calibration": cal.to_json(), "summary": summarize(records, wall, cal, metrics, bench.name),
                "questions": [{k: r.get(k) for k in ("question_id", "conversation", "answer", "error", "latency_s",
                                                     "reader_s", "reader_calls", "bound_s", "shared_prefix_tokens", "prompt_tokens",
                                                     "completion_tokens", "retrieval_ms", "started_s", "finished_s")}
                              for r in records],
            }
        result["paired"] = compare(rows, answers, reference, bench.name)
        result["load_after"] = load_average()
        write_json(out, result)  # after every server: a killed bench keeps what it measured
    table = render(result)
    write_json(out, result)
    out.with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
