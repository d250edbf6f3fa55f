"""Reading a memsys tree's config keys from its source (research/levers/target_schema.py), never running it."""

from __future__ import annotations

from harness.paths import REPO_ROOT
from memsys.config import load_memory_config, to_container
from research.levers.scope import absent_levers, flat_paths
from research.levers.target_schema import CONFIG_SOURCE, schema_paths


def test_this_checkouts_schema_is_read_as_the_resolved_config_has_it():
    paths = schema_paths((REPO_ROOT / CONFIG_SOURCE).read_text())
    resolved = flat_paths(to_container(load_memory_config("omni")))
    # the resolved config also has the keys inside dict-valued fields (pyramid.modality_tokens.image)
    assert paths is not None and paths <= resolved
    assert {p.rsplit(".", 1)[0] for p in resolved - paths} == {"pyramid.modality_tokens"}
    assert absent_levers(paths) == []


def test_an_older_tree_lacks_the_keys_its_source_does_not_declare():
    source = '''
from dataclasses import dataclass, field
from typing import ClassVar

@dataclass
class AnswerConfig:
    KINDS: ClassVar[tuple] = ("a",)
    prompt: str = "default"
    type_hints: "bool" = False

@dataclass
class RetrievalConfig:
    top_k: int = 5

@dataclass
class MemoryConfig:
    name: str = "x"
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    retrieval: "RetrievalConfig" = field(default_factory=RetrievalConfig)
'''
    paths = schema_paths(source)
    assert paths == {"name", "answer", "answer.prompt", "answer.type_hints", "retrieval", "retrieval.top_k"}
    absent = absent_levers(paths)
    assert {"answer.image_ids", "retrieval.dense_k", "widen_dense"} <= set(absent)
    assert "retrieval.top_k" not in absent and "answer.type_hints" not in absent


def test_a_tree_whose_schema_cannot_be_read_hides_nothing():
    assert schema_paths("class MemoryConfig(:\n") is None  # does not parse
    assert schema_paths("x = 1\n") is None  # no MemoryConfig here
    loop = "class A:\n    b: 'MemoryConfig'\nclass MemoryConfig:\n    a: A\n"
    assert schema_paths(loop) == {"a", "a.b"}  # a class already on the path is not walked again
