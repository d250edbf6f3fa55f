"""Knowledge graph of a memory store (paper section "Knowledge graph").

    from memsys.graph import build_graph, KnowledgeGraph
    kg = build_graph(memory)                 # extract (rules | llm), resolve, save, attach
    kg = KnowledgeGraph.load(memory.store)   # what Memory.open uses when graph.enabled
    mau_scores, facts = kg.augment("When did Caroline go to the support group?")

Modules: ``schema`` (records, types, name normalization), ``extract_rules`` (offline
rules; word lists in ``lexicon``, sentences/tokens/dates in ``text``), ``extract_llm``
(one JSON-schema call per MAU, prompt in ``prompts/extract.txt``), ``resolve`` (hybrid
cosine + Jaro-Winkler entity resolution), ``kg`` (graph, seeds, BFS scoring, facts),
``tables`` (SQLite persistence in the store's hot tier), ``build`` (incremental build).
"""

from memsys.graph.build import BuildReport, build_graph, make_extractor
from memsys.graph.extract_llm import EXTRACTION_SCHEMA, LLMExtractor, LLMExtractStats, parse_extraction
from memsys.graph.extract_rules import RuleExtractor
from memsys.graph.kg import GraphHits, KnowledgeGraph, Seed
from memsys.graph.resolve import Merge, Resolution, collect_surface_forms, resolve_entities, resolve_extractions
from memsys.graph.schema import (
    ENTITY_TYPES,
    RELATION_TYPES,
    Entity,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    Relation,
    normalize_name,
)

__all__ = [
    "BuildReport", "ENTITY_TYPES", "EXTRACTION_SCHEMA", "Entity", "ExtractedEntity", "ExtractedRelation",
    "Extraction", "GraphHits", "KnowledgeGraph", "LLMExtractStats", "LLMExtractor", "Merge", "RELATION_TYPES",
    "Relation", "Resolution", "RuleExtractor", "Seed", "build_graph", "collect_surface_forms", "make_extractor",
    "normalize_name", "parse_extraction", "resolve_entities", "resolve_extractions",
]
