"""The research loop with research.executor=ray: the same trajectory as with the local executor.

Real pieces: a local Ray instance (2 CPUs), git worktrees in a scratch repo, the process sandbox on the
LoCoMo tiny sample with reader=none, the scripted researcher over the OpenAI-protocol test server.
Proposing, screening, deciding and scoring stay in the test's process; only the sandboxed answers run
on Ray workers (the records say which node).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from research.loop.research_loop import ResearchLoop
from tests.support.loop import IMPROVE, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow


def _stable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "wall_s"}  # seconds differ from run to run


def _run(repo: Path, run_id: str, *extra: str) -> list:
    with OpenAITestServer() as server:
        server.enqueue(Reply.of_json(IMPROVE))
        events: list = []
        loop = ResearchLoop(scripted_setup(repo, 1, *extra), run_id, llm_opener=scripted_opener(server),
                            on_event=lambda kind, data: events.append((kind, data)))
        loop.run()
    return loop.records, events


def test_ray_executor_gives_the_local_trajectory(repo: Path, runs: Path, locomo_path) -> None:
    pytest.importorskip("ray")
    local, _ = _run(repo, "on-local")
    remote, events = _run(repo, "on-ray", "research.executor=ray", "research.ray.num_cpus=2")
    assert [r.decision for r in remote] == [r.decision for r in local] == ["baseline", "proceed"]
    assert [r.objective_value for r in remote] == [r.objective_value for r in local]
    assert [r.diff for r in remote] == [r.diff for r in local]
    assert [_stable(r.metrics) for r in remote] == [_stable(r.metrics) for r in local]
    assert all(r.sandbox.get("node") and r.sandbox.get("host") for r in remote)  # which node ran each
    assert not any("node" in r.sandbox for r in local)  # the local record is today's
    assert ("executor", {"executor": "ray", "detail": next(d["detail"] for k, d in events if k == "executor")}) in events
    assert any(k == "placed" and d["experiment"] == "exp-001" for k, d in events)
