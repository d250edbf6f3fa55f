"""Versioned dev/test splits and deterministic, category-stratified samples.

The split of each benchmark lives in ``configs/benchmark/<name>.yaml`` (schema:
``BenchmarkConfig``) and is part of the trusted scorer: the research loop only ever
receives ``select(benchmark, "dev", ...)``; test conversations are held out for the
final evaluation. Dev and test must be disjoint and together cover the benchmark.

Sampling is by question: within each category, questions are ranked by
sha256("<seed>:<question id>") and the first ones are taken. A question's rank thus
depends only on its own id and the seed, so samples are stable across machines and
Python versions, and a smaller sample is (almost always) inside a larger one.

The complement of a named sample (``complement=True``) is the split's other
questions, stratified the same way down to the sample's size: a second, disjoint
slice on which a change selected on the sample is checked before it is accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf

from benchmarks.datasets import canonical_name
from benchmarks.datasets.schema import Benchmark, Question
from harness.config import validate
from harness.errors import ConfigError, DatasetError
from harness.paths import config_dir

SPLITS = ("dev", "test", "all")
FULL = "full"  # sample name that always means every question


@dataclass
class BenchmarkConfig:
    name: str = MISSING  # "locomo" | "memgallery"
    data_subdir: str = MISSING  # folder under MEMSYS_DATA_DIR
    split_version: int = 1
    dev: list[str] = field(default_factory=list)  # conversation ids the research loop may see
    test: list[str] = field(default_factory=list)  # held-out conversation ids
    samples: dict[str, int] = field(default_factory=dict)  # name -> number of questions (0 = all)
    seed: int = 1


def benchmark_config(node: Any, where: str = "benchmark config") -> BenchmarkConfig:
    """Validate a composed node (e.g. ``cfg.benchmark``) or a dict into a BenchmarkConfig."""
    raw = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    if not isinstance(raw, dict):
        raise ConfigError(f"invalid {where}: expected a mapping, got {type(raw).__name__}")
    raw = dict(raw)
    # memsys.config.validate makes every node struct, which would reject the (open)
    # sample names of a dict field: check ``samples`` here instead.
    samples = raw.pop("samples", {}) or {}
    cfg: BenchmarkConfig = validate(BenchmarkConfig, raw, where=where)
    if not isinstance(samples, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in samples.items()
    ):
        raise ConfigError(f"invalid {where}: samples must map names to integers, got {samples!r}")
    cfg.samples = dict(samples)
    try:
        cfg.name = canonical_name(cfg.name)
    except DatasetError as exc:
        raise ConfigError(f"invalid {where}: {exc}") from None
    if cfg.split_version < 1:
        raise ConfigError(f"invalid {where}: split_version must be >= 1, got {cfg.split_version}")
    bad = {k: v for k, v in cfg.samples.items() if v < 0}
    if bad:
        raise ConfigError(f"invalid {where}: sample sizes must be >= 0 (0 = all), got {bad}")
    if not cfg.dev:
        raise ConfigError(f"invalid {where}: empty dev split")
    assert_disjoint(cfg)
    return cfg


def load_benchmark_config(name: str, directory: str | Path | None = None) -> BenchmarkConfig:
    """``configs/benchmark/<name>.yaml`` (or ``<directory>/benchmark/<name>.yaml``), validated."""
    name = canonical_name(name)
    path = Path(directory or config_dir()) / "benchmark" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no benchmark config {path}")
    try:
        node = OmegaConf.load(path)
    except Exception as exc:  # yaml errors come in several types
        raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from exc
    return benchmark_config(node, where=str(path.name))


def assert_disjoint(cfg: BenchmarkConfig) -> None:
    """Raise ConfigError if a conversation is in both dev and test (or listed twice)."""
    both = sorted(set(cfg.dev) & set(cfg.test))
    if both:
        raise ConfigError(f"{cfg.name} split v{cfg.split_version}: dev and test overlap on {both}")
    for part in ("dev", "test"):
        ids = getattr(cfg, part)
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ConfigError(f"{cfg.name} split v{cfg.split_version}: {part} lists {repeated} more than once")


def check_split(cfg: BenchmarkConfig, benchmark: Benchmark) -> None:
    """The split names real conversations and covers all of them (nothing falls in neither)."""
    if canonical_name(cfg.name) != benchmark.name:
        raise ConfigError(f"split config {cfg.name!r} used with benchmark {benchmark.name!r}")
    assert_disjoint(cfg)
    known = {c.id for c in benchmark.conversations}
    unknown = sorted((set(cfg.dev) | set(cfg.test)) - known)
    if unknown:
        raise ConfigError(f"{cfg.name} split v{cfg.split_version}: unknown conversation ids {unknown}")
    uncovered = sorted(known - set(cfg.dev) - set(cfg.test))
    if uncovered:
        raise ConfigError(f"{cfg.name} split v{cfg.split_version}: conversations in neither dev nor test: {uncovered}")


def select(
    benchmark: Benchmark,
    split: str,
    sample: str | None = None,
    config: BenchmarkConfig | None = None,
    *,
    complement: bool = False,
) -> Benchmark:
    """The benchmark restricted to a split's conversations and, optionally, a named sample.

    Conversations keep all their sessions and turns (the memory must still ingest the
    whole dialogue); only questions are sampled. With a sample, conversations left
    without questions are dropped (nothing to ask, no need to ingest them).

    ``complement``: the split's questions *not* in the sample, stratified (same seed)
    down to the sample's size (fewer if the rest of the split is smaller); its ``sample``
    is named ``<sample>-complement``.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if benchmark.split != "all" or benchmark.sample is not None:
        raise ConfigError(f"select() needs the whole benchmark, got its {benchmark.split!r} split; load it again")
    cfg = config or load_benchmark_config(benchmark.name)
    check_split(cfg, benchmark)
    wanted = {"dev": set(cfg.dev), "test": set(cfg.test), "all": set(cfg.dev) | set(cfg.test)}[split]
    conversations = [c for c in benchmark.conversations if c.id in wanted]
    size = check_complement(cfg, sample) if complement else _sample_size(cfg, sample)
    if size:
        pool = [q for c in conversations for q in c.questions]
        keep = {q.id for q in stratified_sample(pool, size, cfg.seed)}
        if complement:
            keep = {q.id for q in stratified_sample([q for q in pool if q.id not in keep], size, cfg.seed)}
        conversations = [
            dataclasses.replace(c, questions=tuple(q for q in c.questions if q.id in keep)) for c in conversations
        ]
        conversations = [c for c in conversations if c.questions]
    name = sample if sample and sample != FULL else None
    return dataclasses.replace(
        benchmark,
        conversations=tuple(conversations),
        split=split,
        sample=f"{name}-complement" if complement else name,
        split_version=cfg.split_version,
    )


