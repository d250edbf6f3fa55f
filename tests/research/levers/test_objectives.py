"""research.objectives: the quickstart's budgeted objective, and the multi-objective shared study
(quality up, counted context tokens down) built from journal records with real Optuna."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from harness.errors import ConfigError
from memsys.config import load_memory_config
from research.commands import QUICKSTART
from research.config import load_run_setup, study_name
from research.journal.trajectory import ExperimentRecord
from research.levers.catalogue import resolve
from research.levers.study import SharedStudy, pareto_indices, trial_values
from tests.support.loop import scripted_setup

BOTH = ["quality", "context_tokens"]
#: hand-made evaluated experiments: (overrides on naive, objective value, mean counted context tokens).
#: Non-dominated: 0 (cheapest), 2, 3 (best quality); 1 is beaten by 2 on both, 4 by 3 on both.
POINTS = [
    ([], 0.20, 150.0),
    (["retrieval.top_k=10", "retrieval.dense_k=10"], 0.30, 420.0),
    (["retrieval.top_k=8", "retrieval.dense_k=8"], 0.45, 400.0),
    (["retrieval.top_k=30", "retrieval.dense_k=30"], 0.70, 980.0),
    (["retrieval.top_k=40", "retrieval.dense_k=40"], 0.65, 1000.0),
]
FRONT = [0, 2, 3]


@pytest.fixture(scope="module")
def naive():
    return load_memory_config("naive")


def _records(run_id: str = "run-mo") -> list[ExperimentRecord]:
    """Journal records as the loop writes them: the objective value, and the scorer's metrics beside it."""
    return [ExperimentRecord(run_id=run_id, index=i, experiment_id=f"exp-{i:03d}", proposer="optuna", parent_commit="c0",
                             commit=f"c{i}", decision="baseline" if i == 0 else "iterate", objective="context_recall",
                             objective_value=value, metrics={"context_recall": value, "context_tokens": tokens,
                                                             "context_budget_tokens": 1000})
            for i, (_, value, tokens) in enumerate(POINTS)]


def _study(naive, records: list[ExperimentRecord], **kw) -> SharedStudy:
    """A study rebuilt from ``records`` the way the loop rebuilds it from its journal (research_loop._study_add)."""
    study = SharedStudy(seed=0, objectives=BOTH, run_id="run-mo", **kw)
    for rec, (overrides, _, _) in zip(records, POINTS):
        values = study.values_of(rec.objective_value, rec.metrics)
        study.add(resolve(naive, overrides), values, rec.index)
    return study


def test_the_quickstart_objective_is_the_evidence_in_the_first_1000_context_tokens() -> None:
    setup = load_run_setup(QUICKSTART)  # as research.commands.cmd_quickstart composes it
    assert setup.eval.options.reader == "none" and setup.eval.objective == "context_recall"
    assert setup.eval.options.context_budget_tokens == 1000
    assert setup.research.objectives == ["quality"]
    assert study_name(setup) == "locomo-dev-half-context_recall@1000"


def test_objectives_are_validated_and_name_their_study() -> None:
    setup = load_run_setup([*QUICKSTART, "research.objectives=[quality,context_tokens]"])
    assert setup.research.objectives == BOTH
    assert study_name(setup) == "locomo-dev-half-context_recall@1000+context_tokens"
    for bad in ("[context_tokens]", "[quality,latency]", "[quality,quality]", "[]"):
        with pytest.raises(ConfigError, match="research.objectives must start with quality"):
            load_run_setup([f"research.objectives={bad}"])


def test_a_two_objective_study_proposes_configs_and_its_best_trials_are_the_non_dominated_ones(naive) -> None:
    study = _study(naive, _records())
    assert [d.name for d in study.study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert sorted(t.number for t in study.study.best_trials) == FRONT
    assert pareto_indices([(v, c) for _, v, c in POINTS], ["maximize", "minimize"]) == FRONT
    drawn = study.suggest(None, step_seed=7)  # past n_startup_trials: multi-objective TPE
    assert len(drawn) > 20 and drawn["retrieval.top_k"] >= 1
    assert study.suggest(["retrieval.top_k"], step_seed=8).keys() == {"retrieval.top_k"}
    assert len(study.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == len(POINTS)


def test_a_rebuilt_study_asks_the_same_question_of_the_same_history(naive) -> None:
    """Resume: the study is rebuilt from the journal, so the same step seed draws the same config."""
    first, resumed = _study(naive, _records()), _study(naive, _records())
    assert first.suggest(None, step_seed=11) == resumed.suggest(None, step_seed=11)
    assert [t.values for t in resumed.study.trials if t.values] == [[v, c] for _, v, c in POINTS]


def test_records_without_a_counted_cost_stay_out_of_a_two_objective_study(naive) -> None:
    assert trial_values(0.4, {"context_tokens": 300}, BOTH) == (0.4, 300.0)
    assert trial_values(0.4, {}, BOTH) is None and trial_values(None, {"context_tokens": 3}, BOTH) is None
    assert trial_values(0.4, {"context_tokens": float("nan")}, BOTH) is None
    assert trial_values(0.4, {}, ["quality"]) == (0.4,)
    with pytest.raises(ValueError, match="1 values for objectives"):
        SharedStudy(objectives=BOTH).add(naive, 0.4, 0)


def test_a_shared_study_of_other_directions_is_refused(tmp_path: Path, naive) -> None:
    spec = str(tmp_path / "study.log")
    SharedStudy(storage=spec, name="s", run_id="a").add(naive, 0.2, 0)  # single-objective
    with pytest.raises(ConfigError, match="optimizes \\['maximize'\\], this run \\['maximize', 'minimize'\\]"):
        SharedStudy(storage=spec, name="s", objectives=BOTH)
    two = SharedStudy(storage=spec, name="s2", objectives=BOTH, run_id="a")
    two.add(naive, (0.2, 100.0), 0)
    other = SharedStudy(storage=spec, name="s2", objectives=BOTH, run_id="b")
    assert other.pull() == 1 and other.study.best_trials[0].values == [0.2, 100.0]


@pytest.mark.slow
def test_a_two_objective_run_records_both_values_and_rebuilds_its_study_on_resume(repo: Path, runs: Path) -> None:
    """A real loop (TPE proposer, reader-free tiny evaluations): every evaluated experiment enters the study
    with its objective and the scorer's counted context tokens, and --resume rebuilds the same trials."""
    from research.loop.research_loop import ResearchLoop

    over = ("research.proposer=optuna", "research.objectives=[quality,context_tokens]", "context_budget_tokens=1000",
            "memory.embedder.backend=hashing")
    loop = ResearchLoop(scripted_setup(repo, 2, *over), "mo-run")
    loop.run()
    measured = [r for r in loop.records if r.objective_value is not None and r.decision not in ("failed", "rejected")]
    assert len(measured) >= 2 and all(r.metrics["context_budget_tokens"] == 1000 for r in measured)
    expected = [[r.objective_value, r.metrics["context_tokens"]] for r in measured]
    assert [t.values for t in loop.study.study.trials if t.values] == expected
    resumed = ResearchLoop.from_run("mo-run", ["research.budget.experiments=3"])  # memsys run --resume mo-run
    resumed.run()
    assert resumed.setup.research.objectives == BOTH
    trials = [t.values for t in resumed.study.study.trials if t.values]
    assert trials[:len(expected)] == expected and len(trials) > len(expected)  # the journal's, then the new one
