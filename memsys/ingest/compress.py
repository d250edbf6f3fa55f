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
from typing import Any, Sequence

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


def _absorb(target: MAU, m: MAU) -> None:
    """Consolidate ``m`` into ``target``: union of sources, the restatement kept in details."""
    for src in m.details["source_ids"]:
        if src not in target.details.setdefault("source_ids", []):
            target.details["source_ids"].append(src)
    target.details.setdefault("consolidated", []).append(m.summary)


def compress_turns(llm: Any, turns: Sequence[Turn], cfg: CompressionConfig, cold: ColdStore, embed,
                   existing: Sequence[MAU] = ()) -> tuple[list[MAU], list[MAU], CompressionReport]:
    """Compress all windows in parallel, then consolidate near-duplicates at write time.

    Returns (new MAUs, existing MAUs that absorbed a near-duplicate, report). ``existing``
    are earlier restatements (with embeddings); raw turn MAUs must not be passed, or every
    faithful restatement of a single turn would be "consolidated" away.
    """
    wins = windows(turns, cfg.window_turns, cfg.overlap_turns)
    report = CompressionReport(windows=len(wins), errors=[])

    def run(w):
        try:
            return compress_window(llm, w, cold)
        except LLMError as exc:  # one bad window must not sink the batch
            report.failed_windows += 1
            report.errors.append(f"window {w[0].id}..{w[-1].id}: {exc}")
            log.warning("compression failed for window %s..%s: %s", w[0].id, w[-1].id, exc)
            return []

    with ThreadPoolExecutor(max_workers=max(cfg.workers, 1)) as pool:
        results = list(pool.map(run, wins))
    maus = [m for r in results for m in r]
    seen_ids: set[str] = set()
    maus = [m for m in maus if not (m.id in seen_ids or seen_ids.add(m.id))]
    report.statements = len(maus)
    if not maus:
        return [], [], report
    vecs = embed([m.summary for m in maus])
    old = [m for m in existing if m.embedding is not None]
    old_vecs = np.stack([np.asarray(m.embedding, np.float32) for m in old]) if old else None
    kept: list[MAU] = []
    kept_vecs: list[np.ndarray] = []
    updated: dict[str, MAU] = {}
    for m, v in zip(maus, vecs):
        if kept_vecs:
            sims = np.stack(kept_vecs) @ v
            j = int(np.argmax(sims))
            if sims[j] > cfg.consolidate_above:
                _absorb(kept[j], m)
                report.consolidated += 1
                continue
        if old_vecs is not None:
            sims = old_vecs @ v
            j = int(np.argmax(sims))
            if sims[j] > cfg.consolidate_above:
                _absorb(old[j], m)
                updated[old[j].id] = old[j]
                report.consolidated += 1
                continue
        m.embedding = v
        kept.append(m)
        kept_vecs.append(v)
    return kept, list(updated.values()), report
