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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

from benchmarks.datasets.locomo import load_locomo  # noqa: E402
from harness.bench_output import write_json  # noqa: E402
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10)
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--llm-turns", type=int, default=0, help="also measure the LLM path on this many turns")
    return ap.parse_args(argv)


@dataclass
class _RuleRun:
    """Rule extractions per conversation; a fresh extractor each, since its statistics are per store."""

    extractions: list[list[Any]]
    extract_s: float
    observe_s: float
    ent_types: Counter[str] = field(default_factory=Counter)
    rel_types: Counter[str] = field(default_factory=Counter)


def _extract_rules(all_maus: list[list[MAU]]) -> _RuleRun:
    t0 = time.perf_counter()
    extractions, observe_s = [], 0.0
    for maus in all_maus:
        t_obs = time.perf_counter()
        ex = RuleExtractor()
        ex.observe(maus)
        observe_s += time.perf_counter() - t_obs
        extractions.append(ex.extract_many(maus))
    run = _RuleRun(extractions, time.perf_counter() - t0, observe_s)
    for exs in extractions:
        for e in exs:
            run.ent_types.update(x.type for x in e.entities)
            run.rel_types.update(r.type for r in e.relations)
    return run


@dataclass
class _GraphTally:
    """Resolution and query-time figures summed over the conversations' graphs."""

    resolve_s: float = 0.0
    forms: int = 0
    collapsed: int = 0
    merges: int = 0
    entities: int = 0
    relations: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    n_q: int = 0
    hits: int = 0
    specific_seed: int = 0
    with_evidence: int = 0

    def add_graph(self, conv: Any, kg: KnowledgeGraph) -> None:
        res = kg.resolution
        self.forms += len(res.forms)
        self.collapsed += res.collapsed
        self.merges += len(res.merges)
        self.entities += len(kg.entities)
        self.relations += len(kg.relations)
        self.examples.extend({"conversation": conv.id, **m} for m in merge_examples(res, 3))

    def ask(self, conv: Any, kg: KnowledgeGraph) -> None:
        """A seed other than a speaker is what the graph adds: speakers match nearly every question."""
        speakers = {normalize_name(s) for s in conv.speakers}
        for q in conv.questions:
            t2 = time.perf_counter()
            got = kg.search(q.question)
            self.latencies.append((time.perf_counter() - t2) * 1e3)
            self.n_q += 1
            if any(normalize_name(kg.entities[s.entity_id].name) not in speakers for s in got.seeds):
                self.specific_seed += 1
            if q.evidence:
                self.with_evidence += 1
                self.hits += bool({m for m, _ in got.maus} & set(q.evidence))


def _graph_tally(convs: Any, all_maus: list[list[MAU]], rules: _RuleRun, embedder: Any,
                 cfg: GraphConfig) -> _GraphTally:
    tally = _GraphTally()
    for conv, maus, exs in zip(convs, all_maus, rules.extractions):
        t1 = time.perf_counter()
        kg = KnowledgeGraph.from_extractions(exs, embedder, cfg, {m.id: mau_date_label(m) for m in maus})
        tally.resolve_s += time.perf_counter() - t1
        tally.add_graph(conv, kg)
        tally.ask(conv, kg)
    tally.examples.sort(key=lambda e: (-len(e["aliases"]), e["conversation"]))
    return tally


def _rule_section(rules: _RuleRun, n_turns: int) -> dict[str, Any]:
    return {
        "seconds": round(rules.extract_s, 3),
        "observe_seconds": round(rules.observe_s, 3),
        "turns_per_s": round(n_turns / rules.extract_s, 1),
        "entity_mentions": sum(rules.ent_types.values()),
        "entity_mentions_by_type": dict(rules.ent_types.most_common()),
        "relations": sum(rules.rel_types.values()),
        "relations_by_type": dict(rules.rel_types.most_common()),
    }


def _resolution_section(tally: _GraphTally, embedder: Any, load_s: float, cfg: GraphConfig) -> dict[str, Any]:
    return {
        "embedder": embedder.name,
        "embedder_load_seconds": round(load_s, 2),
        "seconds": round(tally.resolve_s, 2),  # includes embedding the names (cached across runs)
        "threshold": cfg.resolve_threshold,
        "cosine_weight": cfg.resolve_cosine_weight,
        "surface_forms": tally.forms,
        "collapsed": tally.collapsed,
        "merges": tally.merges,
        "entities": tally.entities,
        "relations": tally.relations,
        "examples": tally.examples[:10],
    }


def _augment_section(tally: _GraphTally, cfg: GraphConfig) -> dict[str, Any]:
    latencies, with_evidence = tally.latencies, tally.with_evidence
    return {
        "hops": cfg.hops, "beta": cfg.beta, "max_maus": cfg.max_maus,
        "latency_ms_mean": round(statistics.fmean(latencies), 3) if latencies else 0.0,
        "latency_ms_p95": round(pct(latencies, 0.95), 3),
        "questions_with_non_speaker_seed": tally.specific_seed,
        "evidence_hit_rate": round(tally.hits / with_evidence, 4) if with_evidence else 0.0,
        "questions_with_evidence": with_evidence,
    }


def _write_result(result: dict[str, Any], out: Path, llm_turns: int, first_maus: list[MAU]) -> None:
    """An LLM run is slow, so a run without ``--llm-turns`` keeps the last ``llm_path`` entry."""
    if llm_turns > 0:
        result["llm_path"] = llm_path(first_maus, llm_turns)
    elif out.exists():
        previous = json.loads(out.read_text(encoding="utf-8")).get("llm_path")
        if previous:
            result["llm_path"] = previous
    write_json(out, result)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse_args(argv)
    cfg = GraphConfig(enabled=True)
    bench = load_locomo()
    convs = bench.conversations[: args.conversations]
    all_maus = [conversation_maus(c) for c in convs]
    n_turns = sum(len(m) for m in all_maus)
    rules = _extract_rules(all_maus)  # statistics pass + extraction, all turns

    emb_cfg = EmbedderConfig() if args.embedder == "minilm" else EmbedderConfig(backend="hashing", cache=False)
    t_load = time.perf_counter()
    embedder = make_embedder(emb_cfg)
    load_s = time.perf_counter() - t_load
    tally = _graph_tally(convs, all_maus, rules, embedder, cfg)  # resolution + graph per conversation

    result = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "data": {"conversations": len(convs), "turns": n_turns, "questions": tally.n_q},
        "rule_extraction": _rule_section(rules, n_turns),
        "resolution": _resolution_section(tally, embedder, load_s, cfg),
        "augment": _augment_section(tally, cfg),
    }
    _write_result(result, args.out or runs_dir() / "bench" / "graph.json", args.llm_turns, all_maus[0])
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
