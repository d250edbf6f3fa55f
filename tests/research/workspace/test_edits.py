"""research.workspace.edits: SEARCH/REPLACE blocks, the mutable-surface check, config overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from research.errors import EditApplyError, ForbiddenEditError
from research.journal.trajectory import Edit
from research.workspace.edits import apply_block, apply_config_overrides, apply_edits, check_surface

SURFACE = ["memsys/", "configs/memory/"]
REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- apply_block
def test_exact_match_replaces_first_occurrence_only() -> None:
    text = "a = 1\nb = 2\na = 1\n"
    assert apply_block(text, "a = 1", "a = 3", "t") == "a = 3\nb = 2\na = 1\n"


def test_multiline_exact_match() -> None:
    text = "def f():\n    return 1\n\ndef g():\n    return 2\n"
    out = apply_block(text, "def g():\n    return 2", "def g():\n    return 20", "t")
    assert out == "def f():\n    return 1\n\ndef g():\n    return 20\n"


def test_trailing_whitespace_tolerated_in_file() -> None:
    text = "x = 1   \ny = 2\t\nz = 3\n"  # the file has trailing whitespace the model dropped
    out = apply_block(text, "x = 1\ny = 2", "x = 10\ny = 20", "t")
    assert out == "x = 10\ny = 20\nz = 3\n"


def test_trailing_whitespace_tolerated_in_search() -> None:
    text = "x = 1\ny = 2\n"
    out = apply_block(text, "x = 1  \ny = 2 ", "X", "t")
    assert out == "X\n"


def test_leading_whitespace_is_not_tolerated() -> None:
    with pytest.raises(EditApplyError, match="not found"):
        apply_block("    return 1\n", "return 1\nfoo", "x", "t")
    with pytest.raises(EditApplyError, match="not found"):
        apply_block("  x = 1\n", " x  = 1", "y", "t")


def test_not_found_names_the_location_and_first_line() -> None:
    with pytest.raises(EditApplyError) as ei:
        apply_block("a\n", "missing line\nmore", "x", "edit 2 (memsys/x.py)")
    msg = str(ei.value)
    assert "edit 2 (memsys/x.py)" in msg and "missing line" in msg
    assert ei.value.kind == "edit_apply"


def test_empty_search_rejected() -> None:
    with pytest.raises(EditApplyError, match="empty SEARCH"):
        apply_block("abc", "", "x", "t")


# ---------------------------------------------------------------- surface
@pytest.mark.parametrize("path", ["memsys/retrieve/merge.py", "configs/memory/naive.yaml", "memsys"])
def test_surface_accepts(path: str) -> None:
    check_surface([path], SURFACE)


@pytest.mark.parametrize(
    "path",
    [
        "benchmarks/metrics/locomo.py",  # the scorer
        "research/loop/decide.py",
        "memsys_evil/x.py",  # a prefix of a surface dir is not inside it
        "configs/run.yaml",
        "configs/memoryx/a.yaml",
        "../outside.py",
        "memsys/../benchmarks/metrics/locomo.py",
        "/etc/passwd",
    ],
)
def test_surface_rejects(path: str) -> None:
    with pytest.raises(ForbiddenEditError):
        check_surface([path], SURFACE)


def test_escape_message_mentions_leaving_repo() -> None:
    with pytest.raises(ForbiddenEditError, match="leaves the repository"):
        check_surface(["memsys/../../x.py"], SURFACE)
    with pytest.raises(ForbiddenEditError, match="outside the mutable surface"):
        check_surface(["benchmarks/x.py"], SURFACE)


# ---------------------------------------------------------------- apply_edits
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "memsys").mkdir()
    (tmp_path / "memsys" / "a.py").write_text("A = 1\nB = 2\n", encoding="utf-8")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "score.py").write_text("S = 1\n", encoding="utf-8")
    return tmp_path


def test_apply_edits_in_order_on_same_file(tree: Path) -> None:
    edits = [Edit("memsys/a.py", "A = 1", "A = 10"), Edit("memsys/a.py", "A = 10\nB = 2", "A = 11\nB = 22")]
    assert apply_edits(tree, edits, SURFACE) == ["memsys/a.py"]
    assert (tree / "memsys/a.py").read_text() == "A = 11\nB = 22\n"


def test_apply_edits_creates_new_file(tree: Path) -> None:
    changed = apply_edits(tree, [Edit("memsys/new/mod.py", "", "X = 1\n")], SURFACE)
    assert changed == ["memsys/new/mod.py"]
    assert (tree / "memsys/new/mod.py").read_text() == "X = 1\n"


def test_apply_edits_all_or_nothing(tree: Path) -> None:
    edits = [Edit("memsys/a.py", "A = 1", "A = 10"), Edit("memsys/a.py", "NOT THERE", "x")]
    with pytest.raises(EditApplyError, match="edit 2"):
        apply_edits(tree, edits, SURFACE)
    assert (tree / "memsys/a.py").read_text() == "A = 1\nB = 2\n"


def test_apply_edits_missing_file(tree: Path) -> None:
    with pytest.raises(EditApplyError, match="does not exist"):
        apply_edits(tree, [Edit("memsys/nope.py", "x", "y")], SURFACE)


def test_apply_edits_forbidden_touches_nothing(tree: Path) -> None:
    edits = [Edit("memsys/a.py", "A = 1", "A = 10"), Edit("benchmarks/score.py", "S = 1", "S = 100")]
    with pytest.raises(ForbiddenEditError):
        apply_edits(tree, edits, SURFACE)
    assert (tree / "memsys/a.py").read_text() == "A = 1\nB = 2\n"
    assert (tree / "benchmarks/score.py").read_text() == "S = 1\n"


def test_apply_edits_rejects_traversal(tree: Path) -> None:
    with pytest.raises(ForbiddenEditError):
        apply_edits(tree, [Edit("../escape.py", "", "x")], SURFACE)
    assert not (tree.parent / "escape.py").exists()


# ---------------------------------------------------------------- config overrides
@pytest.fixture
def preset_tree(tmp_path: Path) -> Path:
    d = tmp_path / "configs" / "memory"
    d.mkdir(parents=True)
    (d / "naive.yaml").write_text((REPO / "configs/memory/naive.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_config_overrides_written_into_preset(preset_tree: Path) -> None:
    changed = apply_config_overrides(preset_tree, "naive", ["retrieval.top_k=20", "memory.retrieval.merge=rrf",
                                                            " pyramid.theta = 0.3"], SURFACE)
    assert changed == ["configs/memory/naive.yaml"]
    cfg = OmegaConf.load(preset_tree / "configs/memory/naive.yaml")
    assert cfg.retrieval.top_k == 20 and isinstance(cfg.retrieval.top_k, int)
    assert cfg.retrieval.merge == "rrf"
    assert cfg.pyramid.theta == pytest.approx(0.3)
    assert cfg.retrieval.dense_k == 5  # untouched keys kept
    assert cfg.name == "naive"


def test_a_string_lever_set_to_off_stays_off_and_a_bool_still_takes_the_word(preset_tree: Path) -> None:
    """YAML 1.1 reads off/on as booleans: TPE's draw answer.abstain=off once became the string 'False'."""
    from memsys.config import load_memory_config
    from research.levers.catalogue import resolve

    apply_config_overrides(preset_tree, "naive", ["answer.abstain=off", "pyramid.enabled=on"], SURFACE)
    cfg = OmegaConf.load(preset_tree / "configs/memory/naive.yaml")
    assert cfg.answer.abstain == "off" and cfg.pyramid.enabled == "on"
    resolved = resolve(load_memory_config("naive"), ["answer.abstain=off", "pyramid.enabled=on", "graph.enabled=no"])
    assert resolved.answer.abstain == "off" and resolved.pyramid.enabled is True and resolved.graph.enabled is False


