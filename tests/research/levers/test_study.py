"""The shared Optuna study (research/levers/study.py) with a persistent storage that several drivers share."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from harness.errors import ConfigError
from memsys.config import load_memory_config
from research.levers.catalogue import resolve
from research.levers.study import INFEASIBLE, ORIGIN, SharedStudy, open_storage
from tests.support.loop import git, scripted_setup


@pytest.fixture(scope="module")
def naive():
    return load_memory_config("naive")


def _shared_trials(spec: str, name: str = "s") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=open_storage(spec)).get_trials(deepcopy=False)


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_two_drivers_learn_from_each_others_trials(tmp_path: Path, naive, kind: str) -> None:
    spec = str(tmp_path / "study.log") if kind == "journal" else f"sqlite:///{tmp_path / 'study.db'}"
    a = SharedStudy(seed=0, storage=spec, name="s", run_id="run-a")
    b = SharedStudy(seed=0, storage=spec, name="s", run_id="run-b")
    a.add(naive, 0.2, 0)
    a.add(resolve(naive, ["retrieval.dense_k=40", "retrieval.top_k=40"]), 0.6, 1)
    assert b.pull() == 2 and b.study.best_trial.params["retrieval.top_k"] == 40  # b sees a's best
    b.add(resolve(naive, ["retrieval.top_k=30", "retrieval.dense_k=30"]), 0.5, 1)
    a.suggest(["retrieval.top_k"], 3)  # a suggestion pulls first: a now holds b's trial too
    assert len([t for t in a.study.trials if t.value is not None]) == 3
    shared = _shared_trials(spec)
    # only evaluated trials reach the shared study (the asked-and-failed suggestion stays in memory)
    assert sorted(t.user_attrs[ORIGIN] for t in shared) == ["run-a/0", "run-a/1", "run-b/1"]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in shared)


def test_a_resumed_run_rebuilding_its_study_writes_no_trial_twice(tmp_path: Path, naive) -> None:
    spec = str(tmp_path / "study.log")
    first = SharedStudy(seed=0, storage=spec, name="s", run_id="run-a")
    first.add(naive, 0.2, 0)
    first.add(resolve(naive, ["retrieval.top_k=12"]), 0.3, 1)
    resumed = SharedStudy(seed=0, storage=spec, name="s", run_id="run-a")  # rebuilt from the journal
    resumed.add(naive, 0.2, 0)
    resumed.add(resolve(naive, ["retrieval.top_k=12"]), 0.3, 1)
    resumed.add(resolve(naive, ["retrieval.top_k=14"]), 0.35, 2)
    assert resumed.pull() == 0  # its own trials are not pulled back in
    assert sorted(t.user_attrs[ORIGIN] for t in _shared_trials(spec)) == ["run-a/0", "run-a/1", "run-a/2"]
    assert len(resumed.study.trials) == 3


def _abstain_history(study: SharedStudy, naive, *, tell_failures: bool) -> None:
    """Six experiments, three of them confidence abstention that failed for its config (as without logits)."""
    for k, abstain in enumerate(["off", "confidence", "off", "confidence", "confidence", "off"]):
        cfg = resolve(naive, [f"answer.abstain={abstain}", f"retrieval.top_k={10 + k}"])
        if abstain != "confidence":
            study.add(cfg, 0.3 + 0.01 * k, k)
        elif tell_failures:
            study.add_infeasible(cfg, k)


def test_a_config_that_failed_on_its_own_account_is_an_infeasible_trial_never_a_score(naive) -> None:
    study = SharedStudy(seed=0, n_startup_trials=3, run_id="run")
    _abstain_history(study, naive, tell_failures=True)
    infeasible = [t for t in study.study.trials if t.state == optuna.trial.TrialState.PRUNED]
    # Optuna's TPE ranks a trial whose constraint is above 0 below every feasible one
    assert len(infeasible) == 3 and all(t.value is None and t.constraints == {INFEASIBLE: 1.0} for t in infeasible)
    assert all(t.params["answer.abstain"] == "confidence" for t in infeasible)
    assert study.study.best_trial.params["answer.abstain"] == "off"  # the best is read from feasible trials only
    assert study.suggest(["answer.abstain"], 7) == study.suggest(["answer.abstain"], 7)  # still seeded per step


def test_infeasible_configs_reach_the_shared_study_once_and_the_other_driver(tmp_path: Path, naive) -> None:
    spec = str(tmp_path / "study.log")
    a = SharedStudy(seed=0, storage=spec, name="s", run_id="run-a")
    _abstain_history(a, naive, tell_failures=True)
    _abstain_history(SharedStudy(seed=0, storage=spec, name="s", run_id="run-a"), naive, tell_failures=True)  # resumed
    shared = _shared_trials(spec)
    assert len(shared) == 6 and sum(t.state == optuna.trial.TrialState.PRUNED for t in shared) == 3
    b = SharedStudy(seed=0, storage=spec, name="s", run_id="run-b")
    assert b.pull() == 6
    pulled = [t for t in b.study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert sorted(t.params["answer.abstain"] for t in pulled) == ["confidence"] * 3
    assert all(t.constraints == {INFEASIBLE: 1.0} for t in pulled)


def test_a_storage_that_cannot_be_opened_is_one_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="research.study.storage .*cannot open the journal file"):
        SharedStudy(storage=str(tmp_path / "file" / "study.log"))
    with pytest.raises(ConfigError, match="cannot open the database"):
        SharedStudy(storage="nosuchdialect://x")


@pytest.mark.slow
def test_runs_on_one_storage_share_their_evaluated_experiments(tmp_path: Path, repo: Path, runs: Path) -> None:
    """Two optimization runs (two drivers) with the same study storage: the second run's study starts
    with the first run's evaluated experiments, and the storage holds each run's evaluations once."""
    from research.loop.research_loop import ResearchLoop

    spec = str(tmp_path / "shared" / "study.log")
    over = ["research.proposer=optuna", f"research.study.storage={spec}", "research.study.name=drivers",
            "memory.embedder.backend=hashing"]  # what is shared is checked here, not what the vectors mean
    first = ResearchLoop(scripted_setup(repo, 2, *over), "driver-1")
    first.run()
    measured = sorted(f"driver-1/{r.index}" for r in first.records
                      if r.objective_value is not None and r.decision not in ("failed", "rejected"))
    assert sorted(t.user_attrs[ORIGIN] for t in _shared_trials(spec, "drivers")) == measured
    second = ResearchLoop(scripted_setup(repo, 1, *over), "driver-2")
    second.run()
    assert {f"driver-1/{i.split('/')[1]}" for i in measured} <= {t.user_attrs.get(ORIGIN) for t in second.study.study.trials}
    origins = [t.user_attrs[ORIGIN] for t in _shared_trials(spec, "drivers")]
    assert len(origins) == len(set(origins)) and any(o.startswith("driver-2/") for o in origins)


@pytest.mark.slow
def test_a_run_on_an_older_memsys_never_samples_a_lever_its_schema_lacks(repo: Path, runs: Path) -> None:
    """Found by resuming reader-loop-hybrid after the harness gained answer.image_ids: every TPE draw set
    it, and the run's older memsys failed each one at config composition. The levers offered and sampled
    are now those the run's own memsys declares."""
    from research.loop.research_loop import ResearchLoop

    config = repo / "memsys" / "config.py"
    text = config.read_text()
    field = next(line for line in text.splitlines(keepends=True) if line.strip().startswith("image_ids:"))
    config.write_text(text.replace(field, ""))
    generate = repo / "memsys" / "answer" / "generate.py"
    generate.write_text(generate.read_text().replace("cfg.image_ids and", "False and"))
    git(repo, "commit", "-qam", "an older memsys: no answer.image_ids")
    loop = ResearchLoop(scripted_setup(repo, 2, "research.proposer=optuna", "memory.embedder.backend=hashing"), "older")
    st = loop.run()
    assert loop.commits.absent_at(loop.state.base_commit) == {"answer.image_ids"}
    tried = [r for r in loop.records if r.decision != "baseline"]
    assert len(tried) == 2 and st.evaluated == 2
    assert all(r.decision not in ("failed", "rejected") for r in tried), [r.failure for r in tried]
    assert all(len(r.config_overrides) > 20 for r in tried)  # TPE draws over every other field lever
    assert not any("image_ids" in o for r in tried for o in r.config_overrides)


