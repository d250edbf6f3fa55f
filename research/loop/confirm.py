"""Held-out confirmation: the run's baseline and best commit, scored once on the test split.

The run only ever sees dev. When a run ends (and on demand, ``memsys confirm <run>``)
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

from research.evaluation.commit_evals import eval_dir
from research.evaluation.diagnosis import read_rows, row_mean
from research.evaluation.two_half import EvalOutcome
from research.loop.run_context import RunContext

log = logging.getLogger(__name__)


def _summary(out: EvalOutcome) -> dict[str, Any]:
    if not out.ok or out.result is None:
        f = out.failure
        return {"ok": False, "failure": f"{f.cls.value}: {f.message}" if f else "failed"}
    m = out.result["metrics"]
    keep = {k: v for k, v in m.items() if isinstance(v, (int, float)) and "/" not in k}
    return {"ok": True, "objective_value": out.result["objective_value"], "eval_run_id": out.result["run_id"],
            "n_questions": out.result["n_questions"], "metrics": keep}


def _held_out(run: RunContext, sample: str, prefix: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Base and best commit evaluated once each on the held-out split (the best reuses the base's result when
    they are the same commit): summaries and scored rows by label."""
    st, cc = run.state, run.setup.research.confirm
    results: dict[str, Any] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for label, commit in {"baseline": st.base_commit, "best": st.best_commit}.items():
        if label == "best" and commit == st.base_commit:
            results["best"] = dict(results["baseline"], same_as="baseline")
            rows["best"] = rows.get("baseline", [])
            continue
        exp_id = f"{prefix}-{label}"
        wt = run.ws.create(exp_id, commit)
        try:
            out = run.hooks.run_eval(wt, exp_id, sample, code_changed=label != "baseline", split=cc.split, heldout=True)
        finally:
            run.ws.remove(wt.path)
        results[label] = _summary(out) | {"commit": commit}
        rows[label] = read_rows(eval_dir(out)) if out.ok else []
    return results, rows


def confirm(run: RunContext) -> dict[str, Any]:
    """Evaluate base and best on the held-out split with ``run``'s sandbox and gateway; returns the record.

    When the best commit is the baseline nothing is evaluated: the verdict is "no gain" whatever the test
    split says, and its evaluation cost a reader run as long as a candidate's (about 6 minutes on ``small``)."""
    st = run.state
    cc = run.setup.research.confirm
    sample = cc.sample or run.setup.eval.options.sample or "full"
    if st.best_commit == st.base_commit:  # nothing was accepted: no held-out evaluation can confirm anything
        results = {"baseline": {"ok": True, "skipped": "nothing accepted", "commit": st.base_commit},
                   "best": {"ok": True, "same_as": "baseline", "commit": st.best_commit}}
        rows: dict[str, list[dict[str, Any]]] = {}
    else:
        results, rows = _held_out(run, sample, "confirm")
    dev_base = next((r.objective_value for r in run.records if r.index == 0), None)
    record = {
        "split": cc.split, "sample": sample, "objective": run.setup.eval.objective,
        "finished": datetime.now().isoformat(timespec="seconds"),
        "dev": {"baseline": dev_base, "best": st.best_value},
        "test": {"baseline": results["baseline"].get("objective_value"), "best": results["best"].get("objective_value")},
        "runs": results,
        "test_paired": _paired(run, rows),
    }
    record["verdict"] = confirmation_verdict(record, min_kept=cc.min_kept)
    st.confirmation = record
    st.save(run.run_dir)
    _log_mlflow(st, record)
    return record


def reader_check(run: RunContext, sample: str) -> dict[str, Any]:
    """End to end on held-out questions: base and best answered by the reader (``run``'s setup with
    ``reader=llm``), the reader objective paired best minus baseline, and the prompt tokens each paid. A run
    that climbed a reader-free proxy shows here what its gain bought in answers; it is a record beside the
    confirmation, never a change of it. Saved as the state's ``reader_check``."""
    st, cc = run.state, run.setup.research.confirm
    results, rows = _held_out(run, sample, "reader-check")
    record = {
        "split": cc.split, "sample": sample, "objective": run.setup.eval.objective,
        "finished": datetime.now().isoformat(timespec="seconds"),
        "test": {"baseline": results["baseline"].get("objective_value"), "best": results["best"].get("objective_value")},
        "prompt_tokens": {label: _rounded(row_mean(r, "prompt_tokens")) for label, r in rows.items()},
        "runs": results, "test_paired": _paired(run, rows),
    }
    record["line"] = reader_line(record)
    st.reader_check = record
    st.save(run.run_dir)
    return record


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def reader_line(record: dict[str, Any]) -> str:
    """One line for a reader check. Pure."""
    t, p, tok = record.get("test") or {}, record.get("test_paired") or {}, record.get("prompt_tokens") or {}
    where = f"{record.get('objective')} on {record.get('split')} {record.get('sample')}"
    if None in (t.get("baseline"), t.get("best")) or "ci_low" not in p:
        return f"with the reader ({where}): no paired comparison (an evaluation failed)"
    cost = (f"; {tok['baseline']:,.0f} -> {tok['best']:,.0f} prompt tokens a question"
            if tok.get("baseline") is not None and tok.get("best") is not None else "")
    return (f"with the reader ({where}, {p['n']} questions): baseline {t['baseline']:.4f} -> best {t['best']:.4f}, "
            f"{p['mean_delta']:+.4f} [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]{cost}")


