"""research.report: synthetic run folders written with append_record, the HTML parsed back."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from research.journal.trajectory import TRAJECTORY_FILE, ExperimentRecord, TrajectoryError, append_record
from research.report.build import main_report, write_report
from tests.support.report_page import Page

CHROMIUM = Path("/usr/bin/chromium")
EVIL_DIFF = ("--- a/memsys/answer.py\n+++ b/memsys/answer.py\n@@ -1 +1 @@\n-    if a < b and c > d:\n"
             "+    if a <= b && \"<script>alert('x')</script>\":\n")


def make_record(run_id: str, index: int, decision: str, value: float | None, dtype: str | None = None,
                best_before: float | None = None, **kw) -> ExperimentRecord:
    delta = None if value is None or best_before is None else round(value - best_before, 6)
    metrics = {"all_honest": value, **{f"f1_cat{c}": round(value * (0.6 + 0.1 * c), 4) for c in range(1, 6)}} if value else {}
    return ExperimentRecord(
        run_id=run_id, index=index, experiment_id=f"exp-{index:03d}", proposer="baseline" if index == 0 else "llm",
        parent_commit="0123456789abcdef", commit=f"c{index:03d}", decision=decision, discovery_type=dtype,
        hypothesis=kw.pop("hypothesis", f"hypothesis {index}"), objective="all_honest", objective_value=value,
        best_before=best_before, delta=delta, delta_rel=None if delta is None or not best_before else delta / best_before,
        metrics=kw.pop("metrics", metrics), tokens=1000 * index, cost_usd=0.01 * index,
        durations={"propose_s": 20.0, "eval_s": 100.0 + index, "total_s": 130.0 + index} if index else {"eval_s": 90.0},
        **kw)


def write_run(root: Path, run_id: str, records: list[ExperimentRecord], state: dict | None = None) -> Path:
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    (run_dir / TRAJECTORY_FILE).touch()
    for r in records:
        append_record(run_dir, r)
    if state is not None:
        (run_dir / "state.json").write_text(json.dumps(state), encoding="utf-8")
    return run_dir


def full_run(run_id: str = "run-a") -> list[ExperimentRecord]:
    return [
        make_record(run_id, 0, "baseline", 0.40),
        make_record(run_id, 1, "proceed", 0.50, "bug_fix", 0.40, diff=EVIL_DIFF,
                    diff_stats={"files": 1, "insertions": 1, "deletions": 1}, hypothesis="Missing response_format <json>"),
        make_record(run_id, 2, "proceed", 0.56, "prompt_engineering", 0.50, diff="+ put the constraint last\n" * 400),
        make_record(run_id, 3, "iterate", 0.561, "prompt_engineering", 0.56),
        make_record(run_id, 4, "proceed", 0.60, "architectural_change", 0.56, diff="+ merge_set_union(a, b)\n"),
        make_record(run_id, 5, "rejected", 0.55, "hyperparameter_tuning", 0.60),
        make_record(run_id, 6, "pivot", 0.52, "hyperparameter_tuning", 0.60),
        make_record(run_id, 7, "failed", None, "data_pipeline_repair", 0.60,
                    failure={"class": "dependency", "severity": "high", "message": "No module named 'spacy'"},
                    healing=[{"action": "revert_import", "ok": False}]),
        make_record(run_id, 8, "proceed", 0.62, "hyperparameter_tuning", 0.60, diff="+ top_k = 20\n",
                    failure={"class": "auth", "severity": "high", "message": "embedding service answered 403"},
                    healing=[{"action": "switch_local_embedder", "ok": True}]),
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, Page, str]:
    root = tmp_path_factory.mktemp("runs")
    run_dir = write_run(root, "run-a", full_run(), {"run_id": "run-a", "benchmark": "locomo", "split": "dev",
                                                    "base_commit": "0123456789abcdef", "status": "done"})
    with open(run_dir / TRAJECTORY_FILE, "a", encoding="utf-8") as fh:
        fh.write('{"run_id": "run-a", "index": 9, "experim')  # killed mid-write
    out = write_report(run_dir)
    text = out.read_text(encoding="utf-8")
    return out, Page(text), text


def test_figures_are_embedded_pngs(report):
    out, page, _ = report
    assert out == out.parent.parent / "report" / "report.html"
    pngs = page.png_images()
    assert len(pngs) == 3  # trajectory, categories, cost/time
    for data in pngs:
        assert len(data) > 5000
        Image.open(io.BytesIO(data)).verify()
    for name in ("trajectory.png", "categories.png", "cost_time.png"):
        with Image.open(out.parent / name) as im:
            assert im.format == "PNG" and im.width > 600 and im.height > 250


def test_page_is_self_contained(report):
    _, page, text = report
    assert "<link" not in text and "<script" not in text and "http://" not in text and "https://" not in text
    assert all(im.get("alt") for im in page.imgs)


def test_header_and_warning(report):
    _, page, text = report
    assert page.headings[0] == "Run run-a"
    assert "locomo / dev" in text and "0123456789abcdef" in text and "exp-008" in text
    assert "incomplete record (cut off mid-line" in text  # read_trajectory's warning is shown
    assert "0.6200" in text and "0.4000" in text


def test_taxonomy_table_counts_and_deltas(report):
    _, page, _ = report
    rows = {r[0]: r[1:] for r in page.table("taxonomy")[1:]}
    # experiments, accepted, cumulative delta, cumulative % of start (0.40), mean delta
    assert rows["BF bug fix"] == ["1", "1", "+0.1000", "+25.0%", "+0.1000"]
    assert rows["PE prompt engineering"] == ["2", "1", "+0.0600", "+15.0%", "+0.0600"]
    assert rows["AC architectural change"] == ["1", "1", "+0.0400", "+10.0%", "+0.0400"]
    assert rows["HP hyperparameter tuning"] == ["3", "1", "+0.0200", "+5.0%", "+0.0200"]
    assert rows["DP data pipeline repair"] == ["1", "0", "—", "—", "—"]
    assert rows["EF evaluation format alignment"] == ["0", "0", "—", "—", "—"]
    assert rows["all"] == ["8", "4", "+0.2200", "+55.0%", "+0.0550"]


def test_failure_table(report):
    _, page, _ = report
    rows = {r[0]: r for r in page.table("failures")[1:]}
    assert set(rows) == {"dependency", "auth"}
    assert rows["auth"][1:4] == ["1", "1 / 1", "switch_local_embedder"]
    assert rows["dependency"][1:4] == ["1", "0 / 1", "revert_import"]
    assert "No module named 'spacy'" in rows["dependency"][5]


def test_accepted_diffs_are_escaped_and_cut(report):
    _, page, text = report
    assert len(page.pres) == 4  # exp-001, 002, 004, 008
    assert page.pres[0] == EVIL_DIFF.rstrip("\n")  # the parser unescapes what the page escaped
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text and "<script>alert" not in text
    assert "Missing response_format &lt;json&gt;" in text
    long_diff = page.pres[1]
    assert len(long_diff) < 9000 and "more lines not shown" in long_diff
    headings = [h for h in page.headings if h.startswith("exp-")]
    assert headings[0].startswith("exp-001 · researcher · BF bug fix · +0.1000")


def test_experiment_and_cost_tables(report):
    _, page, _ = report
    exps = page.table("experiments")
    assert len(exps) == 1 + 9 and exps[8][2] == "failed" and exps[8][4] == "—"
    cost = page.table("cost-time")
    assert cost[0] == ["#", "experiment", "decision", "propose", "eval", "overhead", "total", "tokens", "cost"]
    assert cost[2][3:7] == ["20s", "1m 41s", "10s", "2m 11s"]
    assert cost[-1][1] == "total" and cost[-1][7] == "36,000" and cost[-1][8] == "$0.360"


def _small_report(tmp_path: Path, records: list[ExperimentRecord]) -> tuple[Page, str]:
    run_dir = write_run(tmp_path, "run-x", records)
    text = write_report(run_dir).read_text(encoding="utf-8")
    return Page(text), text


@pytest.mark.parametrize("kind", ["empty", "one", "all_failed", "sparse"])
def test_degenerate_runs_still_report(tmp_path, kind):
    records = {
        "empty": [],
        "one": [make_record("run-x", 0, "baseline", 0.3)],
        "all_failed": [make_record("run-x", i, "failed", None, "bug_fix", failure={"class": "timeout"}) for i in range(3)],
        "sparse": [ExperimentRecord(run_id="run-x", index=0, experiment_id="exp-000", proposer="baseline",
                                    parent_commit="", decision="proceed")],
    }[kind]
    page, text = _small_report(tmp_path, records)
    assert len(page.png_images()) == 3
    assert page.table("taxonomy") and page.table("cost-time")
    if kind == "all_failed":
        assert page.table("failures")[1][:3] == ["timeout", "3", "0 / 3"]
    if kind == "sparse":
        assert "without an objective value" in text


def test_run_without_trajectory_yet(tmp_path):
    run_dir = tmp_path / "run-new"
    run_dir.mkdir()
    (run_dir / "state.json").write_text(json.dumps({"run_id": "run-new", "base_commit": "abc", "status": "running"}))
    (run_dir / "config.json").write_text(json.dumps({"config": {"benchmark": {"name": "memgallery"}, "split": "test"}}))
    text = main_report(["run-new"], tmp_path).read_text()
    assert "memgallery / test" in text and "no trajectory.jsonl" in text
    assert len(Page(text).png_images()) == 3
    with pytest.raises(TrajectoryError, match="no trajectory"):
        write_report(tmp_path)


def test_nulls_and_junk_values_in_a_record(tmp_path):
    run_dir = tmp_path / "run-null"
    run_dir.mkdir()
    line = {"version": 1, "run_id": "run-null", "index": 1, "experiment_id": "exp-001", "proposer": "llm",
            "parent_commit": "c0", "decision": "proceed", "discovery_type": "bug_fix", "hypothesis": None,
            "metrics": None, "healing": None, "durations": None, "diff": None, "objective_value": "0.5",
            "tokens": None, "cost_usd": None, "delta": float("nan")}
    (run_dir / TRAJECTORY_FILE).write_text(json.dumps(line) + "\n")
    page = Page(write_report(run_dir).read_text())
    assert len(page.png_images()) == 3
    assert page.table("taxonomy")[1][:3] == ["BF bug fix", "1", "1"]


def test_unreadable_line_in_the_middle_is_a_warning(tmp_path):
    run_dir = write_run(tmp_path, "run-m", full_run("run-m")[:3])
    lines = (run_dir / TRAJECTORY_FILE).read_text().splitlines()
    lines.insert(1, '{"version": 99, "run_id": "run-m"}')
    (run_dir / TRAJECTORY_FILE).write_text("\n".join(lines) + "\n")
    text = write_report(run_dir).read_text()
    assert "skipped" in text and "version 99" in text
    assert len(Page(text).table("experiments")) == 1 + 3


def test_replay_report(tmp_path):
    write_run(tmp_path, "run-orig", full_run("run-orig")[:4])
    replay_dir = write_run(tmp_path, "run-replay", full_run("run-replay")[:3])
    steps = [  # as research/replay.py writes them
        {"experiment_id": "exp-000", "recorded": 0.40, "recorded_decision": "baseline", "replayed": 0.41, "delta": 0.01,
         "replayed_decision": "baseline", "holds": True, "status": "ok"},
        {"experiment_id": "exp-001", "recorded": 0.50, "recorded_decision": "proceed", "replayed": 0.49,
         "delta": -0.01, "replayed_decision": "proceed", "holds": True, "status": "ok"},
        {"experiment_id": "exp-002", "recorded": 0.56, "recorded_decision": "proceed", "replayed": None, "delta": None,
         "replayed_decision": None, "holds": None, "status": "edit no longer applies: <search> not found"},
        # a minimal step: the recorded value and decision come from the original run next to it
        {"index": 3, "replayed": 0.47, "replayed_decision": "proceed"},
    ]
    (replay_dir / "replay.json").write_text(json.dumps({
        "original_run_id": "run-orig", "only": "all", "overrides": ["split=test"], "warnings": ["orig: cut-off line"],
        "wall_s": 100.0, "original_wall_s": 1000.0, "steps": steps}))
    out = write_report(replay_dir)
    text = out.read_text()
    page = Page(text)
    assert "Replay of run-orig" in page.headings
    assert "2 of 3 decisions still hold" in text and "replay took 1m 40s (original run 16m 40s)" in text
    assert "split=test" in text and "replay: orig: cut-off line" in text
    assert len(page.png_images()) == 4
    with Image.open(out.parent / "replay.png") as im:
        assert im.format == "PNG"
    rows = page.table("replay")
    assert rows[0] == ["step", "experiment", "recorded", "replayed", "Δ", "decision", "replayed decision", "still holds",
                       "status"]
    assert rows[1] == ["0", "exp-000", "0.4000", "0.4100", "+0.0100", "baseline", "baseline", "yes", "ok"]
    assert rows[2] == ["1", "exp-001", "0.5000", "0.4900", "-0.0100", "proceed", "proceed", "yes", "ok"]
    assert rows[3] == ["2", "exp-002", "0.5600", "—", "—", "proceed", "—", "—", "edit no longer applies: <search> not found"]
    assert rows[4] == ["3", "exp-003", "0.5610", "0.4700", "-0.0910", "iterate", "proceed", "no", "—"]


def test_compare_mode(tmp_path):
    a = write_run(tmp_path, "run-a", full_run("run-a"))
    b = write_run(tmp_path, "run-b", full_run("run-b")[:3])
    out = main_report(["run-a", "run-b"], tmp_path)
    assert out.parent == a / "report-vs-run-b"
    page = Page(out.read_text())
    assert page.headings[0] == "run-a vs run-b"
    assert (out.parent / "compare.png").stat().st_size > 5000
    assert len(page.png_images()) == 3  # compare + both trajectories
    summary = {r[0]: r[1:] for r in page.table("summary")}
    assert summary[""] == ["run-a", "run-b"]
    assert summary["experiments"] == ["9", "3"] and summary["proceeds"] == ["4", "2"]
    assert summary["best"] == ["0.6200", "0.5600"] and summary["start"] == ["0.4000", "0.4000"]
    assert summary["cost"] == ["$0.36", "$0.03"] and summary["tokens"] == ["36,000", "3,000"]
    taxonomies = [rows for c, rows in page.tables if c == "taxonomy"]
    assert len(taxonomies) == 2
    assert taxonomies[0][-1][:3] == ["all", "8", "4"] and taxonomies[1][-1][:3] == ["all", "2", "2"]
    assert b.exists()


def test_missing_run_id_is_a_one_line_error(tmp_path):
    write_run(tmp_path, "run-a", full_run()[:1])
    with pytest.raises(TrajectoryError) as err:
        main_report(["nope"], tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "no run 'nope'" in msg and "known: run-a" in msg
    with pytest.raises(TrajectoryError, match="one run id, or two"):
        main_report(["a", "b", "c"], tmp_path)


def test_figures_logged_to_mlflow_parent_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("memsys-research", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    run_dir = write_run(tmp_path, "run-ml", full_run("run-ml")[:3], {"mlflow_parent_run_id": parent})
    write_report(run_dir)
    logged = {Path(a.path).name for a in client.list_artifacts(parent, "report")}
    assert {"report.html", "trajectory.png", "categories.png", "cost_time.png"} <= logged
    # an unknown parent run is logged as a warning; the report is still written
    bad = write_run(tmp_path, "run-bad", full_run("run-bad")[:2], {"mlflow_parent_run_id": "0" * 32})
    assert write_report(bad).exists()


def test_chromium_renders_the_page(report, tmp_path):
    out, page, _ = report
    assert len(page.png_images()) == 3 and page.table("taxonomy") and page.table("failures")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium); HTML checked by the parser only")
    shot = tmp_path / "page.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1280,2200",
           f"--screenshot={shot}", out.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.format == "PNG" and im.size == (1280, 2200)
        # a rendered page is not blank: many colours (figures, badges, tables)
        colours = im.convert("RGB").resize((320, 550)).getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 200
    assert shot.stat().st_size > 50_000
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


# --- rejections, classified vs proposed type, paired test, lesson -------------------------------
def _failure(cls: str, message: str, stage: str) -> dict:
    from research.failures import POLICIES, Failure, FailureClass

    p = POLICIES[FailureClass(cls)]
    return Failure(FailureClass(cls), p.severity, p.is_infrastructure, message).to_dict() | {"stage": stage}


PAIRED = {"n": 152, "mean_delta": 0.05, "ci_low": 0.021, "ci_high": 0.079, "p_better": 0.0004, "p_worse": 1.0}


def screened_run(run_id: str = "run-s") -> list[ExperimentRecord]:
    return [
        make_record(run_id, 0, "baseline", 0.40),
        make_record(run_id, 1, "proceed", 0.45, "hyperparameter_tuning", 0.40, proposed_type="architectural_change",
                    test=PAIRED, lesson="a deeper candidate list helped multi-hop questions", diff="+ top_k: 10\n"),
        make_record(run_id, 2, "rejected", None, "hyperparameter_tuning", 0.45, hypothesis="raise top_k again",
                    failure=_failure("identical_conditions", "proposal repeats exp-001 (same changes, same parent commit)",
                                     "propose"),
                    healing=[{"attempt": 1, "action": "resend_edit", "result": "repeats exp-001"}]),
        make_record(run_id, 3, "rejected", None, "prompt_engineering", 0.45, proposed_type="prompt_engineering",
                    failure=_failure("no_effect", "no effect: the reader's input is identical on 152 questions", "screen")),
        make_record(run_id, 4, "failed", None, "bug_fix", 0.45,
                    failure=_failure("runtime_error", "KeyError: 'speaker'", "evaluate")),
    ]


def test_rejections_show_as_what_they_are(tmp_path):
    run_dir = write_run(tmp_path, "run-s", screened_run())
    out = write_report(run_dir)
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    failures = page.table("failures")
    assert [r[0] for r in failures[1:]] == ["runtime_error"]
    assert "unclassified" not in text
    rejections = page.table("rejections")
    assert rejections[0] == ["rejection", "class", "count", "message", "experiments"]
    assert rejections[1][:3] == ["repeat", "identical_conditions", "1"] and rejections[1][4] == "exp-002"
    assert rejections[2][:3] == ["no effect (screened)", "no_effect", "1"] and "152 questions" in rejections[2][3]
    assert page.meta["rejected before evaluation"] == "repeat 1, no effect (screened) 1"
    exps = {r[1]: r for r in page.table("experiments")[1:]}
    assert exps["exp-002"][2] == "rejected repeat" and exps["exp-003"][2] == "rejected no effect (screened)"
    assert exps["exp-004"][2] == "failed" and exps["exp-001"][2] == "proceed"
    # the classified type, and the researcher's own label under it only when the two differ
    assert exps["exp-001"][3] == "HP hyperparameter tuning proposed: AC architectural change"
    assert exps["exp-003"][3] == "PE prompt engineering"
    assert exps["exp-001"][5] == "+0.0500 CI [+0.0210, +0.0790]; p 0.0004; n 152"
    assert exps["exp-001"][7] == "hypothesis 1 lesson: a deeper candidate list helped multi-hop questions"
    assert exps["exp-002"][5] == "—"
    assert "paired test against the best: CI [+0.0210, +0.0790]" in text and "proposed as <b>AC</b>" in text
    assert len(page.png_images()) == 3  # the trajectory draws the screened ones as rings on the floor


def test_compare_counts_rejections(tmp_path):
    write_run(tmp_path, "run-s", screened_run())
    write_run(tmp_path, "run-a", full_run("run-a"))
    summary = {r[0]: r[1:] for r in Page(main_report(["run-s", "run-a"], tmp_path).read_text()).table("summary")}
    assert summary["rejected before evaluation"] == ["2", "0"]


def test_experiment_logged_to_mlflow_with_types_test_and_lesson(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from research.journal.tracking import TAG_VALUE_LIMIT, log_experiment
    from research.loop.state import LoopState

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("memsys-research", artifact_location=(tmp_path / "art").as_uri())
    state = LoopState("run-s", str(tmp_path), "c0", "c1", best_value=0.45,
                      mlflow_parent_run_id=client.create_run(exp).info.run_id)
    records = screened_run()
    accepted, repeat = records[1], records[2]
    accepted.lesson = "long " * 2000
    log_experiment(state, accepted, tmp_path, "run-s")
    log_experiment(state, repeat, tmp_path, "run-s")
    run = client.get_run(accepted.mlflow_run_id)
    tags, metrics = run.data.tags, run.data.metrics
    assert (tags["discovery_type"], tags["proposed_type"]) == ("hyperparameter_tuning", "architectural_change")
    assert len(tags["lesson"]) == TAG_VALUE_LIMIT and tags["lesson"].endswith("...")
    assert metrics["test_ci_low"] == pytest.approx(0.021) and metrics["test_ci_high"] == pytest.approx(0.079)
    assert metrics["test_p_better"] == pytest.approx(0.0004) and metrics["test_n"] == 152
    assert metrics["delta"] == pytest.approx(0.05) and metrics["all_honest"] == pytest.approx(0.45)
    rep = client.get_run(repeat.mlflow_run_id)
    assert rep.data.tags["rejection"] == "repeat" and rep.data.tags["proposed_type"] == "none"
    assert not any(k.startswith("test_") for k in rep.data.metrics)


def test_a_proxy_run_quotes_the_measured_proxy_validity_at_its_budget_or_the_command_that_measures_it(tmp_path):
    from research.report.data import PROXY_BENCH, load_proxy_validity
    from research.report.html import proxy_html

    bench = tmp_path / "bench"
    assert load_proxy_validity(bench) is None
    said = proxy_html("context_recall", 1000, None)
    assert "not measured here" in said and "python -m research.perf.bench_proxy --budget 1000" in said
    bench.mkdir()
    (bench / PROXY_BENCH).write_text(json.dumps({
        "budget": 1000, "when": "2026-12-07T04:00:00+00:00", "questions": 11, "sample": "tiny",
        "command": "python -m research.perf.bench_proxy", "configs": {f"c{i}": {} for i in range(12)},
        "agreement": {"spearman": 0.83, "spearman_ci": [0.41, 0.97], "kendall": 0.67, "kendall_ci": [0.3, 0.9]}}))
    measured = load_proxy_validity(bench)
    text = proxy_html("context_recall", 1000, measured)
    assert "12 configs" in text and "+0.83 [+0.41, +0.97]" in text and "Kendall &tau; +0.67" in text
    assert "not measured here" in proxy_html("context_recall", 6000, measured)  # another budget: not this figure
    assert proxy_html("all_honest", 1000, measured) == ""  # the reader's own objective needs no proxy note
