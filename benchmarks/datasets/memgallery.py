"""Mem-Gallery loader: the 20 topic files under ``benchmark/data/dialog`` into the typed schema.

File shape (measured on the snapshot in SOURCE.txt): each ``<Topic>.json`` is
``{"character_profile": {"name", ...}, "multi_session_dialogues": [...],
"human-annotated QAs": [...]}``. A session is ``{"session_id": "D1", "date":
"2024-06-17", "dialogues": [rounds]}``; a round is ``{"round": "D1:3", "user",
"assistant"}`` plus, for image rounds, one-element lists ``image_id``
(["D1:IMG_001"]), ``input_image`` (["../image/<Topic>/D1_IMG_001.jpg"]) and
``image_caption``. A QA is ``{"point" (category), "question", "answer",
"session_id": [..], "clue": [round ids]}`` plus optional ``question_image`` (a path)
and its ``image_caption``.

One round becomes one ``DatasetTurn``: the user (named after the character profile)
speaks ``text`` and the assistant's reply is ``response``, because the clue
annotations point at whole rounds. Round ids are already prefixed with their session
("D4:7") and are unique per topic in the data; the loader checks it. Images are Git
LFS objects that are usually absent: ``image_path`` is set only when the real file
is on disk, the caption is always kept.
"""

from __future__ import annotations

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
    combined_sha256,
    json_type_name,
    missing_data_error,
    read_json,
    real_file,
    sha256_file,
)
from harness.dates import parse_datetime
from harness.errors import InputError
from harness.paths import data_dir

MEMGALLERY_SUBDIR = "mem-gallery"
DIALOG_SUBPATH = Path("benchmark") / "data" / "dialog"
ASSISTANT = "assistant"
QA_KEY = "human-annotated QAs"
SESSIONS_KEY = "multi_session_dialogues"


def default_memgallery_dir() -> Path:
    return data_dir() / MEMGALLERY_SUBDIR / DIALOG_SUBPATH


def resolve_dialog_dir(directory: str | Path | None) -> Path:
    """The ``dialog`` folder, given it, the ``mem-gallery`` root, or nothing (the default)."""
    d = Path(directory) if directory is not None else default_memgallery_dir()
    for candidate in (d, d / DIALOG_SUBPATH, d / "dialog", d / MEMGALLERY_SUBDIR / DIALOG_SUBPATH):
        if candidate.is_dir() and any(candidate.glob("*.json")):
            return candidate
    raise missing_data_error(d, "Mem-Gallery dialog files (*.json)", "memgallery")


def load_memgallery(directory: str | Path | None = None, *, lenient: bool = False) -> Benchmark:
    """Load and validate Mem-Gallery (default: ``$MEMSYS_DATA_DIR/mem-gallery/benchmark/data/dialog``).

    Cached in-process by (folder, lenient, name/mtime/size of every topic file and of
    every file under the sibling ``image`` folder, since ``image_path`` depends on them).
    """
    dialog = resolve_dialog_dir(directory).resolve()
    key = (_fingerprint(dialog, "*.json"), _fingerprint(dialog.parent / "image", "**/*"))
    return _load_cached(str(dialog), key, lenient)


def _fingerprint(folder: Path, pattern: str) -> tuple[tuple[str, int, int], ...]:
    if not folder.is_dir():
        return ()
    out = []
    for f in sorted(folder.glob(pattern)):
        st = f.stat()
        if f.is_file():
            out.append((str(f.relative_to(folder)), st.st_mtime_ns, st.st_size))
    return tuple(out)


@lru_cache(maxsize=8)
def _load_cached(dialog: str, key: tuple, lenient: bool) -> Benchmark:
    return parse_memgallery(Path(dialog), lenient=lenient)


def parse_memgallery(dialog: Path, *, lenient: bool = False) -> Benchmark:
    """Parse every ``*.json`` topic file of ``dialog`` (sorted by name) without caching."""
    files = sorted(dialog.glob("*.json"))
    if not files:
        raise missing_data_error(dialog, "Mem-Gallery dialog files (*.json)", "memgallery")
    notes: list[str] = []
    conversations = tuple(_parse_topic(f, lenient, notes) for f in files)
    hashes = tuple((f.name, sha256_file(f)) for f in files)
    return Benchmark(
        name="memgallery",
        conversations=conversations,
        source_path=str(dialog),
        sha256=combined_sha256(hashes),
        files=hashes,
        notes=tuple(notes),
    )


def _parse_topic(path: Path, lenient: bool, notes: list[str]) -> Conversation:
    raw = read_json(path)
    where = RecordPath(path.name)
    if not isinstance(raw, dict):
        raise where.error(f"expected an object, got {json_type_name(raw)}")
    conv_id = path.stem
    profile = where.get(raw, "character_profile", dict, optional=True) or {}
    user = where / "character_profile"
    user_name = str(user.get(profile, "name", str, optional=True) or "user")
    sessions_raw = where.get(raw, SESSIONS_KEY, list)
    if not sessions_raw:
        raise where.error(f"{SESSIONS_KEY!r} is empty")
    sessions: list[Session] = []
    turn_ids: set[str] = set()
    session_ids: set[str] = set()
    for i, s in enumerate(sessions_raw):  # type: ignore[arg-type]
        sw = where / f"session {i}"
        sid = str(sw.get(s, "session_id", str))
        sw = where / f"session {i} ({sid})"
        if sid in session_ids:
            raise sw.error(f"duplicate session_id {sid!r}")
        session_ids.add(sid)
        sessions.append(_parse_session(s, i, sid, conv_id, user_name, sw, path.parent, turn_ids))
    qas = where.get(raw, QA_KEY, list)
    questions = tuple(
        _parse_question(q, j, conv_id, where / f"qa {j}", turn_ids, session_ids, path.parent, lenient, notes)
        for j, q in enumerate(qas)  # type: ignore[arg-type]
    )
    return Conversation(id=conv_id, speakers=(user_name, ASSISTANT), sessions=tuple(sessions), questions=questions)


