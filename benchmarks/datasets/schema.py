"""One typed internal form for every benchmark.

Loaders turn each dataset's own JSON into these frozen records, so runners,
metrics and splits never touch dataset-specific dicts. Records are immutable:
a parsed benchmark is cached in-process and shared, and nobody may edit it.

Ids:
- ``Conversation.id``: LoCoMo ``sample_id`` ("conv-26"), Mem-Gallery topic file stem.
- ``Session.id``: LoCoMo "session_4", Mem-Gallery "D4" (unique within a conversation).
- ``DatasetTurn.id``: the dataset's own turn id, LoCoMo ``dia_id`` / Mem-Gallery
  ``round`` ("D4:7"); loaders check it is unique within its conversation. These are
  the ids evidence annotations use, so retrieval metrics compare them directly.
- ``Question.id``: "<conversation id>:q<index in the file>" ("conv-26:q0"), stable
  across splits and samples.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Mapping

from harness.errors import DatasetError

#: category code -> name, per benchmark. LoCoMo codes follow the dataset's own
#: numbering (the released SimpleMem runner swaps the names of 2 and 3; we don't).
CATEGORY_NAMES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "locomo": MappingProxyType({
        "1": "multi-hop",
        "2": "temporal",
        "3": "open-domain",
        "4": "single-hop",
        "5": "adversarial",
    }),
    "memgallery": MappingProxyType({
        "AR": "answer refusal",
        "CD": "conflict detection",
        "FR": "factual retrieval",
        "KR": "knowledge resolution",
        "MR": "multi-entity reasoning",
        "TR": "temporal reasoning",
        "TTL": "test-time learning",
        "VR": "visual reasoning",
        "VS": "visual search",
    }),
})


@dataclass(frozen=True, slots=True)
class DatasetTurn:
    """One turn (LoCoMo) or one user/assistant round (Mem-Gallery)."""

    id: str
    session_id: str
    speaker: str
    text: str
    image_caption: str | None = None
    image_id: str | None = None  # Mem-Gallery "D1:IMG_001"; LoCoMo has none
    image_path: str | None = None  # absolute, only if the image file is really on disk
    timestamp: datetime | None = None  # the session's date (turns carry no own time)
    response: str | None = None  # Mem-Gallery: the assistant's reply in the same round
    response_speaker: str | None = None  # "assistant" when ``response`` is set

    @property
    def dialogue_text(self) -> str:
        """The turn as "Speaker: text" lines (two lines for a Mem-Gallery round)."""
        lines = [f"{self.speaker}: {self.text}"]
        if self.response is not None:
            lines.append(f"{self.response_speaker or 'assistant'}: {self.response}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    conversation_id: str
    index: int  # 1-based position as numbered by the dataset
    date: datetime | None
    date_text: str  # as written in the file
    turns: tuple[DatasetTurn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    conversation_id: str
    question: str
    answer: str  # gold; "" for LoCoMo adversarial questions without one
    category: str  # LoCoMo "1".."5", Mem-Gallery point code ("AR", "VS", ...)
    evidence: tuple[str, ...] = ()  # turn ids of the same conversation
    adversarial_answer: str | None = None  # LoCoMo category 5: the trap answer
    question_image: str | None = None  # Mem-Gallery: image reference as written in the file
    question_image_path: str | None = None  # absolute, only if the file is on disk
    question_image_caption: str | None = None
    session_ids: tuple[str, ...] = ()  # sessions the answer is in (Mem-Gallery given, LoCoMo from evidence)


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turn_ids(self) -> tuple[str, ...]:
        return tuple(t.id for s in self.sessions for t in s.turns)

    def turn(self, turn_id: str) -> DatasetTurn:
        for t in iter_turns(self):
            if t.id == turn_id:
                return t
        raise KeyError(f"{self.id}: no turn {turn_id!r}")


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str  # "locomo" | "memgallery"
    conversations: tuple[Conversation, ...]
    source_path: str  # the file (LoCoMo) or dialog folder (Mem-Gallery) it was read from
    sha256: str  # of the file, or of the sorted "name sha256" lines of all files
    files: tuple[tuple[str, str], ...] = ()  # (file name, sha256) of every file read
    notes: tuple[str, ...] = ()  # repairs the loader made (e.g. malformed evidence ids)
    split: str = "all"  # "dev" | "test" | "all" once restricted by benchmarks.splits.select
    sample: str | None = None  # named sample size ("tiny", "small") if sampled
    split_version: int | None = None

    @property
    def version(self) -> str:
        """Short content version: the first 12 hex digits of ``sha256``."""
        return self.sha256[:12]

    @property
    def questions(self) -> tuple[Question, ...]:
        return tuple(q for c in self.conversations for q in c.questions)

    def conversation(self, conversation_id: str) -> Conversation:
        for c in self.conversations:
            if c.id == conversation_id:
                return c
        raise KeyError(f"{self.name}: no conversation {conversation_id!r}")

    def stats(self) -> dict[str, int]:
        """Counts of conversations, sessions, turns, questions (and per category)."""
        out = {
            "conversations": len(self.conversations),
            "sessions": sum(len(c.sessions) for c in self.conversations),
            "turns": sum(len(s.turns) for c in self.conversations for s in c.sessions),
            "image_turns": sum(
                1 for c in self.conversations for t in iter_turns(c) if t.image_caption is not None
            ),
            "questions": sum(len(c.questions) for c in self.conversations),
        }
        for q in sorted(self.questions, key=lambda q: q.category):
            key = f"questions_{q.category}"
            out[key] = out.get(key, 0) + 1
        return out


def iter_turns(conversation: Conversation) -> Iterator[DatasetTurn]:
    """All turns of a conversation in dialogue order."""
    for session in conversation.sessions:
        yield from session.turns


def category_names(benchmark: Benchmark | str) -> dict[str, str]:
    """Category code -> human name for a benchmark (or a benchmark name)."""
    name = benchmark if isinstance(benchmark, str) else benchmark.name
    try:
        return dict(CATEGORY_NAMES[name])
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(CATEGORY_NAMES)}") from None


# --- helpers shared by the loaders ---------------------------------------------
_JSON_TYPE_NAMES = {str: "string", int: "integer", float: "number", list: "list", dict: "object", bool: "boolean"}


def json_type_name(value: object) -> str:
    return "null" if value is None else _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


@dataclass(frozen=True, slots=True)
class RecordPath:
    """Where a record sits, for one-line errors: ``file: sample 3 (conv-26) session_4 turn 7``."""

    file: str
    parts: tuple[str, ...] = ()

    def __truediv__(self, part: str) -> RecordPath:
        return RecordPath(self.file, (*self.parts, part))

    def __str__(self) -> str:
        return f"{self.file}: {' '.join(self.parts)}" if self.parts else self.file

    def error(self, message: str) -> DatasetError:
        return DatasetError(f"{self}: {message}")

    def get(self, record: object, key: str, *types: type, optional: bool = False) -> object:
        """``record[key]`` checked against JSON ``types``; a DatasetError naming this record if not."""
        if not isinstance(record, dict):
            raise self.error(f"expected an object, got {json_type_name(record)}")
        if key not in record or record[key] is None:
            if optional:
                return None
            raise self.error(f"missing {key!r}")
        value = record[key]
        # bool is an int subclass in Python but not a number in JSON
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join(_JSON_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise self.error(f"{key!r} must be {expected}, got {json_type_name(value)}")
        return value


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def combined_sha256(files: tuple[tuple[str, str], ...]) -> str:
    """One digest for several files: sha256 of their sorted "name sha256" lines."""
    lines = "".join(f"{name} {sha}\n" for name, sha in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def missing_data_error(path: Path, what: str, fetch_arg: str) -> DatasetError:
    return DatasetError(
        f"{what} not found at {path}; set MEMSYS_DATA_DIR or run: python scripts/fetch_data.py {fetch_arg}"
    )


def read_json(path: Path) -> object:
    """Parse a JSON file; any decoding problem becomes a one-line DatasetError naming the file."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path.name}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path.name}: not valid UTF-8 JSON: {exc.reason} at byte {exc.start}") from exc
    except OSError as exc:
        raise DatasetError(f"{path.name}: cannot read: {exc.strerror or exc}") from exc


def real_file(path: Path) -> str | None:
    """``str(path)`` if it is a real file on disk (not missing, not a Git LFS pointer), else None."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    if st.st_size < 1024:  # LFS pointers are ~130 bytes of text
        with open(path, "rb") as fh:
            if fh.read(24).startswith(b"version https://git-lfs"):
                return None
    return str(path)
