"""The screens, end to end: what is rejected before (or instead of) an evaluation, through the real loop.

Real pieces as in test_loop_e2e: git worktrees, the process sandbox running the LoCoMo tiny evaluation
(reader=none, objective context_recall), the openai SDK over HTTP to :class:`OpenAITestServer`. Only the
researcher's replies are scripted. On the naive preset (merge=dense_only, top_k=dense_k=sparse_k=5), with
research.loop.max_iterations_per_hypothesis=1 (every evaluated attempt that does not proceed is a pivot, so
each experiment starts from the best commit: the base):

exp-001  sparse_k / rrf_k / linear_alpha (dead under dense_only)   static screen, re-asked twice   -> rejected no_effect
exp-002  a comment added to memsys/retrieve/merge.py                 applied, dynamic screen          -> rejected no_effect
exp-003  top_k=dense_k=2                                             evaluated                        -> pivot
exp-004  exp-003's values in other words (order, memory. prefix,     static screen, re-asked twice    -> rejected
         a larger dense_k cut by top_k, a dead sparse_k)                                                 identical_conditions
exp-005  top_k=dense_k=4                                             evaluated: the budget (2) spent  -> pivot
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from research.journal.trajectory import read_trajectory
from research.loop.research_loop import ResearchLoop
from tests.support.loop import git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

MERGE = "memsys/retrieve/merge.py"
TOP = "from __future__ import annotations\n"
COMMENT = "# candidates keep their rank order through every merge\n"


def proposal(hypothesis: str, overrides: list[str], edits: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"hypothesis": hypothesis, "discovery_type": "hyperparameter_tuning", "expected_effect": "context_recall up",
            "config_overrides": overrides, "edits": edits or []}


DEAD = [proposal("more BM25 candidates", ["retrieval.sparse_k=9"]),
        proposal("a gentler rank fusion", ["retrieval.rrf_k=30"]),
        proposal("weigh dense and sparse evenly", ["retrieval.linear_alpha=0.3"])]
COMMENT_ONLY = {**proposal("document the merge", []), "discovery_type": "bug_fix",
                "edits": [{"path": MERGE, "search": TOP, "replace": TOP + "\n" + COMMENT}]}
SHALLOW = proposal("two candidates are the most precise context", ["retrieval.top_k=2", "retrieval.dense_k=2"])
# the same effective config as SHALLOW, written three other ways
REPEATS = [proposal("four dense hits, cut to two", ["retrieval.dense_k=4", "retrieval.top_k=2"]),
           proposal("two candidates, memory-prefixed", ["memory.retrieval.top_k = 2", "retrieval.dense_k=2"]),
           proposal("two candidates, with sparse hits", ["retrieval.top_k=2", "retrieval.dense_k=9", "retrieval.sparse_k=7"])]
FOUR = proposal("four candidates", ["retrieval.top_k=4", "retrieval.dense_k=4"])


def evals_of(run_dir: Path, experiment_id: str) -> list[str]:
    """Names of one experiment's evaluation folders (``evals/<exp-id><tag>-<key>``)."""
    return sorted(p.name for p in (run_dir / "evals").glob(f"{experiment_id}-*"))


def scripted_run(repo: Path, run_id: str, replies: list[Reply], experiments: int, *extra: str) -> tuple[Any, list[Any]]:
    """A loop whose researcher sends ``replies`` in turn (anything more fails loudly): its final state, and
    the researcher's requests."""
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")
        server.enqueue(*replies)
        setup = scripted_setup(repo, experiments, *extra)
        st = ResearchLoop(setup, run_id, llm_opener=scripted_opener(server)).run()
        assert server.pending == 0
        return st, server.chat_requests


