"""Held-out confirmation: the run's baseline and best commit, scored once on the test split.

The loop only ever sees dev. When a run ends (and on demand, ``memsys confirm <run>``)
the trusted side evaluates the base commit and the best commit on the test split and
records dev and test side
by side in the run's state, its MLflow parent run and its report. Its caches are a held-out
set of their own (``sandbox-heldout/``): no test-split text reaches a cache that a dev-split
sandbox reads. The researcher's
context is built from the trajectory, never from this record, so the test result
cannot steer the search.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from research.diagnosis import read_rows
from research.evaluations import eval_dir
from research.two_half_eval import EvalOutcome

log = logging.getLogger(__name__)


def _summary(out: EvalOutcome) -> dict[str, Any]:
    if not out.ok or out.result is None:
        f = out.failure
        return {"ok": False, "failure": f"{f.cls.value}: {f.message}" if f else "failed"}
    m = out.result["metrics"]
    keep = {k: v for k, v in m.items() if isinstance(v, (int, float)) and "/" not in k}
    return {"ok": True, "objective_value": out.result["objective_value"], "eval_run_id": out.result["run_id"],
            "n_questions": out.result["n_questions"], "metrics": keep}


def confirm(loop: Any) -> dict[str, Any]:
    """Evaluate base and best on the held-out split with ``loop``'s sandbox and gateway; returns the record."""
    st = loop.state
    cc = loop.setup.research.confirm
    sample = cc.sample or loop.setup.eval.eval.sample or "full"
    results: dict[str, Any] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    commits = {"baseline": st.base_commit, "best": st.best_commit}
    for label, commit in commits.items():
        if label == "best" and commit == st.base_commit:
            results["best"] = dict(results["baseline"], same_as="baseline")
            rows["best"] = rows.get("baseline", [])
            continue
        exp_id = f"confirm-{label}"
        wt = loop.ws.create(exp_id, commit)
        try:
            out = loop.run_eval(wt, exp_id, sample, code_changed=label != "baseline", split=cc.split, heldout=True)
        finally:
            loop.ws.remove(wt.path)
        results[label] = _summary(out) | {"commit": commit}
        rows[label] = read_rows(eval_dir(out)) if out.ok else []
    dev_base = next((r.objective_value for r in loop.records if r.index == 0), None)
    record = {
        "split": cc.split, "sample": sample, "objective": loop.setup.eval.objective,
        "finished": datetime.now().isoformat(timespec="seconds"),
        "dev": {"baseline": dev_base, "best": st.best_value},
        "test": {"baseline": results["baseline"].get("objective_value"), "best": results["best"].get("objective_value")},
        "runs": results,
        "test_paired": _paired(loop, rows),
    }
    st.confirmation = record
    st.save(loop.run_dir)
    _log_mlflow(st, record)
    return record


def _paired(loop: Any, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Best minus baseline on the held-out questions, per question (research.stats)."""
    from harness.errors import ConfigError
    from research.stats import paired_test, per_question

    if not rows.get("baseline") or not rows.get("best"):
        return {}
    obj = loop.setup.eval.objective
    try:
        return paired_test(per_question(obj, rows["best"]), per_question(obj, rows["baseline"]),
                           confidence=1 - loop.setup.research.loop.alpha, seed=loop.setup.research.seed).to_dict()
    except (ConfigError, ValueError) as exc:
        return {"error": str(exc)}


def _log_mlflow(st: Any, record: dict[str, Any]) -> None:
    if not st.mlflow_parent_run_id:
        return
    try:
        import mlflow

        from benchmarks.tracking import tracking_uri

        client = mlflow.MlflowClient(tracking_uri=tracking_uri())
        for side in ("dev", "test"):
            for label, value in record[side].items():
                if value is not None:
                    client.log_metric(st.mlflow_parent_run_id, f"{side}_{label}", float(value))
    except Exception as exc:  # tracking is a report, never a reason to lose the confirmation
        log.warning("MLflow logging of the confirmation failed: %s", exc)


def describe(record: dict[str, Any]) -> str:
    """One line per split: dev and test, baseline -> best."""
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.4f}"

    obj = record.get("objective", "objective")
    return (f"{obj}: dev {f(record['dev']['baseline'])} -> {f(record['dev']['best'])} | "
            f"{record['split']} ({record['sample']}) {f(record['test']['baseline'])} -> {f(record['test']['best'])}")
