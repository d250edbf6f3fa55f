"""The propose stage of the loop, end to end: repeated proposals and a refused researcher key.

Real pieces as in test_loop_e2e: git worktrees, the process sandbox running the LoCoMo tiny
evaluation (reader=none), the openai SDK over HTTP to :class:`OpenAITestServer`. In the auth
test a second test server stands in for the embedded model (the real one takes minutes; its
own start-up is covered in tests/memsys/llm).
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from memsys.llm.client import LLMClient
from research.journal.trajectory import read_trajectory
from research.loop.research_loop import ResearchLoop
from tests.support.loop import DEGRADE, IMPROVE, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

# the same change with other spacing and order: still the same experiment
DEGRADE_RESPACED = {**DEGRADE, "config_overrides": ["retrieval.dense_k = 2", "retrieval.merge=dense_only",
                                                    "retrieval.top_k=2"]}
DEGRADE_OTHER = {**DEGRADE, "config_overrides": ["retrieval.merge=dense_only", "retrieval.top_k=3", "retrieval.dense_k=3"]}
DEGRADE_FOUR = {**DEGRADE, "hypothesis": "four dense candidates", "config_overrides": ["retrieval.top_k=4", "retrieval.dense_k=4",
                                                                                      "retrieval.merge=dense_only"]}
# every value already in the best commit's preset: no effect, caught before a worktree exists
NO_OP = {**IMPROVE, "hypothesis": "set union with 20 candidates", "config_overrides": ["retrieval.top_k=20"]}
# an edit whose SEARCH text is not in the file: sent back once with the error
UNAPPLIABLE = {**DEGRADE, "hypothesis": "rename a constant", "config_overrides": [],
               "edits": [{"path": "memsys/config.py", "search": "THIS TEXT IS NOT IN THE FILE", "replace": "x"}]}


def evals_of(run_dir: Path, experiment_id: str) -> list[Path]:
    """Evaluation folders of one experiment (``evals/<exp-id><tag>-<key>``)."""
    return sorted((run_dir / "evals").glob(f"{experiment_id}-*")) + sorted((run_dir / "evals").glob(experiment_id))


def test_repeated_proposals_are_reasked_then_skipped(repo: Path, runs: Path) -> None:
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")
        server.enqueue(
            Reply.of_json(IMPROVE),  # exp-001: proceed
            Reply.of_json(DEGRADE),  # exp-002: iterate (degraded)
            Reply.of_json(DEGRADE_RESPACED), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE_OTHER),  # exp-003
            Reply.of_json(DEGRADE), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE_RESPACED),  # exp-004: skipped
            Reply.of_json(NO_OP), Reply.of_json(NO_OP), Reply.of_json(NO_OP),  # exp-005: no effect, skipped
            Reply.of_json(UNAPPLIABLE), Reply.of_json(DEGRADE),  # exp-006: the resent proposal repeats exp-002
            Reply.of_json(DEGRADE_FOUR),  # exp-007: the fourth evaluation spends the budget
        )
        loop = ResearchLoop(scripted_setup(repo, 4, "research.loop.degradations_to_pivot=9"), "dup",
                            llm_opener=scripted_opener(server))
        st = loop.run()
        requests = server.chat_requests
        assert server.pending == 0
    run_dir = runs / "dup"
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    base, imp, deg, deg_other, dup, noop, resent, last = records
    assert [r.decision for r in records] == ["baseline", "proceed", "iterate", "iterate", "rejected", "rejected",
                                             "rejected", "pivot"]
    assert deg.degraded and deg_other.degraded  # both iterations start from the best commit (imp)
    assert all(r.parent_commit == imp.commit for r in records[2:])

    # exp-003: sent back twice (respaced + reordered is the same change), the third reply is new
    assert [h["action"] for h in deg_other.healing] == ["reask"] * 2
    assert [h["result"] for h in deg_other.healing] == ["new proposal"] * 2
    assert all(h["stage"] == "propose" and "repeats exp-002" in h["reason"] for h in deg_other.healing)
    assert deg_other.config_overrides == DEGRADE_OTHER["config_overrides"] and deg_other.objective_value is not None
    assert deg_other.effective_key not in (deg.effective_key, imp.effective_key, base.effective_key)

    # exp-004: still a repeat after the bounded re-asks: identical conditions, never evaluated
    assert dup.failure["cls"] == "identical_conditions" and dup.failure["stage"] == "propose"
    assert "repeats exp-002" in dup.failure["message"] and dup.failure["is_infrastructure"] is False
    assert dup.effective_key == deg.effective_key and dup.notes == f"known value {deg.objective_value:.4f}"
    assert len(dup.healing) == 2 and dup.eval_run_id is None and dup.objective_value is None
    assert dup.commit is None and dup.branch is None and "eval_s" not in dup.durations and "screen_s" not in dup.durations
    assert evals_of(run_dir, "exp-004") == []
    assert dup.config_overrides == DEGRADE_RESPACED["config_overrides"]  # the last reply is the one recorded
    assert dup.tokens > 0  # the three proposals' tokens are charged

    # exp-005: the override is the best commit's own value: no effect, known without a worktree
    assert noop.failure["cls"] == "no_effect" and noop.failure["stage"] == "propose"
    assert "retrieval.top_k is already 20" in noop.failure["message"]
    assert [h["action"] for h in noop.healing] == ["reask"] * 2
    assert noop.commit is None and noop.diff == "" and noop.eval_run_id is None and evals_of(run_dir, "exp-005") == []

    # exp-006: the edit did not apply; the resent proposal (config only) repeats exp-002: refused after apply
    assert [h["action"] for h in resent.healing] == ["resend_edit"] and resent.healing[0]["result"] == "ok"
    assert resent.failure["cls"] == "identical_conditions" and resent.failure["stage"] == "apply"
    assert "repeats exp-002" in resent.failure["message"] and resent.effective_key == deg.effective_key
    assert resent.eval_run_id is None and evals_of(run_dir, "exp-006") == []
    assert resent.config_overrides == DEGRADE["config_overrides"] and resent.edits == []
    assert resent.hypothesis == UNAPPLIABLE["hypothesis"] and "configs/memory/naive.yaml" in resent.diff

    # exp-007: rejected proposals do not spend the budget, but count against the hypothesis (iteration cap)
    assert last.objective_value is not None and "attempts on this hypothesis" in last.notes
    assert st.status == "finished" and st.stop_reason == "experiment budget spent (4/4 evaluated)"
    assert (st.evaluated, st.proposals, st.next_index) == (4, 7, 8)

    # the re-asks: a follow-up turn after the model's own reply, sampled warmer, with what was tried
    researcher = [r for r in requests if r["messages"][0]["role"] == "system"]
    assert len(researcher) == len(requests) == 14
    first, reask = researcher[2], researcher[3]
    assert first["temperature"] == pytest.approx(0.7)  # research.researcher.temperature
    assert reask["temperature"] == pytest.approx(0.8)  # research.loop.duplicate_temperature
    assert reask["seed"] != first["seed"]
    roles = [m["role"] for m in reask["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert json.loads(reask["messages"][2]["content"])["config_overrides"] == DEGRADE_RESPACED["config_overrides"]
    notice = reask["messages"][-1]["content"]
    assert notice.startswith("That proposal was not evaluated: repeats exp-002") and "(iterate)" in notice
    assert "- retrieval.dense_k = 2; retrieval.merge=dense_only; retrieval.top_k=2: repeats exp-002" in notice
    assert reask["messages"][1]["content"] == first["messages"][-1]["content"]  # the same step prompt
    second = researcher[4]["messages"][-1]["content"]  # the second re-ask lists both tries
    assert second.count("repeats exp-002") == 3
    noop_reask = researcher[9]["messages"][-1]["content"]
    assert "no effect" in noop_reask and "retrieval.top_k is already 20" in noop_reask
    assert "Your last change failed" in researcher[12]["messages"][-1]["content"]

    assert st.best_commit == imp.commit
    assert git(repo, "rev-parse", "refs/autoresearch/dup/best") == imp.commit
    assert git(repo, "status", "--porcelain") == ""


def two_endpoint_opener(remote: OpenAITestServer, local: OpenAITestServer):
    """``llm=openai`` reaches ``remote``; ``llm=local`` (the fallback) reaches ``local``."""
    @contextmanager
    def opener(cfg: Any, *, budget: Any = None, **_: Any) -> Iterator[LLMClient]:
        server = local if cfg.backend == "local" else remote
        c = dataclasses.replace(cfg, backend="openai", base_url=server.base_url, cache=False, max_retries=0,
                                timeout_s=30.0)
        with LLMClient(c, budget=budget) as client:
            yield client
    return opener


@pytest.mark.parametrize("fallback", [True, False])
def test_refused_researcher_key_switches_to_the_local_model(repo: Path, runs: Path, fallback: bool) -> None:
    with OpenAITestServer() as remote, OpenAITestServer() as local:
        remote.handler = lambda body: Reply.error(403, "the key has expired")
        local.handler = lambda body: Reply.ok("UNSCRIPTED")
        local.enqueue(Reply.of_json(IMPROVE))
        setup = scripted_setup(repo, 1, "llm=openai", f"llm.base_url={remote.base_url}", "llm.model=remote-model",
                          f"research.loop.local_fallback={str(fallback).lower()}")
        st = ResearchLoop(setup, "auth", llm_opener=two_endpoint_opener(remote, local)).run()
        remote_calls, local_calls = len(remote.chat_requests), len(local.chat_requests)
    base, *exps = read_trajectory(runs / "auth", strict=True)[0]
    if fallback:
        assert remote_calls == 1  # a 403 is never retried: the embedded model takes over
        assert local_calls == 1 and len(exps) == 1
        exp = exps[0]
        assert [(h["stage"], h["action"]) for h in exp.healing] == [("propose", "switch_local_llm")]
        assert "switched reader and researcher from remote-model" in exp.healing[0]["result"]
        assert exp.decision == "proceed" and exp.failure is None
        assert st.best_commit == exp.commit and st.local_switched
        assert st.stop_reason == "experiment budget spent (1/1 evaluated)"
    else:
        # a refused key without the fallback ends the run at once (a 403 is never retried): asking again
        # would only be refused again
        assert local_calls == 0 and len(exps) == 1 and remote_calls == 1
        exp = exps[0]
        assert exp.healing == [] and exp.commit is None
        assert exp.decision == "failed" and exp.failure["cls"] == "auth" and exp.failure["stage"] == "propose"
        assert "403" in exp.failure["message"] and exp.failure["is_infrastructure"] is True
        assert st.stop_reason.startswith("the endpoint refused the key") and "local_fallback" in st.stop_reason
        assert st.best_commit == base.commit and st.consecutive_degradations == 0 and not st.local_switched