def test_dead_levers_code_without_effect_and_reworded_repeats_are_rejected(repo: Path, runs: Path) -> None:
    run_id = "screens"
    head = git(repo, "rev-parse", "HEAD")
    st, requests = scripted_run(repo, run_id, [Reply.of_json(p) for p in (*DEAD, COMMENT_ONLY, SHALLOW, *REPEATS, FOUR)],
                                2, "research.loop.max_iterations_per_hypothesis=1")
    run_dir = runs / run_id
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    base, dead, comment, shallow, repeat, four = records
    assert [r.decision for r in records] == ["baseline", "rejected", "rejected", "pivot", "rejected", "pivot"]
    assert len(requests) == 9  # 3 + 1 + 1 + 3 + 1: only the static screen re-asks

    # (a) dead levers: re-asked with the reason, then rejected; no worktree, no commit, no evaluation
    assert dead.failure["cls"] == "no_effect" and dead.failure["stage"] == "propose"
    assert dead.failure["message"].startswith("no effect: no effective change: retrieval.linear_alpha=0.3 is dead here")
    assert [h["action"] for h in dead.healing] == ["reask", "reask"]
    assert "retrieval.sparse_k=9 is dead here (live when merge != dense_only" in dead.healing[0]["reason"]
    assert "retrieval.rrf_k=30 is dead here (live when merge == rrf)" in dead.healing[1]["reason"]
    assert dead.config_overrides == ["retrieval.linear_alpha=0.3"]  # the last reply is the one recorded
    assert dead.commit is None and dead.branch is None and dead.diff == "" and dead.screen == {}
    assert evals_of(run_dir, "exp-001") == [] and "screen_s" not in dead.durations
    reask = requests[1]["messages"]
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert json.loads(reask[2]["content"])["config_overrides"] == ["retrieval.sparse_k=9"]
    assert reask[-1]["content"].startswith("That proposal was not evaluated: no effect: no effective change: "
                                           "retrieval.sparse_k=9 is dead here")
    assert "- retrieval.rrf_k=30: no effect" in requests[2]["messages"][-1]["content"]
    # the researcher is never offered the dead levers in the first place
    step = requests[0]["messages"][-1]["content"]
    levers = step.split("Levers (live in the best config", 1)[1].split("Source excerpts", 1)[0]
    assert "retrieval.top_k = 5" in levers and "retrieval.sparse_k" not in levers and "retrieval.rrf_k" not in levers

    # (b) a code edit nothing downstream can see: applied and committed, stopped by the reader-free screen
    assert comment.failure["cls"] == "no_effect" and comment.failure["stage"] == "screen"
    assert comment.screen["verdict"] == "no effect" and comment.screen["changed"] == 0
    assert comment.screen["questions"] == _rows(run_dir, base.eval_dir) > 0
    assert comment.screen["comparable"] is True and comment.screen["context_recall"] == base.objective_value
    assert comment.parent_commit == head and git(repo, "rev-parse", comment.branch) == comment.commit
    assert COMMENT in git(repo, "show", f"{comment.commit}:{MERGE}") and f"+{COMMENT}" in comment.diff
    assert comment.effective_key not in (base.effective_key, "")  # new code: no static repeat to catch
    assert comment.objective_value is None and comment.eval_run_id is None and comment.eval_dir == ""
    assert comment.healing == [] and "eval_s" not in comment.durations and comment.durations["screen_s"] > 0
    folders = evals_of(run_dir, "exp-002")
    assert len(folders) == 1 and folders[0].startswith("exp-002-screen-")  # the screen only: no objective run
    assert (run_dir / "evals" / folders[0] / "result.json").is_file()
    assert "exp-002 [rejected] 1 code edit to memsys/retrieve/merge.py: no effect on the reader's input " \
           f"(0 of {comment.screen['questions']} reader inputs changed" in requests[4]["messages"][-1]["content"]

    # the first evaluation: no gain, a pivot, so the next experiment starts from the best (the base) again
    assert shallow.parent_commit == head and shallow.screen["verdict"] == "changed" and shallow.delta <= 0
    assert "1 attempts on this hypothesis without progress" in shallow.notes
    assert (run_dir / shallow.eval_dir / "result.json").is_file()

    # (c) exp-003's values in other words: the same effective config and code, rejected without evaluation
    assert repeat.failure["cls"] == "identical_conditions" and repeat.failure["stage"] == "propose"
    assert repeat.failure["message"].startswith("repeats exp-003: the same effective config and code were evaluated")
    assert [h["action"] for h in repeat.healing] == ["reask", "reask"]
    assert all(h["reason"].startswith("repeats exp-003") for h in repeat.healing)
    assert repeat.effective_key == shallow.effective_key and repeat.parent_commit == head
    assert repeat.config_overrides == REPEATS[2]["config_overrides"]
    assert repeat.notes == f"known value {shallow.objective_value:.4f}"
    assert repeat.commit is None and evals_of(run_dir, "exp-004") == []
    for reply, prompt in zip(REPEATS[:2], requests[6:8]):
        assert json.loads(prompt["messages"][2]["content"])["config_overrides"] == reply["config_overrides"]
        assert prompt["messages"][-1]["content"].startswith("That proposal was not evaluated: repeats exp-003")

    # only evaluated experiments spend the budget: 5 proposals, 2 evaluations
    assert four.objective_value is not None and four.parent_commit == head
    assert st.status == "finished" and st.stop_reason == "experiment budget spent (2/2 evaluated)"
    assert (st.evaluated, st.proposals, st.next_index) == (2, 5, 6)
    assert sorted({name.split("-")[1] for name in (p.name for p in (run_dir / "evals").iterdir())}) == [
        "000", "002", "003", "005"]
    assert st.best_commit == head and git(repo, "status", "--porcelain") == ""


