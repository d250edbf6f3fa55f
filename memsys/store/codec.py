"""MAU <-> JSON row encoding for the hot tier. Pure functions, no I/O."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from memsys.records import MAU, Link, LinkKind, Modality, Status, TimeMention

# what json.dumps(obj, ensure_ascii=False, sort_keys=True) builds on every call, built once
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def mau_to_json(m: MAU) -> str:
    obj: dict[str, Any] = {
        "id": m.id,
        "summary": m.summary,
        "modality": m.modality.value,
        "timestamp": m.timestamp.isoformat() if m.timestamp else None,
        "pointer": m.pointer,
        "links": [[link.kind.value, link.target] for link in m.links],
        "session_id": m.session_id,
        "source_id": m.source_id,
        "speaker": m.speaker,
        "details": m.details,
        "status": m.status.value,
        "persons": m.persons,
        "entities": m.entities,
        "keywords": m.keywords,
        "location": m.location,
        "topic": m.topic,
        "time_mentions": [
            [t.text, t.start.isoformat(), t.end.isoformat(), t.granularity] for t in m.time_mentions
        ],
        "time_span": list(m.time_span) if m.time_span else None,
    }
    return _ENCODER.encode(obj)


def mau_from_json(text: str) -> MAU:
    o = json.loads(text)
    return MAU(
        id=o["id"],
        summary=o["summary"],
        modality=Modality(o["modality"]),
        timestamp=datetime.fromisoformat(o["timestamp"]) if o.get("timestamp") else None,
        pointer=o.get("pointer"),
        links=[Link(LinkKind(k), t) for k, t in o.get("links", [])],
        session_id=o.get("session_id"),
        source_id=o.get("source_id"),
        speaker=o.get("speaker"),
        details=o.get("details") or {},
        status=Status(o.get("status", "active")),
        persons=list(o.get("persons") or []),
        entities=list(o.get("entities") or []),
        keywords=list(o.get("keywords") or []),
        location=o.get("location"),
        topic=o.get("topic"),
        time_mentions=[
            TimeMention(t, datetime.fromisoformat(s), datetime.fromisoformat(e), g)
            for t, s, e, g in o.get("time_mentions", [])
        ],
        time_span=tuple(o["time_span"]) if o.get("time_span") else None,
    )
