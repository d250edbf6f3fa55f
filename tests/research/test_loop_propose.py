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
from research.loop import ResearchLoop
from research.trajectory import read_trajectory
from tests.support.loop import DEGRADE, IMPROVE, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

# the same change with other spacing and order: still the same experiment
DEGRADE_RESPACED = {**DEGRADE, "config_overrides": ["retrieval.dense_k = 2", "retrieval.merge=dense_only",
                                                    "retrieval.top_k=2"]}
DEGRADE_OTHER = {**DEGRADE, "config_overrides": ["retrieval.merge=dense_only", "retrieval.top_k=3", "retrieval.dense_k=3"]}
# every value already in the best commit's preset: applying it changes no file
NO_OP = {**IMPROVE, "hypothesis": "set union with 20 candidates", "config_overrides": ["retrieval.top_k=20"]}
# an edit whose SEARCH text is not in the file: sent back once with the error
UNAPPLIABLE = {**DEGRADE, "hypothesis": "rename a constant", "config_overrides": [],
               "edits": [{"path": "memsys/config.py", "search": "THIS TEXT IS NOT IN THE FILE", "replace": "x"}]}





def test_repeated_proposals_are_reasked_then_skipped(repo: Path, runs: Path) -> None:
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")
        server.enqueue(
            Reply.of_json(IMPROVE),  # exp-001: proceed
            Reply.of_json(DEGRADE),  # exp-002: iterate (degraded)
            Reply.of_json(DEGRADE_RESPACED), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE_OTHER),  # exp-003
            Reply.of_json(DEGRADE), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE_RESPACED),  # exp-004: skipped
            Reply.of_json(NO_OP),  # exp-005: empty diff, skipped
            Reply.of_json(UNAPPLIABLE), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE), Reply.of_json(DEGRADE),  # exp-006
        )
        loop = ResearchLoop(scripted_setup(repo, 6, "research.loop.degradations_to_pivot=9"), "dup",
                            llm_opener=scripted_opener(server))
        st = loop.run()
        requests = server.chat_requests
        assert server.pending == 0
    run_dir = runs / "dup"
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    base, imp, deg, deg_other, dup, noop, resent = records
    assert [r.decision for r in records] == ["baseline", "proceed", "iterate", "iterate", "rejected", "rejected",
                                             "rejected"]

    # exp-003: sent back twice (respaced + reordered is the same change), the third reply is new
    assert [h["action"] for h in deg_other.healing] == ["duplicate_proposal"] * 2
    assert [h["result"] for h in deg_other.healing] == ["repeats exp-002 again", "new proposal"]
    assert deg_other.config_overrides == DEGRADE_OTHER["config_overrides"] and deg_other.objective_value is not None

    # exp-004: still a repeat after the bounded re-asks: identical conditions, never evaluated
    assert dup.failure["cls"] == "identical_conditions" and dup.failure["stage"] == "propose"
    assert "repeats exp-002" in dup.failure["message"] and dup.failure["is_infrastructure"] is False
    assert len(dup.healing) == 2 and dup.eval_run_id is None and dup.objective_value is None
    assert dup.commit is None and "eval_s" not in dup.durations
    assert not (run_dir / "evals" / "exp-004").exists()
    assert dup.tokens > 0  # the three proposals' tokens are charged

    # exp-005: the override is the best commit's own value
    assert noop.failure["cls"] == "identical_conditions" and noop.failure["stage"] == "apply"
    assert noop.diff == "" and noop.eval_run_id is None and not (run_dir / "evals" / "exp-005").exists()

    # exp-006: the edit did not apply, and the resent proposal was a repeat: re-asked, then skipped
    assert [h["action"] for h in resent.healing] == ["resend_edit", "duplicate_proposal", "duplicate_proposal"]
    assert resent.healing[0]["result"] == "repeats exp-002"
    assert resent.failure["cls"] == "identical_conditions" and resent.failure["stage"] == "apply"
    assert resent.eval_run_id is None and not (run_dir / "evals" / "exp-006").exists()
    assert resent.config_overrides == DEGRADE["config_overrides"] and resent.edits == []

    # the re-asks: a follow-up turn after the model's own reply, sampled warmer, with what was tried
    researcher = [r for r in requests if r["messages"][0]["role"] == "system"]
    assert len(researcher) == 13
    first, reask = researcher[2], researcher[3]
    assert first.get("temperature", 0.0) == 0.0
    assert reask["temperature"] == pytest.approx(0.8)
    roles = [m["role"] for m in reask["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert json.loads(reask["messages"][2]["content"])["config_overrides"] == DEGRADE_RESPACED["config_overrides"]
    notice = reask["messages"][-1]["content"]
    assert "repeats exp-002" in notice and "retrieval.dense_k=2" in notice and "iterate" in notice
    assert reask["messages"][1]["content"] == first["messages"][-1]["content"]  # the same step prompt

    assert st.status == "finished" and st.best_commit == imp.commit
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
    base, exp = read_trajectory(runs / "auth", strict=True)[0]
    assert remote_calls == 1  # a 403 is never retried
    if fallback:
        assert local_calls == 1
        assert [(h["stage"], h["action"]) for h in exp.healing] == [("propose", "switch_local_llm")]
        assert "switched reader and researcher from remote-model" in exp.healing[0]["result"]
        assert exp.decision == "proceed" and exp.failure is None
        assert st.best_commit == exp.commit
    else:
        assert local_calls == 0 and exp.healing == []
        assert exp.decision == "failed" and exp.failure["cls"] == "auth" and exp.failure["stage"] == "propose"
        assert "403" in exp.failure["message"]
