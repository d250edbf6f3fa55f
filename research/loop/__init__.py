"""The research loop: its steps, decisions, stop rules, state, run folder and self-healing.

Owns: ``ResearchLoop`` and what one experiment goes through (propose, commit, screen, evaluate, decide,
confirm), the decision and stop rules (pure), the run folder and the state rebuilt from the journal.
May import: every other ``research`` sub-package below it (proposers, levers, evaluation, execution,
workspace, journal) and the top-level ``research.config``/``errors``/``failures``.
Called by: ``research.commands`` (``memsys run``) and ``research.replay``.
"""
