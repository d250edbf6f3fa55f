"""What acts in a memory config: the effective view of a config and its key.

A memory config has many fields that cannot change what the reader is given in a given setting
(``dense_k`` beyond ``top_k`` under a cutting merge, graph fields with the graph off, ...). The loop
judges repeats and no-ops on the *effective* config, so two configs that differ only in dead fields
are the same experiment. The lever catalogue (research/levers/catalogue.py) builds its live rules from the same
predicates, so "a lever is live" and "a change shows in the effective key" cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Iterator

from memsys.config import MemoryConfig

DEAD = "<dead>"
#: tokens a rendered memory line adds around its text (number, date, time, speaker, resolved times): a
#: generous bound, used to tell when level-1 summaries alone cannot reach a budget
LINE_FRAMING_TOKENS = 36
DENSE_CUT = ("set_union", "dense_only")  # merges that keep the dense list cut at top_k
#: fields that change speed or labels, never what the reader is given
_NEVER_MATTER = ("name", "embedder.batch_size", "embedder.device", "embedder.cache", "ingest.compression.workers",
                 "answer.record_logprobs")
_COMPRESSION = ("ingest.compression.window_turns", "ingest.compression.overlap_turns", "ingest.compression.consolidate_above")
_TEXT_GATE = ("ingest.text.window", "ingest.text.reject_above", "ingest.text.uncertain_above", "ingest.text.min_words")

# ---------------------------------------------------------------- config access
def get_path(cfg: Any, path: str) -> Any:
    obj = cfg
    for part in path.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _replace(obj: Any, parts: list[str], value: Any) -> Any:
    if len(parts) == 1:
        return dataclasses.replace(obj, **{parts[0]: value})
    return dataclasses.replace(obj, **{parts[0]: _replace(getattr(obj, parts[0]), parts[1:], value)})


def with_values(cfg: MemoryConfig, values: dict[str, Any]) -> MemoryConfig:
    """``cfg`` with typed values set by path (no parsing, no validation: for values a lever produced)."""
    for path, value in values.items():
        cfg = _replace(cfg, path.split("."), value)
    return cfg


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_flatten(value, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = value
    return out


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


# ---------------------------------------------------------------- what acts in a config
def pyramid_expands(cfg: MemoryConfig) -> bool:
    """Levels 2-3 run (build_pyramid returns after level 1 when off or showing summaries)."""
    return cfg.pyramid.enabled and cfg.answer.context_text != "summary"


def compressed(cfg: MemoryConfig) -> bool:
    """Only compressed memories differ from their summary: a raw turn's summary is its whole text, and its
    raw content adds nothing (Retriever.load_raw), so context_text=both and level 3 need compression."""
    return cfg.ingest.compression.enabled


def dense_text_acts(cfg: MemoryConfig) -> bool:
    """The embedded text acts through dense search, or through the similarity that gates pyramid level 2."""
    return cfg.retrieval.merge != "bm25_only" or pyramid_expands(cfg)


def level3_active(cfg: MemoryConfig) -> bool:
    return pyramid_expands(cfg) and cfg.pyramid.level3 and (compressed(cfg) or cfg.pyramid.level3_media)


def facts_shown(cfg: MemoryConfig) -> bool:
    return cfg.graph.enabled and cfg.answer.include_graph_facts and cfg.graph.max_facts > 0


def graph_active(cfg: MemoryConfig) -> bool:
    return cfg.graph.enabled and (cfg.graph.max_maus > 0 or facts_shown(cfg))


def graph_reach(cfg: MemoryConfig, hops: int | None = None) -> int:
    """Hops that can still count: an entity d hops out scores beta^d * conf <= beta^d, and one scoring
    under min_score is ignored (KnowledgeGraph._strength), so hops beyond this are dead."""
    g = cfg.graph
    limit = g.hops if hops is None else hops
    d = 0
    while d < limit and g.beta ** (d + 1) >= g.min_score:
        d += 1
    return d


def retrieval_pool(cfg: MemoryConfig) -> int:
    """The most candidates the merge hands on (before graph memories and neighbour expansion)."""
    r = cfg.retrieval
    if r.merge in DENSE_CUT:
        return min(r.dense_k, r.top_k) + (r.sparse_k if r.merge == "set_union" else 0)
    if r.merge == "bm25_only":
        return min(r.sparse_k, r.top_k)
    return min(r.top_k, r.dense_k + r.sparse_k)


#: the shortest merged list on which a time lift acts: any two candidates can change places. (It was 10,
#: from the six conv-30 questions of tests/research/levers/test_catalogue.py, whose dated turns already led naive's
#: top 5; on other questions a lift reorders a top 5, so a rule from that data called a live lever dead.)
TIME_LIFT_MIN_POOL = 2


def kept_candidates(cfg: MemoryConfig) -> int:
    """The most candidates retrieval hands to the pyramid."""
    r = cfg.retrieval
    n = retrieval_pool(cfg) + (cfg.graph.max_maus if cfg.graph.enabled else 0)
    return n + min(r.expand_top, n) * 2 * r.expand_window  # each expanded candidate brings its neighbours


def level1_bound(cfg: MemoryConfig) -> int:
    """Tokens the level-1 summaries can take at most (each is cut to summary_max_tokens)."""
    return kept_candidates(cfg) * (cfg.pyramid.summary_max_tokens + LINE_FRAMING_TOKENS)


def budget_binds(cfg: MemoryConfig) -> bool:
    return pyramid_expands(cfg) or facts_shown(cfg) or cfg.pyramid.budget_tokens < level1_bound(cfg)


# ---------------------------------------------------------------- the effective config
def effective_view(cfg: MemoryConfig) -> dict[str, Any]:
    """Every field by path, ``DEAD`` where its value cannot change the reader's input, coupled fields
    replaced by the value that acts. Equal views mean equal behaviour (as far as the config decides)."""
    view = _flatten(cfg)
    for p in _NEVER_MATTER:
        view[p] = DEAD
    for rules in (_retrieval_rules, _answer_rules, _ingest_rules, _pyramid_rules, _graph_rules):
        for path, value in rules(cfg):
            view[path] = value
    if graph_active(cfg):  # the graph's own fields, all dead when it is off
        view["graph.hops"] = graph_reach(cfg)
        if view["graph.hops"] == 0:
            view["graph.beta"] = DEAD
    else:
        for p in view:
            if p.startswith("graph."):
                view[p] = DEAD
    return view


Rule = Iterator[tuple[str, Any]]  # (field path, the value that acts, or DEAD)


def _dead(*paths: str) -> Rule:
    return ((p, DEAD) for p in paths)


def _retrieval_rules(cfg: MemoryConfig) -> Rule:
    r = cfg.retrieval
    if r.merge in DENSE_CUT:  # the dense list is dense_k hits cut at top_k: only the smaller acts
        yield "retrieval.top_k", min(r.dense_k, r.top_k)
        yield "retrieval.dense_k", min(r.dense_k, r.top_k)
    elif r.merge == "bm25_only":
        yield "retrieval.top_k", min(r.sparse_k, r.top_k)
        yield "retrieval.sparse_k", min(r.sparse_k, r.top_k)
        yield from _dead("retrieval.dense_k")
    else:  # fusions cut the union, which has at most dense_k + sparse_k hits
        yield "retrieval.top_k", min(r.top_k, r.dense_k + r.sparse_k)
    if r.merge == "dense_only":
        yield from _dead("retrieval.sparse_k", "retrieval.sparse_backend", "retrieval.sparse_fields",
                         "ingest.index_text.sparse")
    if r.expand_top == 0:
        yield from _dead("retrieval.expand_window")
    if retrieval_pool(cfg) < TIME_LIFT_MIN_POOL:
        yield from _dead("retrieval.time_lift")
    if r.speaker_first:
        yield from _dead("retrieval.speaker_lift")
    if r.merge != "rrf":
        yield from _dead("retrieval.rrf_k")
    if r.merge != "linear":
        yield from _dead("retrieval.linear_alpha")


def _answer_rules(cfg: MemoryConfig) -> Rule:
    a = cfg.answer
    if not a.abstains_by_margin():
        yield from _dead("answer.abstain_margin", "answer.abstain_signal")
    if not a.abstains_by_confidence():
        yield from _dead("answer.abstain_logprob")
    if not a.response_format and a.abstain in ("reader", "both"):  # no schema, no 'supported' field
        yield "answer.abstain", "off" if a.abstain == "reader" else "retrieval"
    if not facts_shown(cfg):
        yield from _dead("answer.graph_facts_style")


def _ingest_rules(cfg: MemoryConfig) -> Rule:
    if not dense_text_acts(cfg):
        yield from _dead("ingest.index_text.dense")
    if not compressed(cfg):
        yield from _dead("retrieval.sparse_fields", *_COMPRESSION)
    if not cfg.ingest.text.enabled:
        yield from _dead(*_TEXT_GATE)


def _pyramid_rules(cfg: MemoryConfig) -> Rule:
    if not pyramid_expands(cfg):
        yield from _dead("pyramid.enabled", "answer.context_text", "pyramid.theta")
    elif cfg.answer.context_text == "both" and not compressed(cfg):
        yield "answer.context_text", "full_text"
    if not level3_active(cfg):
        yield from _dead("pyramid.level3", "pyramid.level3_media", "pyramid.modality_tokens")
    elif not cfg.pyramid.level3_media:
        yield from _dead("pyramid.modality_tokens")
    if not budget_binds(cfg):
        yield from _dead("pyramid.budget_tokens")


def _graph_rules(cfg: MemoryConfig) -> Rule:
    if not graph_active(cfg):
        yield from _dead("answer.include_graph_facts")
        return
    if not facts_shown(cfg):
        yield from _dead("graph.max_facts", "answer.include_graph_facts")
    if cfg.graph.max_maus == 0:
        yield from _dead("graph.placement")


def effective_key(cfg: MemoryConfig) -> str:
    """sha256 of the canonical JSON of ``effective_view``."""
    text = json.dumps(effective_view(cfg), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
