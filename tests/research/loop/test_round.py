"""research.loop.round: K candidates per round (research.parallel=2) asked of the researcher in one request,
evaluated at once, the best taken, the other recorded as not taken with its numbers; the same
trajectory on a local Ray instance as with the local executor, each evaluation's node named as it
starts; a run stopped mid-round does not evaluate a finished candidate again; a batch with a repeat
inside it and one proposal short goes through the repeat handling and is topped up.

Real pieces: git worktrees in a scratch repo, the process sandbox on LoCoMo tiny with reader=none,
the scripted researcher over the OpenAI-protocol test server, Ray for the executor=ray run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from research.loop.research_loop import ResearchLoop
from research.loop.round import ROUND_FILE
from research.loop.state import LoopState
from tests.support.loop import DEGRADE, IMPROVE, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow
K2 = ("research.parallel=2", "research.loop.check=false")


def batch(*proposals: dict) -> Reply:
    return Reply.of_json({"proposals": list(proposals)})


def _run(repo: Path, run_id: str, *extra: str, on_event=None, resume: bool = False, replies=None,
         experiments: int = 2):
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")  # an unscripted request fails loudly
        server.enqueue(*(replies or [batch(IMPROVE, DEGRADE)]))
        opener = scripted_opener(server)
        if resume:
            loop = ResearchLoop.from_run(run_id, llm_opener=opener, on_event=on_event)
        else:
            loop = ResearchLoop(scripted_setup(repo, experiments, *K2, *extra), run_id, llm_opener=opener,
                                on_event=on_event)
        loop.run()
        loop.requests = list(server.chat_requests)
    return loop


def _items(body: dict) -> tuple[int, int] | None:
    """(minItems, maxItems) of the request's batch schema; None for a single-proposal request."""
    props = body["response_format"]["json_schema"]["schema"]["properties"].get("proposals")
    return (props["minItems"], props["maxItems"]) if props else None


def test_round_takes_the_best_and_ray_gives_the_local_trajectory(repo: Path, runs: Path, locomo_path) -> None:
    pytest.importorskip("ray")
    run = _run(repo, "k2-local")
    local = run.records
    assert len(run.requests) == 1 and _items(run.requests[0]) == (2, 2)  # one request for both candidates
    assert "Propose 2 DIFFERENT hypotheses" in run.requests[0]["messages"][-1]["content"]
    assert [r.decision for r in local] == ["baseline", "proceed", "not_taken"]
    assert [r.round_of for r in local] == [None, 1, 1]
    improve, degrade = local[1], local[2]
    assert improve.objective_value > degrade.objective_value is not None  # the other keeps its numbers
    assert improve.parent_commit == degrade.parent_commit == local[0].commit  # both from the same best
    assert "not taken: exp-001" in degrade.notes and degrade.branch and degrade.commit
    st = LoopState.load(runs / "k2-local")
    assert st.evaluated == 2 and st.best_commit == improve.commit and st.mode == "new"
    events: list = []
    remote = _run(repo, "k2-ray", "research.executor=ray", "research.ray.num_cpus=2",
                  on_event=lambda kind, data: events.append((kind, data))).records
    assert [r.decision for r in remote] == [r.decision for r in local]
    assert [r.objective_value for r in remote] == [r.objective_value for r in local]
    assert [r.diff for r in remote] == [r.diff for r in local]
    assert all(r.sandbox.get("node") for r in remote)
    # each candidate's node is announced when its evaluation starts, before that evaluation ends
    kinds = [(k, d.get("experiment"), d.get("stage")) for k, d in events if k in ("started", "placed")]
    for exp in ("exp-001", "exp-002"):
        assert kinds.index(("started", exp, "screen")) < kinds.index(("placed", exp, "screen"))
    node = next(d["node"] for k, d in events if k == "started" and d["experiment"] == "exp-001")
    assert node == remote[1].sandbox["node"]


class Stopped(Exception):
    pass


def test_stopped_mid_round_does_not_evaluate_a_finished_candidate_again(repo: Path, runs: Path, locomo_path) -> None:
    def stop_at_decide(kind: str, data: dict) -> None:
        if kind == "stage" and data.get("stage") == "decide":
            raise KeyboardInterrupt  # both candidates are measured: the run dies before recording them

    with pytest.raises(KeyboardInterrupt):
        _run(repo, "k2-stop", on_event=stop_at_decide)
    assert (runs / "k2-stop" / ROUND_FILE).exists()
    events: list = []
    loop = _run(repo, "k2-stop", on_event=lambda k, d: events.append((k, d)), resume=True)
    assert [r.decision for r in loop.records] == ["baseline", "proceed", "not_taken"]
    again = [d for k, d in events if k == "stage" and d.get("stage") in ("screen", "evaluate")]
    assert again and all("not evaluated again" in d["detail"] for d in again)
    assert not (runs / "k2-stop" / ROUND_FILE).exists()


def test_a_batch_with_a_repeat_and_one_short_is_screened_and_topped_up(repo: Path, runs: Path, locomo_path) -> None:
    """parallel=3: the batch brings IMPROVE twice and nothing for the third candidate. The second copy
    repeats the first candidate of the round: it goes back to the researcher (a follow-up turn) and
    DEGRADE comes instead; the third candidate is asked on its own."""
    deeper = {**IMPROVE, "hypothesis": "BM25 beside dense", "config_overrides": ["retrieval.merge=set_union",
                                                                             "retrieval.top_k=10"]}
    run = _run(repo, "k3-batch", "research.parallel=3", experiments=3,
               replies=[batch(IMPROVE, IMPROVE), Reply.of_json(DEGRADE), Reply.of_json(deeper)])
    assert [_items(b) for b in run.requests] == [(3, 3), None, None]
    assert "repeats exp-001, a candidate of this round" in run.requests[1]["messages"][-1]["content"]
    assert run.requests[1]["messages"][-2]["role"] == "assistant"  # the model sees its own repeated proposal
    recs = run.records
    assert [r.config_overrides for r in recs[1:]] == [IMPROVE["config_overrides"], DEGRADE["config_overrides"],
                                                     deeper["config_overrides"]]
    assert [h["action"] for h in recs[2].healing] == ["reask"] and not recs[1].healing and not recs[3].healing
    assert recs[1].decision == "proceed" and {r.decision for r in recs[2:]} == {"not_taken"}
    assert all(r.tokens > 0 for r in recs[1:])  # the batch's tokens are shared, the asks' their own
