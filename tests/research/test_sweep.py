"""research.sweep: Hydra-style sweeps for memsys eval, the comparison frame, and a sweep on a local Ray
instance scoring exactly what an in-process evaluation of each config scores, under one MLflow parent.

Real pieces: Hydra's override parser, LoCoMo tiny with reader=none, bwrap (skipped with the reason when
it cannot run here), Ray, MLflow on a SQLite file in the test's runs folder.
"""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.config import load_eval_setup
from harness.errors import ConfigError
from research.fixed_eval import run_in_process
from research.sweep import COMPARISON_CSV, SweepRun, comparison_frame, expand_sweep, run_sweep, swept_keys
from research.two_half_eval import EvalOutcome
from sandbox.bwrap import BwrapSandbox


def test_expand_sweep_is_the_cartesian_product_in_order():
    combos = expand_sweep(["memory=omni,naive", "llm=local", "memory.retrieval.top_k=5,10"])
    assert combos == [["memory=omni", "llm=local", "memory.retrieval.top_k=5"],
                      ["memory=omni", "llm=local", "memory.retrieval.top_k=10"],
                      ["memory=naive", "llm=local", "memory.retrieval.top_k=5"],
                      ["memory=naive", "llm=local", "memory.retrieval.top_k=10"]]
    assert expand_sweep(["reader=none", "x=[1,2]"]) == [["reader=none", "x=[1,2]"]]  # a list is not a sweep
    assert swept_keys(["memory=omni,naive", "reader=none"]) == ["memory"]
    with pytest.raises(ConfigError, match="bad override"):
        expand_sweep(["memory=omni,"])


def test_comparison_frame_one_row_per_config():
    ok = EvalOutcome(True, {"objective": "context_recall", "objective_value": 0.5, "wall_s": 3.0,
                            "metrics": {"context_recall": 0.5, "recall_at_10/2": 0.25, "recall_at_10/10": 1.0,
                                        "recall_at_5/2": 0.1}}, None, None, "ok",
                     placement={"executor_node": "abcdef0123456789"})
    runs = [SweepRun(["memory=omni", "reader=none"], "s-00", ok), SweepRun(["memory=naive", "reader=none"], "s-01")]
    df = comparison_frame(runs, ["memory"])
    assert list(df.columns) == ["memory", "objective", "value", "recall_at_10/2", "recall_at_10/10", "tokens",
                                "wall_s", "node", "status", "run_id"]
    assert df.loc[0, "node"] == "abcdef01" and df.loc[0, "recall_at_10/10"] == 1.0
    assert df.loc[1, "status"] == "not run" and pd.isna(df.loc[1, "value"])


_OK, _WHY = BwrapSandbox().available()


@pytest.mark.slow
@pytest.mark.skipif(not _OK, reason=f"bwrap unavailable: {_WHY}")
def test_sweep_on_ray_scores_like_in_process(runs, locomo_path):
    pytest.importorskip("ray")
    from mlflow.tracking import MlflowClient

    from benchmarks.tracking import tracking_uri

    base = ["benchmark=locomo", "split=dev", "sample=tiny", "reader=none", "workers=1"]
    frame, folder = run_sweep(["memory=naive,bm25_only", *base, "sandbox=bwrap", "research.executor=ray",
                               "research.ray.num_cpus=2"], sweep_id="sw")
    expected = [run_in_process(load_eval_setup([f"memory={m}", *base, "mlflow=false", f"run_id=ref-{m}"]),
                               [f"memory={m}"]).objective_value for m in ("naive", "bm25_only")]
    assert frame["memory"].tolist() == ["naive", "bm25_only"] and frame["status"].tolist() == ["ok", "ok"]
    assert frame["value"].tolist() == expected and expected[0] != expected[1]
    assert frame["node"].notna().all() and frame["node"].ne("local").all()
    assert pd.read_csv(folder / COMPARISON_CSV)["value"].tolist() == expected
    client = MlflowClient(tracking_uri=tracking_uri())
    parent = client.search_runs([client.get_experiment_by_name("memsys-eval").experiment_id],
                                "tags.kind = 'sweep'")[0]
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.data.tags["memory"] for c in children) == ["bm25_only", "naive"]
