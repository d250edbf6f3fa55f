"""research.loop.healing: the failure class -> healing action table, its bounds, and the import revert.

``plan_heal`` is pure; the loop calls it once per failed attempt (attempt 0, 1, ...) with the
set of actions already tried. These tests walk it the way the loop does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from research.failures import POLICIES, Failure, FailureClass, classify_failure
from research.journal.trajectory import Edit
from research.loop.healing import HealAction, edits_without_import, plan_heal

MAX = 3  # research.loop.max_repairs default (configs/run.yaml)

#: the first action for each class (remote endpoint, nothing tried yet)
FIRST_ACTION = {
    FailureClass.AUTH: "switch_local_llm",
    FailureClass.RATE_LIMIT: "fewer_workers",
    FailureClass.API_ERROR: "retry",
    FailureClass.TIMEOUT: "smaller_sample",
    FailureClass.DEPENDENCY: "revert_import_edit",
    FailureClass.RUNTIME_ERROR: "repair_edit",
    FailureClass.SYNTAX_ERROR: "repair_edit",
    FailureClass.OOM_KILLED: "smaller_sample",
    FailureClass.FORMAT_MISMATCH: "retry",
    FailureClass.INVALID_METRIC: "give_up",
    FailureClass.FORBIDDEN_EDIT: "give_up",
    FailureClass.IDENTICAL_CONDITIONS: "give_up",  # healed at the propose stage, never after an evaluation
    FailureClass.NO_EFFECT: "give_up",  # screened before any evaluation
    FailureClass.LEAKAGE: "give_up",  # refused before any evaluation: a repair of benchmark data is no fix
    FailureClass.INFRASTRUCTURE: "retry",
    FailureClass.UNKNOWN: "give_up",
}


def failure(cls: FailureClass, message: str = "boom") -> Failure:
    p = POLICIES[cls]
    return Failure(cls, p.severity, p.is_infrastructure, message, suggested_fix=p.suggested_fix)


def plan(cls: FailureClass, attempt: int = 0, *, remote: bool = True, tried: set[str] | None = None,
         max_repairs: int = MAX) -> HealAction:
    return plan_heal(failure(cls), attempt, max_repairs=max_repairs, remote_llm=remote, tried=tried or set())


def walk(cls: FailureClass, *, remote: bool = True, max_repairs: int = MAX) -> list[str]:
    """The actions the loop takes when every attempt fails with ``cls`` (as _evaluate_with_healing)."""
    tried: set[str] = set()
    actions = []
    for attempt in range(max_repairs + 1):
        a = plan(cls, attempt, remote=remote, tried=tried, max_repairs=max_repairs)
        actions.append(a.action)
        if a.action == "give_up":
            break
        tried.add(a.action)
    return actions


# ---------------------------------------------------------------------------------------------
def test_table_covers_every_failure_class() -> None:
    assert set(FIRST_ACTION) == set(FailureClass)


@pytest.mark.parametrize("cls", list(FailureClass), ids=lambda c: c.value)
def test_first_action_per_class(cls: FailureClass) -> None:
    a = plan(cls)
    assert isinstance(a, HealAction)
    assert a.action == FIRST_ACTION[cls]
    assert a.reason  # every action says why (it is journaled)


@pytest.mark.parametrize("cls", list(FailureClass), ids=lambda c: c.value)
def test_bound_every_class_gives_up_after_max_repairs(cls: FailureClass) -> None:
    for attempt in (MAX, MAX + 1, 10):
        a = plan(cls, attempt)
        assert a.action == "give_up" and f"{MAX} repair cycles used" in a.reason
    assert plan(cls, 0, max_repairs=0).action == "give_up"


@pytest.mark.parametrize("cls", [FailureClass.RUNTIME_ERROR, FailureClass.SYNTAX_ERROR])
def test_repair_edit_at_most_three_cycles(cls: FailureClass) -> None:
    assert walk(cls) == ["repair_edit"] * 3 + ["give_up"]
    assert plan(cls, MAX - 1, tried={"repair_edit"}).action == "repair_edit"  # the third cycle still runs
    assert walk(cls, max_repairs=1) == ["repair_edit", "give_up"]


def test_rate_limit_backs_off_twice_then_gives_up() -> None:
    assert walk(FailureClass.RATE_LIMIT) == ["fewer_workers"] * 2 + ["give_up"]


@pytest.mark.parametrize("cls", [FailureClass.FORMAT_MISMATCH, FailureClass.API_ERROR, FailureClass.INFRASTRUCTURE])
def test_retry_once_then_give_up(cls: FailureClass) -> None:
    assert walk(cls) == ["retry", "give_up"]
    a = plan(cls, 1, tried={"retry"})
    assert a.action == "give_up" and "after a retry" in a.reason


@pytest.mark.parametrize("cls", [FailureClass.TIMEOUT, FailureClass.OOM_KILLED])
def test_smaller_sample_once_then_give_up(cls: FailureClass) -> None:
    assert walk(cls) == ["smaller_sample", "give_up"]
    a = plan(cls, 1, tried={"smaller_sample"})
    assert a.action == "give_up" and "smaller sample" in a.reason


def test_dependency_revert_is_tried_until_the_bound() -> None:
    # a second missing import (from the remaining edits) gets its own revert
    assert walk(FailureClass.DEPENDENCY) == ["revert_import_edit"] * 3 + ["give_up"]


def test_switch_local_llm_only_for_remote_endpoints() -> None:
    assert plan(FailureClass.AUTH, remote=True).action == "switch_local_llm"
    local = plan(FailureClass.AUTH, remote=False)
    assert local.action == "give_up" and "auth" in local.reason  # the local server has no key to expire
    assert walk(FailureClass.AUTH, remote=True) == ["switch_local_llm", "give_up"]
    assert walk(FailureClass.AUTH, remote=False) == ["give_up"]
    # no other class ever switches backends
    for cls in FailureClass:
        if cls is not FailureClass.AUTH:
            assert "switch_local_llm" not in walk(cls, remote=True)


@pytest.mark.parametrize("cls", [FailureClass.INVALID_METRIC, FailureClass.FORBIDDEN_EDIT, FailureClass.UNKNOWN,
                                 FailureClass.IDENTICAL_CONDITIONS])
def test_no_targeted_fix(cls: FailureClass) -> None:
    a = plan(cls)
    assert a.action == "give_up" and cls.value in a.reason


def test_actions_are_from_the_documented_set() -> None:
    known = {"repair_edit", "switch_local_llm", "fewer_workers", "smaller_sample", "revert_import_edit",
             "retry", "give_up"}
    for cls in FailureClass:
        for remote in (True, False):
            assert set(walk(cls, remote=remote)) <= known


# --- edits_without_import -----------------------------------------------------------------------
MISSING = "ModuleNotFoundError: No module named 'injected_missing_module_xyz'"
IMPORT_EDIT = Edit("memsys/retrieve/merge.py", "from __future__ import annotations\n",
                   "from __future__ import annotations\n\nimport injected_missing_module_xyz\n")
OTHER_EDIT = Edit("memsys/retrieve/merge.py", "    seen = set(order)\n", "    seen = set(order)  # tuned\n")
PROMPT_EDIT = Edit("memsys/answer/prompts/default/constraints.txt", "Answer", "Answer briefly")


def test_drops_only_the_edit_with_the_import() -> None:
    assert edits_without_import([OTHER_EDIT, IMPORT_EDIT, PROMPT_EDIT], MISSING) == [OTHER_EDIT, PROMPT_EDIT]


def test_every_edit_imports_it_leaves_an_empty_list() -> None:
    keep = edits_without_import([IMPORT_EDIT], MISSING)
    assert keep == [] and keep is not None  # [] = revert everything; None = nothing to revert


@pytest.mark.parametrize("replace", [
    "import injected_missing_module_xyz\n",
    "x = 1\nimport injected_missing_module_xyz as m\n",
    "def f():\n    import injected_missing_module_xyz\n",  # a local import
    "from injected_missing_module_xyz import thing\n",
    "from injected_missing_module_xyz.sub import thing\n",
    "import injected_missing_module_xyz.sub\n",
])
def test_import_forms_recognised(replace: str) -> None:
    edit = Edit("memsys/x.py", "pass\n", replace)
    assert edits_without_import([edit, OTHER_EDIT], MISSING) == [OTHER_EDIT]


def test_submodule_message_matches_the_top_level_package() -> None:
    edit = Edit("memsys/x.py", "pass\n", "from injected_missing_module_xyz import thing\n")
    msg = "No module named 'injected_missing_module_xyz.sub'"
    assert edits_without_import([edit], msg) == []


@pytest.mark.parametrize("replace", [
    "import injected_missing_module_xyz_other\n",  # a different module with the same prefix
    "x = 'import injected_missing_module_xyz'\n",  # in a string, not an import statement
    "# we could import it: injected_missing_module_xyz\n",
    "import numpy\n",
])
def test_unrelated_edits_are_kept(replace: str) -> None:
    assert edits_without_import([Edit("memsys/x.py", "pass\n", replace)], MISSING) is None


def test_import_only_in_search_text_is_not_blamed() -> None:
    # an edit that *removes* the import did not introduce it
    edit = Edit("memsys/x.py", "import injected_missing_module_xyz\n", "")
    assert edits_without_import([edit], MISSING) is None


@pytest.mark.parametrize("message", ["", "RuntimeError: injected fault", "dependency: faiss is not installed",
                                     "ImportError: cannot import name 'x' from 'y'"])
def test_messages_without_a_missing_module(message: str) -> None:
    assert edits_without_import([IMPORT_EDIT], message) is None


def test_no_edits() -> None:
    assert edits_without_import([], MISSING) is None


def test_from_real_stderr_through_classification() -> None:
    """A real ModuleNotFoundError, classified as the loop does, then healed by the revert."""
    proc = subprocess.run([sys.executable, "-c", "import injected_missing_module_xyz"], capture_output=True,
                          text=True, timeout=60)
    f = classify_failure(exit_code=proc.returncode, signal=None, timed_out=False, oom_killed=False,
                         stderr=proc.stderr, result_status="missing", metrics=None, parent_metrics=None,
                         code_changed=True, edited_paths=[IMPORT_EDIT.path])
    assert f is not None and f.cls is FailureClass.DEPENDENCY and not f.is_infrastructure
    assert plan_heal(f, 0, max_repairs=MAX, remote_llm=False, tried=set()).action == "revert_import_edit"
    assert edits_without_import([IMPORT_EDIT, OTHER_EDIT], f.message) == [OTHER_EDIT]


# --- classifier inputs the healer depends on ------------------------------------------------------
def _typed_stderr(kind: str, message: str) -> str:
    return f"error: {message}\nMEMSYS_ERROR kind={kind} message={message}\n"


@pytest.mark.parametrize(("status", "first", "expected", "action"), [
    (429, "rate_limit: LLM rate-limited (HTTP 429)", FailureClass.RATE_LIMIT, "fewer_workers"),
    (500, "api_error: LLM server error (HTTP 500)", FailureClass.API_ERROR, "retry"),
])
def test_every_reader_call_failed_keeps_the_endpoint_class(status: int, first: str, expected: FailureClass,
                                                           action: str) -> None:
    # benchmarks.runner raises LLMServerError (kind api_error) when every reader call failed; the
    # class must still be the one of the calls (a 429 is backed off, not retried as a 5xx)
    msg = f"all 12 reader calls failed; first: {first} after 1 attempt at 127.0.0.1:1 model=m: injected HTTP {status}"
    f = classify_failure(exit_code=2, signal=None, timed_out=False, oom_killed=False,
                         stderr=_typed_stderr("api_error", msg), result_status="missing", metrics=None,
                         parent_metrics=None, code_changed=True, edited_paths=[])
    assert f is not None and f.cls is expected and f.is_infrastructure
    assert plan_heal(f, 0, max_repairs=MAX, remote_llm=True, tried=set()).action == action


def test_identical_metrics_ignore_time_and_money() -> None:
    """A repair that restores the parent's code is a no-effect result, even though wall_s differs."""
    parent = {"recall_at_10": 0.5, "mrr": 0.25, "wall_s": 15.1, "seconds_per_question": 0.3, "cost_usd": 0.0}
    child = {"recall_at_10": 0.5, "mrr": 0.25, "wall_s": 17.9, "seconds_per_question": 0.4, "cost_usd": 0.01}
    args = dict(exit_code=0, signal=None, timed_out=False, oom_killed=False, stderr="", result_status="ok",
                edited_paths=[])
    f = classify_failure(metrics=child, parent_metrics=parent, code_changed=True, **args)
    assert f is not None and f.cls is FailureClass.INVALID_METRIC and f.severity == "low"
    assert plan_heal(f, 0, max_repairs=MAX, remote_llm=False, tried=set()).action == "give_up"
    assert classify_failure(metrics=child, parent_metrics=parent, code_changed=False, **args) is None
    assert classify_failure(metrics=child | {"mrr": 0.3}, parent_metrics=parent, code_changed=True, **args) is None
