"""The leakage screen: a candidate's added text against the benchmark index -> refused or not, and why.

Run before evaluation, by the trusted side: a change that carries dev (or test) questions, answers,
evidence ids or question ids can score anything on dev without being any better a memory, and no
evaluation can tell. The lesson is written for the researcher: what was found, where, and the rule.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

from benchmarks.leakage.added import AddedFile
from benchmarks.leakage.config import LeakageConfig
from benchmarks.leakage.index import LeakageIndex
from benchmarks.leakage.signals import (
    KINDS,
    LeakageHit,
    data_blob_hits,
    data_file_hits,
    data_table_hits,
    evidence_id_hits,
    gold_answer_hits,
    levels,
    question_id_hits,
    question_text_hits,
    scan_file,
)

RULE = ("the screen refuses code that carries benchmark data (questions, gold answers, evidence turn ids, question ids, "
        "data tables, blobs or files): make the change general, derived from the conversation, not the benchmark")
KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True, slots=True)
class LeakageReport:
    """The screen's verdict on one diff: every hit, whether it is refused, and the lesson for the researcher."""

    hits: tuple[LeakageHit, ...]
    refused: bool
    lesson: str  # "" when nothing was found
    files: int = 0  # files screened

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, for the trajectory and the run's records."""
        return {"refused": self.refused, "lesson": self.lesson, "files": self.files, "hits": [asdict(h) for h in self.hits]}


def as_added(files: Mapping[str, str | AddedFile]) -> list[AddedFile]:
    """Accept plain text per path (a new file, or added lines numbered from 1) or AddedFile records."""
    return [f if isinstance(f, AddedFile) else AddedFile.from_text(p, f) for p, f in sorted(files.items())]


def describe(hit: LeakageHit) -> str:
    """'memsys/<file>.py:12 holds 40 evidence ids ('D1:3', 'D4:7', ...)': one hit in the lesson's words."""
    shown = ", ".join(repr(e) for e in hit.examples)
    more = ", ..." if hit.count > len(hit.examples) else ""
    values = f" ({shown}{more})" if shown else ""
    where = f"{hit.file}:{hit.line}" if hit.line else hit.file
    context = f" {hit.context}" if hit.context else ""
    return f"{where} {hit.what}{values}{context}"


def lesson(hits: tuple[LeakageHit, ...], cfg: LeakageConfig) -> str:
    """One short paragraph naming the first hits and the rule; "" when there are none."""
    if not hits:
        return ""
    named = "; ".join(describe(h) for h in hits[: cfg.lesson_hits])
    rest = f" (and {len(hits) - cfg.lesson_hits} more)" if len(hits) > cfg.lesson_hits else ""
    return f"refused as leakage: {named}{rest}; {RULE}."


def screen_diff(added_files: Mapping[str, str | AddedFile], index: LeakageIndex,
                cfg: LeakageConfig | None = None) -> LeakageReport:
    """Screen what a change adds (path -> added text or AddedFile) against the benchmark index. Pure.

    Any hit refuses the change: each signal's threshold already allows what legitimate code holds
    (tuned on the repository's history), so a hit is data, not an accident.
    """
    cfg = cfg or LeakageConfig()
    scans = [scan_file(f, cfg) for f in as_added(added_files)]
    hits = (data_file_hits(scans, cfg) + question_text_hits(scans, index, cfg) + gold_answer_hits(scans, index, cfg)
            + evidence_id_hits(scans, index, cfg) + question_id_hits(scans, index, cfg) + data_table_hits(scans, cfg)
            + data_blob_hits(scans, cfg))
    ordered = tuple(sorted(hits, key=lambda h: (KIND_ORDER[h.kind], h.file, h.line)))
    return LeakageReport(ordered, bool(ordered), lesson(ordered, cfg), len(scans))


def signal_levels(added_files: Mapping[str, str | AddedFile], index: LeakageIndex,
                  cfg: LeakageConfig | None = None) -> dict[str, int]:
    """Each signal's raw measure on a diff, for tuning the thresholds (see ``signals.levels``). Pure."""
    cfg = cfg or LeakageConfig()
    return levels([scan_file(f, cfg) for f in as_added(added_files)], index, cfg)
