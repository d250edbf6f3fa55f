"""Applying a proposal to a worktree and committing a healing step: the two writes a step makes to git.

Why apart from the loop: an experiment and its repairs need exactly these two, with the run's preset and
the mutable surface; they need nothing else of the loop.
"""

from __future__ import annotations

from typing import Any

from harness.surface import MUTABLE_SURFACE
from research.errors import EditApplyError, ForbiddenEditError
from research.failures import FailureClass, _failure
from research.journal.trajectory import ExperimentRecord
from research.levers.presets import check_presets
from research.loop.commits import CommitView
from research.proposers.base import Proposal
from research.workspace.edits import apply_config_overrides, apply_edits
from research.workspace.repo import Workspace, Worktree


def apply_proposal(wt: Worktree, preset: str, prop: Proposal) -> tuple[list[str], Exception | None]:
    """The proposal's overrides and edits in ``wt`` (the files changed), or the error that stopped them."""
    try:
        changed = apply_config_overrides(wt.path, preset, prop.config_overrides, MUTABLE_SURFACE)
        changed += apply_edits(wt.path, prop.edits, MUTABLE_SURFACE)
        check_presets(wt.path, changed)
        return changed, None
    except (EditApplyError, ForbiddenEditError) as exc:
        return [], exc


def commit_repair(ws: Workspace, commits: CommitView, wt: Worktree, rec: ExperimentRecord, entry: dict[str, Any],
                  message: str) -> bool:
    """Commit a healing step; a diff that leaves the surface is undone and ends the experiment."""
    try:
        rec.commit = ws.commit(wt, message)
    except ForbiddenEditError as exc:
        entry["result"] = f"refused: {exc}"
        rec.failure = _failure(FailureClass.FORBIDDEN_EDIT, str(exc), code_changed=True).to_dict() | {"stage": "commit"}
        return False
    rec.diff, rec.diff_stats = ws.diff(rec.parent_commit, rec.commit)
    rec.effective_key = commits.effective_key_at(rec.commit)  # what is evaluated now (repeat detection)
    return True
