"""K candidates per round (``research.parallel=K``): propose K, evaluate them at once, take the best.

A round asks the proposer for a batch of K (``Proposer.propose_batch``): the LLM researcher in one
request for K different hypotheses (research.researcher.batch; the hybrid's LLM part likewise, its
TPE values per candidate), TPE and the random sampler K times, candidate i with step seed
``seed + i``. A batch that comes back short is topped up with single asks. Each candidate's proposal
then goes through the static screen on its own, in index order: a repeat of history or of an
earlier candidate of this round, or a no-op, goes back to the proposer (reconsider) like any repeat.
Each candidate is applied on its own worktree and branch, then all are measured concurrently: each
candidate's screen/evaluate/heal cascade (research.loop.measure) runs in a thread of this process and
sends its sandboxed half to the executor (research.executor), so with ``executor=ray`` the K
evaluations run on K workers. Deciding stays here: every measured candidate gets the paired test
against the same best; the best-valued one whose decision is ``proceed`` and that holds on the
check slice is taken. If none is, the best-valued candidate keeps its own decision (iterate,
pivot). Every other measured candidate is recorded as ``not_taken`` with its numbers (it spends
budget, it moves nothing), and failed or rejected ones as such. Records are appended in index
order, each with ``round_of`` (the round's first index), so the state is the same fold of the
journal live and on resume, and a replay (research.replay) regroups the rounds.

Resume mid-round: each finished measurement is saved at once in round.json (the candidate's
effective key, the trusted result and the screen). A resumed run asks the same questions of the
same history (the same batch prompt and step seeds; the LLM's replies are cached), and a candidate
whose effective key has a saved measurement is not evaluated again.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from harness.atomic import atomic_write_json
from research.evaluation.diagnosis import read_rows
from research.evaluation.stats import PairedTest
from research.evaluation.two_half import EvalOutcome, read_result
from research.loop import decide as D
from research.loop.experiment import Experiment
from research.loop.outcomes import Measured, Screen, Stop
from research.loop.run_context import RunContext

if TYPE_CHECKING:
    from research.proposers.base import Proposal, Proposer

ROUND_FILE = "round.json"


@dataclass
class Candidate:
    exp: Experiment
    prop: "Proposal | None" = None
    stop: Stop | None = None
    measured: Measured | None = None
    decision: D.Decision | None = None

    @property
    def value(self) -> float:
        return self.exp.rec.objective_value if self.exp.rec.objective_value is not None else float("-inf")


class Round:
    """One round of ``len(proposers)`` candidates; one proposer for all (a batch is asked of it), or one
    per candidate (a replay's recorded proposals, each asked on its own)."""

    def __init__(self, run: RunContext, proposers: "Sequence[Proposer]"):
        self.run_ctx, self.k = run, len(proposers)
        self.cands = [Candidate(Experiment(run, p, offset=i)) for i, p in enumerate(proposers)]
        for c in self.cands:
            c.exp.rec.round_of = self.cands[0].exp.rec.index
        self.path = run.run_dir / ROUND_FILE
        self.saved = _load(self.path)
        self._lock = threading.Lock()

    def run(self) -> None:
        run = self.run_ctx
        ctx = run.hooks.researcher_context()
        try:
            batch, share_s = self._batch(ctx)
            for i, c in enumerate(self.cands):
                first = batch[i] if i < len(batch) else None
                self._propose_and_apply(c, replace(ctx, seed=ctx.seed + i), first, share_s if first else 0.0)
            ready = [c for c in self.cands if c.stop is None]
            if ready:
                with ThreadPoolExecutor(max_workers=len(ready), thread_name_prefix="candidate") as pool:
                    for c, result in zip(ready, pool.map(self._measure, ready)):
                        c.stop, c.measured = (result, None) if isinstance(result, Stop) else (None, result)
            self._decide()
            for c in self.cands:  # index order: the journal and the state fold agree live and on resume
                if c.decision is not None:
                    c.exp.conclude(c.prop, c.decision)
                else:
                    c.exp.stop(c.stop, c.prop)
        finally:
            run.round_keys.clear()
            for c in self.cands:
                if c.exp.wt is not None:
                    run.ws.remove(c.exp.wt.path)
        self.path.unlink(missing_ok=True)

    def _batch(self, ctx: Any) -> tuple[list["Proposal"], float]:
        """The round's proposals from one ``propose_batch`` (each candidate's share of its time), or
        none when the candidates have proposers of their own."""
        proposers = {id(c.exp.proposer) for c in self.cands}
        if len(proposers) != 1:
            return [], 0.0
        first = self.cands[0].exp
        t = time.perf_counter()
        batch = self.run_ctx.hooks.propose_batch(first.proposer, ctx, self.k, first.rec)
        return batch, (time.perf_counter() - t) / max(1, len(batch))

    def _propose_and_apply(self, c: Candidate, ctx: Any, first: "Proposal | None", spent_s: float) -> None:
        exp, run = c.exp, self.run_ctx
        exp.ctx = ctx
        prop = exp.propose(first, spent_s)
        if isinstance(prop, Stop):
            c.stop = prop
            return
        exp.wt = run.ws.create(exp.rec.experiment_id, exp.rec.parent_commit)
        exp.rec.branch, exp.prop = exp.wt.branch, prop
        result = exp.apply(prop)
        c.prop = exp.prop  # a resend may have replaced it
        if isinstance(result, Stop):
            c.stop = result
        elif exp.rec.effective_key:
            run.round_keys.setdefault(exp.rec.effective_key, exp.rec.experiment_id)

    def _measure(self, c: Candidate) -> Measured | Stop:
        rec = c.exp.rec
        again = self._saved_measurement(c)
        if again is not None:
            self.run_ctx.stage(rec, "evaluate", "measured before the run was stopped: not evaluated again")
            return again
        result = c.exp.measure(c.prop)
        if isinstance(result, Measured) and rec.effective_key:
            with self._lock:
                self.saved[rec.experiment_id] = {"effective_key": rec.effective_key, "result": result.outcome.result,
                                                 "screen": rec.screen, "durations": rec.durations,
                                                 "reader": rec.reader, "sandbox": rec.sandbox, "probe": rec.probe,
                                                 "probe_test": result.probe_test.to_dict() if result.probe_test else None}
                atomic_write_json(self.path, {"start_index": self.cands[0].exp.rec.index, "candidates": self.saved})
        return result

    def _saved_measurement(self, c: Candidate) -> Measured | None:
        rec = c.exp.rec
        entry = self.saved.get(rec.experiment_id)
        if not entry or not rec.effective_key or entry.get("effective_key") != rec.effective_key:
            return None
        status, result = read_result(Path(entry["result"]["run_dir"]) / "result.json")
        if status != "ok" or result is None:
            return None
        s = entry.get("screen") or {}
        rec.screen, rec.reader, rec.sandbox = s, entry.get("reader") or {}, entry.get("sandbox") or {}
        rec.durations |= entry.get("durations") or {}
        screen = Screen(int(s.get("questions", 0)), int(s.get("changed", 0)), bool(s.get("comparable", False)))
        rec.probe = entry.get("probe") or {}
        test = PairedTest(**entry["probe_test"]) if entry.get("probe_test") else None
        return Measured(EvalOutcome(True, result, None, None, "ok"), screen, read_rows(result["run_dir"]),
                        probe=rec.probe, probe_test=test)

    def _decide(self) -> None:
        """Every measured candidate against the same best; one takes the round's decision."""
        measured = [c for c in self.cands if c.measured is not None]
        for c in measured:
            c.decision = c.exp.judge(c.measured)
        taken = None
        for c in sorted((c for c in measured if c.decision.kind == "proceed"), key=lambda c: -c.value):
            c.decision = c.exp.accept(c.measured, c.decision)
            if c.decision.kind == "proceed":
                taken = c
                break
        if taken is None and measured:
            taken = max(measured, key=lambda c: c.value)
        for c in measured:
            if c is not taken:
                why = f"not taken: {taken.exp.rec.experiment_id} of the same round was taken ({c.decision.reason})"
                c.decision = replace(c.decision, kind="not_taken", degraded=False, reason=why)


def _load(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("candidates") or {} if isinstance(data, dict) else {}
