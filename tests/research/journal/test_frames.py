"""research.journal.frames: a run's trajectory as DataFrames, hand-checked on a small journal, and the CSVs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from research.journal.frames import (
    CATEGORIES_CSV,
    TAXONOMY_CSV,
    TRAJECTORY_CSV,
    category_frame,
    compare_frame,
    experiments_frame,
    load_frame,
    taxonomy_frame,
    write_csv,
)
from research.journal.trajectory import DISCOVERY_TYPES, ExperimentRecord, append_record
from research.report.build import main_report
from tests.support.records import make_record


def rec(index: int, decision: str, value: float | None, dtype: str | None = None, best_before: float | None = None,
        **kw) -> ExperimentRecord:
    return make_record(index, decision, value, dtype, best_before, run_id="run-f", proposer="optuna", objective="context_recall",
                       **kw)


@pytest.fixture
def records() -> list[ExperimentRecord]:
    return [
        rec(0, "baseline", 0.50, metrics={"f1_cat1": 0.4, "f1_cat2": 0.6, "n_cat1": 3},
            durations={"propose_s": 0.0, "eval_s": 10.0, "total_s": 12.0}, tokens=100),
        rec(1, "proceed", 0.60, "hyperparameter_tuning", 0.50, metrics={"f1_cat1": 0.5},
            durations={"propose_s": 1.0, "eval_s": 9.0, "total_s": 11.0}, tokens=200, sandbox={"node": "n1"}),
        rec(2, "iterate", 0.55, "hyperparameter_tuning", 0.60),
        rec(3, "proceed", 0.70, "bug_fix", 0.60),
        rec(4, "failed", None, None, 0.70, failure={"class": "runtime_error", "message": "boom"}),
        rec(5, "rejected", None, "prompt_engineering", 0.70, failure={"class": "identical_conditions"}),
    ]


def test_experiments_frame_rows_and_running_best(records):
    df = experiments_frame(records)
    assert list(df["experiment_id"]) == [r.experiment_id for r in records]
    assert df["best_so_far"].tolist()[:4] == [0.50, 0.60, 0.60, 0.70]
    assert df["best_so_far"].iloc[-1] == 0.70  # a failure keeps the best
    assert df.loc[1, "delta"] == pytest.approx(0.10) and math.isnan(df.loc[4, "delta"])
    assert df.loc[4, "failure_class"] == "runtime_error" and df.loc[5, "rejection"] == "repeat"
    assert df.loc[1, "node"] == "n1" and df.loc[0, "overhead_s"] == pytest.approx(2.0)
    assert df["tokens"].sum() == 300


def test_category_frame_is_wide_with_gaps(records):
    df = category_frame(records)
    assert list(df.columns) == ["experiment_id", "decision", "f1_cat1", "f1_cat2"]  # n_cat1 is a count, not a metric
    assert df.loc[1, "f1_cat1"] == 0.5 and math.isnan(df.loc[1, "f1_cat2"])


def test_taxonomy_frame_groups_by_type(records):
    df = taxonomy_frame(records).set_index("discovery_type")
    assert list(df.index) == [*DISCOVERY_TYPES, "untagged"]
    hp = df.loc["hyperparameter_tuning"]
    assert (hp["count"], hp["accepted"], hp["experiments"]) == (2, 1, ["exp-001", "exp-002"])
    assert hp["cumulative_delta"] == pytest.approx(0.10) and hp["mean_delta"] == pytest.approx(0.10)
    assert hp["cumulative_delta_rel"] == pytest.approx(0.20)  # of the start value 0.50
    assert df.loc["bug_fix", "cumulative_delta"] == pytest.approx(0.10)
    pe = df.loc["prompt_engineering"]
    assert (pe["count"], pe["accepted"], pe["cumulative_delta"]) == (1, 0, 0.0) and math.isnan(pe["mean_delta"])
    assert df.loc["untagged", "count"] == 1 and df["count"].sum() == len(records) - 1  # baseline left out


def test_compare_frame_puts_runs_side_by_side(records):
    df = compare_frame([("a", records), ("b", records[:2])])
    assert list(df.columns) == ["a", "b"]
    assert df.loc["experiments"].tolist() == [6, 2] and df.loc["best"].tolist() == [0.70, 0.60]
    assert df.loc["proceeds"].tolist() == [2, 1] and df.loc["rejected before evaluation"].tolist() == [1, 0]


def test_load_frame_reads_the_journal(tmp_path, records):
    for r in records:
        append_record(tmp_path, r)
    df = load_frame(tmp_path)
    pd.testing.assert_frame_equal(df, experiments_frame(records))


def test_write_csv_round_trips(tmp_path, records):
    paths = write_csv(records, tmp_path / "out")
    assert [p.name for p in paths] == [TRAJECTORY_CSV, CATEGORIES_CSV, TAXONOMY_CSV]
    traj = pd.read_csv(paths[0])
    assert traj["objective_value"].tolist()[:4] == [0.5, 0.6, 0.55, 0.7]
    tax = pd.read_csv(paths[2]).set_index("discovery_type")
    assert tax.loc["hyperparameter_tuning", "experiments"] == "exp-001 exp-002"


def test_report_csv_flag_writes_the_tables(tmp_path, records):
    for name in ("run-a", "run-b"):
        for r in records:
            (tmp_path / name).mkdir(exist_ok=True)
            append_record(tmp_path / name, r)
    one = main_report(["run-a"], tmp_path, csv=True)
    assert {p.name for p in one.parent.glob("*.csv")} == {TRAJECTORY_CSV, CATEGORIES_CSV, TAXONOMY_CSV}
    two = main_report(["run-a", "run-b"], tmp_path, csv=True)
    compare = pd.read_csv(two.parent / "compare.csv", index_col="value")
    assert compare.loc["experiments"].tolist() == ["6", "6"]
    assert (two.parent / "run-b" / TRAJECTORY_CSV).exists()


def test_node_frame_and_the_report_table(tmp_path, records):
    from research.journal.frames import node_frame
    from research.report.html import nodes_html

    df = node_frame(records)
    assert df.to_dict("records") == [{"node": "n1", "experiments": 1, "eval_s": 9.0, "mean_eval_s": 9.0, "total_s": 11.0}]
    assert "<code>n1</code>" in nodes_html(records) and nodes_html(records[:1]) == ""  # no node: no table