def _rows(run_dir: Path, eval_dir: str) -> int:
    """Questions scored in one evaluation folder."""
    return len((run_dir / eval_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines())


def menu_reply(lever: str, value: Any) -> dict[str, Any]:
    return {"hypothesis": f"{lever} to {value}", "targets": "retrieval_miss", "why": "evidence is missed",
            "changes": [{"lever": lever, "value": value}]}


def menu_levers(request: dict[str, Any]) -> list[str]:
    """The lever ids a request's JSON schema lets the model name."""
    schema = request["response_format"]["json_schema"]["schema"]
    return [item["properties"]["lever"]["const"] for item in schema["properties"]["changes"]["items"]["anyOf"]]


def test_a_lever_refused_before_evaluation_leaves_the_menu_until_the_start_commit_changes(repo: Path, runs: Path) -> None:
    """Menu mode (the embedded model's): a change refused before evaluation takes its lever out of the
    reply's JSON schema, for the re-asks and for the next experiments from the same commit, and the
    levers section says why; a pivot also takes out the levers the abandoned direction moved. The 1.5B
    model, told only in words, sent ``sparse_k=50`` back eight times in one run."""
    run_id = "withheld"
    # exp-001: top_k=5 is naive's value (static no-op), re-asked twice with the same reply;
    # exp-002: evaluated, fewer candidates: no gain, a pivot (one attempt per hypothesis);
    # exp-003: evaluated, which spends the budget of two
    # exp-002 starts with a value outside the lever's range (a server without the grammar): sampled again
    replies = [*(Reply.of_json(menu_reply("retrieval.top_k", 5)) for _ in range(3)),
               Reply.of_json(menu_reply("retrieval.dense_k", 70)),
               Reply.of_json(menu_reply("widen_dense", 3)), Reply.of_json(menu_reply("retrieval.merge", "rrf"))]
    st, requests = scripted_run(repo, run_id, replies, 2, "research.researcher.mode=menu",
                                "research.loop.max_iterations_per_hypothesis=1")
    records, _ = read_trajectory(runs / run_id, strict=True)
    assert [r.decision for r in records[:3]] == ["baseline", "rejected", "pivot"] and len(records) == 4
    assert st.evaluated == 2 and st.status == "finished"
    refused, fewer, last = records[1:]
    assert refused.failure["cls"] == "no_effect" and [h["action"] for h in refused.healing] == ["reask", "reask"]
    assert len(requests) == 6
    assert [(h["action"], h["result"]) for h in records[2].healing] == [("resample", "new proposal")]
    assert "retrieval.dense_k=70 is outside" in records[2].healing[0]["reason"]
    assert requests[3]["messages"] == requests[4]["messages"] and requests[3]["seed"] != requests[4]["seed"]
    first, *reasks, second, _, third = (menu_levers(r) for r in requests)
    assert "retrieval.top_k" in first and "widen_dense" in first
    for offered in (*reasks, second):  # every request after the refusal: top_k gone (widen_dense, which
        # writes dense_k too, is another change and stays)
        assert set(offered) == set(first) - {"retrieval.top_k"}
    levers = _levers_section(requests[3])
    assert "retrieval.top_k = 5" not in levers
    assert "Not offered now: retrieval.top_k (refused before evaluation: retrieval.top_k=5, no effect, exp-001)" \
        in levers
    # after the pivot, from the same commit: the abandoned direction's lever is out too
    assert fewer.parent_commit == refused.parent_commit == last.parent_commit and fewer.objective_value is not None
    assert set(third) == set(first) - {"retrieval.top_k", "widen_dense", "retrieval.dense_k"}  # widen_dense's paths
    assert "widen_dense (moved by exp-002 since the best last moved, no supported gain)" in _levers_section(requests[5])


def _levers_section(request: dict[str, Any]) -> str:
    step = request["messages"][-1]["content"]
    return step.split("Levers (live in the best config", 1)[1].split("Source excerpts", 1)[0]


PRESET = "configs/memory/naive.yaml"
HELD_OVERRIDE = proposal("two candidates are the most precise context", ["retrieval.top_k=2", "retrieval.dense_k=2"])
HELD_EDIT = proposal("a shorter list in the preset itself", [],
                     [{"path": PRESET, "search": "  top_k: 5\n", "replace": "  top_k: 3\n"}])
FREE = proposal("two dense candidates inside the same list", ["retrieval.dense_k=2"])


def test_fixed_levers_are_never_offered_and_a_proposal_that_moves_them_by_override_or_edit_is_refused(
        repo: Path, runs: Path) -> None:
    """research.fixed_levers=[retrieval.top_k]: the researcher is not shown top_k (nor widen_dense, which
    writes it); an override of it is refused before anything is applied and re-asked; a code edit of the
    preset that moves it is refused once committed, before any evaluation; a change elsewhere is evaluated."""
    run_id = "held"
    st, requests = scripted_run(repo, run_id, [Reply.of_json(p) for p in (HELD_OVERRIDE, HELD_EDIT, FREE)], 1,
                                "research.fixed_levers=[retrieval.top_k]", "research.loop.max_iterations_per_hypothesis=1")
    run_dir = runs / run_id
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    base, edit, free = records
    assert [r.decision for r in records] == ["baseline", "rejected", "pivot"] and st.status == "finished"
    levers = _levers_section(requests[0])
    assert "retrieval.dense_k" in levers and "retrieval.top_k" not in levers and "widen_dense" not in levers
    # the override: refused at the static screen, re-asked with the reason
    assert [h["action"] for h in edit.healing] == ["reask"]
    assert "retrieval.top_k 5 -> 2: research.fixed_levers keeps it at the run's value" in edit.healing[0]["reason"]
    # the edit of the preset: committed, then refused before any evaluation
    assert edit.failure["cls"] == "forbidden_edit" and edit.failure["stage"] == "apply"
    assert edit.failure["message"] == "retrieval.top_k 5 -> 3: research.fixed_levers keeps it at the run's value"
    assert evals_of(run_dir, "exp-001") == [] and git(repo, "rev-parse", st.best_commit) == base.commit
    # elsewhere the run goes on as usual
    assert free.config_overrides == ["retrieval.dense_k=2"] and free.objective_value is not None
