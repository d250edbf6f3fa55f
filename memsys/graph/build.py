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
    is_memory = hasattr(target, "store") and hasattr(target, "attach_graph")
    store = target.store if is_memory else target
    if getattr(store, "read_only", False):
        raise StoreReadOnlyError(f"cannot build a knowledge graph in {store.path}: store opened read-only")
    cfg = cfg or (target.cfg.graph if is_memory else GraphConfig())
    embedder = embedder or (target.embedder if is_memory else None)
    if embedder is None:
        raise ConfigError("build_graph on a MemoryStore needs an embedder (for entity resolution)")
    ex = make_extractor(extractor or cfg.extractor, llm=llm, workers=workers) if not hasattr(extractor, "extract_many") else extractor
    name = ex.name
    report = BuildReport(name)
    conn, lock = tables.store_connection(store)
    where = str(getattr(store, "path", "store"))

    t0 = time.perf_counter()
    maus = list(store.maus)
    report.maus = len(maus)
    done = {} if rebuild else tables.read_extractions(conn, where)
    todo = [m for m in maus if m.id not in done or done[m.id][0] != name]
    report.reused = len(maus) - len(todo)
    if isinstance(ex, RuleExtractor):
        ex.observe(maus)
    fresh = _extract(ex, todo, lambda got: tables.write_extractions(conn, lock, name, got), batch_size, progress)
    report.extracted = len(fresh)
    report.failed = len(todo) - len(fresh)
    if isinstance(ex, LLMExtractor):
        s = ex.stats
        report.dropped_items, report.llm_calls = s.dropped_items, s.calls
        report.prompt_tokens, report.completion_tokens = s.prompt_tokens, s.completion_tokens
    t1 = time.perf_counter()

    extractions = [fresh[m.id] if m.id in fresh else done[m.id][1] for m in maus
                   if m.id in fresh or (m.id in done and done[m.id][0] == name)]
    dates = {m.id: mau_date_label(m) for m in maus}
    kg = KnowledgeGraph.from_extractions(extractions, embedder, cfg, dates,
                                         meta={"extractor": name, "maus": len(extractions)})
    t2 = time.perf_counter()
    kg.save(store)
    t3 = time.perf_counter()
    report.entities, report.relations = len(kg.entities), len(kg.relations)
    report.surface_forms, report.collapsed = kg.meta["surface_forms"], kg.meta["collapsed"]
    report.seconds = {"extract": round(t1 - t0, 3), "resolve": round(t2 - t1, 3), "save": round(t3 - t2, 3)}
    if report.failed:
        log.warning("graph build: %d of %d MAUs had malformed LLM replies and were skipped", report.failed, len(todo))
    kg.build_report = report
    if is_memory:
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
