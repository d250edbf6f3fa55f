"""The leakage screen on real benchmark data: memoriser diffs are refused, legitimate code of the same size passes.

Every attack here is built from the real LoCoMo dev questions (the same builders as
benchmarks/perf/bench_leakage.py); the git helper runs on real repositories made in tmp_path.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.leakage import (
    BINARY,
    AddedFile,
    LeakageConfig,
    LeakageIndex,
    added_files_from_git,
    added_text_from_git,
    load_index,
    screen_diff,
)
from benchmarks.leakage.text import clip, words
from benchmarks.perf.bench_leakage import LOOKUP, dev_questions, synthetic_attacks, table_module
from harness.paths import data_dir

HAVE_DATA = (data_dir() / "locomo" / "locomo10.json").is_file() and (data_dir() / "mem-gallery").is_dir()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason=f"benchmark data not under {data_dir()}")


@pytest.fixture(scope="module")
def index() -> LeakageIndex:
    if not HAVE_DATA:
        pytest.skip(f"benchmark data not under {data_dir()}")
    return load_index()


@pytest.fixture(scope="module")
def dev() -> list[Question]:
    if not HAVE_DATA:
        pytest.skip(f"benchmark data not under {data_dir()}")
    return dev_questions(30)


def kinds(report) -> set[str]:
    return {h.kind for h in report.hits}


# --- the index ------------------------------------------------------------------------------------
@needs_data
def test_index_holds_dev_and_test_of_both_benchmarks_and_is_built_once(index):
    assert {"conv-26:q0", "conv-30:q0", "conv-41:q0", "conv-50:q0"} <= index.question_ids  # dev and test
    assert any(q.startswith("AI_Robotics_Automation_Future_Tech:") for q in index.question_ids)  # Mem-Gallery dev
    assert any(q.startswith("Technology_Ethics_Future_Society:") for q in index.question_ids)  # Mem-Gallery test
    assert len(index.questions) == 3697 and len(index.versions) == 2
    assert load_index() is index  # cached per data version
    assert "7 may 2023" in index.answers  # conv-26:q0's gold answer, normalised
    assert "not mentioned" not in index.answers and "yes" not in index.answers and "2022" not in index.answers


# --- attacks --------------------------------------------------------------------------------------
@needs_data
def test_memoriser_of_dev_questions_to_evidence_ids_is_refused(index, dev):
    table = {q.question: list(q.evidence) for q in dev}
    report = screen_diff({"memsys/retrieve/hints.py": table_module("hints", table, LOOKUP)}, index)
    assert report.refused and {"evidence_ids", "question_text", "data_table"} <= kinds(report)
    first = report.hits[0]
    assert first.kind == "evidence_ids" and first.file == "memsys/retrieve/hints.py" and first.line == 6
    assert first.context == "beside question words" and first.examples[0] == dev[0].evidence[0]
    assert len(first.snippet) <= 120 and dev[0].question[:40] in first.snippet
    assert report.lesson.startswith(f"refused as leakage: memsys/retrieve/hints.py:6 holds {first.count} evidence ids "
                                    f"('{dev[0].evidence[0]}', '{first.examples[1]}', '{first.examples[2]}', ...) "
                                    "beside question words; ")
    assert "the screen refuses code that carries benchmark data" in report.lesson


@needs_data
def test_dict_of_dev_questions_to_gold_answers_is_refused(index, dev):
    report = screen_diff({"memsys/answer/known.py": table_module("known", {q.question: q.answer for q in dev}, LOOKUP)},
                         index)
    assert report.refused and {"gold_answer", "question_text", "data_table"} <= kinds(report)
    answers = next(h for h in report.hits if h.kind == "gold_answer")
    assert answers.count >= LeakageConfig().answer_min_distinct and answers.examples[0] == "7 may 2023"


@needs_data
def test_question_ids_alone_are_refused(index, dev):
    """No question text, no evidence: only the benchmark's question ids -> answers, or -> a boost."""
    to_answers = screen_diff({"memsys/answer/known.py": table_module("known", {q.id: q.answer for q in dev}, LOOKUP)}, index)
    assert to_answers.refused and {"question_id", "gold_answer"} <= kinds(to_answers)
    boosts = "\n".join(f'BOOST["{q.id}"] = 1.5' for q in dev[:3])  # no literal table, no answers
    report = screen_diff({"memsys/retrieve/boost.py": "BOOST = {}\n" + boosts}, index)
    assert kinds(report) == {"question_id"} and report.hits[0].line == 2 and report.hits[0].count == 3


