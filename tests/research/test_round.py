"""research.round: K candidates per round (research.parallel=2) evaluated at once, the best taken, the
other recorded as not taken with its numbers; the same trajectory on a local Ray instance as with the
local executor; a run stopped mid-round does not evaluate a finished candidate again.

Real pieces: git worktrees in a scratch repo, the process sandbox on LoCoMo tiny with reader=none,
the scripted researcher over the OpenAI-protocol test server, Ray for the executor=ray run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from research.loop import ResearchLoop
from research.round import ROUND_FILE
from research.state import LoopState
from tests.support.loop import DEGRADE, IMPROVE, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow
K2 = ("research.parallel=2", "research.loop.check=false")


def _run(repo: Path, run_id: str, *extra: str, on_event=None, resume: bool = False):
    with OpenAITestServer() as server:
        server.enqueue(Reply.of_json(IMPROVE), Reply.of_json(DEGRADE))
        opener = scripted_opener(server)
        if resume:
            loop = ResearchLoop.from_run(run_id, llm_opener=opener, on_event=on_event)
        else:
            loop = ResearchLoop(scripted_setup(repo, 2, *K2, *extra), run_id, llm_opener=opener, on_event=on_event)
        loop.run()
    return loop


def test_round_takes_the_best_and_ray_gives_the_local_trajectory(repo: Path, runs: Path, locomo_path) -> None:
    pytest.importorskip("ray")
    local = _run(repo, "k2-local").records
    assert [r.decision for r in local] == ["baseline", "proceed", "not_taken"]
    improve, degrade = local[1], local[2]
    assert improve.objective_value > degrade.objective_value is not None  # the other keeps its numbers
    assert improve.parent_commit == degrade.parent_commit == local[0].commit  # both from the same best
    assert "not taken: exp-001" in degrade.notes and degrade.branch and degrade.commit
    st = LoopState.load(runs / "k2-local")
    assert st.evaluated == 2 and st.best_commit == improve.commit and st.mode == "new"
    remote = _run(repo, "k2-ray", "research.executor=ray", "research.ray.num_cpus=2").records
    assert [r.decision for r in remote] == [r.decision for r in local]
    assert [r.objective_value for r in remote] == [r.objective_value for r in local]
    assert [r.diff for r in remote] == [r.diff for r in local]
    assert all(r.sandbox.get("node") for r in remote)


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
