"""research.journal.discovery: the discovery type of a change from what it touched, and the paths of a git diff."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from research.journal.discovery import PRECEDENCE, classify_change, path_area, paths_from_diff
from research.journal.trajectory import DISCOVERY_TYPES


@pytest.mark.parametrize(
    ("paths", "overrides", "expected"),
    [
        ([], ["memory.retrieval.top_k=20"], "hyperparameter_tuning"),
        (["configs/memory/omni.yaml"], [], "hyperparameter_tuning"),
        (["memsys/answer/prompts/default/constraints.txt"], [], "prompt_engineering"),
        (["memsys/answer/prompts/default/system.txt", "memsys/answer/prompts/memgallery/user.txt"], [],
         "prompt_engineering"),
        (["memsys/ingest/prompts/compress.txt"], [], "prompt_engineering"),  # a prompt wherever it lives
        (["memsys/answer/generate.py"], [], "evaluation_format_alignment"),
        (["memsys/ingest/compress.py"], [], "data_pipeline_repair"),
        (["memsys/media/gates.py"], [], "data_pipeline_repair"),
        (["memsys/store/store.py"], [], "data_pipeline_repair"),
        (["memsys/temporal.py"], [], "data_pipeline_repair"),
        (["memsys/retrieve/merge.py"], [], "architectural_change"),
        (["memsys/index/sparse.py"], [], "architectural_change"),
        (["memsys/graph/kg.py"], [], "architectural_change"),
        (["memsys/memory.py"], [], "architectural_change"),
        (["./memsys/retrieve/pyramid.py"], [], "architectural_change"),
    ],
)
def test_single_area_changes(paths, overrides, expected):
    kind, reason = classify_change(paths, overrides)
    assert kind == expected
    assert "\n" not in reason and " only: " in reason


def test_mixed_changes_follow_the_documented_precedence():
    kind, reason = classify_change(["configs/memory/omni.yaml", "memsys/retrieve/merge.py"], [])
    assert kind == "architectural_change"
    assert reason == ("mixed change, memsys code takes precedence over configuration: "
                      "memsys/retrieve/merge.py, configs/memory/omni.yaml")
    kind, reason = classify_change(["memsys/answer/prompts/default/user.txt"], ["memory.answer.max_tokens=64"])
    assert kind == "prompt_engineering" and "prompt files takes precedence over configuration" in reason
    kind, _ = classify_change(["memsys/answer/generate.py", "memsys/answer/prompts/default/user.txt"], [])
    assert kind == "evaluation_format_alignment"
    kind, reason = classify_change(["memsys/temporal.py", "memsys/retrieve/retriever.py", "memsys/answer/generate.py"], [])
    assert kind == "architectural_change"
    assert "over ingestion/media/store code, answer output code" in reason
    # each type wins over every type after it in PRECEDENCE
    example = {"architectural_change": "memsys/memory.py", "data_pipeline_repair": "memsys/ingest/text.py",
               "evaluation_format_alignment": "memsys/answer/generate.py",
               "prompt_engineering": "memsys/answer/prompts/default/system.txt",
               "hyperparameter_tuning": "configs/memory/naive.yaml"}
    for i, winner in enumerate(PRECEDENCE):
        for loser in PRECEDENCE[i + 1:]:
            assert classify_change([example[loser], example[winner]], [])[0] == winner


def test_a_repair_of_a_failing_behaviour_is_a_bug_fix_whatever_it_touched():
    kind, reason = classify_change(["memsys/answer/generate.py"], [], repairs_failure=True)
    assert kind == "bug_fix" and reason == "repairs a failing behaviour (memsys/answer/generate.py)"
    assert classify_change([], ["memory.retrieval.top_k=5"], repairs_failure=True)[0] == "bug_fix"


def test_paths_outside_the_memory_system_do_not_count():
    kind, reason = classify_change(["tests/test_x.py", "configs/memory/omni.yaml"], [])
    assert kind == "hyperparameter_tuning" and "tests/" not in reason
    kind, reason = classify_change(["README.md"], [])
    assert kind == "architectural_change" and "touches no memsys code or memory config (only README.md)" in reason
    assert path_area("benchmarks/scoring.py") is None and path_area("memsysx/a.py") is None


def test_reasons_stay_short_for_large_changes():
    paths = [f"memsys/retrieve/m{i}.py" for i in range(20)]
    kind, reason = classify_change(paths, [])
    assert kind == "architectural_change" and reason.endswith("(+17 more)")


def test_every_answer_is_one_of_the_six_types():
    cases = [([], ["a=1"]), (["memsys/x.py"], []), (["memsys/answer/generate.py"], []), (["README.md"], [])]
    assert {classify_change(p, o)[0] for p, o in cases} <= set(DISCOVERY_TYPES)
    assert set(PRECEDENCE) | {"bug_fix"} == set(DISCOVERY_TYPES)


# --- paths of a real git diff ---------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "HOME": str(repo), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def test_paths_from_a_real_git_diff(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    files = {
        "memsys/retrieve/merge.py": "def merge():\n    return 1\n",
        "memsys/old name.py": "x = 1\n" * 20,
        "memsys/gone.py": "y = 2\n",
        "configs/memory/omni.yaml": "top_k: 20\n",
        "memsys/notes.sql": "-- a comment\nselect 1;\n",
        "memsys/img.bin": "",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "memsys/img.bin").write_bytes(b"\x00\x01\x02")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "memsys/retrieve/merge.py").write_text("def merge():\n    return 2\n")
    (repo / "memsys/old name.py").rename(repo / "memsys/new name.py")
    (repo / "memsys/gone.py").unlink()
    (repo / "memsys/answer").mkdir()
    (repo / "memsys/answer/café.py").write_text("z = 3\n")
    (repo / "configs/memory/omni.yaml").write_text("top_k: 10\n")
    (repo / "memsys/notes.sql").write_text("select 1;\n")  # the removed line reads "--- a comment" in the hunk
    (repo / "memsys/img.bin").write_bytes(b"\x00\x09\x02")
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached", "-M")
    assert "\n--- a comment" in diff and '"b/memsys/answer/caf\\303\\251.py"' in diff
    assert sorted(paths_from_diff(diff)) == sorted([
        "configs/memory/omni.yaml", "memsys/answer/café.py", "memsys/gone.py", "memsys/img.bin",
        "memsys/new name.py", "memsys/notes.sql", "memsys/old name.py", "memsys/retrieve/merge.py"])
    kind, _ = classify_change(paths_from_diff(diff), [])
    assert kind == "architectural_change"
    plain = _git(repo, "diff", "--cached", "--no-renames", "--", "memsys/new name.py", "memsys/old name.py")
    assert paths_from_diff(plain) == ["memsys/new name.py", "memsys/old name.py"]


def test_paths_from_hand_written_diffs():
    assert paths_from_diff("") == []
    one = "diff --git a/memsys/a.py b/memsys/a.py\nindex 1..2 100644\n--- a/memsys/a.py\n+++ b/memsys/a.py\n@@ -1 +1 @@\n-x\n+y\n"
    assert paths_from_diff(one) == ["memsys/a.py"]
    assert paths_from_diff(one + one.replace("a.py", "b.py")) == ["memsys/a.py", "memsys/b.py"]
    renamed = ("diff --git a/memsys/x.py b/memsys/y.py\nsimilarity index 100%\n"
               "rename from memsys/x.py\nrename to memsys/y.py\n")
    assert paths_from_diff(renamed) == ["memsys/x.py", "memsys/y.py"]
    quoted = 'diff --git "a/memsys/tab\\there.py" "b/memsys/tab\\there.py"\nnew file mode 100644\n'
    assert paths_from_diff(quoted) == ["memsys/tab\there.py"]
