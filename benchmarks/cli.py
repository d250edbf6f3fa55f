"""``memsys eval``: fixed-config benchmark evaluation."""

from __future__ import annotations

import argparse
import sys


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="evaluate one config on one benchmark split",
        description="e.g. memsys eval benchmark=locomo split=dev memory=omni llm=local workers=2",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--result-file", help="also write a machine-readable result JSON here (used by the research loop)")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from rich.console import Console

    from benchmarks.config import load_eval_setup
    from benchmarks.runner import run_eval
    from benchmarks.tracking import ui_command

    setup = load_eval_setup(args.overrides)
    console = Console(stderr=False)
    if setup.eval.reader == "llm":
        from memsys.llm.client import open_llm

        ctx = open_llm(setup.llm)
    else:
        ctx = nullcontext(None)
    with ctx as llm:
        result = run_eval(setup, llm=llm, progress=not args.no_progress)
    console.print(result.table)
    console.print(f"run folder: {result.run_dir}")
    if result.mlflow_run_id:
        console.print(f"MLflow run {result.mlflow_run_id}; open the UI with: {ui_command()}")
    if args.result_file:
        write_result_file(args.result_file, result)
    return 0


def write_result_file(path: str, result) -> None:
    """The contract between an evaluation subprocess and the research loop."""
    from pathlib import Path

    from memsys.store.atomic import atomic_write_json

    atomic_write_json(Path(path), {
        "schema": "memsys-eval-result/1",
        "run_id": result.run_id,
        "run_dir": str(result.run_dir),
        "objective": result.objective,
        "objective_value": result.objective_value,
        "metrics": result.metrics,
        "n_questions": result.n_questions,
        "n_errors": result.n_errors,
        "wall_s": result.wall_s,
        "mlflow_run_id": result.mlflow_run_id,
    })


if __name__ == "__main__":  # python -m benchmarks.cli eval ... (the sandbox entry point)
    from research.cli import main

    sys.exit(main(sys.argv[1:]))
