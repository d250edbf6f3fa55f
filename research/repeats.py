"""Identical conditions: has a proposed change already been tried from the current best commit?

Small models re-propose the same change; evaluating it again only re-measures noise. Pure
functions over the journal, so the loop (which re-asks and skips) and its tests share one
notion of "the same change": the same edits and the same overrides, in any order and spacing.
"""

from __future__ import annotations

from typing import Sequence

from research.proposers.base import Proposal
from research.trajectory import ExperimentRecord


def _signature(overrides: Sequence[str], edits: Sequence[tuple[str, str, str]]) -> tuple:
    return tuple(sorted(o.replace(" ", "") for o in overrides)), tuple(edits)


def tried_from(records: Sequence[ExperimentRecord], best_commit: str | None) -> list[ExperimentRecord]:
    """Experiments started from ``best_commit``, except those that failed on our side (an
    endpoint or sandbox fault says nothing about the change: repeating it is fair)."""
    return [r for r in records if r.index > 0 and r.parent_commit == best_commit
            and (r.config_overrides or r.edits) and not (r.failure or {}).get("is_infrastructure")]


def repeated_experiment(prop: Proposal, records: Sequence[ExperimentRecord], best_commit: str | None) -> str | None:
    """The id of the experiment that applied exactly these changes to ``best_commit``, if any."""
    sig = _signature(prop.config_overrides, [(e.path, e.search, e.replace) for e in prop.edits])
    for r in tried_from(records, best_commit):
        if _signature(r.config_overrides, [(e["path"], e["search"], e["replace"]) for e in r.edits]) == sig:
            return r.experiment_id
    return None


def describe_tried(records: Sequence[ExperimentRecord], best_commit: str | None) -> list[str]:
    """One line per tried change, as the researcher is shown them when it repeats itself."""
    return [("; ".join(r.config_overrides) or "")
            + (f" + {len(r.edits)} code edit(s) ({r.hypothesis[:80]})" if r.edits else "")
            for r in tried_from(records, best_commit)]


def describe_outcome(record: ExperimentRecord, objective: str) -> str:
    if record.objective_value is None:
        return f"decision {record.decision}"
    return f"{objective} {record.objective_value:.4f}, decision {record.decision}"
