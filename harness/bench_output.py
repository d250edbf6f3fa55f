"""Where a benchmark's result goes, for the benches of benchmarks/perf and research/perf alike.

A result is a JSON file written atomically (sorted keys, indented, one trailing newline), with, if the
bench has one, its markdown table beside it; its ``command`` field is the command line that made it
(a figure without it cannot be re-measured); ``load_average()`` and ``utc_now()`` are the machine's
load and the time a result records.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from harness.atomic import atomic_write_json, atomic_write_text


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """``python -m <module> <args>``: ``argv``, or this process's arguments when it is None."""
    return " ".join([f"python -m {module}", *(sys.argv[1:] if argv is None else argv)])


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, to two decimals (the machine may be shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json(out: Path, result: dict[str, Any]) -> None:
    """``result`` to ``out`` (its folder made if missing), atomically: a crash leaves the old file or the new one."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)


def write_result(out: Path, result: dict[str, Any], table: str) -> None:
    """``out`` (JSON) and ``out`` with ``.md`` (the table), then the table and where it went on stdout."""
    out = Path(out)
    write_json(out, result)
    atomic_write_text(out.with_suffix(".md"), table + "\n")
    print(table)
    print(f"wrote {out}")
