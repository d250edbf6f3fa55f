"""The trusted leakage screen of a committed candidate, run before anything is evaluated.

Why here, on the trusted side: a researcher that carries dev answers in its own code (a table from
questions to evidence ids or gold answers) scores anything on dev, and no evaluation can tell it from a
real gain (docs/design.md section 6). The screen reads what the commit adds under the mutable surface
from git (never from the worktree the candidate could have written) and matches it against the
benchmark's dev and test questions (benchmarks/leakage). A hit refuses the candidate as ``leakage``,
with the matched snippets in its lesson.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.leakage import added_files_from_git, load_index, screen_diff
from harness.surface import MUTABLE_SURFACE


def screen_commit(repo: Path, parent: str, commit: str, benchmark: str) -> dict[str, Any]:
    """The screen's verdict on ``parent..commit`` as the journal keeps it: refused, lesson, hits, seconds.

    The index (about a second to build) is cached per process and data version by ``load_index``; a
    diff then takes milliseconds (docs/results.md, "Trusted evaluation")."""
    t = time.perf_counter()
    index = load_index((benchmark,))
    report = screen_diff(added_files_from_git(repo, parent, commit, surface=MUTABLE_SURFACE), index)
    return report.to_dict() | {"seconds": round(time.perf_counter() - t, 4)}
