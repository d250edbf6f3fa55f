"""The per-category table `memsys eval` prints and saves (benchmarks/runner.py render_table): readable in an
80-column terminal, every value whole (issue #48), for both benchmarks with and without a reader."""

from __future__ import annotations

import pytest

from benchmarks.config import load_eval_setup
from benchmarks.datasets.schema import category_names
from benchmarks.runner import TABLE_WIDTH, _fmt, render_table, selection


def _metrics(bench, with_reader: bool) -> dict:
    """A metrics dict of the runner's own keys, with values of every width the table shows."""
    m: dict = {"n": 1540, "recall_at_5": 0.61234, "recall_at_10": 0.7, "recall_at_20": 0.85, "context_tokens": 5872.4,
               "f1": 0.51234, "em": 0.25, "bleu1": 0.4321, "f1_cat1_4": 0.488}
    for c in category_names(bench):
        m |= {f"n/{c}": 337, f"recall_at_5/{c}": 0.123456, f"recall_at_10/{c}": 0.5, f"recall_at_20/{c}": 1.0,
              f"context_tokens/{c}": 12345.6, f"f1_cat{c}": 0.333, f"f1_{c}": 0.8125, f"em_{c}": 0.5, f"bleu1_{c}": 0.7071}
    return m


@pytest.mark.parametrize("benchmark", ["locomo", "memgallery"])
@pytest.mark.parametrize("reader", ["llm", "none"])
def test_the_eval_table_fits_80_columns_with_every_value_whole(benchmark: str, reader: str) -> None:
    setup = load_eval_setup([f"benchmark={benchmark}", f"reader={reader}", "sample=tiny", "mlflow=false"])
    bench = selection(setup)
    m = _metrics(bench, reader == "llm")
    out = render_table(bench, setup, m, reader == "llm")
    lines = out.splitlines()
    assert TABLE_WIDTH == 80 and max(len(line) for line in lines) <= 80
    assert "…" not in out
    retrieval = ("n", "recall_at_5", "recall_at_10", "recall_at_20", "context_tokens")
    answers = ("f1_cat",) if benchmark == "locomo" else ("f1", "em", "bleu1")
    shown = {k for k in m if k.split("/")[0] in retrieval}
    if reader == "llm":
        shown |= {k for k in m if k.startswith(answers) and (benchmark == "locomo") == k.startswith("f1_cat")}
    for key in shown:
        assert _fmt(m[key]) in out, key