def check_complement(cfg: BenchmarkConfig, sample: str | None) -> int:
    """The sample's size, or ConfigError when the sample is the whole split (its complement is empty)."""
    size = _sample_size(cfg, sample)
    if not size:
        raise ConfigError(f"complement=true needs a named sample smaller than the split: sample {sample or FULL!r} "
                          f"of {cfg.name} is the whole split and leaves no disjoint dev slice")
    return size


def _sample_size(cfg: BenchmarkConfig, sample: str | None) -> int:
    if sample is None or sample == FULL:
        return 0
    if sample not in cfg.samples:
        raise ConfigError(f"unknown sample {sample!r} for {cfg.name}; known: {', '.join(sorted(cfg.samples))}")
    return cfg.samples[sample]


def sample_rank(question_id: str, seed: int) -> str:
    """The question's position key in every sample: independent of the pool and of Python's hash seed."""
    return hashlib.sha256(f"{seed}:{question_id}".encode()).hexdigest()


def allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Split ``n`` over categories in proportion to their sizes (largest remainder).

    Every non-empty category gets at least one question when ``n`` allows it, so a
    tiny sample still touches every category; ties break by category name.
    """
    total = sum(sizes.values())
    n = min(n, total)
    cats = sorted(c for c, s in sizes.items() if s > 0)
    quota = {c: n * sizes[c] / total for c in cats}
    alloc = {c: int(quota[c]) for c in cats}
    if n >= len(cats):
        alloc = {c: max(1, a) for c, a in alloc.items()}
    while sum(alloc.values()) > n:  # the minimum of one overshot: take from the most over-served
        c = max((c for c in cats if alloc[c] > 1), key=lambda c: (alloc[c] - quota[c], c))
        alloc[c] -= 1
    while sum(alloc.values()) < n:
        c = max((c for c in cats if alloc[c] < sizes[c]), key=lambda c: (quota[c] - alloc[c], -cats.index(c)))
        alloc[c] += 1
    return alloc


def stratified_sample(questions: list[Question], n: int, seed: int) -> list[Question]:
    """``n`` questions stratified by category, in their original order."""
    by_cat: dict[str, list[Question]] = {}
    for q in questions:
        by_cat.setdefault(q.category, []).append(q)
    alloc = allocate({c: len(qs) for c, qs in by_cat.items()}, n)
    chosen: set[str] = set()
    for cat, k in alloc.items():
        ranked = sorted(by_cat[cat], key=lambda q: sample_rank(q.id, seed))
        chosen.update(q.id for q in ranked[:k])
    return [q for q in questions if q.id in chosen]
