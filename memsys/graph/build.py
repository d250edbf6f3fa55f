"""Build (or update) a store's knowledge graph.

Extraction is incremental: what was extracted per MAU is kept in ``kg_extractions``,
so a build only extracts MAUs added since the last one (or MAUs extracted by another
extractor). Entity resolution and the graph are then recomputed over all extractions:
resolution is cheap (name embeddings are cached) and order-independent, so an
incremental build gives the same graph as a full one from the same extractions.

The rule extractor's capitalization statistics (rule E2) are gathered over all MAUs
of the store each build; MAUs extracted in earlier builds keep the extraction made
with the statistics of their time (``rebuild=True`` re-extracts everything).

Graph writes share the store's SQLite connection; do not run a build concurrently
with ``Memory.add`` on the same store (both take the store's write lock per
transaction, but a build reads the MAU list once at its start).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from memsys.config import GraphConfig
from memsys.embed import Embedder
from memsys.errors import ConfigError, StoreReadOnlyError
from memsys.graph import tables
from memsys.graph.extract_llm import LLMExtractor
from memsys.graph.extract_rules import RuleExtractor
from memsys.graph.kg import KnowledgeGraph
from memsys.graph.schema import Extraction, mau_date_label
from memsys.records import MAU

log = logging.getLogger(__name__)

EXTRACTORS = ("rules", "llm")


@dataclass
class BuildReport:
    extractor: str
    maus: int = 0  # MAUs in the store
    extracted: int = 0  # extracted in this build
    reused: int = 0  # extractions kept from earlier builds
    failed: int = 0  # malformed LLM replies: MAU skipped now, retried next build
    dropped_items: int = 0  # invalid LLM items dropped
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    entities: int = 0
    relations: int = 0
    surface_forms: int = 0
    collapsed: int = 0  # surface forms merged into another by entity resolution
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_extractor(name: str, *, llm: Any = None, workers: int = 1) -> RuleExtractor | LLMExtractor:
    if name == "rules":
        return RuleExtractor()
    if name == "llm":
        if llm is None:
            raise ConfigError("graph extractor 'llm' needs an LLM client (build_graph(..., llm=client))")
        return LLMExtractor(llm, workers=workers)
    raise ConfigError(f"unknown graph extractor '{name}' ({' | '.join(EXTRACTORS)})")


@dataclass(frozen=True)
class _Target:
    """What a build works on, whether it was handed a Memory or a bare MemoryStore."""

    store: Any
    is_memory: bool
    cfg: GraphConfig
    embedder: Embedder


@dataclass(frozen=True)
class _GraphStore:
    """The store's connection, shared with ``MemoryStore.add``, and its name for errors."""

    store: Any
    conn: sqlite3.Connection
    lock: Any
    where: str


@dataclass
class _Extracted:
    maus: list[MAU]  # every MAU of the store, read once at the start of the build
    done: dict[str, tuple[str, Extraction]]  # kept from earlier builds (empty on rebuild)
    fresh: dict[str, Extraction]  # extracted in this build
    pending: int  # MAUs this build tried to extract


def _open_target(target: Any, cfg: GraphConfig | None, embedder: Embedder | None) -> _Target:
    is_memory = hasattr(target, "store") and hasattr(target, "attach_graph")
    store = target.store if is_memory else target
    if getattr(store, "read_only", False):
        raise StoreReadOnlyError(f"cannot build a knowledge graph in {store.path}: store opened read-only")
    cfg = cfg or (target.cfg.graph if is_memory else GraphConfig())
    embedder = embedder or (target.embedder if is_memory else None)
    if embedder is None:
        raise ConfigError("build_graph on a MemoryStore needs an embedder (for entity resolution)")
    return _Target(store, is_memory, cfg, embedder)


def _open_graph_store(store: Any) -> _GraphStore:
    conn, lock = tables.store_connection(store)
    return _GraphStore(store, conn, lock, str(getattr(store, "path", "store")))


