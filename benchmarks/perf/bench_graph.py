"""Knowledge-graph figures on LoCoMo (all 10 conversations, 5,882 turns).

Why: the graph's offline rule extractor runs at every ingest, and whether it is
worth its cost depends on what it extracts and how the graph answers queries.
Measures, per conversation (one memory store per conversation, as the runner does):

- rule extraction throughput (turns/s; corpus statistics + extraction, MAUs built
  the way ingestion builds them: text + image caption, relative times resolved);
- entity mentions and relations by type;
- entity resolution with all-MiniLM-L6-v2 name embeddings (default GraphConfig):
  surface forms, how many collapsed, 10 merge examples, time;
- query-time augmentation on the conversation's questions: latency, how many
  questions get a seed other than a speaker, and graph evidence hit rate (a question
  counts when one of its evidence turns is among the graph's ``max_maus`` MAUs);
- with ``--llm-turns N``, the LLM path on N turns of the first conversation (evenly
  spaced) with the embedded local model, reply cache off: calls, prompt and completion
  tokens and seconds per turn, malformed replies, and what it yields next to the rule
  extractor on the same turns.

Usage: ``python benchmarks/perf/bench_graph.py [--conversations 10] [--embedder minilm|hashing]
[--llm-turns 30]``. Writes ``runs/bench/graph.json`` (an existing ``llm_path`` entry is kept
when ``--llm-turns`` is 0) and prints the same JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

from benchmarks.datasets.locomo import load_locomo  # noqa: E402
from harness.paths import runs_dir  # noqa: E402
from memsys.config import EmbedderConfig, GraphConfig  # noqa: E402
from memsys.embed import make_embedder  # noqa: E402
from memsys.graph import KnowledgeGraph, RuleExtractor  # noqa: E402
from memsys.graph.resolve import merge_examples  # noqa: E402
from memsys.graph.schema import mau_date_label, normalize_name  # noqa: E402
from memsys.records import MAU  # noqa: E402
from memsys.temporal import resolve_relative_times  # noqa: E402


def conversation_maus(conv: Any) -> list[MAU]:
    out = []
    for session in conv.sessions:
        for t in session.turns:
            text = t.text.strip()
            if t.image_caption:
                text = f"{text} [shared an image: {t.image_caption.strip()}]".strip()
            out.append(MAU(id=t.id, summary=text, speaker=t.speaker, timestamp=t.timestamp,
                           session_id=t.session_id, details={"text": text},
                           time_mentions=resolve_relative_times(t.text, t.timestamp) if t.timestamp else []))
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def llm_path(maus: list[MAU], n: int) -> dict[str, Any]:
    """LLM extraction cost and yield on ``n`` evenly spaced turns, rules alongside."""
    from memsys.config import LLMConfig, validate
    from memsys.graph import LLMExtractor
    from memsys.llm.client import open_llm

    step = max(1, len(maus) // n)
    picked = maus[::step][:n]
    rules = RuleExtractor()
    rules.observe(maus)
    rule_ex = rules.extract_many(picked)
    cfg = validate(LLMConfig, {"backend": "local", "cache": False, "max_retries": 0, "timeout_s": 600})
    with open_llm(cfg, cache=None) as llm:
        llm.chat([{"role": "user", "content": "Hello"}], max_tokens=4)  # pages the weights in
        extractor = LLMExtractor(llm)
        t0 = time.perf_counter()
        llm_ex = extractor.extract_many(picked)
        wall = time.perf_counter() - t0
    st = extractor.stats
    n_ok = max(1, len(llm_ex))
    return {
        "model": cfg.model,
        "turns": len(picked),
        "calls_per_turn": round(st.calls / len(picked), 3),
        "prompt_tokens_per_turn": round(st.prompt_tokens / n_ok, 1),
        "completion_tokens_per_turn": round(st.completion_tokens / n_ok, 1),
        "seconds_per_turn": round(wall / len(picked), 2),
        "malformed_replies": st.failed,
        "dropped_items": st.dropped_items,
        "entities_per_turn": {"llm": round(sum(len(e.entities) for e in llm_ex) / n_ok, 2),
                              "rules": round(sum(len(e.entities) for e in rule_ex) / len(picked), 2)},
        "relations_per_turn": {"llm": round(sum(len(e.relations) for e in llm_ex) / n_ok, 2),
                               "rules": round(sum(len(e.relations) for e in rule_ex) / len(picked), 2)},
        "example": {"turn": picked[1].full_text if len(picked) > 1 else picked[0].full_text,
                    "llm": llm_ex[1].to_json() if len(llm_ex) > 1 else None,
                    "rules": rule_ex[1].to_json() if len(rule_ex) > 1 else None},
        "note": "per-turn tokens average over the replies that parsed; the speaker entity is added by code",
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10)
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--llm-turns", type=int, default=0, help="also measure the LLM path on this many turns")
    args = ap.parse_args(argv)
    cfg = GraphConfig(enabled=True)
    bench = load_locomo()
    convs = bench.conversations[: args.conversations]
    all_maus = [conversation_maus(c) for c in convs]
    n_turns = sum(len(m) for m in all_maus)

    # --- rule extraction throughput (statistics pass + extraction), all turns
    t0 = time.perf_counter()
    extractions, observe_s = [], 0.0
    for maus in all_maus:
        t_obs = time.perf_counter()
        ex = RuleExtractor()
        ex.observe(maus)
        observe_s += time.perf_counter() - t_obs
        extractions.append(ex.extract_many(maus))
    extract_s = time.perf_counter() - t0
    ent_types: Counter[str] = Counter()
    rel_types: Counter[str] = Counter()
    for exs in extractions:
        for e in exs:
            ent_types.update(x.type for x in e.entities)
            rel_types.update(r.type for r in e.relations)

    # --- resolution + graph per conversation
    emb_cfg = EmbedderConfig() if args.embedder == "minilm" else EmbedderConfig(backend="hashing", cache=False)
    t_load = time.perf_counter()
    embedder = make_embedder(emb_cfg)
    load_s = time.perf_counter() - t_load
    resolve_s, forms, collapsed, merges, entities, relations = 0.0, 0, 0, 0, 0, 0
    examples: list[dict[str, Any]] = []
    latencies: list[float] = []
    n_q = hits = specific_seed = with_evidence = 0
    for conv, maus, exs in zip(convs, all_maus, extractions):
        t1 = time.perf_counter()
        kg = KnowledgeGraph.from_extractions(exs, embedder, cfg, {m.id: mau_date_label(m) for m in maus})
        resolve_s += time.perf_counter() - t1
        res = kg.resolution
        forms += len(res.forms)
        collapsed += res.collapsed
        merges += len(res.merges)
        entities += len(kg.entities)
        relations += len(kg.relations)
        examples.extend({"conversation": conv.id, **m} for m in merge_examples(res, 3))
        speakers = {normalize_name(s) for s in conv.speakers}
        for q in conv.questions:
            t2 = time.perf_counter()
            got = kg.search(q.question)
            latencies.append((time.perf_counter() - t2) * 1e3)
            n_q += 1
            if any(normalize_name(kg.entities[s.entity_id].name) not in speakers for s in got.seeds):
                specific_seed += 1
            if q.evidence:
                with_evidence += 1
                hits += bool({m for m, _ in got.maus} & set(q.evidence))
    examples.sort(key=lambda e: (-len(e["aliases"]), e["conversation"]))

    result = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "data": {"conversations": len(convs), "turns": n_turns, "questions": n_q},
        "rule_extraction": {
            "seconds": round(extract_s, 3),
            "observe_seconds": round(observe_s, 3),
            "turns_per_s": round(n_turns / extract_s, 1),
            "entity_mentions": sum(ent_types.values()),
            "entity_mentions_by_type": dict(ent_types.most_common()),
            "relations": sum(rel_types.values()),
            "relations_by_type": dict(rel_types.most_common()),
        },
        "resolution": {
            "embedder": embedder.name,
            "embedder_load_seconds": round(load_s, 2),
            "seconds": round(resolve_s, 2),  # includes embedding the names (cached across runs)
            "threshold": cfg.resolve_threshold,
            "cosine_weight": cfg.resolve_cosine_weight,
            "surface_forms": forms,
            "collapsed": collapsed,
            "merges": merges,
            "entities": entities,
            "relations": relations,
            "examples": examples[:10],
        },
        "augment": {
            "hops": cfg.hops, "beta": cfg.beta, "max_maus": cfg.max_maus,
            "latency_ms_mean": round(statistics.fmean(latencies), 3) if latencies else 0.0,
            "latency_ms_p95": round(pct(latencies, 0.95), 3),
            "questions_with_non_speaker_seed": specific_seed,
            "evidence_hit_rate": round(hits / with_evidence, 4) if with_evidence else 0.0,
            "questions_with_evidence": with_evidence,
        },
    }
    out = args.out or runs_dir() / "bench" / "graph.json"
    if args.llm_turns > 0:
        result["llm_path"] = llm_path(all_maus[0], args.llm_turns)
    elif out.exists():
        previous = json.loads(out.read_text(encoding="utf-8")).get("llm_path")
        if previous:
            result["llm_path"] = previous
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
