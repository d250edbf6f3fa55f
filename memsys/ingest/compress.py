"""SimpleMem write-time compression: windows of turns -> lossless restatements.

Relative dates are resolved in code before and after the LLM call (small models
get them wrong): each turn is shown with its resolved mentions, and any relative
expression left in a statement is rewritten to the absolute date. The raw turns
stay in the cold tier and in ``details["text"]``, so a config can hand the reader
summaries, full text or both.
"""

from __future__ import annotations

import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from memsys.config import CompressionConfig
from memsys.errors import LLMError
from memsys.records import MAU, Link, LinkKind, Modality, Turn
from memsys.store.cold import ColdStore
from memsys.temporal import describe_mention, format_date, resolve_relative_times

log = logging.getLogger(__name__)
PROMPT = Template((Path(__file__).parent / "prompts" / "compress.txt").read_text(encoding="utf-8"))

RESTATEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "statement": {"type": "string"},
                    "persons": {"type": "array", "items": {"type": "string"}},
                    "entities": {"type": "array", "items": {"type": "string"}},
                    "keywords": {"type": "array", "items": {"type": "string"}},
                    "topic": {"type": "string"},
                    "location": {"type": "string"},
                    "source_turns": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["statement", "persons", "keywords", "source_turns"],
            },
        }
    },
    "required": ["memories"],
}


@dataclass
class CompressionReport:
    windows: int = 0
    failed_windows: int = 0
    statements: int = 0
    consolidated: int = 0
    resumed_windows: int = 0  # written by an earlier, stopped ingest of the same input: skipped
    errors: list[str] | None = None


def windows(turns: Sequence[Turn], size: int, overlap: int) -> list[list[Turn]]:
    """Sliding windows within each session (a window never spans two sessions)."""
    step = max(size - overlap, 1)
    out: list[list[Turn]] = []
    by_session: dict[str | None, list[Turn]] = {}
    for t in turns:
        by_session.setdefault(t.session_id, []).append(t)
    for sess in by_session.values():
        for start in range(0, len(sess), step):
            out.append(list(sess[start : start + size]))
            if start + size >= len(sess):
                break
    return out


def render_window(window: Sequence[Turn]) -> str:
    lines = []
    for t in window:
        extra = ""
        if t.timestamp:
            mentions = resolve_relative_times(t.text, t.timestamp)
            if mentions:
                extra = " [" + "; ".join(describe_mention(m) for m in mentions) + "]"
        cap = f" [shares an image: {t.image_caption}]" if t.image_caption else ""
        lines.append(f"({t.id}) {t.speaker}: {t.text}{cap}{extra}")
    return "\n".join(lines)


def absolutize(statement: str, anchor) -> str:
    """Replace relative time words left in a statement by the resolved date."""
    for m in sorted(resolve_relative_times(statement, anchor), key=lambda m: -len(m.text)):
        statement = statement.replace(m.text, describe_mention(m).split(" = ", 1)[1], 1)
    return statement


def compress_window(llm: Any, window: Sequence[Turn], cold: ColdStore) -> list[MAU]:
    anchor = next((t.timestamp for t in window if t.timestamp), None)
    prompt = PROMPT.substitute(session_date=format_date(anchor) if anchor else "unknown date",
                               turns=render_window(window))
    data = llm.chat_json([{"role": "user", "content": prompt}], RESTATEMENT_SCHEMA)
    ids = {t.id: t for t in window}
    raw = {"turns": [{"id": t.id, "speaker": t.speaker, "text": t.text, "image_caption": t.image_caption}
                     for t in window]}
    pointer = cold.put_text(json.dumps(raw, ensure_ascii=False, sort_keys=True))
    out = []
    for item in data.get("memories", []):
        stmt = str(item.get("statement", "")).strip()
        if not stmt:
            continue
        if anchor:
            stmt = absolutize(stmt, anchor)
        src = [s for s in item.get("source_turns", []) if s in ids] or [t.id for t in window]
        full = " ".join(f"{ids[s].speaker}: {ids[s].text}" for s in src)
        digest = hashlib.sha1(f"{stmt}\x00{','.join(src)}".encode()).hexdigest()[:16]
        out.append(MAU(
            id=f"c:{digest}", summary=stmt, modality=Modality.TEXT,
            timestamp=ids[src[0]].timestamp or anchor, pointer=pointer,
            session_id=window[0].session_id, source_id=src[0], speaker=None,
            details={"text": full, "source_ids": src, "compressed": True},
            persons=[str(p) for p in item.get("persons", [])][:10],
            entities=[str(e) for e in item.get("entities", [])][:10],
            keywords=[str(k) for k in item.get("keywords", [])][:8],
            topic=(item.get("topic") or None), location=(item.get("location") or None),
            links=[Link(LinkKind.SOURCE, s) for s in src],
        ))
    return out


