"""Read dialogue turns from files users hand to ``memsys ingest``.

Two shapes: a LoCoMo-format JSON (a list of samples, each with a ``conversation``
holding ``session_N`` turn lists and ``session_N_date_time``) and a JSONL with one
turn per line. The benchmark loaders (benchmarks/datasets) validate datasets for
scoring; this reader only turns a file into ``Turn`` records for a store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

from memsys.errors import DatasetError, InputError
from memsys.records import Turn
from memsys.temporal import parse_datetime

_SESSION_RE = re.compile(r"^session_(\d+)$")


def read_locomo_turns(path: Path, conversation: str | None = None) -> dict[str, list[Turn]]:
    """Turns per LoCoMo sample id (optionally only one sample)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read LoCoMo JSON: {str(exc).splitlines()[0]}") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: not LoCoMo-shaped (top level is {type(data).__name__}, expected a list of samples)")
    out: dict[str, list[Turn]] = {}
    for n, sample in enumerate(data):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise DatasetError(f"{path}: sample {n} has no 'conversation' object (not LoCoMo-shaped)")
        sid = str(sample.get("sample_id", f"sample-{n}"))
        if conversation and sid != conversation:
            continue
        conv = sample["conversation"]
        sessions = sorted((int(m[1]), k) for k in conv if (m := _SESSION_RE.match(k)))
        turns: list[Turn] = []
        for idx, key in sessions:
            date_text = conv.get(f"{key}_date_time")
            try:
                ts = parse_datetime(date_text) if date_text else None
            except InputError as exc:
                raise DatasetError(f"{path}: sample {sid} {key}_date_time: {exc}") from exc
            if not isinstance(conv[key], list):
                raise DatasetError(f"{path}: sample {sid} {key} is not a list of turns")
            for t_n, t in enumerate(conv[key]):
                if not isinstance(t, dict) or "text" not in t or "speaker" not in t:
                    raise DatasetError(f"{path}: sample {sid} {key} turn {t_n}: missing 'speaker' or 'text'")
                tid = str(t.get("dia_id") or f"{key}:{t_n}")
                turns.append(Turn(f"{sid}/{tid}" if conversation is None else tid, str(t["speaker"]),
                                  str(t["text"]), ts, f"{sid}/{key}", t.get("blip_caption")))
        out[sid] = turns
    if conversation and not out:
        raise DatasetError(f"{path}: no sample with sample_id {conversation!r}")
    return out


def read_jsonl_turns(path: Path) -> Iterator[Turn]:
    """One JSON object per line: {id, speaker, text, timestamp?, session_id?, image_caption?, user?,
    conversation?}."""
    with open(path, encoding="utf-8", errors="strict") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{n}: not JSON ({exc.msg})") from exc
            if not isinstance(o, dict) or "text" not in o:
                raise DatasetError(f"{path}:{n}: expected an object with 'text'")
            try:
                ts = parse_datetime(o["timestamp"]) if o.get("timestamp") else None
            except InputError as exc:
                raise DatasetError(f"{path}:{n}: {exc}") from exc
            scope = {k: str(o[k]) for k in ("user", "conversation") if o.get(k) is not None}
            yield Turn(str(o.get("id") or f"line{n}"), str(o.get("speaker") or "user"), o["text"], ts,
                       o.get("session_id"), o.get("image_caption"), **scope)
