"""The public API: a memory you can use in five lines.

    mem = Memory.create("runs/stores/demo", "omni")
    mem.add([Turn("D1:1", "Caroline", "I went to a support group yesterday.", ts, "S1")])
    hits = mem.retrieve("When did Caroline go to the support group?")
    print(mem.context("...", budget_tokens=2000).render())
    mem.save()
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from memsys.config import MemoryConfig, load_memory_config, to_container, validate
from memsys.embed import Embedder, make_embedder
from memsys.errors import ConfigError, DuplicateIdError, InputError, StoreVersionError
from memsys.index.scope import Scope
from memsys.index.text import CONTEXT_KEY, LEGACY_INDEX_TEXT, index_text, neighbour_context
from memsys.ingest.text import IngestReport, build_text_maus, turn_text, validate_turn
from memsys.ingest.text_gate import TextNoveltyGate
from memsys.records import MAU, Link, LinkKind, Turn
from memsys.retrieve.context import Context
from memsys.retrieve.retriever import Retrieval, Retriever
from memsys.store.store import MemoryStore

if TYPE_CHECKING:
    from memsys.answer.generate import Answer

log = logging.getLogger(__name__)


def _resolve_config(config: MemoryConfig | str | dict | None, overrides: Sequence[str] = ()) -> MemoryConfig:
    if isinstance(config, MemoryConfig):
        return config
    if config is None or isinstance(config, str):
        return load_memory_config(config or "omni", overrides)
    if isinstance(config, dict):
        return validate(MemoryConfig, config, where="memory config")
    raise ConfigError(f"memory config must be a preset name, dict or MemoryConfig, got {type(config).__name__}")


def _embedded_index_text(saved: dict | None) -> str:
    """What a store's vectors were embedded from; stores from before index text embedded the summary."""
    return str(((saved or {}).get("ingest") or {}).get("index_text", {}).get("dense", LEGACY_INDEX_TEXT))


