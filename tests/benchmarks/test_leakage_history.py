"""The leakage screen's false positives on this repository's own history: every accepted change passes.

The same routines as benchmarks/perf/bench_leakage.py: each commit that touched memsys/ or
configs/memory/ (its diff against its first parent, surface paths only), and the researcher edits
the test suite itself makes (SEARCH/REPLACE blocks and config overrides).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.leakage import LeakageConfig, load_index
from benchmarks.perf.bench_leakage import main, screen_history, screen_suite
from harness.paths import REPO_ROOT, data_dir

HAVE_DATA = (data_dir() / "locomo" / "locomo10.json").is_file() and (data_dir() / "mem-gallery").is_dir()
IS_REPO = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=REPO_ROOT, capture_output=True).returncode == 0
pytestmark = pytest.mark.skipif(not (HAVE_DATA and IS_REPO), reason="needs the benchmark data and the repository's git history")
HISTORY_LIMIT = 200  # surface commits screened (the newest); the whole history takes a few seconds


def test_no_surface_commit_in_the_history_is_a_hit():
    screened = screen_history(REPO_ROOT, load_index(), LeakageConfig(), HISTORY_LIMIT)
    assert len(screened) >= 1
    flagged = {s.name: s.lesson for s in screened if s.hits}
    assert flagged == {}
    assert max(s.screen_ms for s in screened) < 5000  # target <= 1000 ms; bounded loosely for a loaded machine


def test_the_test_suites_researcher_edits_are_no_hit():
    screened = screen_suite(REPO_ROOT, load_index(), LeakageConfig())
    assert len(screened) >= 10  # overrides and SEARCH/REPLACE blocks of tests/research and tests/support/loop.py
    assert {s.name: s.lesson for s in screened if s.hits} == {}


def test_bench_writes_its_figures(tmp_path: Path):
    out = tmp_path / "leakage.json"
    assert main(["--limit", "5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["history"]["commits_screened"] == 5 and report["history"]["commits_with_hits"] == 0
    assert report["false_positive_rate"] == 0.0 and report["all_attacks_caught"] is True
    assert set(report["attacks"]) >= {"questions_to_evidence_ids", "questions_to_gold_answers", "question_ids_to_answers"}
    assert report["screen_ms"]["max"] < 5000 and report["margins"]["answers"]["threshold"] == 3
