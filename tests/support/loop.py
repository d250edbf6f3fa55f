"""Helpers shared by the research-loop tests: git in a scratch repo, the loop's LLM on the test server."""

from __future__ import annotations

import dataclasses
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from memsys.llm.client import LLMClient
from research.journal.trajectory import ExperimentRecord
from research.workspace.edits import apply_config_overrides
from tests.support.openai_server import OpenAITestServer

# scripted researcher proposals on the naive preset (objective context_recall with reader=none)
IMPROVE = {
    "hypothesis": "hybrid retrieval with more candidates raises recall",
    "discovery_type": "hyperparameter_tuning",
    "expected_effect": "recall@10 up",
    "config_overrides": ["retrieval.merge=set_union", "retrieval.top_k=20", "retrieval.dense_k=20",
                         "retrieval.sparse_k=20"],
    "edits": [],
}
SCORER = "benchmarks/metrics/locomo.py"
# touches the scorer: must be rejected before evaluation
FORBIDDEN = {
    "hypothesis": "score answers more leniently",
    "discovery_type": "evaluation_format_alignment",
    "expected_effect": "everything passes",
    "config_overrides": [],
    "edits": [{"path": SCORER, "search": "", "replace": "# owned\n"}],
}
DEGRADE = {
    "hypothesis": "fewer candidates give a more precise context",
    "discovery_type": "hyperparameter_tuning",
    "expected_effect": "precision up",
    "config_overrides": ["retrieval.merge=dense_only", "retrieval.top_k=2", "retrieval.dense_k=2"],
    "edits": [],
}


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def scripted_opener(server: OpenAITestServer, *, cache: bool = False, timeout_s: float = 30.0):
    """An ``llm_opener`` for ResearchLoop: the researcher (and reader) talk to the scripted server."""
    @contextmanager
    def opener(cfg: Any, *, budget: Any = None, **_: Any) -> Iterator[LLMClient]:
        c = dataclasses.replace(cfg, backend="openai", base_url=server.base_url, cache=cache, max_retries=0,
                                timeout_s=timeout_s)
        with LLMClient(c, budget=budget) as client:
            yield client
    return opener


#: the never-shown check (docs/design.md section 6) off in the scripted runs of other features: on the
#: 12-question tiny sample at most 3 questions are shown and 9 are left, too few for the sign-flip test to
#: support their scripted gains (a gain on 3 of 9 questions has p = 1/8). Its own tests turn it on
#: (tests/research/test_leakage_e2e.py, tests/research/test_capable_researcher_e2e.py).
NEVER_SHOWN_OFF = "research.loop.never_shown_check=false"


def scripted_setup(repo: Path, experiments: int, *extra: str) -> Any:
    """A loop setup for the scripted tests: retrieval-only tiny evaluations in the process sandbox."""
    from research.config import load_run_setup

    return load_run_setup(["reader=none", "sample=tiny", "mlflow=false", "research.sandbox.backend=process",
                           "research.sandbox.allow_weak=true", "research.confirm.enabled=false",
                           f"research.repo={repo}", "research.proposer=llm", "research.researcher.mode=code",
                           f"research.budget.experiments={experiments}", "research.loop.smoke_sample=null",
                           "workers=1", NEVER_SHOWN_OFF, *extra])


_SURFACE = ["memsys/", "configs/memory/"]


def commit_overrides(repo: Path, overrides: list[str], message: str) -> str:
    """A candidate's commit on main: its config overrides written into the preset, as the loop writes them."""
    apply_config_overrides(repo, "naive", overrides, _SURFACE)
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def journal_record(index: int, commit: str, decision: str, value: float | None = None, failure: dict | None = None,
                   edits: list[dict] | None = None) -> ExperimentRecord:
    """One TPE experiment's journal line, as ``resume_journal`` returns it."""
    return ExperimentRecord(run_id="study", index=index, experiment_id=f"exp-{index:03d}", proposer="optuna",
                            parent_commit=commit, commit=commit, decision=decision, objective_value=value,
                            failure=failure, edits=edits or [])
