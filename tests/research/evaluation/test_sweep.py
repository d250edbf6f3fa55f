"""research.sweep: Hydra-style sweeps for memsys eval, the comparison frame, and a sweep on a local Ray
instance scoring exactly what an in-process evaluation of each config scores, under one MLflow parent.

Real pieces: Hydra's override parser, LoCoMo tiny with reader=none, bwrap (skipped with the reason when
it cannot run here), Ray, MLflow on a SQLite file in the test's runs folder.
"""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from rich.console import Console
from rich.table import Table

from benchmarks.config import load_eval_setup
from benchmarks.scoring import Usage
from harness.errors import ConfigError
from research.evaluation.fixed import run_in_process
from research.evaluation.sweep import (
    COMPARISON_CSV,
    SweepRun,
    comparison_frame,
    config_label,
    expand_sweep,
    rich_table,
    run_sweep,
    swept_keys,
)
from research.evaluation.two_half import EvalOutcome
from research.failures import POLICIES, Failure, FailureClass


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



# --- the comparison table at 80 columns (issue #48: "mem…", "0.8…") ---------------------------------------
SWEEP = ["memory=omni,naive_rag,bm25_only", "reader=none"]


def _outcome(value: float, node: str, wall_s: float, tokens: int = 0, reader: bool = False) -> EvalOutcome:
    """A scored evaluation as two_half.evaluate returns it: LoCoMo's categories 1-5, reader-free or read."""
    if reader:
        metrics = {"all_honest": value, **{f"f1_cat{c}": round(value * (0.55 + 0.1 * c), 6) for c in range(1, 6)},
                   "f1_cat1_4": value + 0.01234}
        objective = "all_honest"
    else:
        metrics = {"context_recall": value, **{f"recall_at_10/{c}": round(value - 0.0371 * c, 6) for c in range(1, 6)},
                   **{f"recall_at_5/{c}": 0.1 for c in range(1, 6)}, "context_tokens": 1473}
        objective = "context_recall"
    usage = Usage(tokens - tokens // 10, tokens // 10, 0.0) if reader else None
    return EvalOutcome(True, {"objective": objective, "objective_value": value, "wall_s": wall_s, "metrics": metrics},
                       None, None, "ok", usage=usage, placement={"executor_node": node, "untrusted_s": wall_s - 3})


def _sweep_frame(reader: bool = False, n: int = 3) -> pd.DataFrame:
    """What cmd_sweep prints: the comparison of real-looking SweepRuns, objective and run id dropped, the
    last config failed on its node (values missing, status its failure class)."""
    names = ["omni", "naive_rag", "bm25_only", "naive", "full_context", "graph", "pyramid", "hybrid", "time"][:n]
    runs = [SweepRun([f"memory={m}", "reader=none"], f"sweep-20250101-120000-{i:02d}",
                     _outcome(0.812345 - 0.0713 * i, f"{i}f3a9c2e7d10b", 1234.56789 + 7 * i, 1_234_567 + i, reader))
            for i, m in enumerate(names)]
    p = POLICIES[FailureClass.INFRASTRUCTURE]
    runs[-1].outcome = EvalOutcome(False, None, Failure(FailureClass.INFRASTRUCTURE, p.severity, p.is_infrastructure,
                                                        "node lost"), None, "missing")
    frame = comparison_frame(runs, swept_keys(SWEEP))
    return frame.drop(columns=["objective", "run_id"]).rename(columns=lambda c: c.replace("recall_at_", "R@"))


def _render(renderable, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _shown(frame: pd.DataFrame) -> list[str]:
    """Every value of the frame as the table formats it."""
    return ["—" if v is None or (isinstance(v, float) and v != v) else f"{v:.4f}" if isinstance(v, float) else str(v)
            for row in frame.itertuples(index=False) for v in row]


@pytest.mark.parametrize("reader", [False, True], ids=["reader_free", "reader"])
def test_sweep_table_at_80_columns_shows_every_value_whole(reader):
    frame = _sweep_frame(reader)
    assert len(frame) == 3 and len(frame.columns) >= 10
    out = _render(rich_table(frame, title="sweep sweep-20250101-120000: context_recall", width=80,
                             keys=swept_keys(SWEEP)))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out
    tokens = set(re.split(r"[\s│┃]+", out))
    for value in _shown(frame.drop(columns=["memory"])):
        assert value in tokens, value
    for column in frame.columns[1:]:  # one row per metric, the name whole
        assert any(line.startswith(f"│ {column} ") for line in lines), column
    assert "A = memory=omni" in lines and "B = memory=naive_rag" in lines and "C = memory=bm25_only" in lines
    header = next(line for line in lines if "metric" in line)
    assert header.split() == ["┃", "metric", "┃", "A", "┃", "B", "┃", "C", "┃"]


def test_sweep_table_that_fits_is_the_wide_one_as_before():
    frame = _sweep_frame()
    table = rich_table(frame, title="t", width=200, keys=["memory"])
    assert isinstance(table, Table) and [str(c.header) for c in table.columns] == list(frame.columns)
    assert [c.justify for c in table.columns][:2] == ["left", "right"]
    out = _render(table, 200)
    assert "omni" in out and "A = " not in out and "…" not in out
    assert _render(rich_table(frame, title="t"), 200) == out  # no width: the wide table


def test_many_configs_print_in_blocks_that_each_fit():
    frame = _sweep_frame(n=9)
    out = _render(rich_table(frame, title="sweep", width=80, keys=["memory"]))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out
    assert sum(1 for line in lines if line.lstrip("┃ ").startswith("metric")) >= 2  # the names repeat per block
    tokens = set(re.split(r"[\s│┃]+", out))
    assert all(v in tokens for v in _shown(frame.drop(columns=["memory"])))
    assert [line.split(" = ")[0] for line in lines if " = memory=" in line] == [config_label(i) for i in range(9)]
    assert config_label(25) == "Z" and config_label(26) == "AA" and config_label(27) == "AB"


def test_a_console_narrower_than_one_config_folds_values_rather_than_cutting():
    frame = _sweep_frame()
    out = _render(rich_table(frame, width=16, keys=["memory"]), 16)
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 16
    column = "".join(line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3)
    assert column == "".join(_shown(frame.drop(columns=["memory"])))  # one block per config, every character


def test_sweep_on_ray_scores_like_in_process(runs, locomo_path):
    pytest.importorskip("ray")
    from mlflow.tracking import MlflowClient

    from benchmarks.tracking import tracking_uri

    # the hashing embedder: the Ray workers' stores are built cold, and this is about the executor, not MiniLM
    hashing = ["memory.embedder.backend=hashing", "memory.embedder.cache=false"]
    base = ["benchmark=locomo", "split=dev", "sample=tiny", "reader=none", "workers=1", *hashing]
    frame, folder = run_sweep(["memory=naive,bm25_only", *base, "sandbox=bwrap", "research.executor=ray",
                               "research.ray.num_cpus=2"], sweep_id="sw")
    expected = [run_in_process(load_eval_setup([f"memory={m}", *base, "mlflow=false", f"run_id=ref-{m}"]),
                               [f"memory={m}", *hashing]).objective_value for m in ("naive", "bm25_only")]
    assert frame["memory"].tolist() == ["naive", "bm25_only"] and frame["status"].tolist() == ["ok", "ok"]
    assert frame["value"].tolist() == expected and expected[0] != expected[1]
    assert frame["node"].notna().all() and frame["node"].ne("local").all()
    assert pd.read_csv(folder / COMPARISON_CSV)["value"].tolist() == expected
    client = MlflowClient(tracking_uri=tracking_uri())
    parent = client.search_runs([client.get_experiment_by_name("memsys-eval").experiment_id],
                                "tags.kind = 'sweep'")[0]
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.data.tags["memory"] for c in children) == ["bm25_only", "naive"]
