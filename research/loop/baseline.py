"""The run's first experiment: the starting commit, measured as it is.

Why apart from the experiment stages: the baseline has no proposal and no edit, so nothing to screen,
heal or decide. What it can suffer is the infrastructure's (a timeout, a dead endpoint, a lost node), so
it is tried once more in the same folder (its written answers kept) before the run gives up on it.
"""

from __future__ import annotations

import time
from datetime import datetime

from research.evaluation.commit_evals import eval_dir
from research.failures import FailureClass
from research.journal.trajectory import ExperimentRecord
from research.loop.run_context import RunContext

#: failures of the unchanged code that a second try can outlive (the baseline has no edit to heal)
BASELINE_RETRY = (FailureClass.TIMEOUT, FailureClass.API_ERROR, FailureClass.INFRASTRUCTURE)


def measure_baseline(run: RunContext) -> None:
    """Evaluate the base commit and record it as experiment 0 (journal, state, best ref, study)."""
    st = run.state
    rec = ExperimentRecord(run.run_id, 0, "exp-000", "baseline", st.base_commit,
                           started=datetime.now().isoformat(timespec="seconds"),
                           hypothesis="baseline: the starting configuration", objective=run.setup.eval.objective)
    run.stage(rec, "evaluate", "baseline")
    t0 = time.perf_counter()
    wt = run.ws.create(rec.experiment_id, st.base_commit)
    rec.commit, rec.branch = st.base_commit, wt.branch
    try:
        out = run.hooks.run_eval(wt, rec, None, code_changed=False)
        if not out.ok and out.failure is not None and out.failure.cls in BASELINE_RETRY:
            entry = {"attempt": 1, "action": "continue", "stage": "evaluate",
                     "reason": f"{out.failure.cls.value}: the same evaluation once more, its written answers kept"}
            rec.healing.append(entry)
            out = run.hooks.run_eval(wt, rec, None, code_changed=False)  # same folder: it resumes, it does not restart
            entry["result"] = "ok" if out.ok else f"failed again ({out.failure.cls.value if out.failure else 'no value'})"
    finally:
        run.ws.remove(wt.path)
    rec.durations = {"eval_s": time.perf_counter() - t0, "total_s": time.perf_counter() - t0}
    rec.effective_key = run.commits.effective_key_at(st.base_commit)
    if out.ok and out.objective_value is not None:
        rec.objective_value, rec.metrics, rec.decision = out.objective_value, out.result["metrics"], "baseline"
        rec.eval_run_id, rec.mlflow_run_id = out.result["run_id"], out.result.get("mlflow_run_id")
        rec.eval_dir = run.relative(eval_dir(out))
    else:
        rec.failure = out.failure.to_dict() if out.failure else {"cls": "invalid_metric", "message": "no objective value"}
    run.hooks.finish(rec, None, None)
