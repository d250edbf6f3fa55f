"""The capable-researcher path end to end (issue #50 item 6): a researcher in code mode over the OpenAI
protocol makes a real code edit under memsys/, the edit fails once, is repaired through the repair prompt,
and the loop accepts the gain through the sandbox.

Real pieces: a throwaway git repo, worktrees and commits, the leakage screen, the process sandbox running
the untrusted half on the LoCoMo ``small`` dev sample (reader=none, objective context_recall), the trusted
scorer, the paired test, the never-shown check and the disjoint-slice check; the openai SDK over HTTP to
:class:`OpenAITestServer`, whose handler plays the researcher (``llm=openai``: its context budget follows
the model). Only the researcher's two replies are scripted:

exp-001  widen_dense=20 (a macro lever, as the lever list offers it) and a merge that appends the BM25 hits
         the dense list missed, calling an undefined name -> NameError in the sandbox -> the repair prompt
         shows the applied diff, the levers in effect and the context cost beside the budget -> the repair
         (the right name) -> screened, evaluated, proceed.
exp-002  an edit whose SEARCH text copies merge.py as it was before exp-001 (it no longer matches) -> the
         edit does not apply, the worktree is reset -> the repair prompt says plainly that none of it is
         applied, with the levers as exp-001 left them -> a config-only change -> evaluated.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from research.journal.trajectory import read_trajectory
from research.loop.research_loop import ResearchLoop
from research.proposers.llm import PROMPTS
from tests.support.loop import git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

MERGE = "memsys/retrieve/merge.py"
DENSE_ONLY = "    return merge_set_union(dense, [], k)\n"  # merge_dense_only: the dense list alone
BROKEN = ('    """The dense list, then the BM25 hits it missed (rare names and dates the embedding misses)."""\n'
          "    return merge_set_union(dense, sparse_hits, k)\n")
NEEDS = '    return strategy != "bm25_only", strategy != "dense_only"\n'
NEEDS_BM25 = '    return strategy != "bm25_only", True  # dense_only appends the BM25 hits too\n'
ATTEMPT = {
    "hypothesis": "retrieval misses: a deeper dense list, then the BM25 hits it missed",
    "discovery_type": "architectural_change",
    "expected_effect": "context_recall up: evidence turns that share rare words with the question reach the context",
    "config_overrides": ["widen_dense=20"],
    "edits": [{"path": MERGE, "search": DENSE_ONLY, "replace": BROKEN},
              {"path": MERGE, "search": NEEDS, "replace": NEEDS_BM25}],
}
REPAIR = {**ATTEMPT, "config_overrides": [],
          "edits": [{"path": MERGE, "search": "merge_set_union(dense, sparse_hits, k)",
                     "replace": "merge_set_union(dense, sparse, k)"}]}
STALE = {**ATTEMPT, "hypothesis": "BM25 hits only when the dense list is short",
         "config_overrides": ["retrieval.expand_top=2"],
         "edits": [{"path": MERGE, "search": DENSE_ONLY, "replace": DENSE_ONLY.replace("[]", "sparse[:2]")}]}
RESEND = {**STALE, "config_overrides": ["widen_dense=30"], "edits": []}
STEP_START = (PROMPTS / "researcher_step.txt").read_text(encoding="utf-8").split("$", 1)[0]
REPAIR_START = (PROMPTS / "researcher_repair.txt").read_text(encoding="utf-8").splitlines()[0]


@dataclass
class Researcher:
    """The scripted capable researcher: an attempt for each step prompt, for each repair prompt the repair of
    what it says is applied; every prompt it was sent is kept."""

    steps: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        user = str((body.get("messages") or [{}])[-1].get("content", ""))
        with self.lock:
            if user.startswith(REPAIR_START):
                self.repairs.append(user)
                return Reply.of_json(RESEND if "Applied now: nothing." in user else REPAIR)
            if user.startswith(STEP_START) and len(self.steps) < 2:
                self.steps.append(user)
                return Reply.of_json((ATTEMPT, STALE)[len(self.steps) - 1])
            self.unexpected.append(user[:200])
            return Reply.ok("UNSCRIPTED")


def test_a_code_edit_fails_once_is_repaired_and_accepted_and_a_stale_edit_is_said_to_be_unapplied(
        repo: Path, runs: Path) -> None:
    source = (repo / MERGE).read_text(encoding="utf-8")
    assert DENSE_ONLY in source and NEEDS in source  # the SEARCH texts copy the scratch repo's merge.py
    head = git(repo, "rev-parse", "HEAD")
    researcher = Researcher()
    with OpenAITestServer(researcher) as server:
        setup = scripted_setup(repo, 2, "sample=small", "llm=openai", "llm.model=capable-researcher",
                               "research.loop.never_shown_check=true")
        assert setup.research.loop.never_shown_check and setup.research.loop.check  # both stay on
        state = ResearchLoop(setup, "capable", llm_opener=scripted_opener(server)).run()
    records, warnings = read_trajectory(runs / "capable", strict=True)
    assert warnings == [] and researcher.unexpected == []
    base, exp, stale = records
    assert [r.decision for r in records[:2]] == ["baseline", "proceed"] and stale.objective_value is not None
    assert state.stop_reason.startswith("experiment budget")

    # the step: a hosted model's budget shows the retriever, the pyramid and the answer code, and the levers
    step = researcher.steps[0]
    for path in ("memsys/retrieve/retriever.py", "memsys/retrieve/pyramid.py", MERGE, "memsys/answer/generate.py"):
        assert f"--- {path} ---" in step, path
    assert "widen_dense = 5  [2..60]" in step

    # the attempt: the macro lever became the keys it writes; the NameError failed the screen and was repaired
    assert exp.config_overrides == ["retrieval.dense_k=20", "retrieval.top_k=20"]
    assert [(h["failure"], h["action"], h["result"]) for h in exp.healing] == [("runtime_error", "repair_edit", "retrying")]
    assert [e["replace"] for e in exp.edits] == [BROKEN, NEEDS_BM25, "merge_set_union(dense, sparse, k)"]
    attempt = git(repo, "rev-parse", f"{exp.commit}^")
    assert git(repo, "log", "-1", "--format=%s", exp.commit) == "exp-001: repair 1"
    assert git(repo, "rev-parse", f"{attempt}^") == exp.parent_commit == head

    # the repair prompt: the error, the diff now applied, the levers in effect, the context cost and the budget
    assert len(researcher.repairs) == 2
    prompt = researcher.repairs[0]
    assert "sparse_hits" in prompt.split("\n")[1] and f"at {MERGE}:" in prompt
    assert "(no diff)" not in prompt and "Applied now (the diff against the parent commit" in prompt
    assert "+    return merge_set_union(dense, sparse_hits, k)" in prompt and "+  top_k: 20" in prompt
    assert "widen_dense = 20  [2..60]" in prompt and "retrieval.dense_k = 20" in prompt
    baseline_tokens = _mean_context_tokens(runs / "capable" / base.eval_dir)
    assert f"{baseline_tokens:,.0f} context tokens per question on average in the last evaluation" in prompt
    assert "the scorer counts at most 6,000 tokens of context per question" in prompt

    # accepted through the sandbox: a real gain, supported on the never-shown questions and on the check slice
    assert exp.objective_value > base.objective_value * 1.005 and exp.test["p_better"] < 0.05
    assert exp.shown_questions and exp.never_shown["supported"] is True and exp.never_shown["shown"] > 0
    assert exp.check["passed"] is True
    assert git(repo, "rev-parse", "refs/autoresearch/capable/best") == exp.commit == state.best_commit
    best_merge = git(repo, "show", f"{exp.commit}:{MERGE}")
    assert "merge_set_union(dense, sparse, k)" in best_merge and "sparse_hits" not in best_merge

    # exp-002: the stale edit did not apply; the repair prompt says none of it is (no "(no diff)"), with the
    # levers as the parent (exp-001) left them and its evaluation's context cost
    unapplied = researcher.repairs[1]
    assert "SEARCH text not found" in unapplied.split("\n")[1] and "(no diff)" not in unapplied
    assert "Applied now: nothing. None of your attempt is applied (it did not apply, as the error says, so the " \
           "worktree was reset to the parent commit)" in unapplied
    assert "Edits apply to the parent commit's files" in unapplied and "widen_dense = 20  [2..60]" in unapplied
    exp_tokens = _mean_context_tokens(runs / "capable" / exp.eval_dir)
    assert f"{exp_tokens:,.0f} context tokens per question on average in the last evaluation" in unapplied
    assert [(h["action"], h["result"]) for h in stale.healing] == [("resend_edit", "ok")]
    assert stale.parent_commit == exp.commit and stale.edits == [] and stale.config_overrides == [
        "retrieval.dense_k=30", "retrieval.top_k=30"]
    preset = git(repo, "show", f"{stale.commit}:configs/memory/naive.yaml")
    assert "top_k: 30" in preset and "expand_top" not in preset  # nothing of the stale attempt stayed
    assert git(repo, "show", f"{stale.commit}:{MERGE}") == best_merge
    assert git(repo, "status", "--porcelain") == ""


def _mean_context_tokens(eval_dir: Path) -> float:
    from research.evaluation.diagnosis import read_rows

    rows = read_rows(eval_dir)
    return sum(r["context_tokens"] for r in rows) / len(rows)