def window_key(window: Sequence[Turn]) -> str:
    """A window's identity: its turn ids (the same input gives the same windows, resumed or not)."""
    return "w:" + hashlib.sha1("\x00".join(t.id for t in window).encode()).hexdigest()[:16]


def done_windows(maus: Iterable[MAU]) -> set[str]:
    """Windows whose restatements are stored: each window's write marks the MAUs it added or extended."""
    return {k for m in maus for k in m.details.get("windows", ())}


def _absorb(target: MAU, m: MAU) -> None:
    """Consolidate ``m`` into ``target``: union of sources, the restatement kept in details. Idempotent,
    so a window written again after a kill (its absorbers were updated, its new MAUs not) changes nothing twice."""
    for src in m.details["source_ids"]:
        if src not in target.details.setdefault("source_ids", []):
            target.details["source_ids"].append(src)
    if m.summary not in target.details.setdefault("consolidated", []):
        target.details["consolidated"].append(m.summary)


def _mark(m: MAU, key: str) -> None:
    if key not in m.details.setdefault("windows", []):
        m.details["windows"].append(key)


class _Consolidator:
    """Restatements stored so far (earlier ingests and earlier windows of this one), with their vectors."""

    def __init__(self, existing: Sequence[MAU], threshold: float):
        self.maus = [m for m in existing if m.embedding is not None]
        self.vecs = [np.asarray(m.embedding, np.float32) for m in self.maus]
        self.threshold = threshold

    def nearest(self, v: np.ndarray) -> MAU | None:
        if not self.vecs:
            return None
        sims = np.stack(self.vecs) @ v
        j = int(np.argmax(sims))
        return self.maus[j] if sims[j] > self.threshold else None

    def keep(self, m: MAU) -> None:
        self.maus.append(m)
        self.vecs.append(np.asarray(m.embedding, np.float32))


def compress_turns(llm: Any, turns: Sequence[Turn], cfg: CompressionConfig, cold: ColdStore, embed,
                   existing: Sequence[MAU], write: Callable[[list[MAU], list[MAU]], None]) -> CompressionReport:
    """Compress the windows in parallel; consolidate near-duplicates and ``write`` each window in order.

    ``write(new, updated)`` gets one window's new restatements and the stored ones that absorbed a
    near-duplicate; it must store ``updated`` before ``new``. ``existing`` are the stored restatements
    (with embeddings): raw turn MAUs must not be passed, or every faithful restatement of a single turn
    would be "consolidated" away. Windows already written (``done_windows``) are skipped, so an ingest
    killed half-way through compression resumes at the first window it had not written.
    """
    wins = windows(turns, cfg.window_turns, cfg.overlap_turns)
    done = done_windows(existing)
    todo = [w for w in wins if window_key(w) not in done]
    report = CompressionReport(windows=len(wins), resumed_windows=len(wins) - len(todo), errors=[])
    pool_of = _Consolidator(existing, cfg.consolidate_above)

    def run(w):
        try:
            return compress_window(llm, w, cold)
        except LLMError as exc:  # one bad window must not sink the batch
            report.failed_windows += 1
            report.errors.append(f"window {w[0].id}..{w[-1].id}: {exc}")
            log.warning("compression failed for window %s..%s: %s", w[0].id, w[-1].id, exc)
            return None

    with ThreadPoolExecutor(max_workers=max(cfg.workers, 1)) as pool:
        for w, maus in zip(todo, pool.map(run, todo)):  # in window order, as each one is ready
            if maus is None:
                continue  # failed: not marked, so a rerun tries it again
            _write_window(w, maus, embed, pool_of, report, write)
    return report


def _write_window(w: Sequence[Turn], maus: list[MAU], embed, pool_of: _Consolidator, report: CompressionReport,
                  write: Callable[[list[MAU], list[MAU]], None]) -> None:
    """One window's effect on the store. The window counts as written (``done_windows``) once the MAUs
    holding its key are stored: its new restatements, which ``write`` stores after the absorbers, or,
    when everything was absorbed, the absorbers themselves (one write)."""
    key = window_key(w)
    stored = {m.id for m in pool_of.maus}
    seen: set[str] = set()
    maus = [m for m in maus if not (m.id in stored or m.id in seen or seen.add(m.id))]
    report.statements += len(maus)
    vecs = embed([m.summary for m in maus]) if maus else []
    new: dict[str, MAU] = {}
    updated: dict[str, MAU] = {}
    for m, v in zip(maus, vecs):
        target = pool_of.nearest(v)
        if target is not None:
            _absorb(target, m)
            report.consolidated += 1
            if target.id not in new:
                updated[target.id] = target
            continue
        m.embedding = v
        _mark(m, key)
        new[m.id] = m
        pool_of.keep(m)
    if not new:
        for m in updated.values():
            _mark(m, key)
    if new or updated:  # an empty window stores nothing and is cheap to ask again
        write(list(new.values()), list(updated.values()))
