"""Does the study steer TPE off configs that failed on their own account? (issue #50, the reader loop)

Why: session 38's reader run drew confidence abstention again and again; each draw failed at its first
question (the embedded server keeps no log-probabilities) and cost minutes. The study now enters such a
failure as an infeasible trial (research/levers/study.py). This bench replays a finished run's journal: at
the end of every prefix that ends on a failure, it rebuilds the study as a resume would, with and without the
infeasible trials, and counts how many of TPE's next ``--draws`` whole-space draws (the proposer's own call,
seeded per step) set ``--lever`` to one of ``--values``. Nothing is evaluated; a run of any size replays in
seconds.

Usage::

    python -m research.perf.bench_infeasible --run <run-id> [--lever answer.abstain]
        [--values confidence,or_confidence,and_confidence] [--draws 40]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from harness.bench_output import command, utc_now, write_result
from harness.paths import runs_dir


def _needs_logprobs() -> tuple[str, ...]:
    """The ``answer.abstain`` values that read the reader's confidence, as memsys decides it."""
    from memsys.config import AnswerConfig
    from research.levers.catalogue import lever_by_id

    return tuple(v for v in lever_by_id("answer.abstain").choices if AnswerConfig(abstain=v).abstains_by_confidence())


NEEDS_LOGPROBS = _needs_logprobs()


def hits(study: Any, lever: str, values: Sequence[str], draws: int, first_seed: int) -> int:
    """How many of ``draws`` whole-space suggestions, step seeds from ``first_seed`` on, set ``lever`` to one of ``values``."""
    return sum(study.suggest(None, first_seed + i).get(lever) in values for i in range(draws))


def measure(loop: Any, lever: str, values: Sequence[str], draws: int) -> list[dict[str, Any]]:
    """One row per prefix of ``loop``'s journal (a ResearchLoop with its records read) that ends on a failed
    experiment, and one for the whole journal."""
    records = loop.records
    ends = sorted({i + 1 for i, r in enumerate(records) if r.decision == "failed"} | {len(records)})
    rows = []
    for end in ends:
        prefix = records[:end]
        told = loop.rebuild_study(prefix, storage=False)
        blind = loop.rebuild_study(prefix, learn_infeasible=False, storage=False)
        infeasible = sum(t.state.name == "PRUNED" for t in told.study.trials)
        first_seed = 1000 + end  # the same questions of both studies
        rows.append({"records": end, "infeasible_trials": infeasible, "draws": draws,
                     "hits_without": hits(blind, lever, values, draws, first_seed),
                     "hits_with": hits(told, lever, values, draws, first_seed)})
    return rows


def render(result: dict[str, Any]) -> str:
    lines = [f"run {result['run']}: how many of TPE's next {result['draws']} draws set {result['lever']} to",
             f"  {', '.join(result['values'])}",
             "| journal prefix | infeasible trials | without them | with them |", "| ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        lines.append(f"| {r['records']} | {r['infeasible_trials']} | {r['hits_without']}/{r['draws']} | "
                     f"{r['hits_with']}/{r['draws']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a finished or stopped optimization run")
    ap.add_argument("--lever", default="answer.abstain")
    ap.add_argument("--values", default=",".join(NEEDS_LOGPROBS), help="comma-separated values that fail")
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    values = [v for v in args.values.split(",") if v]
    from research.loop.research_loop import ResearchLoop

    loop = ResearchLoop.from_run(args.run)
    loop.load_state()
    result = {"command": command("research.perf.bench_infeasible", argv), "when": utc_now(), "run": args.run,
              "lever": args.lever, "values": values, "draws": args.draws,
              "rows": measure(loop, args.lever, values, args.draws)}
    write_result(args.out or runs_dir() / "bench" / "infeasible.json", result, render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
