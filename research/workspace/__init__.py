"""The git side of a run: the workspace and its worktrees, what a commit may hold, edits.

Owns: branches, worktrees and refs of one run; the mutable-surface check of a commit; SEARCH/REPLACE
edits and config overrides applied to a worktree; stale worktrees left by a killed run.
May import: ``research.errors``, ``research.journal`` (edit records), ``harness``.
Called by: ``research.loop``.
"""
