"""One experiment, in stages with typed results: propose -> screen -> apply -> evaluate -> check -> decide.

Each stage either hands the next one what it needs or ends the experiment with a record that
says why (``Stop``). Nothing is evaluated that the screens could have caught:

- the static screen (before any worktree): overrides that touch only dead levers or restate
  current values, and changes whose *effective* config (plus code) was already evaluated;
- the dynamic screen (after apply): the candidate runs reader-free on the run's questions and the
  reader inputs it would send are hashed per question; identical to the parent's on every
  question means the reader cannot answer differently, so it is rejected without a reader run.

A rejected proposal is sent back to the proposer (bounded) with the reason, then recorded.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError, MemsysError
from research.errors import ForbiddenEditError, ProposalFormatError
from research.evaluation.commit_evals import eval_dir
from research.evaluation.diagnosis import read_rows
from research.evaluation.stats import StatsInputError
from research.failures import PRE_EVALUATION_REJECTIONS, FailureClass, _failure, classify_exception
from research.journal.trajectory import ExperimentRecord
from research.loop import decide as D
from research.loop.changes import apply_proposal
from research.loop.measure import applied_now, measure
from research.loop.outcomes import Measured, Stop, effective_key, held_failure
from research.loop.run_context import RunContext
from research.loop.slice_check import check_on_complement
from research.proposers.base import Proposal, Proposer, ResearchContext

#: a malformed reply is sampled again this far from its step's seed (re-asks use 7919 * attempt)
RESAMPLE_SEED = 7919 * 10

if TYPE_CHECKING:
    from research.workspace.repo import Worktree


class Experiment:
    """The stages of one experiment against ``run`` (its state, workspace, evaluations, journal)."""

    def __init__(self, run: RunContext, proposer: Proposer, offset: int = 0):
        self.run_ctx, self.proposer = run, proposer
        st = run.state
        index = st.next_index + offset  # offset: the candidate's place in a round (research.parallel)
        self.rec = ExperimentRecord(run.run_id, index, f"exp-{index:03d}", proposer.name, st.start_commit,
                                    started=run.now(), objective=run.setup.eval.objective,
                                    best_before=st.best_value)
        self.t0 = time.perf_counter()
        self.ctx: ResearchContext | None = None
        self.wt: "Worktree | None" = None

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        run, rec = self.run_ctx, self.rec
        self.ctx = run.hooks.researcher_context()
        prop = self.propose()
        if isinstance(prop, Stop):
            return self.stop(prop, None)
        self.wt = run.ws.create(rec.experiment_id, rec.parent_commit)
        rec.branch = self.wt.branch
        self.prop = prop
        try:
            result = self.apply(prop)  # a resend may replace the proposal: self.prop is the applied one
            if not isinstance(result, Stop):
                result = self.measure(self.prop)
            if isinstance(result, Stop):
                self.stop(result, self.prop)
            else:
                self.decide(self.prop, result)  # the check on a disjoint slice still needs the worktree
        finally:
            run.ws.remove(self.wt.path)

    def _durations(self) -> None:
        d = self.rec.durations
        d["total_s"] = time.perf_counter() - self.t0
        measured = sum(d.get(k, 0.0) for k in ("propose_s", "screen_s", "probe_s", "eval_s", "check_s"))
        d["overhead_s"] = max(0.0, d["total_s"] - measured)  # worktree, apply, commit, bookkeeping

    # ------------------------------------------------------------------ propose + static screen
    def propose(self, first: Proposal | None = None, spent_s: float = 0.0) -> Proposal | Stop:
        """A proposal that passes the static screen, re-asking (bounded) when it does not.

        ``first``: this candidate's proposal from a round's batch (``spent_s``: its share of that
        request's time); it is screened and re-asked like one asked here."""
        run, rec = self.run_ctx, self.rec
        run.stage(rec, "propose", f"{self.proposer.name} ({run.state.mode})" + (", from the round's batch" if first else ""))
        t = time.perf_counter() - spent_s
        rec.shown_questions = list(getattr(self.ctx, "shown_questions", None) or [])  # seen, whatever it proposes
        try:
            prop = first if first is not None else run.hooks.propose(self.proposer, self.ctx, rec)
        except ProposalFormatError as exc:
            prop = self.resample(exc)
        except MemsysError as exc:
            prop = Stop("failed", classify_exception(exc), "propose")
        if isinstance(prop, Stop):
            rec.durations["propose_s"] = time.perf_counter() - t
            return prop
        tried: list[str] = []
        for attempt in range(run.setup.research.loop.duplicate_reasks + 1):
            verdict = self.static_screen(prop)
            if verdict is None:
                break
            tried.append(f"{'; '.join(prop.config_overrides) or prop.hypothesis[:80]}: {verdict.failure.message}")
            if attempt == run.setup.research.loop.duplicate_reasks:
                self._take(prop)
                rec.durations["propose_s"] = time.perf_counter() - t
                return verdict
            prop = self.reask(prop, verdict, tried, attempt)
            if isinstance(prop, Stop):
                rec.durations["propose_s"] = time.perf_counter() - t
                return prop
        rec.durations["propose_s"] = time.perf_counter() - t
        self._take(prop)
        return prop

    def resample(self, error: ProposalFormatError) -> Proposal | Stop:
        """A reply that is not a proposal (bad JSON, an unknown or dead lever, a value out of range) is
        asked for once more at another seed: a slip of one sampled reply, not a verdict on the idea. A
        second slip fails the experiment as before."""
        entry: dict[str, Any] = {"attempt": 1, "action": "resample", "stage": "propose",
                                 "reason": " ".join(str(error).split())[:200]}
        self.rec.healing.append(entry)
        assert self.ctx is not None
        try:
            again = self.run_ctx.hooks.propose(self.proposer, dataclasses.replace(self.ctx, seed=self.ctx.seed + RESAMPLE_SEED),
                                      self.rec)
        except (ProposalFormatError, MemsysError) as exc:
            entry["result"] = "failed again"
            return Stop("failed", classify_exception(exc), "propose")
        entry["result"] = "new proposal"
        return again

    def static_screen(self, prop: Proposal) -> Stop | None:
        """Dead levers, unchanged values and already-evaluated effective configs (config-only changes;
        code edits are judged after they are applied)."""
        if prop.edits:
            return None
        from research.levers.catalogue import resolve, static_noop
        from research.levers.effective import effective_key as cfg_key

        parent = self.run_ctx.commits.config_at(self.rec.parent_commit)
        if parent is None:
            return None
        try:
            after = resolve(parent, prop.config_overrides)
        except ConfigError as exc:
            return Stop("failed", _failure(FailureClass.FORMAT_MISMATCH, str(exc), code_changed=True), "propose")
        lacking = [o for o in prop.config_overrides if o.split("=", 1)[0].strip().removeprefix("memory.") in self.run_ctx.commits.absent_at(self.rec.parent_commit)]
        if lacking:
            msg = f"{'; '.join(lacking)}: this run's memsys has no such key (it is older than this checkout's schema)"
            return Stop("failed", _failure(FailureClass.FORMAT_MISMATCH, msg, code_changed=True), "propose")
        if moved := self.run_ctx.held.moved(parent, after):
            return Stop("rejected", held_failure(moved), "propose")
        reason = static_noop(parent, prop.config_overrides)
        if not reason and self.run_ctx.setup.eval.options.reader == "none" and all(
                o.removeprefix("memory.").startswith("answer.") for o in prop.config_overrides):
            reason = "only the reader's settings change, and the objective is reader-free"
        if reason:
            return Stop("rejected", _failure(FailureClass.NO_EFFECT, f"no effect: {reason}", code_changed=True), "propose")
        key = effective_key(self.run_ctx.commits.code_tree(self.rec.parent_commit), cfg_key(after))
        return self._repeat(key, "propose")

    def _repeat(self, key: str, stage: str) -> Stop | None:
        self.rec.effective_key = key
        dup = self.run_ctx.evaluated_with_key(key)
        sibling = self.run_ctx.round_keys.get(key)  # another candidate of this round (research.parallel > 1)
        if dup is None and sibling is not None and sibling != self.rec.experiment_id:
            msg = f"repeats {sibling}, a candidate of this round: the same effective config and code"
            return Stop("rejected", _failure(FailureClass.IDENTICAL_CONDITIONS, msg, code_changed=True), stage)
        if dup is None:
            return None
        msg = f"repeats {dup.experiment_id}: the same effective config and code were evaluated ({dup.decision})"
        return Stop("rejected", _failure(FailureClass.IDENTICAL_CONDITIONS, msg, code_changed=True), stage,
                    known_value=dup.objective_value)

    def reask(self, prop: Proposal, verdict: Stop, tried: list[str], attempt: int) -> Proposal | Stop:
        run, rec = self.run_ctx, self.rec
        entry = {"attempt": attempt, "action": "reask", "stage": verdict.stage, "reason": verdict.failure.message}
        rec.healing.append(entry)
        lc = run.setup.research.loop
        ctx = self.ctx_without(prop, verdict)
        try:
            again = self.proposer.reconsider(ctx, prop, verdict.failure.message, "not evaluated", tried,
                                             lc.duplicate_temperature)
            if again is None:  # a sampler simply samples again, with another seed
                again = run.hooks.propose(self.proposer, dataclasses.replace(ctx, seed=ctx.seed + 7919 * (attempt + 1)), rec)
        except (ProposalFormatError, MemsysError) as exc:
            entry["result"] = f"re-ask failed: {exc}"
            return Stop("failed", classify_exception(exc), "propose")
        again.tokens += prop.tokens
        again.cost_usd += prop.cost_usd
        entry["result"] = "new proposal"
        return again

    def ctx_without(self, prop: Proposal, verdict: Stop) -> ResearchContext:
        """The context of a re-ask: the refused proposal's levers join the withheld ones (the menu
        leaves them out), so a model that repeats itself cannot send the same change back."""
        from research.levers.catalogue import levers_of

        assert self.ctx is not None
        if prop.edits or verdict.failure.cls not in PRE_EVALUATION_REJECTIONS:
            return self.ctx
        why = f"refused before evaluation: {'; '.join(prop.config_overrides)}, {verdict.failure.message[:80]}"
        withheld = {**self.ctx.withheld, **{lv: why for lv in levers_of(prop.config_overrides)}}
        return dataclasses.replace(self.ctx, withheld=withheld)

    def _take(self, prop: Proposal) -> None:
        rec = self.rec
        rec.hypothesis, rec.proposed_type, rec.expected_effect = prop.hypothesis, prop.discovery_type, prop.expected_effect
        rec.discovery_type = prop.discovery_type
        rec.edits = [asdict(e) for e in prop.edits]
        rec.config_overrides = list(prop.config_overrides)
        rec.tokens, rec.cost_usd = prop.tokens, prop.cost_usd
        rec.seed, rec.subspace = prop.seed, list(prop.subspace)

    # ------------------------------------------------------------------ apply
    def apply(self, prop: Proposal) -> Stop | None:
        run, rec, wt = self.run_ctx, self.rec, self.wt
        run.stage(rec, "apply", f"{len(prop.edits)} edit(s), {len(prop.config_overrides)} override(s)")
        t = time.perf_counter()
        edited, error = apply_proposal(wt, run.preset, prop)
        if error is not None and not isinstance(error, ForbiddenEditError):
            prop, edited, error = self._resend(prop, error)
            self.prop = prop
        try:
            rec.commit = run.ws.commit(wt, f"{rec.experiment_id}: {prop.hypothesis[:60]}\n\ndiscovery: {prop.discovery_type}")
        except ForbiddenEditError as exc:  # the committed diff left the surface: undone, refused
            rec.commit, error = run.ws.head_of(wt), exc
        rec.diff, rec.diff_stats = run.ws.diff(rec.parent_commit, rec.commit)
        rec.durations["apply_s"] = time.perf_counter() - t
        self.edited = edited
        if error is not None:
            forbidden = isinstance(error, ForbiddenEditError)
            cls = FailureClass.FORBIDDEN_EDIT if forbidden else FailureClass.FORMAT_MISMATCH
            return Stop("rejected" if forbidden else "failed", _failure(cls, str(error), code_changed=True), "apply")
        if not rec.diff.strip():
            return Stop("rejected", _failure(FailureClass.NO_EFFECT, "no effect: the changes leave the parent commit "
                                             "unchanged (empty diff)", code_changed=True), "apply", rec.best_before)
        if prop.edits and (moved := self._held_moved()):
            return Stop("rejected", held_failure(moved), "apply")
        if (leak := self.leakage()) is not None:
            return leak
        # the commit is what would be evaluated: code edits, and a resent proposal (which skipped the
        # static screen), may still land on an effective config and code that were evaluated already
        resent = any(h.get("action") == "resend_edit" for h in rec.healing)
        return self._repeat(run.commits.effective_key_at(rec.commit), "apply") if prop.edits or resent else None

    def leakage(self) -> Stop | None:
        """The trusted leakage screen of the committed diff (benchmarks/leakage): a change that carries the
        benchmark's questions, answers or ids is refused before any evaluation, the snippets in its lesson."""
        rec = self.rec
        t = time.perf_counter()
        verdict = self.run_ctx.hooks.screen_leakage(rec.parent_commit, rec.commit)
        rec.durations["leakage_s"] = rec.durations.get("leakage_s", 0.0) + time.perf_counter() - t
        if not verdict:
            return None
        rec.leakage = {k: verdict[k] for k in ("refused", "hits", "seconds") if k in verdict}
        if not verdict.get("refused"):
            return None
        self.run_ctx.stage(rec, "leakage", verdict["lesson"][:160])
        return Stop("rejected", _failure(FailureClass.LEAKAGE, verdict["lesson"], code_changed=True), "leakage")

    def _held_moved(self) -> list[str]:
        """Held keys an applied code edit moved in the preset file; [] when either side does not resolve
        (the evaluation then fails or passes on its own). The preset is read under this checkout's schema,
        so an edit of a default in the run tree's memsys/config.py is not seen: fixed levers bound the
        search, they are not a trust boundary (the scorer's is the sandbox's)."""
        before, after = self.run_ctx.commits.config_at(self.rec.parent_commit), self.run_ctx.commits.config_at(self.rec.commit)
        return self.run_ctx.held.moved(before, after) if before is not None and after is not None else []

    def _resend(self, prop: Proposal, error: Exception) -> tuple[Proposal, list[str], Exception | None]:
        """An edit that did not apply goes back to the researcher once, with the error."""
        run, rec = self.run_ctx, self.rec
        t = time.perf_counter()
        run.ws.restore(self.wt)  # a part may have been written (overrides before edits): none of it stays
        applied = applied_now(run, rec.parent_commit, rec.parent_commit,
                              not_applied="it did not apply, as the error says, so the worktree was reset to the parent commit")
        try:
            again = self.proposer.repair(self.ctx, prop, str(error), applied)
        except MemsysError as exc:
            again, error = None, exc
        rec.durations["propose_s"] = rec.durations.get("propose_s", 0.0) + time.perf_counter() - t
        if again is None:
            return prop, [], error
        entry: dict[str, Any] = {"attempt": 1, "action": "resend_edit"}
        rec.healing.append(entry)
        self._take(again)
        rec.tokens += prop.tokens
        edited, err = apply_proposal(self.wt, run.preset, again)
        entry["result"] = "ok" if err is None else str(err)
        return again, edited, err

    # ------------------------------------------------------------------ screen + evaluate (with healing)
    def measure(self, prop: Proposal) -> Measured | Stop:
        return measure(self, prop)

    # ------------------------------------------------------------------ decide, check, record
    def decide(self, prop: Proposal, m: Measured) -> None:
        self.conclude(prop, self.accept(m, self.judge(m)))

    def accept(self, m: Measured, d: D.Decision) -> D.Decision:
        """Before the best ref moves, a proceed must also hold where the researcher could not have tuned to:
        on the questions of the run's sample whose gold it never saw, then on the disjoint dev slice."""
        if d.kind == "proceed":
            d = self.never_shown(m, d)
        if d.kind == "proceed":
            d = check_on_complement(self.run_ctx, self, d)
        return d

    def never_shown(self, m: Measured, d: D.Decision) -> D.Decision:
        """The paired test on the run's questions whose gold no context of this run showed (the journal's
        ``shown_questions``, this experiment's included), and its verdict (research/loop/decide.py)."""
        run, rec = self.run_ctx, self.rec
        if not run.setup.research.loop.never_shown_check:
            return d
        shown = set(rec.shown_questions).union(*(r.shown_questions for r in run.records))
        unseen = [r for r in m.rows if str(r["question_id"]) not in shown]
        left_out = len(m.rows) - len(unseen)
        if left_out == 0:
            return d  # nothing of this sample was shown: the decision's own test is on never-shown questions
        try:
            best = [r for r in read_rows(run.state.best_eval_dir) if str(r["question_id"]) not in shown]
            test = run.evals.paired(rec.objective, unseen, best)
        except StatsInputError:  # no never-shown question counts toward the objective: nothing supports the gain
            test = None
        except ConfigError as exc:  # an objective with no per-question form: the decision's own rule stands
            rec.never_shown = {"error": str(exc), "shown": left_out}
            return d
        verdict = D.never_shown_verdict(d, test, shown=left_out, alpha=run.setup.research.loop.alpha)
        rec.never_shown = (test.to_dict() if test else {"n": 0}) | {"shown": left_out, "supported": verdict.kind == "proceed"}
        return verdict

    def judge(self, m: Measured) -> D.Decision:
        """The measured value against the best: the paired test and the decision rule (no check yet)."""
        run, rec, lc = self.run_ctx, self.rec, self.run_ctx.setup.research.loop
        st = run.state
        out = m.outcome
        run.stage(rec, "decide", "paired test against the best")
        rec.objective_value, rec.metrics = out.objective_value, out.result["metrics"]
        rec.eval_run_id, rec.mlflow_run_id = out.result["run_id"], out.result.get("mlflow_run_id")
        rec.eval_dir = run.relative(eval_dir(out))
        test = m.probe_test
        if m.stopped_early:  # on the run's scale: the best's value plus what the probe's questions measured
            rec.objective_value = st.best_value + test.mean_delta
            rec.test = test.to_dict()
        else:
            try:
                test = run.evals.paired(rec.objective, m.rows, read_rows(st.best_eval_dir))
                rec.test = test.to_dict()
            except (ConfigError, ValueError) as exc:
                rec.test = {"error": str(exc)}
        ds = D.DecisionState(st.best_value, st.consecutive_degradations, st.iterations_on_hypothesis, st.pivots)
        d = D.decide(ds, rec.objective_value, test, min_rel_improvement=lc.min_rel_improvement, alpha=lc.alpha,
                     max_iterations=lc.max_iterations_per_hypothesis, degradations_to_pivot=lc.degradations_to_pivot)
        if m.stopped_early:
            p = m.probe
            d = dataclasses.replace(d, reason=f"{d.reason}; stopped after the probe: {p['questions']} of {p['of']} "
                                    f"questions ({p['sample']}), clearly worse (Optuna's WilcoxonPruner, p < "
                                    f"{p['p_threshold']:g})")
        return d

    def conclude(self, prop: Proposal, d: D.Decision) -> None:
        """Record the decision (the journal, then the state that folds it)."""
        rec, run = self.rec, self.run_ctx
        self._durations()
        rec.decision, rec.delta, rec.delta_rel, rec.degraded = d.kind, d.delta, d.delta_rel, d.degraded
        rec.notes = f"{rec.notes}; {d.reason}" if rec.notes else d.reason
        self.classify()
        run.hooks.finish(rec, prop, self.proposer)

    def classify(self) -> None:
        from research.journal.discovery import classify_change, paths_from_diff

        rec = self.rec
        repaired = any(h.get("action") in ("repair_edit", "revert_import_edit") for h in rec.healing)
        rec.discovery_type, _ = classify_change(paths_from_diff(rec.diff), rec.config_overrides, repairs_failure=repaired)

    def stop(self, s: Stop, prop: Proposal | None) -> None:
        rec = self.rec
        self._durations()
        rec.failure = s.failure.to_dict() | {"stage": s.stage}
        rec.decision = s.decision
        if s.known_value is not None:
            rec.notes = f"known value {s.known_value:.4f}"
        if rec.diff:
            self.classify()
        self.run_ctx.hooks.finish(rec, prop, self.proposer)