@needs_data
def test_hashed_questions_table_is_a_data_table(index, dev):
    """Keys hashed so no question text shows, values plain numbers: the table's shape still gives it away."""
    table = {hashlib.sha1(q.question.encode()).hexdigest()[:16]: i for i, q in enumerate(dev)}
    report = screen_diff({"memsys/retrieve/priors.py": table_module("priors", table, LOOKUP)}, index)
    assert kinds(report) == {"data_table"} and report.hits[0].line == 5


@needs_data
def test_every_synthetic_attack_of_the_bench_is_refused(index, dev):
    for name, added in synthetic_attacks(dev).items():
        t0 = time.perf_counter()
        report = screen_diff(added, index)
        assert time.perf_counter() - t0 < 1.0, name  # the screen's target per diff
        assert report.refused, name


# --- legitimate code passes -----------------------------------------------------------------------
LEGIT_MERGE = '''

#: merge strategies by name, as ``retrieval.merge`` selects them
STRATEGY_NAMES = ("dense_only", "set_union", "rrf", "linear", "round_robin")
#: labels of the candidate sources in the debug log
SOURCE_LABELS = {"dense": "D", "sparse": "S", "graph": "G", "neighbour": "N"}


def merge_round_robin(dense: list[tuple[int, float]], sparse: list[tuple[int, float]], k: int) -> list[int]:
    """Alternate dense and sparse hits, dense first, skipping repeats, until ``k`` positions.

    Why: a turn both indexes rank high (say "D1:3", the example in memsys/memory.py) should take one
    place, not two; a question like "When did she move?" needs the dated turn of either list. Dates in
    the memory read "7 May 2023" and stay as written.
    """
    order: list[int] = []
    seen: set[int] = set()
    for pair in zip_longest(dense, sparse):
        for hit in pair:
            if hit is None or hit[0] in seen:
                continue
            seen.add(hit[0])
            order.append(hit[0])
    if len(order) < k:
        log.debug("round_robin: %d of %d candidates (%s)", len(order), k, ", ".join(STRATEGY_NAMES))
    return order[:k]


def merge_weighted(dense: list[tuple[int, float]], sparse: list[tuple[int, float]], k: int,
                   weights: tuple[float, float] = (0.6, 0.4)) -> list[int]:
    """Weighted sum of the two normalised score lists (a missing score counts 0)."""
    scores: dict[int, float] = {}
    for (w, hits) in zip(weights, (dense, sparse)):
        top = max((s for _, s in hits), default=1.0) or 1.0
        for pos, s in hits:
            scores[pos] = scores.get(pos, 0.0) + w * s / top
    if not scores:
        raise ValueError("merge_weighted: no candidates (check retrieval.dense_k and retrieval.sparse_k)")
    return sorted(scores, key=lambda p: (-scores[p], p))[:k]
'''


@needs_data
def test_legitimate_change_of_similar_size_passes(index):
    """A new merge strategy in memsys/retrieve/merge.py's style, added inside the existing file: string
    constants, a turn id and a gold-like date in its docstring, a question as an example."""
    lines = LEGIT_MERGE.split("\n")
    added = AddedFile("memsys/retrieve/merge.py", tuple(enumerate(lines, start=120)))
    report = screen_diff({"memsys/retrieve/merge.py": added}, index)
    assert report.hits == () and not report.refused and report.lesson == ""
    preset = "retrieval:\n  merge: round_robin\n  top_k: 12\n  dense_k: 12\nanswer:\n  abstain: subject\n"
    assert not screen_diff({"configs/memory/omni.yaml": preset, "memsys/retrieve/merge.py": added}, index).refused


@needs_data
def test_a_comment_quoting_one_questions_8gram_is_a_hit(index, dev):
    q = next(q for q in dev if len(words(q.question)) >= 10)
    eight = " ".join(q.question.split()[1:9])
    lines = LEGIT_MERGE.split("\n")
    lines.insert(12, f"# e.g. {eight}")
    report = screen_diff({"memsys/retrieve/merge.py": AddedFile("memsys/retrieve/merge.py",
                                                                 tuple(enumerate(lines, start=120)))}, index)
    assert kinds(report) == {"question_text"}
    hit = report.hits[0]
    assert hit.line == 132 and hit.snippet == f"# e.g. {eight}" and hit.count == 1
    assert hit.examples == (clip(" ".join(words(eight)), 60),)  # the change's own words, not the whole (test) question