class Memory:
    """A memory store plus the configured embedder, ingestion gates and retriever."""

    def __init__(self, store: MemoryStore, cfg: MemoryConfig, embedder: Embedder | None = None):
        self.store, self.cfg = store, cfg
        self.embedder = embedder or make_embedder(cfg.embedder)
        if self.embedder.dim != store.dim:
            raise ConfigError(f"embedder dim {self.embedder.dim} != store dim {store.dim} ({store.path})")
        self._gate = TextNoveltyGate(cfg.ingest.text)
        self._gate.seed(store.recent_summaries(cfg.ingest.text.window))
        self._last_in_session: dict[str, str] = store.last_in_sessions()
        self._graph = None
        self._retriever: Retriever | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path: str | Path, config: MemoryConfig | str | dict | None = "omni", *,
               overrides: Sequence[str] = (), embedder: Embedder | None = None) -> "Memory":
        cfg = _resolve_config(config, overrides)
        emb = embedder or make_embedder(cfg.embedder)
        store = MemoryStore.create(
            path, embedder_name=emb.name, dim=emb.dim,
            sparse_backend=cfg.retrieval.sparse_backend, sparse_fields=cfg.retrieval.sparse_fields,
            sparse_index_text=cfg.ingest.index_text.sparse, index=cfg.index, extra={"memory_config": to_container(cfg)},
        )
        return cls(store, cfg, emb)

    @classmethod
    def open(cls, path: str | Path, config: MemoryConfig | str | dict | None = None, *,
             read_only: bool = False, overrides: Sequence[str] = (),
             embedder: Embedder | None = None) -> "Memory":
        """Open a store; without ``config`` the config it was created with is used."""
        store = MemoryStore.open(path, read_only=read_only)
        saved = store.manifest.get("extra", {}).get("memory_config")
        embedded_as = _embedded_index_text(saved)
        if config is None and not overrides:
            cfg = validate(MemoryConfig, saved, where=f"config saved in {store.path}") if saved else _resolve_config(None)
            if embedded_as == LEGACY_INDEX_TEXT and "index_text" not in (saved or {}).get("ingest", {}):
                cfg.ingest.index_text.dense = cfg.ingest.index_text.sparse = LEGACY_INDEX_TEXT
        else:
            cfg = _resolve_config(config, overrides)
        if cfg.ingest.index_text.dense != embedded_as:
            store.close()
            raise StoreVersionError(
                f"store {store.path} was embedded with index text {embedded_as!r} but the config asks for "
                f"{cfg.ingest.index_text.dense!r}: rebuild it (ingest again into a new store) or set "
                f"memory.ingest.index_text.dense={embedded_as}")
        emb = embedder or make_embedder(cfg.embedder)
        if emb.name != store.manifest["embedder"]["name"]:
            raise ConfigError(
                f"store {store.path} was built with embedder {store.manifest['embedder']['name']!r}, config uses {emb.name!r}"
            )
        mem = cls(store, cfg, emb)
        if cfg.graph.enabled:
            from memsys.graph.kg import KnowledgeGraph

            graph = KnowledgeGraph.load(store, cfg.graph)
            if graph is not None:
                mem.attach_graph(graph)
        return mem

    def save(self) -> None:
        self.store.save()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.store.read_only and exc[0] is None:
            self.save()
        self.close()

    def __len__(self) -> int:
        return len(self.store)

    # ------------------------------------------------------------------ ingestion
    def add(self, turns: Iterable[Turn] | Turn, *, batch_size: int = 256, progress: bool = False,
            llm: Any = None, resume: bool = False) -> IngestReport:
        """Gate, embed and store turns. Each batch is one transaction: a crash loses at most one batch.

        ``resume``: ``turns`` is the input of an earlier ``add`` that was stopped (a killed process);
        the input up to its last stored turn is skipped and the rest is added as the stopped call
        would have added it (see ``processed_prefix``).

        With ``ingest.compression.enabled`` the accepted turns are also rewritten by
        ``llm`` into restatement MAUs (the raw turns stay stored next to them).
        """
        if self.cfg.ingest.compression.enabled and llm is None:  # refuse before anything is written
            raise ConfigError("ingest.compression.enabled needs an LLM: pass llm= to Memory.add")
        if isinstance(turns, Turn):
            turns = [turns]
        turns = list(turns)
        for i, t in enumerate(turns):
            validate_turn(t, where=f"input #{i}: ")
        done = self.processed_prefix(turns) if resume else 0
        seen: set[str] = set()
        for i, t in enumerate(turns):
            if t.id in seen or (i >= done and t.id in self.store.positions):
                hint = "" if resume else " (finishing a stopped ingest of this input? resume=True skips what it stored)"
                raise DuplicateIdError(f"duplicate turn id {t.id!r} (input #{i}); ids must be unique in a store{hint}")
            seen.add(t.id)
        report = IngestReport(resumed_after=done)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(turns), initial=done, unit="turn", desc="ingest")
        with self._lock:
            # over the whole input, resumed or not: a turn's neighbours are the ones the stopped call saw
            skip = frozenset(t.id for t in turns[:done])
            context = neighbour_context(turns, self.cfg.ingest.index_text.neighbors, turn_text,
                                        lambda session_id: self._earlier_turns(session_id, skip))
            for start in range(done, len(turns), batch_size):
                batch = turns[start : start + batch_size]
                stored_next: dict[str, str] = {}
                maus = build_text_maus(batch, self.cfg.ingest, self._gate, self.store.cold, report,
                                       self._last_in_session, stored_next)
                for m in maus:
                    if m.id in context:
                        m.details[CONTEXT_KEY] = context[m.id]
                self._embed_and_store(maus)
                if stored_next:
                    updates = []
                    for prev_id, next_id in stored_next.items():
                        prev = self.store.get(prev_id)
                        prev.links.append(Link(LinkKind.NEXT, next_id))
                        updates.append(prev)
                    self.store.update(updates)
                if bar:
                    bar.update(len(batch))
            if self.cfg.ingest.compression.enabled:
                self._compress(turns, report, llm)
            self._retriever = None
        if bar:
            bar.close()
        return report

    def processed_prefix(self, turns: Sequence[Turn]) -> int:
        """How much of ``turns`` a stopped ``add`` of the same input got through: the position after the
        last of them that is stored. Batches commit whole and in order, so every turn before it was either
        stored or rejected by the novelty gate, and every turn after it is new. A stored turn whose
        speaker, time or text differ from the input's means this is not that input: refused in one line."""
        stored = [i for i, t in enumerate(turns) if t.id in self.store.positions]
        if not stored:
            return 0
        for i in stored:
            t, m = turns[i], self.store.get(turns[i].id)
            if (m.speaker, m.timestamp, m.details.get("text")) != (t.speaker, t.timestamp, turn_text(t)):
                raise DuplicateIdError(f"turn {t.id!r} (input #{i}) is stored with other content: this store was "
                                       "not written from this input, so there is nothing to resume")
        return stored[-1] + 1

    def _earlier_turns(self, session_id: str, skip: frozenset[str] = frozenset()) -> list[tuple[str | None, str]]:
        """(speaker, text) of the session's last stored turns, oldest first (as many as the
        neighbour context asks), following the PREV links back from its last MAU. Turns in ``skip``
        (the part of a resumed input already stored) are passed over: they came after these."""
        out: list[tuple[str | None, str]] = []
        mau_id = self._last_in_session.get(session_id)
        while mau_id is not None and len(out) < self.cfg.ingest.index_text.neighbors:
            if mau_id not in self.store.positions:
                break
            m = self.store.get(mau_id)
            if m.id not in skip:
                out.append((m.speaker, m.full_text))
            mau_id = next((link.target for link in m.links if link.kind == LinkKind.PREV), None)
        return out[::-1]

    def _compress(self, turns: list[Turn], report: IngestReport, llm: Any) -> None:
        """Restate the input's stored turns (a resumed ingest's earlier part included: a turn of the input
        is stored exactly when the gate accepted it), one window at a time, skipping windows written
        before a stop."""
        from memsys.ingest.compress import compress_turns

        if llm is None:
            raise ConfigError("ingest.compression.enabled needs an LLM: pass llm= to Memory.add")
        accepted = [t for t in turns if t.id in self.store.positions]
        earlier = [m for m in self.store.maus if m.details.get("compressed")]

        def write(new: list[MAU], absorbers: list[MAU]) -> None:
            self.store.update(absorbers)  # first: new restatements mark their window written
            self.store.add(new)

        report.compression = compress_turns(llm, accepted, self.cfg.ingest.compression, self.store.cold,
                                            self.embedder.embed, earlier, write)

    def add_turn(self, speaker: str, text: str, timestamp: datetime | None = None, id: str | None = None,
                 session_id: str | None = None) -> IngestReport:
        return self.add(Turn(id or f"t{len(self.store) + 1}", speaker, text, timestamp, session_id))

    def add_maus(self, maus: Sequence[MAU]) -> None:
        """Store ready-made MAUs (e.g. from compression or media ingestion); embeds missing vectors."""
        with self._lock:
            self._embed_and_store(list(maus))
            self._retriever = None

    def _embed_and_store(self, maus: list[MAU]) -> None:
        todo = [m for m in maus if m.embedding is None]
        if todo:
            vecs = self.embedder.embed([index_text(m, self.cfg.ingest.index_text.dense) for m in todo])
            for m, v in zip(todo, vecs):
                m.embedding = v
        self.store.add(maus)

    # ------------------------------------------------------------------ retrieval
    def attach_graph(self, graph: Any) -> None:
        """Use a knowledge graph (memsys.graph) for query-time augmentation."""
        self._graph = graph
        self._retriever = None

    def build_graph(self, *, extractor: str | None = None, llm: Any = None, progress: bool = False) -> Any:
        """Extract entities/relations for MAUs not yet processed (incremental), resolve, save, attach."""
        from memsys.graph.build import build_graph

        return build_graph(self, extractor=extractor or self.cfg.graph.extractor, llm=llm, progress=progress)

    @property
    def retriever(self) -> Retriever:
        r = self._retriever
        if r is None:
            with self._lock:
                if self._retriever is None:
                    self._retriever = Retriever(self.store, self.embedder, self.cfg, self._graph)
                r = self._retriever
        return r

    def retrieve(self, query: str, *, budget_tokens: int | None = None, scope: Scope | None = None) -> Retrieval:
        """``scope`` (a user, a conversation, a time range) is applied inside the index queries, so a
        lifelong store answers one user's question from that user's memories at full depth."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("empty query")
        return self.retriever.retrieve(query, budget_tokens=budget_tokens, scope=scope)

    def context(self, query: str, *, budget_tokens: int | None = None, scope: Scope | None = None) -> Context:
        return self.retrieve(query, budget_tokens=budget_tokens, scope=scope).context


    def ask(self, question: str, llm: Any, *, budget_tokens: int | None = None,
            scope: Scope | None = None) -> "Answer":
        """Retrieve, then answer with the reader (a memsys.llm.LLMClient)."""
        from memsys.answer.generate import answer_question

        r = self.retrieve(question, budget_tokens=budget_tokens, scope=scope)
        ans = answer_question(llm, question, r.context, self.cfg.answer)
        ans.timings_ms = dict(r.timings_ms)
        return ans
