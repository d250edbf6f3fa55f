"""The knowledge graph: resolved entities and relations, persisted in the store,
traversed with networkx at query time.

Query-time augmentation (``augment``), the paper's rule plus what it leaves open:

1. Seeds V_q: entities whose alias (normalized) equals a query n-gram (n <= 5, longest
   first, n-grams of query stopwords skipped, a matched span is not matched again);
   partial names (a Person's name tokens, "smith" for "John Smith"; the head of an
   owner-qualified name, "sunrise" for "Melanie's lake sunrise") match with score 0.9; n-grams left
   over are matched fuzzily (Jaro-Winkler >= ``seed_fuzzy_threshold``). At most
   ``max_seeds``, ranked by match score, n-gram length, then rarity (fewer MAUs).
2. Bounded BFS from V_q within ``hops``, edges undirected for reachability; each
   reached entity v scores r(v) = beta^d(v, V_q) * conf(v).
3. MAUs: the paper says only "MAUs linked to high-scoring entities". We keep entities
   with r(v) >= ``min_score``, weight them by specificity, s(v) = r(v) * spec(v) with
   spec(v) = 1 / (1 + ln |M(v)|) (M(v): MAUs mentioning v), and score a MAU by the max
   s(v) of its entities (ties: the sum, then store order). Measured on LoCoMo: without
   spec a speaker seed (linked to every turn it spoke) ties all its MAUs; with a sum
   instead of the max, turns naming many 1-2 hop entities outrank the turn that names
   the query's specific entity. At most ``max_maus``, best first.
4. Facts for the reader: relations touching reached entities, scored
   conf(rel) * (s(src) + s(dst)) / 2 (an endpoint not reached counts 0), grouped by
   (src, type, dst), rendered "Caroline --occurs_at--> LGBTQ support group (7 May 2023)"
   with the dates of the MAUs they came from; at most ``max_facts``.

A :class:`KnowledgeGraph` never changes after construction (a rebuild makes a new
one), so concurrent ``augment`` calls need no lock.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx
from rapidfuzz.distance import JaroWinkler
from rapidfuzz.process import extractOne

from memsys.config import GraphConfig
from memsys.embed import Embedder
from memsys.graph import tables
from memsys.graph.lexicon import QUERY_STOP
from memsys.graph.resolve import Resolution, noisy_or, resolve_extractions
from memsys.graph.schema import (
    Entity,
    Extraction,
    Relation,
    core_name,
    entity_id,
    mau_date_label,
    normalize_name,
    split_owner,
)
from memsys.retrieve.facts import Fact

MAX_NGRAM = 5
PARTIAL_NAME_SCORE = 0.9  # a seed found through a partial name (see _partial_keys)
_MIN_FUZZY_CHARS = 4
_MAX_FACT_DATES = 3


@dataclass(frozen=True, slots=True)
class Seed:
    entity_id: str
    ngram: str
    match: float  # 1.0 exact alias, 0.9 name token, else the Jaro-Winkler similarity


@dataclass(slots=True)
class GraphHits:
    """Everything ``augment`` computed for one query (for tests, reports and debugging)."""

    seeds: list[Seed] = field(default_factory=list)
    reached: dict[str, tuple[int, float]] = field(default_factory=dict)  # entity -> (hops, r)
    maus: list[tuple[str, float]] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)


def _partial_keys(e: Entity, keys: Iterable[str]) -> set[str]:
    """Lookups that name an entity partially: a Person's name tokens ("smith"), and the
    head of an owner-qualified name ("lake sunrise", "sunrise" for "Melanie's lake sunrise")."""
    out: set[str] = set()
    for k in keys:
        owner, head = split_owner(k)
        toks = head.split()
        if owner is not None:
            out.add(head)
            out.add(toks[-1])
        elif e.type == "Person" and len(toks) > 1:
            out.update(toks)
    return {t for t in out if len(t) >= 3 and t not in QUERY_STOP}


class KnowledgeGraph:
    """Entities + relations with alias lookup and bounded BFS scoring (read-only)."""

    def __init__(self, entities: Iterable[Entity], relations: Iterable[Relation], cfg: GraphConfig | None = None,
                 mau_dates: Mapping[str, str | None] | None = None, meta: Mapping[str, Any] | None = None):
        self.cfg = cfg or GraphConfig()
        self.entities: dict[str, Entity] = {e.id: e for e in entities}
        self.relations: list[Relation] = [r for r in relations if r.src in self.entities and r.dst in self.entities]
        self.mau_dates: dict[str, str | None] = dict(mau_dates or {})
        self.meta: dict[str, Any] = dict(meta or {})
        self.resolution: Resolution | None = None  # set by from_extractions
        self.build_report: Any = None  # set by memsys.graph.build.build_graph
        self.graph = nx.MultiDiGraph()
        for e in self.entities.values():
            self.graph.add_node(e.id, name=e.name, type=e.type, confidence=e.confidence)
        for i, r in enumerate(self.relations):
            self.graph.add_edge(r.src, r.dst, key=i, type=r.type, confidence=r.confidence, mau_id=r.mau_id)
        # reachability only, built in entity and relation order: networkx's undirected view of a
        # directed graph merges neighbours through sets, whose order changes with the hash seed
        self._undirected = nx.Graph()
        self._undirected.add_nodes_from(self.entities)
        self._undirected.add_edges_from((r.src, r.dst) for r in self.relations)
        # facts are rendered per (src, type, dst): group the per-MAU relations once
        group_of: dict[tuple[str, str, str], int] = {}
        self._groups: list[tuple[str, str, str, float, list[str | None]]] = []
        self._touching: dict[str, list[int]] = defaultdict(list)
        for r in self.relations:
            key = (r.src, r.type, r.dst)
            gi = group_of.get(key)
            if gi is None:
                gi = group_of[key] = len(self._groups)
                self._groups.append((r.src, r.type, r.dst, r.confidence, [r.mau_id]))
                self._touching[r.src].append(gi)
                self._touching[r.dst].append(gi)
            else:
                src, type_, dst, conf, maus = self._groups[gi]
                maus.append(r.mau_id)
                if r.confidence > conf:
                    self._groups[gi] = (src, type_, dst, r.confidence, maus)
        self._spec = {eid: 1.0 / (1.0 + math.log(max(1, len(e.mau_ids)))) for eid, e in self.entities.items()}
        self._position = {eid: i for i, eid in enumerate(self.entities)}
        self._alias: dict[str, list[str]] = defaultdict(list)
        self._partial: dict[str, list[str]] = defaultdict(list)
        for e in self.entities.values():
            keys = {normalize_name(n) for n in [e.name, *e.aliases]}
            keys |= {core_name(k) for k in keys}
            for k in sorted(keys):  # sorted: a set's order changes with the process's hash seed
                if k and e.id not in self._alias[k]:
                    self._alias[k].append(e.id)
            for part in sorted(_partial_keys(e, keys)):
                if e.id not in self._partial[part]:
                    self._partial[part].append(e.id)
        self._fuzzy_keys = [k for k in self._alias if len(k) >= _MIN_FUZZY_CHARS]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_extractions(cls, extractions: Sequence[Extraction], embedder: Embedder, cfg: GraphConfig | None = None,
                         mau_dates: Mapping[str, str | None] | None = None,
                         meta: Mapping[str, Any] | None = None) -> "KnowledgeGraph":
        """Resolve entities across all extractions (see memsys.graph.resolve) and build the graph."""
        cfg = cfg or GraphConfig()
        res = resolve_extractions(extractions, embedder, threshold=cfg.resolve_threshold,
                                  cosine_weight=cfg.resolve_cosine_weight)
        entities: list[Entity] = []
        id_of: dict[str, str] = {}
        for canon, members in res.clusters.items():
            forms = [res.forms[k] for k in members]
            head = forms[0]
            eid = entity_id(head.type, canon)
            maus = list(dict.fromkeys(m for f in forms for m in f.mau_ids))
            aliases = [s for f in forms for s in f.spellings if s != head.name]
            conf = noisy_or([f.confidence for f in forms])
            entities.append(Entity(eid, head.name, head.type, aliases, round(conf, 4), maus))
            for k in members:
                id_of[k] = eid
        relations: list[Relation] = []
        seen: set[tuple[str, str, str, str]] = set()
        for ex in extractions:
            for r in ex.relations:
                src, dst = id_of.get(normalize_name(r.source)), id_of.get(normalize_name(r.target))
                if src is None or dst is None or src == dst or (src, dst, r.type, ex.mau_id) in seen:
                    continue
                seen.add((src, dst, r.type, ex.mau_id))
                relations.append(Relation(src, dst, r.type, r.confidence, ex.mau_id))
        meta = {"surface_forms": len(res.forms), "collapsed": res.collapsed, "merges": len(res.merges),
                "pairs_compared": res.pairs_compared, **(meta or {})}
        kg = cls(entities, relations, cfg, mau_dates, meta)
        kg.resolution = res
        return kg

    # ------------------------------------------------------------------ persistence
    def save(self, store: Any) -> None:
        """Write the resolved graph into the store's hot tier in one transaction."""
        conn, lock = tables.store_connection(store)
        tables.write_graph(conn, lock, list(self.entities.values()), self.relations, self.meta)

    @classmethod
    def load(cls, store: Any, cfg: GraphConfig | None = None) -> "KnowledgeGraph | None":
        """The graph saved in ``store``, or None if it has none. MAU dates come from the store."""
        got = tables.read_graph(store.hot_connection(), where=str(getattr(store, "path", "store")))
        if got is None:
            return None
        entities, relations, meta = got
        dates = {m.id: mau_date_label(m) for m in getattr(store, "maus", [])}
        return cls(entities, relations, cfg, dates, meta)

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.entities)

    def entity(self, name: str) -> Entity | None:
        """The entity a name (or alias) refers to; the most mentioned one if several."""
        ids = self._alias.get(normalize_name(name)) or self._alias.get(core_name(normalize_name(name)))
        if not ids:
            return None
        return max((self.entities[i] for i in ids), key=lambda e: len(e.mau_ids))

    def find_seeds(self, query: str) -> list[Seed]:
        tokens = normalize_name(query).split()
        claimed = [False] * len(tokens)
        best: dict[str, Seed] = {}
        leftovers: list[tuple[int, int, str]] = []

        def take(eids: Iterable[str], gram: str, score: float) -> None:
            for eid in eids:
                old = best.get(eid)
                if old is None or (score, len(gram)) > (old.match, len(old.ngram)):
                    best[eid] = Seed(eid, gram, score)

        for n in range(min(MAX_NGRAM, len(tokens)), 0, -1):
            for i in range(len(tokens) - n + 1):
                if any(claimed[i:i + n]) or all(t in QUERY_STOP for t in tokens[i:i + n]):
                    continue
                gram = " ".join(tokens[i:i + n])
                ids, score = self._alias.get(gram), 1.0
                if not ids:
                    ids, score = self._partial.get(gram), PARTIAL_NAME_SCORE
                if ids:
                    take(ids, gram, score)
                    claimed[i:i + n] = [True] * n
                elif n <= 3 and len(gram) >= _MIN_FUZZY_CHARS and tokens[i] not in QUERY_STOP and tokens[i + n - 1] not in QUERY_STOP:
                    leftovers.append((i, n, gram))
        if self._fuzzy_keys:
            for i, n, gram in leftovers:
                if any(claimed[i:i + n]):
                    continue
                hit = extractOne(gram, self._fuzzy_keys, scorer=JaroWinkler.normalized_similarity,
                                 score_cutoff=self.cfg.seed_fuzzy_threshold)
                if hit is not None:
                    take(self._alias[hit[0]], gram, float(hit[1]))
                    claimed[i:i + n] = [True] * n
        ranked = sorted(best.values(), key=lambda s: (-s.match, -len(s.ngram.split()),
                                                      len(self.entities[s.entity_id].mau_ids), s.entity_id))
        return ranked[: self.cfg.max_seeds]

    def expand(self, seed_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Bounded BFS: entity -> (hop distance, r = beta^d * conf) for d <= hops."""
        sources = [s for s in dict.fromkeys(seed_ids) if s in self._undirected]
        out: dict[str, tuple[int, float]] = {}
        if not sources:
            return out
        rank = {v: i for i, v in enumerate(sources)}
        for d, layer in enumerate(nx.bfs_layers(self._undirected, sources)):
            if d > self.cfg.hops:
                break
            # bfs_layers starts from a set of the sources: put each layer in a fixed order (the seeds'
            # order, then the entities'), since ties among the memories follow it
            for v in sorted(layer, key=lambda v: (rank.get(v, len(rank)), self._position[v])):
                out[v] = (d, (self.cfg.beta ** d) * self.entities[v].confidence)
        return out

    def _strength(self, reached: Mapping[str, tuple[int, float]]) -> dict[str, float]:
        """s(v) = r(v) * spec(v) for reached entities with r(v) >= min_score."""
        return {v: r * self._spec[v] for v, (_, r) in reached.items() if r >= self.cfg.min_score}

    def rank_maus(self, reached: Mapping[str, tuple[int, float]]) -> list[tuple[str, float]]:
        """MAUs by max s(v) over their reached entities, ties by sum s(v), then store order."""
        best: dict[str, float] = {}
        total: dict[str, float] = defaultdict(float)
        first_seen: dict[str, int] = {}
        for v, s in self._strength(reached).items():
            for m in self.entities[v].mau_ids:
                if s > best.get(m, 0.0):
                    best[m] = s
                total[m] += s
                first_seen.setdefault(m, len(first_seen))
        top = heapq.nsmallest(self.cfg.max_maus, best, key=lambda m: (-best[m], -total[m], first_seen[m]))
        return [(m, round(best[m], 6)) for m in top]

    def facts(self, reached: Mapping[str, tuple[int, float]]) -> list[str]:
        """Relations touching reached entities by conf(rel) * (s(src) + s(dst)) / 2."""
        s_of = self._strength(reached)
        scored: dict[int, float] = {}
        for v in s_of:
            for gi in self._touching.get(v, ()):
                if gi not in scored:
                    src, _, dst, conf, _ = self._groups[gi]
                    scored[gi] = conf * (s_of.get(src, 0.0) + s_of.get(dst, 0.0)) / 2
        top = heapq.nsmallest(self.cfg.max_facts, scored, key=lambda gi: (-scored[gi], gi))
        return [self._render(*self._groups[gi][:3], self._groups[gi][4]) for gi in top]

    def _render(self, src: str, type_: str, dst: str, mau_ids: Sequence[str | None]) -> str:
        dates = list(dict.fromkeys(d for m in mau_ids if m and (d := self.mau_dates.get(m))))
        label = ""
        if dates:
            more = len(dates) - _MAX_FACT_DATES
            label = f"{'; '.join(dates[:_MAX_FACT_DATES])}{f'; +{more} more' if more > 0 else ''}"
        return Fact(self.entities[src].name, type_, self.entities[dst].name, label).line()

    def search(self, query: str) -> GraphHits:
        seeds = self.find_seeds(query)
        reached = self.expand([s.entity_id for s in seeds])
        return GraphHits(seeds, reached, self.rank_maus(reached), self.facts(reached))

    def augment(self, query: str) -> tuple[list[tuple[str, float]], list[str]]:
        """GraphAugmenter protocol: (MAU id, score) best first, and fact lines for the reader."""
        hits = self.search(query)
        return hits.maus, hits.facts

    def stats(self) -> dict[str, Any]:
        by_type: dict[str, int] = defaultdict(int)
        for e in self.entities.values():
            by_type[e.type] += 1
        rel_types: dict[str, int] = defaultdict(int)
        for r in self.relations:
            rel_types[r.type] += 1
        return {"entities": len(self.entities), "relations": len(self.relations),
                "entity_types": dict(sorted(by_type.items())), "relation_types": dict(sorted(rel_types.items())),
                **{k: v for k, v in self.meta.items() if k in ("surface_forms", "collapsed", "merges", "extractor")}}