def _paired(run: RunContext, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Best minus baseline on the held-out questions, per question (research.evaluation.stats)."""
    from harness.errors import ConfigError
    from research.evaluation.stats import paired_test, per_question

    if not rows.get("baseline") or not rows.get("best"):
        return {}
    obj = run.setup.eval.objective
    try:
        return paired_test(per_question(obj, rows["best"]), per_question(obj, rows["baseline"]),
                           confidence=1 - run.setup.research.loop.alpha, seed=run.setup.research.seed).to_dict()
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
        verdict = record.get("verdict") or {}
        if verdict:
            client.set_tag(st.mlflow_parent_run_id, "confirmation", verdict["status"])
            client.set_tag(st.mlflow_parent_run_id, "confirmation_line", verdict["line"][:5000])
    except Exception as exc:  # tracking is a report, never a reason to lose the confirmation
        log.warning("MLflow logging of the confirmation failed: %s", exc)


def confirmation_verdict(record: dict[str, Any], *, min_kept: float) -> dict[str, Any]:
    """Whether the held-out split confirms the run's dev gain, and one line that says so plainly. Pure.

    Why: a researcher can climb dev without generalising (leakage, or the noise of a small sample); a run
    whose gain does not hold on test must not end by printing its dev best as its result. Confirmed: the
    paired per-question test on the held-out questions supports a gain (its CI above 0) and the test gain
    keeps at least ``min_kept`` of the dev gain."""
    dev, test, paired = record.get("dev") or {}, record.get("test") or {}, record.get("test_paired") or {}
    split = record.get("split", "test")
    if record.get("runs", {}).get("best", {}).get("same_as") == "baseline" or dev.get("best") == dev.get("baseline"):
        return {"status": "no_gain", "confirmed": None,
                "line": f"no gain to confirm: the best commit is the baseline (dev and {split} unchanged)"}
    if None in (dev.get("baseline"), dev.get("best"), test.get("baseline"), test.get("best")) or "ci_low" not in paired:
        return {"status": "unknown", "confirmed": False,
                "line": f"NOT CONFIRMED on {split}: the held-out evaluation did not give a paired comparison"}
    dev_gain, test_gain = dev["best"] - dev["baseline"], test["best"] - test["baseline"]
    kept = test_gain / dev_gain if dev_gain > 0 else None
    ci = f"[{paired['ci_low']:+.4f}, {paired['ci_high']:+.4f}]"
    if paired["ci_low"] <= 0:
        why = f"the {split} gain {test_gain:+.4f} is not supported (paired CI {ci} includes 0)"
    elif kept is not None and kept < min_kept:
        why = f"the {split} gain {test_gain:+.4f} keeps {kept:.0%} of the dev gain {dev_gain:+.4f} (< {min_kept:.0%})"
    else:
        share = f", {kept:.0%} of the dev gain" if kept is not None else ""
        return {"status": "confirmed", "confirmed": True, "kept": kept,
                "line": f"CONFIRMED on {split}: {test_gain:+.4f} {ci}{share}"}
    return {"status": "not_confirmed", "confirmed": False, "kept": kept, "line": f"NOT CONFIRMED on {split}: {why}"}


def verdict_of(record: dict[str, Any] | None) -> dict[str, Any]:
    """The saved verdict of a confirmation record ({} when the run has none); an older record without one
    gets it computed at the default share, so every place that prints a result can print it."""
    if not record or "dev" not in record:
        return {}
    return record.get("verdict") or confirmation_verdict(record, min_kept=0.5)


def describe(record: dict[str, Any]) -> str:
    """One line per split: dev and test, baseline -> best, and the verdict beside them."""
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.4f}"

    obj = record.get("objective", "objective")
    line = (f"{obj}: dev {f(record['dev']['baseline'])} -> {f(record['dev']['best'])} | "
            f"{record['split']} ({record['sample']}) {f(record['test']['baseline'])} -> {f(record['test']['best'])}")
    verdict = verdict_of(record)
    return f"{line}\n{verdict['line']}" if verdict else line