def _extract_pending(ex: RuleExtractor | LLMExtractor, gs: _GraphStore, report: BuildReport, rebuild: bool,
                     batch_size: int, progress: bool) -> _Extracted:
    """Extract only MAUs new since the last build (or extracted by another extractor)."""
    name = ex.name
    maus = list(gs.store.maus)
    report.maus = len(maus)
    done = {} if rebuild else tables.read_extractions(gs.conn, gs.where)
    todo = [m for m in maus if m.id not in done or done[m.id][0] != name]
    report.reused = len(maus) - len(todo)
    if isinstance(ex, RuleExtractor):
        ex.observe(maus)
    fresh = _extract(ex, todo, lambda got: tables.write_extractions(gs.conn, gs.lock, name, got), batch_size, progress)
    report.extracted = len(fresh)
    report.failed = len(todo) - len(fresh)
    _copy_llm_stats(ex, report)
    return _Extracted(maus, done, fresh, len(todo))


def _copy_llm_stats(ex: RuleExtractor | LLMExtractor, report: BuildReport) -> None:
    if isinstance(ex, LLMExtractor):
        s = ex.stats
        report.dropped_items, report.llm_calls = s.dropped_items, s.calls
        report.prompt_tokens, report.completion_tokens = s.prompt_tokens, s.completion_tokens


def _resolve_graph(got: _Extracted, name: str, tgt: _Target) -> KnowledgeGraph:
    """Resolve entities over all current extractions, so an incremental build equals a full one."""
    extractions = [got.fresh[m.id] if m.id in got.fresh else got.done[m.id][1] for m in got.maus
                   if m.id in got.fresh or (m.id in got.done and got.done[m.id][0] == name)]
    dates = {m.id: mau_date_label(m) for m in got.maus}
    return KnowledgeGraph.from_extractions(extractions, tgt.embedder, tgt.cfg, dates,
                                           meta={"extractor": name, "maus": len(extractions)})


def _record_graph_size(report: BuildReport, kg: KnowledgeGraph) -> None:
    report.entities, report.relations = len(kg.entities), len(kg.relations)
    report.surface_forms, report.collapsed = kg.meta["surface_forms"], kg.meta["collapsed"]


def build_graph(
    target: Any,
    *,
    extractor: str | RuleExtractor | LLMExtractor | None = None,
    llm: Any = None,
    embedder: Embedder | None = None,
    cfg: GraphConfig | None = None,
    rebuild: bool = False,
    batch_size: int = 64,
    workers: int = 1,
    progress: bool = True,
) -> KnowledgeGraph:
    """Extract new MAUs, resolve entities, save the graph in the store, and (for a
    :class:`memsys.memory.Memory`) attach it for retrieval. ``target`` is a Memory or a
    MemoryStore (then ``embedder`` is required). The report is ``kg.build_report``."""
    tgt = _open_target(target, cfg, embedder)
    ex = make_extractor(extractor or tgt.cfg.extractor, llm=llm, workers=workers) if not hasattr(extractor, "extract_many") else extractor
    name = ex.name
    report = BuildReport(name)
    gs = _open_graph_store(tgt.store)

    t0 = time.perf_counter()
    got = _extract_pending(ex, gs, report, rebuild, batch_size, progress)
    t1 = time.perf_counter()
    kg = _resolve_graph(got, name, tgt)
    t2 = time.perf_counter()
    kg.save(tgt.store)
    t3 = time.perf_counter()
    _record_graph_size(report, kg)
    report.seconds = {"extract": round(t1 - t0, 3), "resolve": round(t2 - t1, 3), "save": round(t3 - t2, 3)}
    if report.failed:
        log.warning("graph build: %d of %d MAUs had malformed LLM replies and were skipped", report.failed, got.pending)
    kg.build_report = report
    if tgt.is_memory:
        target.attach_graph(kg)
    return kg


def _extract(ex: Any, todo: list[MAU], commit: Callable[[list[Extraction]], None], batch_size: int,
             progress: bool) -> dict[str, Extraction]:
    """Extractions by MAU id, committed batch by batch: a killed build keeps the batches it finished."""
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="mau", desc=f"graph ({ex.name})")
    fresh: dict[str, Extraction] = {}
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            got = ex.extract_many(batch)
            commit(got)
            fresh.update((e.mau_id, e) for e in got)
            if bar:
                bar.update(len(batch))
    finally:
        if bar:
            bar.close()
    return fresh
