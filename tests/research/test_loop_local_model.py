"""The research loop with the embedded local model as the researcher (slow: a real 1.5B model on CPU).

The reader is off (reader=none) so the only LLM calls are the researcher's; whatever the small model
proposes, the loop must journal it: an applied experiment with its tokens, or a classified failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from research.config import load_run_setup
from research.loop.research_loop import ResearchLoop
from research.workspace.repo import make_scratch_repo

# one llama.cpp server at a time (the Ray node module starts one too): two on 2 cores nearly double each
# test (135 s -> 220-265 s)
pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.xdist_group("ray_and_local_model")]


def test_one_experiment_proposed_by_the_local_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.paths import REPO_ROOT

    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(tmp_path / "runs"))
    # the 1.1 GB model is assembled once into the repo's cache, not into every test session's
    monkeypatch.setenv("MEMSYS_MODELS_DIR", str(REPO_ROOT / "runs" / "cache" / "models"))
    repo = make_scratch_repo(tmp_path / "repo")
    setup = load_run_setup(["reader=none", "sample=tiny", "mlflow=false", "llm=local", "research.proposer=llm",
                            f"research.repo={repo}", "research.budget.experiments=1", "research.sandbox.backend=process",
                            "research.sandbox.allow_weak=true", "research.confirm.enabled=false",
                            "research.loop.smoke_sample=null", "research.loop.context_budget_tokens=900",
                            "research.loop.max_proposals_factor=1", "workers=1",  # exactly one proposal,
                            "research.loop.duplicate_reasks=0", "research.loop.max_repairs=1",  # at most two calls more
                            "research.loop.check=false",  # the disjoint-slice check is tested without a model
                            "memory.embedder.backend=hashing"])  # what is tested is the researcher, not MiniLM
    loop = ResearchLoop(setup, "local-model")
    state = loop.run()
    assert [r.experiment_id for r in loop.records] == ["exp-000", "exp-001"]
    base, exp = loop.records
    assert base.decision == "baseline" and base.objective_value is not None
    assert exp.proposer == "llm" and exp.decision in ("proceed", "iterate", "pivot", "failed", "rejected")
    if exp.failure is None:
        assert exp.tokens > 0 and exp.hypothesis and exp.discovery_type and exp.commit
    else:  # a small model may well fail: then the failure is classified and journaled
        assert exp.failure["cls"] and exp.failure["message"]
    assert state.status == "finished" and state.next_index == 2