@pytest.mark.slow
def test_tpe_draws_leave_the_fixed_levers_at_the_runs_values(repo: Path, runs: Path) -> None:
    """research.fixed_levers with a memory override (the cheap-reader recipe): TPE samples every other
    lever, and each evaluated commit keeps the held keys where the run put them."""
    from research.loop.research_loop import ResearchLoop

    loop = ResearchLoop(scripted_setup(repo, 2, "research.proposer=optuna", "memory.embedder.backend=hashing",
                                       "memory.pyramid.budget_tokens=1000",
                                       "research.fixed_levers=[pyramid.budget_tokens,widen_dense]"), "held-tpe")
    st = loop.run()
    tried = [r for r in loop.records if r.decision != "baseline"]
    assert len(tried) == 2 and st.evaluated == 2 and all(len(r.config_overrides) > 20 for r in tried)
    held = ("pyramid.budget_tokens", "retrieval.top_k", "retrieval.dense_k")
    assert not [o for r in tried for o in r.config_overrides if o.split("=")[0].removeprefix("memory.") in held]
    for r in loop.records:
        cfg = loop.commits.config_at(r.commit)
        assert (cfg.pyramid.budget_tokens, cfg.retrieval.top_k, cfg.retrieval.dense_k) == (1000, 5, 5)


