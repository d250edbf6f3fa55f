"""The ``memsys`` program: one entry point, subcommands owned by their packages.

memsys/ owns ingest/search/ask; research/ owns eval/run/confirm/replay/report (the trusted
evaluation service lives there: an evaluation runs the evaluated code in a sandbox).
Heavy libraries are imported inside the commands, so ``memsys --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memsys",
        epilog="Any KEY=VALUE word is a config override, e.g. memory=naive memory.retrieval.top_k=10 llm=openai.",
        description="Autoresearch harness for agent memory (Omni-SimpleMem). Config overrides are Hydra-style key=value.",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    from memsys import cli as memsys_cli
    from research import commands as research_commands

    memsys_cli.add_parsers(sub)
    research_commands.add_parsers(sub)
    return parser


_OVERRIDE_RE = re.compile(r"^[+~]{0,2}[A-Za-z_][\w.\-]*=")


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra ``key=value`` overrides (anywhere on the line) from argparse words."""
    words, overrides = [], []
    for a in argv:
        (overrides if _OVERRIDE_RE.match(a) else words).append(a)
    return words, overrides


def main(argv: Sequence[str] | None = None) -> int:
    words, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(words)
    args.overrides = overrides
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from memsys.errors import MemsysError

    try:
        return int(args.func(args) or 0)
    except MemsysError as exc:
        # one line, with the kind the healer classifies on
        print(f"error: {exc}", file=sys.stderr)
        print(f"MEMSYS_ERROR kind={exc.kind} message={exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
