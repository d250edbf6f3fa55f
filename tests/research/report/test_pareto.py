"""The report's Pareto section: quality against the context tokens the scorer counted, over a synthetic run's
evaluated configs, the front as Optuna's best_trials and the accepted configs (baseline, proceeds) marked."""

from __future__ import annotations

import json

from PIL import Image

from research.report.build import write_report
from research.report.figures import pareto_frame
from tests.research.report.test_build import make_record, write_run
from tests.support.report_page import Page

#: (decision, objective value, mean counted context tokens). Front: exp-000 (cheapest), exp-002, exp-004 (best);
#: exp-001 is beaten by exp-002 on both, exp-003 by exp-004 on both; exp-005 failed, exp-006 was screened out
RUN = [("baseline", 0.20, 150.0), ("iterate", 0.30, 420.0), ("proceed", 0.45, 400.0), ("not_taken", 0.65, 1000.0),
       ("proceed", 0.70, 980.0), ("failed", None, None), ("rejected", 0.9, 10.0)]


def _records(run_id: str) -> list:
    out = []
    for i, (decision, value, tokens) in enumerate(RUN):
        metrics = {} if value is None else {"all_honest": value, "context_tokens": tokens, "context_budget_tokens": 1000}
        out.append(make_record(run_id, i, decision, value, "hyperparameter_tuning" if i else None, metrics=metrics))
    return out


def _run(tmp_path, objectives: list[str]) -> tuple[Page, str, object]:
    run_dir = write_run(tmp_path, "run-p", _records("run-p"))
    config = {"benchmark": {"name": "locomo"}, "split": "dev", "research": {"objectives": objectives}}
    (run_dir / "config.json").write_text(json.dumps({"config": config, "overrides": []}))
    out = write_report(run_dir)
    text = out.read_text(encoding="utf-8")
    return Page(text), text, out


def test_the_front_is_the_non_dominated_evaluated_configs() -> None:
    frame = pareto_frame(_records("run-p"))
    assert list(frame["experiment"]) == [f"exp-{i:03d}" for i in range(5)]  # failed and rejected are no configs
    assert list(frame.loc[frame["on_front"], "experiment"]) == ["exp-000", "exp-002", "exp-004"]
    assert list(frame.loc[frame["accepted"], "experiment"]) == ["exp-000", "exp-002", "exp-004"]


def test_a_multi_objective_run_reports_its_pareto_front_with_the_accepted_configs_marked(tmp_path) -> None:
    page, text, out = _run(tmp_path, ["quality", "context_tokens"])
    assert "Quality against context cost" in page.headings
    assert len(page.png_images()) == 4  # trajectory, pareto, categories, cost/time
    with Image.open(out.parent / "pareto.png") as im:
        assert im.format == "PNG" and im.width > 600 and im.height > 250
    rows = page.table("pareto")
    assert rows[0] == ["experiment", "decision", "all_honest", "context tokens", "on the front", "accepted"]
    assert [r[:2] + r[4:] for r in rows[1:]] == [["exp-000", "baseline", "yes", "yes"],
                                                 ["exp-002", "proceed", "yes", "yes"],
                                                 ["exp-004", "proceed", "yes", "yes"]]
    assert rows[1][2:4] == ["0.2000", "150.0"]
    assert "multi-objective (quality, context_tokens)" in text and "paired test on all_honest" in text


def test_a_single_objective_run_draws_the_same_front_and_says_what_it_optimized(tmp_path) -> None:
    page, text, _ = _run(tmp_path, ["quality"])
    assert len(page.table("pareto")) == 1 + 3 and "optimized quality alone" in text


def test_no_section_without_counted_context_tokens(tmp_path) -> None:
    run_dir = write_run(tmp_path, "run-old", [make_record("run-old", 0, "baseline", 0.3),
                                              make_record("run-old", 1, "proceed", 0.4, "bug_fix", 0.3)])
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    assert "Quality against context cost" not in page.headings and len(page.png_images()) == 3