def test_a_warm_start_point_is_asked_once_and_counts_as_tried_when_evaluated(naive) -> None:
    """research.study.warm_start through Optuna's enqueue_trial: the point's values come back as the draw, a
    value outside its lever's range is left to TPE (Optuna would refuse it), and a point is untried until a
    trial holds it (asked here, or evaluated: a resumed run's study is rebuilt from the journal)."""
    from research.levers.study import field_levers, params_of

    omni = params_of(load_memory_config("omni"), field_levers()) | {"pyramid.budget_tokens": 9000}  # range 1000..8000
    base = params_of(naive, field_levers())
    points = (("naive", base), ("omni", omni))
    study = SharedStudy(seed=0)
    study.add(naive, 0.2, index=0)
    assert study.untried(points) == ("omni", omni)  # naive is the evaluated baseline: tried
    drawn = study.suggest(None, 7, enqueue=omni)
    assert {k: v for k, v in drawn.items() if k != "pyramid.budget_tokens"} == {
        k: v for k, v in omni.items() if k != "pyramid.budget_tokens"}
    assert 1000 <= drawn["pyramid.budget_tokens"] <= 8000
    assert study.untried(points) is None  # asked in this process
    rebuilt = SharedStudy(seed=0)  # a resume: the journal's evaluated configs only
    rebuilt.add(naive, 0.2, index=0)
    assert rebuilt.untried(points) == ("omni", omni)
    rebuilt.add(resolve(load_memory_config("omni"), ["pyramid.budget_tokens=2000"]), 0.5, index=1)
    assert rebuilt.untried(points) is None  # every value it can hold is in the evaluated trial


@pytest.mark.slow
def test_a_run_starts_tpe_from_a_warm_start_preset_and_the_report_names_the_gain(repo: Path, runs: Path) -> None:
    """research.study.warm_start=[omni] from naive: the first draw is omni's lever values but the held ones,
    the second TPE's own; a gain of the first is attributed to the warm start, not to the search."""
    from research.loop.research_loop import ResearchLoop
    from research.proposers.base import WARM_HYPOTHESIS, gain_source

    loop = ResearchLoop(scripted_setup(repo, 2, "research.proposer=optuna", "memory.embedder.backend=hashing",
                                       "memory.pyramid.budget_tokens=1000", "research.fixed_levers=[pyramid.budget_tokens]",
                                       "research.study.warm_start=[omni]"), "warm")
    loop.run()
    first, second = (r for r in loop.records if r.decision != "baseline")
    assert first.hypothesis.startswith(f"{WARM_HYPOTHESIS} omni") and gain_source(first).startswith("warm start")
    assert not second.hypothesis.startswith(WARM_HYPOTHESIS) and gain_source(second) == "sampler draw"
    cfg, omni = loop.commits.config_at(first.commit), load_memory_config("omni")
    assert (cfg.retrieval.merge, cfg.answer.abstain_attribution, cfg.pyramid.enabled) == (
        omni.retrieval.merge, omni.answer.abstain_attribution, omni.pyramid.enabled)
    assert cfg.pyramid.budget_tokens == 1000  # held at the run's value
    assert first.decision == "proceed", (first.decision, first.lesson)  # omni's retrieval beats naive's on context recall


def test_a_warm_start_preset_the_repo_lacks_is_one_config_error_before_the_run_starts(repo: Path, runs: Path) -> None:
    from research.loop.research_loop import ResearchLoop

    loop = ResearchLoop(scripted_setup(repo, 1, "research.proposer=optuna", "research.study.warm_start=[omnii]"), "cold")
    with pytest.raises(ConfigError, match="warm_start: configs/memory/omnii.yaml is not a preset"):
        loop.run()
    assert not (runs / "cold").exists()
    with pytest.raises(ConfigError, match="not a preset name"):
        scripted_setup(repo, 1, "research.study.warm_start=[../benchmarks/x]")
