"""LoCoMo loader: ``locomo10.json`` (snap-research/locomo) into the typed schema.

File shape (measured on the released file, sha256 79fa87e9...): a list of 10 samples,
each ``{"sample_id", "conversation", "qa", "event_summary", "observation",
"session_summary"}``. ``conversation`` holds ``speaker_a``, ``speaker_b``,
``session_N`` (a list of turns ``{"speaker", "dia_id", "text"}`` plus, for image turns,
``blip_caption`` and usually ``img_url``/``query``) and ``session_N_date_time``
("1:56 pm on 8 May, 2023"; some date keys have no session and are ignored). QA items
are ``{"question", "answer", "evidence", "category"}``; category 5 (adversarial) has
``adversarial_answer`` and usually no ``answer``; a few answers are integers.

Eight evidence annotations in the release are malformed ("D8:6; D9:17", "D:11:26",
"D30:05", "D", ids of turns that do not exist). They are repaired when the intent is
unambiguous and dropped otherwise; every change is listed in ``Benchmark.notes``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from benchmarks.datasets.schema import (
    CATEGORY_NAMES,
    Benchmark,
    Conversation,
    DatasetTurn,
    Question,
    RecordPath,
    Session,
    json_type_name,
    missing_data_error,
    read_json,
    sha256_file,
)
from harness.dates import parse_datetime
from harness.errors import InputError
from harness.paths import data_dir

LOCOMO_SUBDIR = "locomo"
LOCOMO_FILE = "locomo10.json"
LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
ADVERSARIAL = "5"

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")


def default_locomo_path() -> Path:
    return data_dir() / LOCOMO_SUBDIR / LOCOMO_FILE


def load_locomo(path: str | Path | None = None, *, lenient: bool = False) -> Benchmark:
    """Load and validate LoCoMo (default: ``$MEMSYS_DATA_DIR/locomo/locomo10.json``).

    ``lenient`` accepts empty gold answers on non-adversarial questions (they score 0).
    Results are cached in-process by (path, mtime, size, lenient); records are immutable.
    """
    path = Path(path) if path is not None else default_locomo_path()
    if path.is_dir():
        path = path / LOCOMO_FILE
    if not path.is_file():
        raise missing_data_error(path, "LoCoMo data", "locomo")
    st = path.stat()
    return _load_cached(str(path.resolve()), st.st_mtime_ns, st.st_size, lenient)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int, lenient: bool) -> Benchmark:
    return parse_locomo(Path(path), lenient=lenient)


def parse_locomo(path: Path, *, lenient: bool = False) -> Benchmark:
    """Parse without caching; raises a one-line DatasetError naming file and record."""
    raw = read_json(path)
    where = RecordPath(path.name)
    if not isinstance(raw, list):
        raise where.error(f"expected a list of samples, got {json_type_name(raw)}")
    if not raw:
        raise where.error("no samples")
    notes: list[str] = []
    conversations: list[Conversation] = []
    seen: set[str] = set()
    for i, sample in enumerate(raw):
        w = where / f"sample {i}"
        conv_id = w.get(sample, "sample_id", str)
        w = where / f"sample {i} ({conv_id})"
        if conv_id in seen:
            raise w.error(f"duplicate sample_id {conv_id!r}")
        seen.add(conv_id)
        conversations.append(_parse_sample(sample, conv_id, w, lenient, notes))
    sha = sha256_file(path)
    return Benchmark(
        name="locomo",
        conversations=tuple(conversations),
        source_path=str(path),
        sha256=sha,
        files=((path.name, sha),),
        notes=tuple(notes),
    )


def _parse_sample(sample: dict, conv_id: str, w: RecordPath, lenient: bool, notes: list[str]) -> Conversation:
    conv = w.get(sample, "conversation", dict)
    cw = w / "conversation"
    speakers = (str(cw.get(conv, "speaker_a", str)), str(cw.get(conv, "speaker_b", str)))
    numbers = sorted(int(m[1]) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    if not numbers:
        raise cw.error("no session_N keys")
    sessions: list[Session] = []
    turn_ids: set[str] = set()
    for n in numbers:
        sessions.append(_parse_session(conv, n, conv_id, w / f"session_{n}", turn_ids))
    qa = w.get(sample, "qa", list)
    questions = tuple(
        _parse_question(item, j, conv_id, w / f"qa {j}", turn_ids, lenient, notes) for j, item in enumerate(qa)
    )
    return Conversation(id=conv_id, speakers=speakers, sessions=tuple(sessions), questions=questions)


def _parse_session(conv: dict, n: int, conv_id: str, sw: RecordPath, turn_ids: set[str]) -> Session:
    key = f"session_{n}"
    turns_raw = conv[key]
    if not isinstance(turns_raw, list):
        raise sw.error(f"expected a list of turns, got {json_type_name(turns_raw)}")
    date_text = str(sw.get(conv, f"{key}_date_time", str))
    try:
        date = parse_datetime(date_text)
    except InputError as exc:
        raise sw.error(f"bad {key}_date_time: {exc}") from exc
    turns: list[DatasetTurn] = []
    for j, t in enumerate(turns_raw):
        tw = sw / f"turn {j}"
        dia_id = tw.get(t, "dia_id", str)
        tw = sw / f"turn {j} ({dia_id})"
        if dia_id in turn_ids:
            raise tw.error(f"duplicate dia_id {dia_id!r} in conversation {conv_id}")
        turn_ids.add(str(dia_id))
        turns.append(
            DatasetTurn(
                id=str(dia_id),
                session_id=key,
                speaker=str(tw.get(t, "speaker", str)),
                text=str(tw.get(t, "text", str)),
                image_caption=tw.get(t, "blip_caption", str, optional=True),  # type: ignore[arg-type]
                timestamp=date,
            )
        )
    return Session(id=key, conversation_id=conv_id, index=n, date=date, date_text=date_text, turns=tuple(turns))


def _answer_text(value: object) -> str:
    return str(value).strip() if value is not None else ""


def _parse_question(
    item: object, j: int, conv_id: str, qw: RecordPath, turn_ids: set[str], lenient: bool, notes: list[str]
) -> Question:
    text = qw.get(item, "question", str)
    raw_cat = qw.get(item, "category", int, str)
    category = str(raw_cat).strip()
    if category not in CATEGORY_NAMES["locomo"]:
        raise qw.error(f"unknown category {raw_cat!r} (expected 1-5)")
    answer = _answer_text(qw.get(item, "answer", str, int, float, optional=True))
    adversarial = qw.get(item, "adversarial_answer", str, int, float, optional=True)
    if not answer and category != ADVERSARIAL and not lenient:
        raise qw.error(f"empty gold answer for category {category} (pass lenient=True to accept)")
    raw_evidence = qw.get(item, "evidence", list, optional=True) or []
    evidence = _repair_evidence(raw_evidence, turn_ids, qw, notes)  # type: ignore[arg-type]
    session_ids = tuple(dict.fromkeys(f"session_{e[1:].split(':')[0]}" for e in evidence))
    return Question(
        id=f"{conv_id}:q{j}",
        conversation_id=conv_id,
        question=str(text),
        answer=answer,
        category=category,
        evidence=evidence,
        adversarial_answer=_answer_text(adversarial) if adversarial is not None else None,
        session_ids=session_ids,
    )


def _repair_evidence(raw: list, turn_ids: set[str], qw: RecordPath, notes: list[str]) -> tuple[str, ...]:
    """Canonical, existing, de-duplicated dia_ids; each repair or drop is noted."""
    out: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            raise qw.error(f"evidence entries must be strings, got {json_type_name(entry)}")
        found = [f"D{int(a)}:{int(b)}" for a, b in _EVIDENCE_ID.findall(entry)]
        kept = [e for e in found if e in turn_ids]
        if kept != [entry]:
            dropped = [e for e in found if e not in turn_ids]
            msg = f"{qw}: evidence {entry!r} -> {kept}"
            if dropped or not found:
                msg += " (dropped: " + (", ".join(dropped) if dropped else "unparseable") + ")"
            notes.append(msg)
        out.extend(e for e in kept if e not in out)
    return tuple(out)
