"""research/perf/bench_proposers.py in --dry-run mode: run folders in the loop's own format (records written
with append_record, state.json, config.json, confirmation.json) read back and summarised; the command a
real comparison runs is checked against the real config schema and the launcher's override parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from launcher.main import split_overrides
from research.config import load_run_setup
from research.failures import POLICIES, Failure, FailureClass
from research.journal.trajectory import TRAJECTORY_FILE, ExperimentRecord, append_record
from research.perf.bench_proposers import best_curve, main, mean_curve, probe_stats, run_command


def failure(cls: FailureClass, message: str, **kw) -> dict:
    p = POLICIES[cls]
    return Failure(cls, kw.pop("severity", p.severity), p.is_infrastructure, message,
                   suggested_fix=p.suggested_fix).to_dict() | kw


def rec(run_id: str, index: int, decision: str, value: float | None, best_before: float | None = None,
        total_s: float = 10.0, **kw) -> ExperimentRecord:
    return ExperimentRecord(
        run_id=run_id, index=index, experiment_id=f"exp-{index:03d}", proposer=kw.pop("proposer", "baseline" if not index else "llm"),
        parent_commit="c0", decision=decision, objective="recall_at_10", objective_value=value, best_before=best_before,
        delta=None if value is None or best_before is None else round(value - best_before, 6),
        durations=kw.pop("durations", {"total_s": total_s}), **kw)


def write_run(root: Path, run_id: str, records: list[ExperimentRecord], *, state: dict | None = None,
              config: dict | None = None, confirmation: dict | None = None) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    (d / TRAJECTORY_FILE).touch()
    for r in records:
        append_record(d, r)
    (d / "state.json").write_text(json.dumps(state or {"run_id": run_id, "status": "finished",
                                                       "stop_reason": "budget: 5 experiments"}))
    if config is not None:
        (d / "config.json").write_text(json.dumps({"config": config, "overrides": []}))
    if confirmation is not None:
        (d / "confirmation.json").write_text(json.dumps(confirmation))
    return d


def confirmation(dev: tuple[float, float], test: tuple[float, float]) -> dict:
    return {"split": "test", "sample": "full", "objective": "recall_at_10",
            "dev": {"baseline": dev[0], "best": dev[1]}, "test": {"baseline": test[0], "best": test[1]}, "runs": {}}


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(root))
    a = "bench-llm-0-0101-120000"
    write_run(root, a, [
        rec(a, 0, "baseline", 0.40, total_s=30.0),
        rec(a, 1, "proceed", 0.45, 0.40, total_s=10.0),
        rec(a, 2, "rejected", None, total_s=2.0, failure=failure(
            FailureClass.IDENTICAL_CONDITIONS, "proposal repeats exp-001; skipped without evaluating", stage="propose")),
        rec(a, 3, "rejected", None, total_s=4.0, failure=failure(
            FailureClass.NO_EFFECT, "no effect: the reader's input is identical", stage="screen")),
        rec(a, 4, "iterate", 0.45, 0.45, total_s=12.0),  # evaluated, delta exactly 0: a no-op
        rec(a, 5, "proceed", 0.47, 0.45, total_s=14.0),
    ], state={"run_id": a, "status": "finished", "stop_reason": "budget", "confirmation": confirmation((0.40, 0.47), (0.38, 0.43))},
        config={"research": {"proposer": "llm", "seed": 0}})
    b = "bench-llm-1-0101-120000"
    write_run(root, b, [  # stopped after two experiments: its last best carries the mean curve on
        rec(b, 0, "baseline", 0.40),
        rec(b, 1, "failed", None, total_s=8.0, failure=failure(
            FailureClass.INVALID_METRIC, "metrics identical to the parent although the code changed", severity="low")),
        rec(b, 2, "proceed", 0.42, 0.40, total_s=6.0),
    ], config={"research": {"proposer": "llm", "seed": 1}})
    c = "bench-random-0-0101-120000"
    write_run(root, c, [  # no config.json: proposer and seed from the run id; confirmation in its own file
        rec(c, 0, "baseline", 0.40),
        rec(c, 1, "pivot", 0.38, 0.40, proposer="random", total_s=5.0),
        rec(c, 2, "proceed", 0.41, 0.40, proposer="random", total_s=7.0),
    ], confirmation=confirmation((0.40, 0.41), (0.38, 0.385)))
    return root


def test_dry_run_summarises_real_format_runs(runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bench" / "proposers.json"
    ids = "bench-llm-0-0101-120000,bench-llm-1-0101-120000,bench-random-0-0101-120000"
    assert main(["--dry-run", "--runs", ids, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["setup"]["dry_run"] is True and data["objective"] == "recall_at_10"
    runs = {r["run_id"]: r for r in data["runs"]}
    a = runs["bench-llm-0-0101-120000"]
    assert (a["proposer"], a["seed"], a["experiments"]) == ("llm", 0, 5)
    assert a["curve"] == pytest.approx([0.40, 0.45, 0.45, 0.45, 0.45, 0.47])
    assert a["final_best"] == pytest.approx(0.47) and a["start"] == pytest.approx(0.40)
    assert a["gain"] == pytest.approx(0.07) and a["gain_rel"] == pytest.approx(0.175)
    assert a["rejected_before_eval"] == 2 and a["rejected_by_kind"] == {"repeat": 1, "no effect (screened)": 1}
    assert a["evaluated_noops"] == 1
    assert a["wall_s_per_experiment"] == [10.0, 2.0, 4.0, 12.0, 14.0] and a["wall_s_mean"] == pytest.approx(8.4)
    assert a["confirmation"]["test"] == {"baseline": 0.38, "best": 0.43}
    assert a["confirmation"]["test_gain"] == pytest.approx(0.05)
    assert a["returncode"] is None and a["status"] == "finished"
    b = runs["bench-llm-1-0101-120000"]
    assert b["evaluated_noops"] == 1 and b["rejected_before_eval"] == 0 and b["confirmation"] is None
    c = runs["bench-random-0-0101-120000"]
    assert (c["proposer"], c["seed"]) == ("random", 0)
    assert c["confirmation"]["test_gain"] == pytest.approx(0.005)

    rows = {p["proposer"]: p for p in data["proposers"]}
    assert list(rows) == ["llm", "random"]
    llm = rows["llm"]
    assert llm["seeds"] == [0, 1] and len(llm["runs"]) == 2
    assert llm["mean_curve"] == pytest.approx([0.40, 0.425, 0.435, 0.435, 0.435, 0.445])
    assert llm["final_best_mean"] == pytest.approx(0.445) and llm["final_best_sd"] == pytest.approx(0.0353553, abs=1e-6)
    assert llm["gain_mean"] == pytest.approx(0.045) and llm["rejected_before_eval_mean"] == pytest.approx(1.0)
    assert llm["evaluated_noops_mean"] == pytest.approx(1.0)
    assert llm["wall_s_per_experiment_mean"] == pytest.approx((10 + 2 + 4 + 12 + 14 + 8 + 6) / 7)
    assert llm["test_gain_mean"] == pytest.approx(0.05)  # only the seed that ran the confirmation
    assert rows["random"]["final_best_sd"] is None  # one seed

    png, md = Path(data["figure"]), Path(data["table"])
    assert png == out.with_suffix(".png") and md == out.with_suffix(".md")
    with Image.open(png) as im:
        assert im.format == "PNG" and im.width > 600
    table = md.read_text().splitlines()
    assert table[0] == "# Proposer comparison (recall_at_10)"
    lines = [line for line in table if line.startswith("| ")]
    assert lines[0].startswith("| proposer | seeds |") and table[table.index(lines[0]) + 1].startswith("|---|")
    assert lines[1].startswith("| llm | 2 | 0.4450 ± 0.0354 | +0.0450 | +11.2% | 1.0 | 1.0 |")
    assert lines[2].startswith("| random | 1 | 0.4100 | +0.0100 | +2.5% | 0.0 | 0.0 |")
    printed = capsys.readouterr().out
    assert f"json: {out}" in printed and f"figure: {png}" in printed and f"table: {md}" in printed


def test_a_missing_run_is_a_warning_not_a_crash(runs_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    assert main(["--dry-run", "--runs", f"bench-llm-0-0101-120000,{tmp_path / 'nowhere'}", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert runs[1]["run_id"] == "nowhere" and runs[1]["experiments"] == 0 and "no trajectory" in runs[1]["warnings"][0]


def test_dry_run_needs_runs() -> None:
    with pytest.raises(SystemExit):
        main(["--dry-run"])


def test_curves() -> None:
    r = [rec("x", 0, "baseline", 0.4), rec("x", 1, "iterate", 0.39, 0.4), rec("x", 3, "proceed", 0.5, 0.4)]
    assert best_curve(r) == [0.4, 0.4, 0.4, 0.5]  # index 2 has no record: the best before it
    assert best_curve([rec("x", 0, "failed", None)]) == [None]
    assert mean_curve([[0.4, 0.5], [0.2], []]) == pytest.approx([0.3, 0.35])  # a short run keeps its last best
    assert mean_curve([[None, 0.5], [None, None]]) == [None, 0.5]


def test_the_run_command_composes_with_the_real_config() -> None:
    cmd = run_command("hybrid", 2, sample="tiny", experiments=7, confirm=False, run_id="bench-hybrid-2-x",
                      extra=["workers=1"])
    assert cmd[1:4] == ["-m", "launcher.main", "run"]
    words, overrides = split_overrides(cmd[4:])
    assert words == [] and overrides[-1] == "workers=1"
    setup = load_run_setup(overrides)
    assert (setup.research.proposer, setup.research.seed, setup.research.budget.experiments) == ("hybrid", 2, 7)
    assert setup.research.confirm.enabled is False
    assert (setup.eval.options.reader, setup.eval.options.split, setup.eval.options.sample) == ("none", "dev", "tiny")
    assert setup.eval.options.run_id == "bench-hybrid-2-x"


def _predictions(run_dir: Path, eval_dir: str, hits: list[bool]) -> None:
    """A best config's own evaluation: one scorer row per question, evidence found or not (recall_at_10)."""
    d = run_dir / eval_dir
    d.mkdir(parents=True)
    rows = [{"question_id": f"q{i}", "category": "1", "evidence": ["D1:1"],
             "retrieved_ids": ["D1:1"] if hit else ["D9:9"]} for i, hit in enumerate(hits)]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_compares_two_proposers_bests_on_the_same_questions(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "runs"
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(root))
    n = 40
    # seed 0: a's best finds 30 of 40, b's 20 of 40 (the same first 20 and 10 more); seed 1: both find 25
    plans = {("hybrid", 0): 30, ("optuna", 0): 20, ("hybrid", 1): 25, ("optuna", 1): 25}
    ids = []
    for (proposer, seed), found in plans.items():
        run_id = f"bench-{proposer}-{seed}-0101-120000"
        d = write_run(root, run_id, [
            rec(run_id, 0, "baseline", 0.1, eval_dir="evals/exp-000"),
            rec(run_id, 1, "proceed", found / n, 0.1, proposer=proposer, eval_dir="evals/exp-001"),
            rec(run_id, 2, "iterate", 0.05, found / n, proposer=proposer, eval_dir="evals/exp-002"),
        ], config={"research": {"proposer": proposer, "seed": seed}})
        _predictions(d, "evals/exp-000", [i < 4 for i in range(n)])
        _predictions(d, "evals/exp-001", [i < found for i in range(n)])  # the best: the last accepted
        _predictions(d, "evals/exp-002", [i < 2 for i in range(n)])
        ids.append(run_id)
    out = tmp_path / "p.json"
    assert main(["--dry-run", "--runs", ",".join(ids), "--paired", "hybrid,optuna", "--out", str(out)]) == 0
    paired = json.loads(out.read_text())["paired"]
    assert (paired["a"], paired["b"], paired["warnings"]) == ("hybrid", "optuna", [])
    s0, s1, pooled = paired["seeds"]["0"], paired["seeds"]["1"], paired["pooled"]
    assert s0["n"] == n and s0["mean_delta"] == pytest.approx(10 / n) and s0["p_better"] < 0.01
    assert s1["mean_delta"] == 0 and s1["p_better"] == 1
    assert pooled["n"] == 2 * n and pooled["mean_delta"] == pytest.approx(10 / (2 * n))
    assert "- seed 0: +0.2500 [" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        main(["--dry-run", "--runs", ids[0], "--paired", "hybrid"])


def test_probe_stats_count_the_stopped_candidates_and_estimate_the_reader_time_they_saved() -> None:
    stopped = rec("r", 1, "iterate", 0.05, 0.20, durations={"probe_s": 500.0, "screen_s": 30.0, "total_s": 560.0},
                  probe={"sample": "small", "questions": 50, "of": 152, "stopped": True})
    passed = rec("r", 2, "proceed", 0.30, 0.20, durations={"probe_s": 400.0, "eval_s": 900.0, "total_s": 1400.0},
                 probe={"sample": "small", "questions": 50, "of": 152, "stopped": False})
    plain = rec("r", 3, "iterate", 0.25, 0.30, durations={"eval_s": 1500.0, "total_s": 1550.0})
    got = probe_stats([stopped, passed, plain])
    # the stopped one would have answered 102 more questions at its probe's 10 s a question
    assert got == {"stopped_at_probe": 1, "probe_s": 900.0, "eval_s": 2400.0, "probe_saved_s_est": 1020.0}
    assert probe_stats([plain]) == {"stopped_at_probe": 0, "probe_s": 0.0, "eval_s": 1500.0, "probe_saved_s_est": 0.0}
