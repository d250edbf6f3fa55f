"""Built memory stores for benchmark conversations, cached by content hash.

A store is reused when the dataset file, the conversation, the ingestion-relevant
config and the ingestion code are all unchanged. The code part matters for the
research loop: an experiment that edits ``memsys/ingest`` must rebuild, one that
edits only retrieval must not pay for ingestion again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import memsys
from benchmarks.datasets.schema import Benchmark, Conversation, DatasetTurn
from memsys.config import MemoryConfig, to_container
from memsys.memory import Memory
from memsys.paths import cache_dir
from memsys.records import Turn

log = logging.getLogger(__name__)

# memsys modules whose code decides what a built store contains
_INGEST_CODE = ("ingest", "store", "embed.py", "records.py", "temporal.py", "graph", "media", "index")


def ingestion_code_hash() -> str:
    root = Path(memsys.__file__).parent
    h = hashlib.sha256()
    for name in _INGEST_CODE:
        p = root / name
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and f.suffix in (".py", ".txt", ".json"):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def store_key(bench: Benchmark, conv: Conversation, cfg: MemoryConfig, llm_model: str | None) -> str:
    ingest_cfg = {
        "embedder": to_container(cfg.embedder),
        "ingest": to_container(cfg.ingest),
        "sparse_fields": cfg.retrieval.sparse_fields,
        "graph": to_container(cfg.graph) if cfg.graph.enabled else None,
        "llm": llm_model if (cfg.ingest.compression.enabled or (cfg.graph.enabled and cfg.graph.extractor == "llm")) else None,
    }
    images = sorted(t.image_path for s in conv.sessions for t in s.turns if t.image_path)
    payload = json.dumps(
        {"files": bench.files, "conversation": conv.id, "cfg": ingest_cfg, "code": ingestion_code_hash(),
         "images": images},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def to_turn(t: DatasetTurn) -> Turn:
    text = t.text if t.response is None else f"{t.text}\n{t.response_speaker or 'assistant'}: {t.response}"
    caption = t.image_caption
    if caption and t.image_id:  # text systems get the image id with its caption (Mem-Gallery VS answers are ids)
        caption = f"{t.image_id} {caption}"
    return Turn(id=t.id, speaker=t.speaker, text=text,
                timestamp=t.timestamp, session_id=t.session_id, image_caption=caption,
                image_path=t.image_path)


def conversation_turns(conv: Conversation) -> list[Turn]:
    return [to_turn(t) for s in conv.sessions for t in s.turns]


def build_or_open_store(bench: Benchmark, conv: Conversation, cfg: MemoryConfig, *,
                        llm: Any = None, root: Path | None = None) -> tuple[Memory, bool]:
    """A read-only Memory over the conversation's store; builds it once (atomically).

    Returns (memory, built_now).
    """
    root = root or cache_dir() / "stores"
    key = store_key(bench, conv, cfg, getattr(getattr(llm, "cfg", None), "model", None))
    final = root / f"{bench.name}-{conv.id}-{key}"
    built = False
    if not (final / "manifest.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            mem = Memory.create(tmp / "store", cfg)
            mem.add(conversation_turns(conv), llm=llm)
            _ingest_images(mem, conv)
            if cfg.graph.enabled:
                _build_graph(mem, cfg, llm)
            mem.save()
            mem.close()
            try:
                os.replace(tmp / "store", final)  # atomic publish; a concurrent builder may win
                built = True
            except OSError:
                if not (final / "manifest.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Memory.open(final, cfg, read_only=True), built  # loads the saved graph when enabled


def image_mode(bench: Benchmark) -> str:
    """"images" when the benchmark's image files are on disk (fetched), else "captions"."""
    has = any(t.image_path for c in bench.conversations for s in c.sessions for t in s.turns)
    return "images" if has else "captions"


def _ingest_images(mem: Memory, conv: Conversation) -> None:
    """Image rounds whose file exists become image MAUs (raw image in the cold tier); the
    caption stays on the text turn either way, so caption mode loses nothing."""
    rounds = [t for s in conv.sessions for t in s.turns if t.image_path]
    if not rounds:
        return
    from memsys.media import MediaReport, ingest_image

    report = MediaReport()
    for t in rounds:
        ingest_image(mem, t.image_path, t.image_caption, timestamp=t.timestamp, session_id=t.session_id,
                     id=f"{t.id}#image", image_id=t.image_id, speaker=t.speaker, source_id=t.id, report=report)
    for line in report.lines():
        if "error" in line.lower():
            log.warning("%s: %s", conv.id, line)


def _build_graph(mem: Memory, cfg: MemoryConfig, llm: Any) -> None:
    from memsys.graph.build import build_graph

    build_graph(mem, extractor=cfg.graph.extractor, llm=llm)

