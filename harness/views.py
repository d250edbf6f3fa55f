"""What crosses the sandbox boundary of an evaluation, in both directions.

The trusted side (scorer, loop) hands the evaluated code a *public view*: the
conversations of the requested split and, per question, only its id and text (no
gold answer, no evidence ids, no category, no adversarial answer). The evaluated
code hands back *answers*: one JSON line per question in ``answers.jsonl``. Nothing
else it writes is read. Both records live here, in fixed code, so neither side can
redefine the contract; the trusted side validates answers against ``AnswerLimits``
before scoring.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from harness.atomic import atomic_write_text
from harness.errors import MemsysError

VIEW_SCHEMA = "memsys-public-view/1"
REQUEST_SCHEMA = "memsys-predict-request/1"
ANSWERS_FILE = "answers.jsonl"
VIEW_FILE = "view.json"
REQUEST_FILE = "request.json"
#: environment of the untrusted half, set by the trusted side: read-only folders it may use
STORES_READONLY_ENV = "MEMSYS_STORES_READONLY"  # stores built by byte-identical code
EMBEDDINGS_READONLY_ENV = "MEMSYS_EMBEDDINGS_READONLY"  # verified embeddings (a SQLite file)


class PredictionFormatError(MemsysError):
    """The evaluated code's answers break the contract (schema, ids, types, sizes)."""

    kind = "prediction_format"


class _JsonFile:
    """Written atomically by the trusted side, read by the untrusted one (``to_json``/``from_json``)."""

    __slots__ = ()

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), ensure_ascii=False))  # type: ignore[attr-defined]

    @classmethod
    def read(cls, path: Path) -> Any:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class PublicTurn:
    id: str
    session_id: str
    speaker: str
    text: str
    timestamp: str | None = None  # ISO 8601 (the session's date)
    image_caption: str | None = None
    image_id: str | None = None
    image_path: str | None = None  # inside the view's folder, when the image file exists
    response: str | None = None
    response_speaker: str | None = None


@dataclass(frozen=True, slots=True)
class PublicSession:
    id: str
    index: int
    date: str | None  # ISO 8601
    date_text: str
    turns: tuple[PublicTurn, ...]


@dataclass(frozen=True, slots=True)
class PublicQuestion:
    id: str
    question: str
    question_image_path: str | None = None
    question_image_caption: str | None = None


@dataclass(frozen=True, slots=True)
class PublicConversation:
    id: str
    speakers: tuple[str, ...]
    sessions: tuple[PublicSession, ...]
    questions: tuple[PublicQuestion, ...]

    def turns(self) -> Iterator[PublicTurn]:
        for s in self.sessions:
            yield from s.turns