def test_no_overrides_is_a_noop(preset_tree: Path) -> None:
    before = (preset_tree / "configs/memory/naive.yaml").read_text()
    assert apply_config_overrides(preset_tree, "naive", [], SURFACE) == []
    assert (preset_tree / "configs/memory/naive.yaml").read_text() == before


@pytest.mark.parametrize(
    "override",
    [
        "retrieval.top_kk=20",  # typo'd key
        "retreival.top_k=20",  # typo'd section
        "retrieval.top_k=lots",  # wrong type
        "retrieval.top_k",  # not key=value
    ],
)
def test_bad_override_fails_and_leaves_preset(preset_tree: Path, override: str) -> None:
    before = (preset_tree / "configs/memory/naive.yaml").read_text()
    with pytest.raises(EditApplyError):
        apply_config_overrides(preset_tree, "naive", ["retrieval.dense_k=7", override], SURFACE)
    assert (preset_tree / "configs/memory/naive.yaml").read_text() == before


def test_overrides_need_preset_on_surface(preset_tree: Path) -> None:
    with pytest.raises(ForbiddenEditError):
        apply_config_overrides(preset_tree, "naive", ["retrieval.top_k=20"], ["memsys/"])


def test_a_macro_lever_override_is_written_as_the_keys_it_sets(preset_tree: Path) -> None:
    """A preset has no key for a macro lever: ``widen_hybrid=20`` as it stands is refused (a ConfigKeyError,
    named), and the proposer's expansion (research.levers.catalogue.expand_macros) writes what the macro sets."""
    from research.levers.catalogue import expand_macros, lever_by_id
    from research.proposers.context import resolved_memory

    preset = preset_tree / "configs/memory/naive.yaml"
    before = preset.read_text()
    with pytest.raises(EditApplyError, match="widen_hybrid"):
        apply_config_overrides(preset_tree, "naive", ["widen_hybrid=20"], SURFACE)
    assert preset.read_text() == before
    apply_config_overrides(preset_tree, "naive", expand_macros(["widen_hybrid=20"]), SURFACE)
    cfg = OmegaConf.load(preset)
    assert (cfg.retrieval.merge, cfg.retrieval.dense_k, cfg.retrieval.sparse_k, cfg.retrieval.top_k) == ("set_union", 20, 20, 20)
    assert lever_by_id("widen_hybrid").current(resolved_memory(preset.read_text())) == 20
