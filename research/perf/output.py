"""Where a research benchmark's result goes: its JSON and its markdown table beside it, both written atomically."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from harness.atomic import atomic_write_json, atomic_write_text


def write_result(out: Path, result: dict[str, Any], table: str) -> None:
    """``out`` (JSON) and ``out`` with ``.md`` (the table), then the table and where it went on stdout."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    atomic_write_text(out.with_suffix(".md"), table + "\n")
    print(table)
    print(f"wrote {out}")


def command(module: str, argv: Sequence[str] | None) -> str:
    """The command line that made a result, for its JSON: a figure without it cannot be re-measured."""
    return f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)