def _parse_session(
    s: dict, i: int, sid: str, conv_id: str, user_name: str, sw: RecordPath, dialog: Path, turn_ids: set[str]
) -> Session:
    date_text = str(sw.get(s, "date", str))
    try:
        date = parse_datetime(date_text)
    except InputError as exc:
        raise sw.error(f"bad date: {exc}") from exc
    turns: list[DatasetTurn] = []
    for j, r in enumerate(sw.get(s, "dialogues", list)):  # type: ignore[arg-type]
        rw = sw / f"round {j}"
        rid = str(rw.get(r, "round", str))
        rw = sw / f"round {j} ({rid})"
        if rid in turn_ids:
            raise rw.error(f"duplicate round id {rid!r} in {conv_id}")
        turn_ids.add(rid)
        image_id = _single(rw, r, "image_id")
        image_ref = _single(rw, r, "input_image")
        turns.append(
            DatasetTurn(
                id=rid,
                session_id=sid,
                speaker=user_name,
                text=str(rw.get(r, "user", str)),
                image_caption=_single(rw, r, "image_caption"),
                image_id=image_id,
                image_path=_image_path(dialog, image_ref),
                timestamp=date,
                response=str(rw.get(r, "assistant", str)),
                response_speaker=ASSISTANT,
            )
        )
    return Session(id=sid, conversation_id=conv_id, index=i + 1, date=date, date_text=date_text, turns=tuple(turns))


def _single(rw: RecordPath, record: dict, key: str) -> str | None:
    """A string given as ``"x"`` or ``["x"]`` (the data uses one-element lists)."""
    value = rw.get(record, key, str, list, optional=True)
    if value is None or isinstance(value, str):
        return value
    if len(value) == 0:  # type: ignore[arg-type]
        return None
    if len(value) > 1:  # type: ignore[arg-type]
        raise rw.error(f"{key!r} has {len(value)} entries; one image per round is supported")  # type: ignore[arg-type]
    if not isinstance(value[0], str):  # type: ignore[index]
        raise rw.error(f"{key!r} entries must be strings, got {json_type_name(value[0])}")  # type: ignore[index]
    return value[0]  # type: ignore[index]


def _image_path(dialog: Path, ref: str | None) -> str | None:
    """Absolute path of an image referenced relative to the dialog folder, if really on disk."""
    if not ref:
        return None
    path = (dialog / ref).resolve()
    root = dialog.parent.parent.resolve()  # the Mem-Gallery "benchmark" folder
    if not path.is_relative_to(root):
        return None
    return real_file(path)


def _string_list(qw: RecordPath, record: dict, key: str) -> list[str]:
    value = qw.get(record, key, list, str, optional=True)
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    for x in items:  # type: ignore[union-attr]
        if not isinstance(x, str):
            raise qw.error(f"{key!r} entries must be strings, got {json_type_name(x)}")
    return list(items)  # type: ignore[arg-type]


def _parse_question(
    q: object,
    j: int,
    conv_id: str,
    qw: RecordPath,
    turn_ids: set[str],
    session_ids: set[str],
    dialog: Path,
    lenient: bool,
    notes: list[str],
) -> Question:
    category = str(qw.get(q, "point", str)).strip()
    if category not in CATEGORY_NAMES["memgallery"]:
        known = "/".join(CATEGORY_NAMES["memgallery"])
        raise qw.error(f"unknown category (point) {category!r} (expected one of {known})")
    text = str(qw.get(q, "question", str))
    answer_raw = qw.get(q, "answer", str, int, float, optional=True)
    answer = str(answer_raw).strip() if answer_raw is not None else ""
    if not answer and not lenient:
        raise qw.error(f"empty gold answer for category {category} (pass lenient=True to accept)")
    clues = _string_list(qw, q, "clue")  # type: ignore[arg-type]
    evidence = [c for c in dict.fromkeys(clues) if c in turn_ids]
    if len(evidence) != len(clues):
        notes.append(f"{qw}: clue {clues} -> {evidence} (dropped unknown or repeated round ids)")
    sessions = _string_list(qw, q, "session_id")  # type: ignore[arg-type]
    unknown = [s for s in sessions if s not in session_ids]
    if unknown:
        raise qw.error(f"session_id {unknown} not in this topic")
    image_ref = qw.get(q, "question_image", str, optional=True)
    return Question(
        id=f"{conv_id}:q{j}",
        conversation_id=conv_id,
        question=text,
        answer=answer,
        category=category,
        evidence=tuple(evidence),
        question_image=image_ref,  # type: ignore[arg-type]
        question_image_path=_image_path(dialog, image_ref),  # type: ignore[arg-type]
        question_image_caption=qw.get(q, "image_caption", str, optional=True),  # type: ignore[arg-type]
        session_ids=tuple(dict.fromkeys(sessions)),
    )

