"""``memsys eval | run | quickstart | confirm | replay | report`` subcommands."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

# < 15 min on 2 cores: the embedded 1.5B researcher (menu of live levers, TPE for the values) optimizes
# the reader-free objective, the evidence inside the first 1,000 context tokens (the scorer's budget, recounted
# on the trusted side: a wider context past it changes nothing, so neither TPE nor the researcher can win by
# adding tokens), on half of dev; a gain must pass the paired test and hold on the other half; then held-out test
#: the quickstart's run: at most 6 evaluated experiments, and no new one after 9 minutes, aiming at 15 minutes
#: on 2 cores with the first install and the held-out confirmation (docs/results.md, "Research loop", has the measured time)
QUICKSTART = ["memory=naive", "reader=none", "sample=half", "context_budget_tokens=1000", "research.proposer=hybrid",
              "research.budget.experiments=6", "research.budget.wall_time_s=540",
              "research.loop.context_budget_tokens=1500", "workers=2"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="evaluate one config (or a sweep of configs) on one benchmark split",
        description="e.g. memsys eval benchmark=locomo split=dev memory=omni llm=local workers=2; a sweep: "
                    "memsys eval memory=omni,naive_rag,bm25_only reader=none [research.executor=ray]",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--sweep-id", help="name of a sweep's folder under runs/ (default sweep-<time>)")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("run", help="launch (or --resume) an autonomous optimization run",
                       description="e.g. memsys run benchmark=locomo split=dev memory=naive proposer=llm llm=local "
                                   "research.budget.experiments=8")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a killed or finished run (key=value may change its budget, sandbox or workers)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("confirm", help="score a run's baseline and best commit on the held-out test split")
    p.add_argument("run_id")
    p.add_argument("--reader", action="store_true",
                   help="end to end: base and best answered by the run's reader on held-out questions, paired "
                        "(a record beside the confirmation; a reader-free run's answers cost reader time here)")
    p.add_argument("--sample", default="tiny", help="the held-out sample of --reader (default tiny: 12 LoCoMo questions)")
    p.set_defaults(func=cmd_confirm)
    p = sub.add_parser("quickstart", help="a short optimization run on the embedded defaults (< 15 min, 2 cores)")
    p.set_defaults(func=cmd_quickstart)
    p = sub.add_parser("replay", help="re-apply a run's recorded experiments from its base commit and re-evaluate")
    p.add_argument("run_id")
    p.add_argument("--only", choices=["all", "accepted"], default="all")
    p.set_defaults(func=cmd_replay)
    p = sub.add_parser("report", help="HTML + PNG report of a run (or two runs side by side)")
    p.add_argument("run_ids", nargs="+")
    p.add_argument("--csv", action="store_true",
                   help="also write trajectory.csv, categories.csv and taxonomy.csv (compare.csv for two runs)")
    p.set_defaults(func=cmd_report)


def cmd_eval(args: argparse.Namespace) -> int:
    """Fixed-config evaluation through the same two halves as the loop (sandboxed answers, trusted scoring)."""
    from rich.console import Console

    from benchmarks.config import load_eval_setup
    from benchmarks.tracking import ui_command
    from research.evaluation.fixed import evaluate_config
    from research.evaluation.sweep import expand_sweep
    from research.failures import format_error_line

    if len(expand_sweep(args.overrides)) > 1 or _executor_of(args.overrides) != "local":
        return cmd_sweep(args)
    setup = load_eval_setup(args.overrides)
    console = Console(stderr=False)
    out = evaluate_config(setup, args.overrides, progress=not args.no_progress)
    if not out.ok:
        f = out.failure
        tail = (out.sandbox.stderr.strip().splitlines()[-15:] if out.sandbox and out.sandbox.stderr else [])
        for line in tail:
            print(line, file=sys.stderr)
        print(f"error: evaluation failed ({f.cls.value}): {f.message}", file=sys.stderr)
        print(format_error_line("evaluation", f.message), file=sys.stderr)
        if out.eval_result is not None and f.message.startswith("judge:"):  # scored; the LLM judge failed after
            console.print(out.eval_result.table)
            print(f"J not measured: the same command with run_id={out.eval_result.run_id} resumes the judging "
                  "(verdicts already given are not asked again)", file=sys.stderr)
        return 2
    res = out.eval_result
    console.print(res.table)
    console.print(f"run folder: {res.run_dir}")
    if out.sandbox is not None:
        console.print(f"answers from {out.sandbox.summary()}", markup=False, style="dim")
    if res.mlflow_run_id:
        console.print(f"MLflow run {res.mlflow_run_id}; open the UI with: {ui_command()}")
    return 0


def _executor_of(overrides: list[str]) -> str:
    from benchmarks.config import load_eval_setup

    return str((load_eval_setup(overrides).raw.get("research") or {}).get("executor", "local"))


def cmd_sweep(args: argparse.Namespace) -> int:
    """Every combination of the sweep on the executor; one comparison table (research.sweep)."""
    from rich.console import Console

    from benchmarks.tracking import ui_command
    from research.evaluation.sweep import expand_sweep, rich_table, run_sweep, swept_keys

    console = Console()
    n = len(expand_sweep(args.overrides))
    console.print(f"[bold]{n} config(s)[/] on the executor", highlight=False)

    def done(run: Any) -> None:
        out = run.outcome
        where = f" on node {str(out.placement.get('executor_node', '?'))[:12]}" if out and out.placement else ""
        took = f" in {out.placement['untrusted_s']:.1f} s" if out and out.placement.get("untrusted_s") else ""
        status = f"{out.objective_value:.4f}" if out and out.ok else f"failed ({out.failure.cls.value}: {out.failure.message})"
        console.print(f"{' '.join(run.overrides)}: {status}{where}{took}", markup=False, style="dim")

    frame, folder = run_sweep(args.overrides, sweep_id=getattr(args, "sweep_id", None), on_done=done)
    objective = ", ".join(sorted({str(o) for o in frame["objective"] if o}))
    shown = frame.drop(columns=["objective", "run_id"]).rename(columns=lambda c: c.replace("recall_at_", "R@"))
    # at the console's width: transposed (configs A, B, ... and a legend) when the wide table would cut values
    console.print(rich_table(shown, title=f"sweep {folder.name}: {objective}", width=console.width,
                             keys=swept_keys(args.overrides)))
    console.print(f"comparison: {folder / 'comparison.csv'}")
    if frame["status"].ne("ok").any():
        console.print(f"{int(frame['status'].ne('ok').sum())} config(s) failed; see the status column")
    console.print(f"MLflow: {ui_command()}", style="dim")
    return 0 if frame["status"].eq("ok").all() else 2


def cmd_run(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    return run_loop(args, extra)[0]


def run_loop(args: argparse.Namespace, extra: list[str] | None = None) -> tuple[int, str]:
    """``memsys run`` (and the quickstart): the exit code and the run's id."""
    from rich.console import Console

    from research.config import load_run_setup
    from research.loop.research_loop import ResearchLoop
    from research.report.terminal import EventPrinter

    console = Console()
    printer = EventPrinter(console)
    if args.resume:
        loop = ResearchLoop.from_run(args.resume, [*(extra or []), *args.overrides], on_event=printer)
    else:
        setup = load_run_setup([*(extra or []), *args.overrides])
        run_id = setup.eval.options.run_id or f"run-{datetime.now():%Y%m%d-%H%M%S}"
        loop = ResearchLoop(setup, run_id, on_event=printer)
    console.print(f"[bold]optimization run {loop.run_id}[/] -> {loop.run_dir}")
    try:
        state = loop.run()
    finally:
        printer.close()
    print_summary(console, loop)
    console.print(f"stopped: {state.stop_reason}")
    print_verdict(console, state.confirmation)
    return 0, loop.run_id