@dataclass(frozen=True, slots=True)
class PublicView(_JsonFile):
    """One evaluation's inputs; ``digest`` names its content (store caches key on it)."""

    benchmark: str
    split: str
    sample: str | None
    conversations: tuple[PublicConversation, ...]

    @property
    def question_ids(self) -> list[str]:
        return [q.id for c in self.conversations for q in c.questions]

    def to_json(self) -> dict[str, Any]:
        return {"schema": VIEW_SCHEMA, **asdict(self)}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def conversation_digest(self, conv: PublicConversation) -> str:
        """Content hash of one conversation's turns (what a built store depends on)."""
        payload = json.dumps({"benchmark": self.benchmark, "id": conv.id, "speakers": conv.speakers,
                              "sessions": [asdict(s) for s in conv.sessions]}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PublicView":
        if data.get("schema") != VIEW_SCHEMA:
            raise PredictionFormatError(f"public view schema {data.get('schema')!r}, expected {VIEW_SCHEMA}")
        convs = tuple(
            PublicConversation(
                id=c["id"], speakers=tuple(c["speakers"]),
                sessions=tuple(PublicSession(id=s["id"], index=s["index"], date=s["date"], date_text=s["date_text"],
                                             turns=tuple(PublicTurn(**t) for t in s["turns"]))
                               for s in c["sessions"]),
                questions=tuple(PublicQuestion(**q) for q in c["questions"]),
            )
            for c in data["conversations"]
        )
        return cls(data["benchmark"], data["split"], data.get("sample"), convs)


@dataclass(frozen=True, slots=True)
class PredictRequest(_JsonFile):
    """How the trusted side asks for answers: which code config, which reader, where to write.

    The memory config is named (preset + overrides) and composed *inside* the sandbox
    from the evaluated tree's own ``configs/memory``, so a preset can never reach the
    benchmark, split or objective: those are composed on the trusted side only.
    """

    view_path: str
    out_dir: str
    memory_preset: str
    memory_overrides: tuple[str, ...] = ()
    reader: str = "llm"  # llm | none
    system: str = "memsys"  # memsys | full_context | recent_window
    workers: int = 1
    full_context_budget: int = 6000
    llm: Mapping[str, Any] = field(default_factory=dict)  # an LLMConfig as a dict (base_url: the gateway)
    resume: bool = True

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["memory_overrides"] = list(self.memory_overrides)
        d["llm"] = dict(self.llm)
        return {"schema": REQUEST_SCHEMA, **d}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PredictRequest":
        if data.get("schema") != REQUEST_SCHEMA:
            raise PredictionFormatError(f"request schema {data.get('schema')!r}, expected {REQUEST_SCHEMA}")
        fields = {k: v for k, v in data.items() if k != "schema"}
        fields["memory_overrides"] = tuple(fields.get("memory_overrides", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class Answer:
    """One question's answer as the evaluated code reports it (untrusted until validated)."""

    question_id: str
    answer: str = ""
    retrieved_ids: tuple[str, ...] = ()  # ranked source turn ids
    context_ids: tuple[str, ...] = ()  # source turn ids in the reader's context, in context order
    context_tokens: int = 0  # as claimed; the scorer recomputes its own figure
    levels: tuple[int, ...] = ()  # pyramid level of each context item
    latency_s: float = 0.0
    retrieval_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    error: str | None = None
    # sha256 of everything the reader would be sent (messages, output format, token cap), computed
    # with or without a reader: two trees that give identical inputs on every question are the same
    # system to the scorer (the no-op screen)
    input_sha256: str = ""
    # log-probability of each answer token, as the evaluated code reports its reader's (calibration data for
    # answer.abstain=confidence; never part of a score)
    answer_logprobs: tuple[float, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """Sizes past which an answers file is refused rather than read."""

    max_file_bytes: int = 256 << 20
    max_line_bytes: int = 1 << 20
    max_answer_chars: int = 8000
    max_ids: int = 2000
    max_id_chars: int = 200
    max_error_chars: int = 2000


_STR_LISTS = ("retrieved_ids", "context_ids")
_NUMBERS = ("latency_s", "retrieval_ms", "cost_usd")
_INTS = ("context_tokens", "prompt_tokens", "completion_tokens")


def _check_answer(obj: Any, where: str, lim: AnswerLimits) -> Answer:
    if not isinstance(obj, dict):
        raise PredictionFormatError(f"{where}: not a JSON object")
    unknown = set(obj) - set(Answer.__dataclass_fields__)
    if unknown:
        raise PredictionFormatError(f"{where}: unknown fields {sorted(unknown)}")
    qid = obj.get("question_id")
    if not isinstance(qid, str) or not qid or len(qid) > lim.max_id_chars:
        raise PredictionFormatError(f"{where}: question_id must be a non-empty string")
    ans = obj.get("answer", "")
    if not isinstance(ans, str) or len(ans) > lim.max_answer_chars:
        raise PredictionFormatError(f"{where} ({qid}): answer must be a string of at most {lim.max_answer_chars} chars")
    fields: dict[str, Any] = {"question_id": qid, "answer": ans}
    for name in _STR_LISTS:
        ids = obj.get(name, [])
        if not isinstance(ids, list) or len(ids) > lim.max_ids or not all(
                isinstance(i, str) and len(i) <= lim.max_id_chars for i in ids):
            raise PredictionFormatError(f"{where} ({qid}): {name} must be a list of at most {lim.max_ids} short strings")
        fields[name] = tuple(ids)
    levels = obj.get("levels", [])
    if not isinstance(levels, list) or len(levels) > lim.max_ids or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in levels):
        raise PredictionFormatError(f"{where} ({qid}): levels must be a list of integers")
    fields["levels"] = tuple(levels)
    for name in _INTS:
        v = obj.get(name, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise PredictionFormatError(f"{where} ({qid}): {name} must be a non-negative integer")
        fields[name] = v
    for name in _NUMBERS:
        v = obj.get(name, 0.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise PredictionFormatError(f"{where} ({qid}): {name} must be a finite non-negative number")
        fields[name] = float(v)
    cached = obj.get("cached", False)
    if not isinstance(cached, bool):
        raise PredictionFormatError(f"{where} ({qid}): cached must be a boolean")
    fields["cached"] = cached
    err = obj.get("error")
    if err is not None and (not isinstance(err, str) or len(err) > lim.max_error_chars):
        raise PredictionFormatError(f"{where} ({qid}): error must be null or a short string")
    fields["error"] = err
    digest = obj.get("input_sha256", "")
    if not isinstance(digest, str) or len(digest) > 64:
        raise PredictionFormatError(f"{where} ({qid}): input_sha256 must be a hex digest string")
    fields["input_sha256"] = digest
    logprobs = obj.get("answer_logprobs")
    if logprobs is not None:
        if not isinstance(logprobs, list) or len(logprobs) > lim.max_ids or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v <= 0 for v in logprobs):
            raise PredictionFormatError(f"{where} ({qid}): answer_logprobs must be null or a list of log-probabilities (<= 0)")
        fields["answer_logprobs"] = tuple(float(v) for v in logprobs)
    return Answer(**fields)


def open_regular_file(path: Path) -> int:
    """A file descriptor for ``path`` only if it is a regular file reached without a symlink.

    The folder is writable by the evaluated code: it could plant a symlink to a host file
    or a FIFO that blocks the reader forever.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise PredictionFormatError(f"{path.name}: cannot be opened as a plain file ({exc.strerror})") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PredictionFormatError(f"{path.name}: not a regular file")
    return fd


def read_answers(path: Path, expected_ids: list[str], limits: AnswerLimits = AnswerLimits(),
                 *, partial: bool = False) -> dict[str, Answer]:
    """Validated answers keyed by question id, in the expected order.

    Exactly the expected ids, each once (``partial``: a subset, for resuming a killed
    run; a last line cut off by a kill is dropped then). Anything else is a
    :class:`PredictionFormatError` with a one-line reason.
    """
    try:
        fd = open_regular_file(path)
    except FileNotFoundError:
        if partial:
            return {}
        raise PredictionFormatError(f"no {path.name}: the evaluated code wrote no answers") from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limits.max_file_bytes:
            raise PredictionFormatError(f"{path.name} is {size} bytes (limit {limits.max_file_bytes})")
        raw = fh.read(limits.max_file_bytes + 1)
    expected = set(expected_ids)
    found: dict[str, Answer] = {}
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.name}:{n}"
        if len(line) > limits.max_line_bytes:
            raise PredictionFormatError(f"{where}: line of {len(line)} bytes (limit {limits.max_line_bytes})")
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if partial and n == len(lines):  # cut off by a kill: answered again
                continue
            raise PredictionFormatError(f"{where}: not a JSON line ({type(exc).__name__})") from exc
        a = _check_answer(obj, where, limits)
        if a.question_id not in expected:
            raise PredictionFormatError(f"{where}: answer for {a.question_id!r}, which was not asked")
        if a.question_id in found:
            raise PredictionFormatError(f"{where}: a second answer for {a.question_id!r}")
        found[a.question_id] = a
    missing = [q for q in expected_ids if q not in found]
    if missing and not partial:
        raise PredictionFormatError(f"{len(missing)} of {len(expected_ids)} questions have no answer "
                                    f"(first: {missing[0]})")
    return {q: found[q] for q in expected_ids if q in found}
