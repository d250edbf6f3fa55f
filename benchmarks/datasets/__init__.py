"""Benchmark loaders: dataset files -> one typed, immutable form (``schema``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.memgallery import load_memgallery
from benchmarks.datasets.schema import (
    CATEGORY_NAMES,
    Benchmark,
    Conversation,
    DatasetTurn,
    Question,
    Session,
    category_names,
    iter_turns,
)
from harness.errors import DatasetError

#: accepted spellings -> canonical benchmark name
_ALIASES = {"locomo": "locomo", "memgallery": "memgallery", "mem-gallery": "memgallery", "mem_gallery": "memgallery"}
BENCHMARKS = ("locomo", "memgallery")


def canonical_name(name: str) -> str:
    try:
        return _ALIASES[name.strip().lower()]
    except KeyError:
        raise DatasetError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


def load_benchmark(name: str, path: str | Path | None = None, *, lenient: bool = False) -> Benchmark:
    """Load a benchmark by name; ``path`` overrides the default location under ``MEMSYS_DATA_DIR``."""
    canonical = canonical_name(name)
    if canonical == "locomo":
        return load_locomo(path, lenient=lenient)
    return load_memgallery(path, lenient=lenient)


__all__ = [
    "BENCHMARKS",
    "CATEGORY_NAMES",
    "Benchmark",
    "Conversation",
    "DatasetTurn",
    "Question",
    "Session",
    "canonical_name",
    "category_names",
    "iter_turns",
    "load_benchmark",
    "load_locomo",
    "load_memgallery",
]
