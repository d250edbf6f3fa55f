"""Versioned dev/test splits and stratified samples."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.datasets import category_names, load_benchmark
from benchmarks.splits import (
    BenchmarkConfig,
    allocate,
    assert_disjoint,
    benchmark_config,
    check_split,
    load_benchmark_config,
    select,
    stratified_sample,
)
from harness.errors import ConfigError
from harness.paths import config_dir, data_dir
from memsys.config import compose

HAVE_DATA = (data_dir() / "locomo" / "locomo10.json").is_file() and (data_dir() / "mem-gallery").is_dir()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason=f"benchmark data not under {data_dir()}")
NAMES = ("locomo", "memgallery")


@pytest.mark.parametrize("name", NAMES)
def test_dev_and_test_never_overlap(name):
    cfg = load_benchmark_config(name)
    assert cfg.name == name and cfg.split_version == 1
    assert not set(cfg.dev) & set(cfg.test)
    assert_disjoint(cfg)


def test_split_v1_is_pinned():
    """Editing a split silently would make old and new results incomparable: bump split_version."""
    locomo = load_benchmark_config("locomo")
    assert locomo.dev == ["conv-26", "conv-30"]
    assert len(locomo.test) == 8
    gallery = load_benchmark_config("memgallery")
    assert gallery.dev == [
        "AI_Robotics_Automation_Future_Tech",
        "Academic_Animal_Pet_Research_Life",
        "Architecture_Art_Culture_Exhibition_Technology",
    ]
    assert len(gallery.test) == 17


def test_assert_disjoint_rejects_overlap_and_repeats():
    with pytest.raises(ConfigError, match=r"dev and test overlap on \['b'\]"):
        assert_disjoint(BenchmarkConfig(name="locomo", data_subdir="x", dev=["a", "b"], test=["b", "c"]))
    with pytest.raises(ConfigError, match="dev lists"):
        assert_disjoint(BenchmarkConfig(name="locomo", data_subdir="x", dev=["a", "a"], test=["c"]))


@needs_data
@pytest.mark.parametrize("name", NAMES)
def test_split_covers_the_benchmark(name):
    b = load_benchmark(name)
    cfg = load_benchmark_config(name)
    check_split(cfg, b)
    dev, test = select(b, "dev"), select(b, "test")
    assert {c.id for c in dev.conversations} == set(cfg.dev)
    assert not {q.id for q in dev.questions} & {q.id for q in test.questions}
    assert len(dev.questions) + len(test.questions) == len(b.questions)
    assert select(b, "all").questions == b.questions
    assert (dev.split, dev.sample, dev.split_version) == ("dev", None, 1)


@needs_data
def test_dev_counts():
    dev = select(load_benchmark("locomo"), "dev")
    assert dev.stats()["questions"] == 304 and dev.stats()["turns"] == 788
    gallery = select(load_benchmark("memgallery"), "dev")
    assert gallery.stats()["questions"] == 208 and gallery.stats()["sessions"] == 40
    assert {q.category for q in gallery.questions} == set(category_names("memgallery"))  # all nine


@needs_data
@pytest.mark.parametrize(("name", "tiny", "n_categories"), [("locomo", 12, 5), ("memgallery", 18, 9)])
def test_samples_are_stratified_deterministic_and_nested(name, tiny, n_categories):
    b = load_benchmark(name)
    full_dev = select(b, "dev")
    t1, t2 = select(b, "dev", "tiny"), select(b, "dev", "tiny")
    assert [q.id for q in t1.questions] == [q.id for q in t2.questions]
    assert len(t1.questions) == tiny and t1.sample == "tiny"
    assert len({q.category for q in t1.questions}) == n_categories  # every category is represented
    small = select(b, "dev", "small")
    assert {q.id for q in t1.questions} <= {q.id for q in small.questions}
    assert select(b, "dev", "full").questions == full_dev.questions
    # conversations keep every turn even when only some questions are sampled
    for c in t1.conversations:
        assert c.sessions == full_dev.conversation(c.id).sessions


def test_allocate_by_hand():
    assert allocate({"a": 10, "b": 1}, 5) == {"a": 4, "b": 1}  # b keeps its one question
    assert allocate({"a": 30, "b": 10}, 4) == {"a": 3, "b": 1}
    assert allocate({"a": 5, "b": 5, "c": 5}, 2) == {"a": 1, "b": 1, "c": 0}  # too few for all: ties by name
    assert allocate({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}  # capped at the pool
    assert sum(allocate({"1": 43, "2": 63, "3": 13, "4": 114, "5": 71}, 12).values()) == 12


def test_stratified_sample_keeps_order():
    from benchmarks.datasets.schema import Question

    pool = [Question(id=f"c:q{i}", conversation_id="c", question="?", answer="x", category="AB"[i % 2])
            for i in range(20)]
    picked = stratified_sample(pool, 6, seed=1)
    assert len(picked) == 6 and [q.category for q in picked].count("A") == 3
    assert picked == [q for q in pool if q in picked]
    assert stratified_sample(pool, 6, seed=2) != picked  # the seed matters


def test_bad_configs():
    good = {"name": "locomo", "data_subdir": "locomo", "dev": ["a"], "test": ["b"], "samples": {"tiny": 2}}
    assert benchmark_config(good).samples == {"tiny": 2}
    with pytest.raises(ConfigError, match="tset"):
        benchmark_config({**good, "tset": ["b"]})
    with pytest.raises(ConfigError, match="sample sizes must be >= 0"):
        benchmark_config({**good, "samples": {"tiny": -1}})
    with pytest.raises(ConfigError, match="samples must map names to integers"):
        benchmark_config({**good, "samples": {"tiny": "12"}})
    with pytest.raises(ConfigError, match="unknown benchmark"):
        benchmark_config({**good, "name": "squad"})
    with pytest.raises(ConfigError, match="overlap"):
        benchmark_config({**good, "test": ["a"]})
    with pytest.raises(ConfigError, match="empty dev"):
        benchmark_config({**good, "dev": []})
    with pytest.raises(ConfigError):
        benchmark_config({"data_subdir": "locomo"})  # name is mandatory


@needs_data
def test_select_rejects_unknown_split_sample_and_stale_split():
    b = load_benchmark("locomo")
    with pytest.raises(ConfigError, match="unknown split 'train'"):
        select(b, "train")
    with pytest.raises(ConfigError, match="unknown sample 'huge'"):
        select(b, "dev", "huge")
    cfg = load_benchmark_config("locomo")
    missing_one = BenchmarkConfig(**{**cfg.__dict__, "test": cfg.test[:-1]})
    with pytest.raises(ConfigError, match=r"in neither dev nor test: \['conv-50'\]"):
        select(b, "dev", config=missing_one)
    unknown = BenchmarkConfig(**{**cfg.__dict__, "dev": [*cfg.dev, "conv-99"]})
    with pytest.raises(ConfigError, match="unknown conversation ids"):
        select(b, "dev", config=unknown)
    with pytest.raises(ConfigError, match="needs the whole benchmark"):
        select(select(b, "dev"), "dev", "tiny")
    with pytest.raises(ConfigError, match="used with benchmark"):
        select(load_benchmark("memgallery"), "dev", config=cfg)


def test_configs_compose_as_hydra_group(tmp_path: Path):
    shutil.copytree(config_dir() / "benchmark", tmp_path / "benchmark")
    (tmp_path / "primary.yaml").write_text("defaults:\n  - benchmark: locomo\n  - _self_\n")
    cfg = compose("primary", directory=tmp_path)
    assert benchmark_config(cfg.benchmark) == load_benchmark_config("locomo")
    cfg = compose("primary", ["benchmark=memgallery", "benchmark.seed=7", "+benchmark.samples.medium=100"],
                  directory=tmp_path)
    gallery = benchmark_config(cfg.benchmark)
    assert gallery.name == "memgallery" and gallery.seed == 7 and gallery.samples["medium"] == 100


@needs_data
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sample", ["tiny", "small", "half"])
def test_complement_is_a_disjoint_stratified_slice_of_the_same_size(name, sample):
    b = load_benchmark(name)
    dev = select(b, "dev")
    chosen = select(b, "dev", sample)
    other = select(b, "dev", sample, complement=True)
    ids, other_ids = {q.id for q in chosen.questions}, {q.id for q in other.questions}
    assert not ids & other_ids
    assert len(other_ids) == len(ids) == load_benchmark_config(name).samples[sample]
    assert other_ids <= {q.id for q in dev.questions}
    assert [q.id for q in select(b, "dev", sample, complement=True).questions] == [q.id for q in other.questions]
    assert (other.split, other.sample) == ("dev", f"{sample}-complement")
    # stratified: every category, each near its share of dev
    total = len(dev.questions)
    for cat in {q.category for q in dev.questions}:
        share = sum(q.category == cat for q in dev.questions) * len(other_ids) / total
        got = sum(q.category == cat for q in other.questions)
        assert got >= 1 and abs(got - share) <= 2, (cat, got, share)
    # conversations keep every turn; those left without questions are dropped
    for c in other.conversations:
        assert c.questions and c.sessions == dev.conversation(c.id).sessions


@needs_data
def test_the_complement_of_half_is_the_other_half():
    b = load_benchmark("locomo")
    halves = select(b, "dev", "half"), select(b, "dev", "half", complement=True)
    assert {q.id for h in halves for q in h.questions} == {q.id for q in select(b, "dev").questions}


@needs_data
def test_complement_of_the_whole_split_is_refused():
    b = load_benchmark("locomo")
    for sample in (None, "full"):
        with pytest.raises(ConfigError, match="leaves no disjoint dev slice"):
            select(b, "dev", sample, complement=True)
    cfg = load_benchmark_config("locomo")
    zero = BenchmarkConfig(**{**cfg.__dict__, "samples": {**cfg.samples, "everything": 0}})
    with pytest.raises(ConfigError, match="'everything' of locomo is the whole split"):
        select(b, "dev", "everything", config=zero, complement=True)
    with pytest.raises(ConfigError, match="unknown sample 'huge'"):
        select(b, "dev", "huge", complement=True)


@needs_data
def test_complement_smaller_than_the_sample_when_the_split_runs_out():
    b = load_benchmark("locomo")
    cfg = load_benchmark_config("locomo")
    big = BenchmarkConfig(**{**cfg.__dict__, "samples": {"most": 250}})
    other = select(b, "dev", "most", config=big, complement=True)
    assert len(other.questions) == 304 - 250
    assert not {q.id for q in other.questions} & {q.id for q in select(b, "dev", "most", config=big).questions}