def print_verdict(console: Any, confirmation: dict[str, Any] | None) -> None:
    """The held-out verdict as the run's last line: a dev gain that test does not confirm is said plainly."""
    from research.loop.confirm import verdict_of

    verdict = verdict_of(confirmation)
    if verdict:
        style = "bold red" if verdict.get("confirmed") is False else "bold"
        console.print(verdict["line"], style=style, highlight=False, soft_wrap=True)


def cmd_confirm(args: argparse.Namespace) -> int:
    """Re-run the held-out confirmation of a finished run (baseline and best on the test split)."""
    from contextlib import ExitStack

    from rich.console import Console

    from research.loop.confirm import confirm, describe, reader_check
    from research.loop.guarantees import check_sandbox
    from research.loop.research_loop import ResearchLoop

    console = Console()
    loop = ResearchLoop.from_run(args.run_id)
    loop.state = loop.load_state()
    if getattr(args, "reader", False):
        ev = loop.setup.eval.options
        if ev.reader != "llm":  # a reader-free run: its evaluations now answer, scored by the reader objective
            ev.reader, ev.objective = "llm", "auto"
    check_sandbox(loop.evals.sandbox(), allow_weak=loop.setup.research.sandbox.allow_weak)
    with ExitStack() as stack:
        loop.llms.open(stack)
        if getattr(args, "reader", False):
            console.print(reader_check(loop.run_context(), args.sample)["line"], style="bold")
            return 0
        record = confirm(loop.run_context())
    console.print(describe(record))
    return 0


def print_summary(console: Any, loop: Any) -> None:
    from benchmarks.tracking import ui_command
    from research.loop.confirm import verdict_of
    from research.report.terminal import print_lines, summary_lines

    st = loop.state
    print_lines(console, summary_lines(console, loop.records, run_id=loop.run_id, run_dir=loop.run_dir,
                                       objective=loop.setup.eval.objective, best_value=st.best_value,
                                       best_commit=st.best_commit, elapsed_s=st.elapsed_s, ui=ui_command(),
                                       verdict=verdict_of(st.confirmation).get("line", "")))


def cmd_quickstart(args: argparse.Namespace) -> int:
    code, run_id = run_loop(argparse.Namespace(resume=None, overrides=args.overrides), extra=QUICKSTART)
    # the reader's answers for baseline vs best do not fit the quickstart's 15 minutes on 2 cores (12 held-out
    # questions each, about 50 s with omni's prompts: docs/results.md "Reader speed"): the one command that gives them
    print(f"end to end with the reader (baseline vs best on 12 held-out questions, paired): memsys confirm {run_id} --reader")
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from research.replay import replay_run

    console = Console()
    out = replay_run(args.run_id, args.overrides, only=args.only, console=console)
    console.print(f"replay written to {out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.paths import runs_dir
    from research.report.build import main_report

    path = main_report(args.run_ids, runs_dir(), csv=args.csv)
    print(f"report: {path}")
    if args.csv:
        print(f"CSV tables in {path.parent}")
    return 0
