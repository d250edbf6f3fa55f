"""bench_lifelong.py and bench_lifelong_parts.py share benchmarks/perf/lifelong_data.py and do not import
each other's helpers: the parts module never imports bench_lifelong, and bench_lifelong names the parts
it runs in a plain dict. Cheap checks only: no haystack is built."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from benchmarks.haystack import HaystackItem

PERF = Path(__file__).resolve().parents[2] / "benchmarks" / "perf"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_no_import_cycle_between_the_lifelong_benches():
    data = _imported_modules(PERF / "lifelong_data.py")
    parts = _imported_modules(PERF / "bench_lifelong_parts.py")
    main = _imported_modules(PERF / "bench_lifelong.py")
    assert not any("bench_lifelong" in m for m in data)
    assert not any(m.endswith("bench_lifelong") or ".bench_lifelong." in m for m in parts)
    assert "benchmarks.perf.lifelong_data" in parts and "benchmarks.perf.lifelong_data" in main
    assert "benchmarks.perf.bench_lifelong_parts" in main


def test_the_other_parts_are_dispatched_by_a_plain_dict_of_the_parts_functions():
    from benchmarks.perf import bench_lifelong, bench_lifelong_parts

    assert bench_lifelong.OTHER_PARTS == {"dense": bench_lifelong_parts.part_dense,
                                          "sparse": bench_lifelong_parts.part_sparse,
                                          "embed": bench_lifelong_parts.part_embed,
                                          "crash": bench_lifelong_parts.part_crash}


def test_both_benches_use_the_same_helpers():
    from benchmarks.perf import bench_lifelong, bench_lifelong_parts, lifelong_data

    for name in ("BATCH", "K", "ann_recall", "base_vectors", "batches", "corpus", "item_vectors", "pct"):
        assert getattr(bench_lifelong_parts, name) is getattr(lifelong_data, name)
    for name in ("BATCH", "K", "NOISE_SIGMA", "ann_recall", "base_vectors", "batches", "corpus", "item_vectors", "pct"):
        assert getattr(bench_lifelong, name) is getattr(lifelong_data, name)


def _item(i: int) -> HaystackItem:
    return HaystackItem(id=f"x/{i}", text=f"turn {i}", user="u", conversation="c", timestamp=None, source_key=f"k{i}",
                        planted=False, speaker="s")


def test_batches_and_percentiles():
    from benchmarks.perf.lifelong_data import batches, pct

    got = list(batches(iter([_item(i) for i in range(5)]), 2))
    assert [[it.id for it in b] for b in got] == [["x/0", "x/1"], ["x/2", "x/3"], ["x/4"]]
    assert list(batches(iter([]), 2)) == []
    assert pct([1.0, 2.0, 3.0], 50) == 2.0
    assert math.isnan(pct([], 95))