@needs_data
def test_thresholds_leave_examples_alone(index, dev):
    """One short question, two turn ids, two gold answers, a template sentence, lower-cased place names:
    what legitimate code writes; each crosses its threshold only as a list."""
    short = next(q for q in dev if 6 <= len(words(q.question)) < 8)
    example = (f'"""Example: "{short.question}" -> turns "D1:3" and "D2:8", answered "7 May 2023" or "Sweden".\n'
               'Mem-Gallery asks: "Please answer using an Arabic numeral (e.g. 2 instead of two)."\n"""\n'
               'PLACES = ("lake tahoe", "united states", "new york", "san francisco", "lord of the rings")\n')
    assert screen_diff({"memsys/answer/hints.py": example}, index).hits == ()
    cased = 'PLACES = ("Lake Tahoe", "United States", "New York", "San Francisco", "Lord of the Rings")\n'
    assert kinds(screen_diff({"memsys/answer/hints.py": cased}, index)) == {"gold_answer"}  # names as the gold writes them
    two = next(q for q in dev if 6 <= len(words(q.question)) < 8 and q.id != short.id)
    listed = example.replace('"""\n', f'And "{two.question}"\n"""\n', 1)
    assert kinds(screen_diff({"memsys/answer/hints.py": listed}, index)) == {"question_text"}


@needs_data
def test_an_added_data_file_under_the_surface_is_a_hit(index):
    report = screen_diff({"memsys/retrieve/weights.json": '{"alpha": 0.5, "beta": 0.25}\n'}, index)
    assert kinds(report) == {"data_file"} and report.hits[0].what == "is a data file added under the surface"
    binary = screen_diff({"memsys/retrieve/table.dat.x": BINARY}, index)
    assert kinds(binary) == {"data_file"} and binary.hits[0].what == "is a binary file added under the surface"
    assert not screen_diff({"memsys/answer/prompts/default/system.txt": "You answer questions.\n"}, index).refused


# --- reading a diff from git ----------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def test_added_text_from_git_returns_only_added_lines(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "memsys").mkdir(parents=True)
    (repo / "configs" / "memory").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "memsys" / "merge.py").write_text("a = 1\nb = 2\nc = 3\nd = 4\n")
    (repo / "memsys" / "gone.py").write_text("x = 1\n")
    (repo / "configs" / "memory" / "omni.yaml").write_text("retrieval:\n  top_k: 5\n")
    git(repo, "init", "-q")
    base = commit_all(repo, "base")
    (repo / "memsys" / "merge.py").write_text("a = 1\nb = 20\nc = 3\nnew = 5\nd = 4\ne = 6\n")
    (repo / "memsys" / "gone.py").unlink()
    (repo / "memsys" / "table.json").write_text('{"k": 1}\n')
    (repo / "memsys" / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (repo / "configs" / "memory" / "omni.yaml").write_text("retrieval:\n  top_k: 12\n")
    (repo / "benchmarks" / "scorer.py").write_text("SCORE = 1.0\n")  # outside the surface
    head = commit_all(repo, "change")

    added = added_text_from_git(repo, base, head)
    assert added == {"memsys/merge.py": "b = 20\nnew = 5\ne = 6", "memsys/table.json": '{"k": 1}\n',
                     "memsys/blob.bin": BINARY, "configs/memory/omni.yaml": "  top_k: 12"}
    files = added_files_from_git(repo, base, head)
    assert files["memsys/merge.py"].lines == ((2, "b = 20"), (4, "new = 5"), (6, "e = 6"))
    assert files["memsys/table.json"].new and files["memsys/blob.bin"].binary
    assert added_text_from_git(repo, base, head, surface=("configs/memory/",)) == {"configs/memory/omni.yaml": "  top_k: 12"}
    root = added_text_from_git(repo, None, base)  # a root commit: every surface file is new
    assert root == {"memsys/merge.py": "a = 1\nb = 2\nc = 3\nd = 4\n", "memsys/gone.py": "x = 1\n",
                    "configs/memory/omni.yaml": "retrieval:\n  top_k: 5\n"}


@needs_data
def test_a_leaking_commit_read_from_git_is_refused_with_its_line(tmp_path: Path, index, dev):
    repo = tmp_path / "repo"
    (repo / "memsys" / "retrieve").mkdir(parents=True)
    merge = repo / "memsys" / "retrieve" / "merge.py"
    merge.write_text('"""Merges."""\n\nfrom __future__ import annotations\n\n\ndef merge(a, b):\n    return a + b\n')
    git(repo, "init", "-q")
    base = commit_all(repo, "base")
    table = "".join(f"    {q.question!r}: {list(q.evidence)!r},\n" for q in dev)
    merge.write_text(merge.read_text() + f"\n\nHINTS = {{\n{table}}}\n")
    head = commit_all(repo, "hints")
    report = screen_diff(added_files_from_git(repo, base, head), index)
    assert report.refused
    assert report.lesson.startswith("refused as leakage: memsys/retrieve/merge.py:11 holds ")
