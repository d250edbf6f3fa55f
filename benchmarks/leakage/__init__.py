"""A trusted leakage screen, run on a candidate's diff before it is evaluated.

Why: a hostile researcher can carry dev answers in its own code (a table from dev questions to their
evidence turn ids or gold answers); such a change scores anything on dev and no evaluation can tell.
Train/test leakage is the second route of reward hacking beside tampering (RewardHackingAgents,
arXiv 2603.11337). The screen looks at what the change adds under the mutable surface for
benchmark material and refuses it with a lesson.

Use::

    index = load_index()                                   # once per run (cached per data version)
    added = added_files_from_git(worktree, parent, candidate)  # the only I/O
    report = screen_diff(added, index)                     # pure, milliseconds
    if report.refused: ...report.lesson...
"""

from __future__ import annotations

from benchmarks.leakage.added import BINARY, SURFACE, AddedFile, added_files_from_git, added_text_from_git
from benchmarks.leakage.config import LeakageConfig
from benchmarks.leakage.index import LeakageIndex, load_index
from benchmarks.leakage.screen import LeakageReport, screen_diff
from benchmarks.leakage.signals import KINDS, LeakageHit

__all__ = [
    "BINARY",
    "KINDS",
    "SURFACE",
    "AddedFile",
    "LeakageConfig",
    "LeakageHit",
    "LeakageIndex",
    "LeakageReport",
    "added_files_from_git",
    "added_text_from_git",
    "load_index",
    "screen_diff",
]
