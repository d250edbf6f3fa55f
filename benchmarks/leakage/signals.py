"""The leakage signals: each reads the scanned added text and returns hits. All pure.

One detector per route by which a change can carry benchmark data (question text, gold answers,
evidence turn ids, question ids, data-like literal tables, data files). Counts of answers and ids
are taken over the whole diff, so a table split across files is still one table.
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Iterable, Iterator, Sequence

from benchmarks.leakage.added import AddedFile
from benchmarks.leakage.config import DATA_SUFFIXES, FIELD_SUFFIXES, HASH_COMMENTS, LeakageConfig
from benchmarks.leakage.index import LeakageIndex, cased
from benchmarks.leakage.text import (
    QUESTION_ID,
    TURN_ID,
    Literal,
    clip,
    field_literals,
    is_opaque,
    is_question_like,
    normal,
    pieces,
    quoted_literals,
    words,
)

Lines = tuple[tuple[int, str], ...]
#: the kinds of hit, in the order a report lists them (the plainest evidence of a table first)
KINDS = ("evidence_ids", "gold_answer", "question_id", "question_text", "data_table", "data_blob", "data_file")


@dataclass(frozen=True, slots=True)
class LeakageHit:
    """One finding: what kind, where, the matched line (<= 120 chars) and the values it matched."""

    kind: str  # one of KINDS
    file: str
    line: int
    snippet: str
    what: str  # "holds 30 evidence ids": the lesson's words for it
    count: int = 1
    examples: tuple[str, ...] = ()  # the first values matched
    context: str = ""  # "beside question words": said after the examples


@dataclass(frozen=True, slots=True)
class FileScan:
    """One added file read once for every detector: its lines, hunks and literals."""

    file: AddedFile
    literals: tuple[Literal, ...]

    @property
    def path(self) -> str:
        return self.file.path

    def line_text(self, number: int) -> str:
        return next((t for n, t in self.file.lines if n == number), "")


def scan_file(added: AddedFile, cfg: LeakageConfig) -> FileScan:
    """Literals of each hunk: quoted strings (not in comments), and for a structured data file (YAML,
    CSV, ...) each line's fields too; prose (prompts) is not cut into fields, its quotes count."""
    suffix = PurePosixPath(added.path).suffix.lower()
    literals: list[Literal] = []
    for hunk in added.hunks():
        numbers = [n for n, _ in hunk]
        literals.extend(quoted_literals("\n".join(t for _, t in hunk), numbers, hash_comments=suffix in HASH_COMMENTS))
        if suffix in FIELD_SUFFIXES or suffix in DATA_SUFFIXES:
            literals.extend(field_literals(list(hunk), cfg.answer_separators, hash_comments=suffix in HASH_COMMENTS))
    return FileScan(added, tuple(literals))


def _hit(scan: FileScan, kind: str, line: int, what: str, found: Sequence[str], cfg: LeakageConfig,
         context: str = "") -> LeakageHit:
    return LeakageHit(kind, scan.path, line, clip(scan.line_text(line), cfg.snippet_chars), what,
                      len(found), tuple(found[: cfg.lesson_examples]), context)


# --- question text --------------------------------------------------------------------------------
def hunk_words(hunk: Lines) -> tuple[list[str], list[int]]:
    """The hunk's words across its lines (a question may wrap), with each word's line."""
    ws: list[str] = []
    at: list[int] = []
    for n, text in hunk:
        w = words(text)
        ws.extend(w)
        at.extend([n] * len(w))
    return ws, at


@dataclass(frozen=True, slots=True)
class QuestionMatch:
    """Where a question's words were found, and the words as the change wrote them (normalised)."""

    line: int
    words: str


def question_matches(added: AddedFile, index: LeakageIndex) -> dict[str, QuestionMatch]:
    """Question id -> the first place one of its n-grams (or its whole short text) occurs."""
    found: dict[str, QuestionMatch] = {}
    for hunk in added.hunks():
        ws, at = hunk_words(hunk)
        for i in range(len(ws)):
            for n in index.ngram_lengths:
                key = " ".join(ws[i:i + n]) if i + n <= len(ws) else ""
                qid = index.ngrams.get(key)
                if qid is not None:
                    found.setdefault(qid, QuestionMatch(at[i], key))
                    break
    return found


def quotes_questions(found: dict[str, QuestionMatch], index: LeakageIndex, cfg: LeakageConfig) -> bool:
    """One n-gram of a long question is a quote; whole short questions count from ``cfg.short_questions_min``
    on (a docstring may ask one as an example: history's memsys/answer/times.py does)."""
    short = [q for q in found if len(words(index.questions[q])) < cfg.ngram]
    return len(found) > len(short) or len(short) >= cfg.short_questions_min


def question_text_hits(scans: Sequence[FileScan], index: LeakageIndex, cfg: LeakageConfig) -> list[LeakageHit]:
    """Any run of ``cfg.ngram`` words of a dev/test question, in a literal or a comment alike."""
    hits = []
    for scan in scans:
        found = question_matches(scan.file, index)
        if found and quotes_questions(found, index, cfg):
            # the words the change wrote, never the indexed question: the lesson must not show the
            # researcher more of a (test) question than it already holds
            ordered = sorted(found.values(), key=lambda m: m.line)
            quoted = [clip(m.words, cfg.example_chars) for m in ordered]
            first = ordered[0].line
            hits.append(_hit(scan, "question_text", first, f"quotes {len(found)} benchmark question(s)", quoted, cfg))
    return hits


# --- gold answers ---------------------------------------------------------------------------------
def answer_matches(scan: FileScan, index: LeakageIndex, cfg: LeakageConfig) -> dict[str, int]:
    """Distinctive answer -> first line where a literal (or a piece of one) is exactly that answer."""
    found: dict[str, int] = {}
    for lit in scan.literals:
        for piece in pieces(lit.value, cfg.answer_separators):
            key = normal(piece)
            if key in index.answers and (key not in index.answer_names or cased(piece) == index.answer_names[key]):
                found.setdefault(key, lit.line)
    return found


def gold_answer_hits(scans: Sequence[FileScan], index: LeakageIndex, cfg: LeakageConfig) -> list[LeakageHit]:
    """Several distinct distinctive answers as literals in one diff: a table of answers."""
    per_file = {s.path: answer_matches(s, index, cfg) for s in scans}
    distinct = set().union(*per_file.values()) if per_file else set()
    if len(distinct) < cfg.answer_min_distinct:
        return []
    return [_hit(s, "gold_answer", min(per_file[s.path].values()), f"holds {len(per_file[s.path])} gold answers as literals",
                 sorted(per_file[s.path], key=per_file[s.path].get), cfg)
            for s in scans if per_file[s.path]]


# --- evidence turn ids ----------------------------------------------------------------------------
def turn_ids(added: AddedFile) -> dict[str, int]:
    """Turn id ("D12:3") -> first line it is written on."""
    found: dict[str, int] = {}
    for n, text in added.lines:
        for m in TURN_ID.finditer(text):
            found.setdefault(m.group(0), n)
    return found


def question_lines(scan: FileScan, index: LeakageIndex, cfg: LeakageConfig) -> set[int]:
    """Lines holding question material: a question-like literal, or an n-gram of a real question."""
    lines = {lit.line for lit in scan.literals if is_question_like(lit.value, cfg.record_min_words)}
    return lines | {m.line for m in question_matches(scan.file, index).values()}


def ids_near_questions(scan: FileScan, ids: dict[str, int], index: LeakageIndex, cfg: LeakageConfig) -> list[str]:
    """The ids written within ``cfg.near_lines`` lines of question material."""
    asked = question_lines(scan, index, cfg)
    near = {n for q in asked for n in range(q - cfg.near_lines, q + cfg.near_lines + 1)}
    return [i for i, n in ids.items() if n in near]


def evidence_id_hits(scans: Sequence[FileScan], index: LeakageIndex, cfg: LeakageConfig) -> list[LeakageHit]:
    """Many turn ids in a diff, or a few beside question text: what a question -> evidence table looks like."""
    per_file = {s.path: turn_ids(s.file) for s in scans}
    total = len(set().union(*per_file.values())) if per_file else 0
    hits = []
    for scan in scans:
        ids = per_file[scan.path]
        if not ids:
            continue
        near = ids_near_questions(scan, ids, index, cfg)
        if len(near) >= cfg.evidence_ids_near_question_min:
            hits.append(_hit(scan, "evidence_ids", ids[near[0]], f"holds {len(ids)} evidence ids", list(ids), cfg,
                             "beside question words"))
        elif total >= cfg.evidence_ids_min:
            hits.append(_hit(scan, "evidence_ids", min(ids.values()), f"holds {len(ids)} evidence ids", list(ids), cfg))
    return hits


# --- question ids ---------------------------------------------------------------------------------
def question_id_matches(added: AddedFile, index: LeakageIndex) -> dict[str, int]:
    found: dict[str, int] = {}
    for n, text in added.lines:
        for m in QUESTION_ID.finditer(text):
            if m.group(0) in index.question_ids:
                found.setdefault(m.group(0), n)
    return found


def question_id_hits(scans: Sequence[FileScan], index: LeakageIndex, cfg: LeakageConfig) -> list[LeakageHit]:
    """The benchmark's own question ids: memsys has no business knowing which question it is asked."""
    per_file = {s.path: question_id_matches(s.file, index) for s in scans}
    if len(set().union(*per_file.values()) if per_file else set()) < cfg.question_ids_min:
        return []
    return [_hit(s, "question_id", min(per_file[s.path].values()), f"names {len(per_file[s.path])} benchmark question ids",
                 list(per_file[s.path]), cfg)
            for s in scans if per_file[s.path]]


# --- data-like literals ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Table:
    """A literal display (or a window of literals) and how many of its literals look like records."""

    line: int
    literals: int
    records: tuple[str, ...]


def is_record(value: str, cfg: LeakageConfig) -> bool:
    """A question, a hash-like token or a benchmark id: what the keys and cells of a memoriser's table look
    like. Plain sentences are not enough: code keeps tables of descriptions and messages (research's
    lever catalogue holds 25), but not of questions."""
    return (is_question_like(value, cfg.record_min_words) or is_opaque(value, cfg.opaque_min_chars)
            or TURN_ID.search(value) is not None or QUESTION_ID.search(value) is not None)


def outer_displays(tree: ast.AST) -> Iterator[ast.AST]:
    """Dict/list/set/tuple displays not inside another display (a nested table counts once)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.Tuple)):
            yield node
            continue
        stack.extend(ast.iter_child_nodes(node))


def display_tables(source: str, first_line: int, cfg: LeakageConfig) -> list[Table] | None:
    """Tables of the parsed ``source`` (line numbers shifted to the file's); None if it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return None
    out = []
    for node in outer_displays(tree):
        consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value is not None]
        strings = [c for c in consts if isinstance(c, str)]
        out.append(Table(node.lineno + first_line - 1, len(consts), tuple(s for s in strings if is_record(s, cfg))))
    return out


def window_tables(literals: Iterable[Literal], cfg: LeakageConfig) -> list[Table]:
    """Literals of an unparsable fragment, counted per ``cfg.window_lines`` lines."""
    buckets: dict[int, list[Literal]] = defaultdict(list)
    for lit in literals:
        buckets[lit.line // cfg.window_lines].append(lit)
    return [Table(lits[0].line, len(lits), tuple(x.value for x in lits if is_record(x.value, cfg)))
            for _, lits in sorted(buckets.items())]


def file_tables(scan: FileScan, cfg: LeakageConfig) -> list[Table]:
    """A Python file's displays (its whole text if new, else each hunk that parses); windows otherwise."""
    is_py = scan.path.endswith(".py")
    units = [scan.file.lines] if scan.file.new and scan.file.lines else list(scan.file.hunks())
    tables: list[Table] = []
    for unit in units:
        lo, hi = unit[0][0], unit[-1][0]
        parsed = display_tables("\n".join(t for _, t in unit), lo, cfg) if is_py else None
        tables.extend(parsed if parsed is not None else window_tables((x for x in scan.literals if lo <= x.line <= hi), cfg))
    return tables


def data_table_hits(scans: Sequence[FileScan], cfg: LeakageConfig) -> list[LeakageHit]:
    """Large literal tables whose cells are sentences, hashes or ids: benchmark data in code form."""
    hits = []
    for scan in scans:
        for t in file_tables(scan, cfg):
            if t.literals >= cfg.table_min_literals and len(t.records) >= cfg.table_min_record_like:
                what = f"holds a literal table of {t.literals} values, {len(t.records)} of them questions, hashes or ids"
                hits.append(_hit(scan, "data_table", t.line, what, [clip(r, cfg.example_chars) for r in t.records], cfg))
    return hits


def data_blob_hits(scans: Sequence[FileScan], cfg: LeakageConfig) -> list[LeakageHit]:
    """One long hash-like literal (base64 of a compressed table): a table the other signals cannot read."""
    hits = []
    for scan in scans:
        blobs = [lit for lit in scan.literals if is_opaque(lit.value, cfg.blob_min_chars)]
        if blobs:
            what = f"holds {len(blobs)} encoded blob(s) of up to {max(len(b.value) for b in blobs)} characters"
            hits.append(_hit(scan, "data_blob", blobs[0].line, what, [clip(b.value, cfg.example_chars) for b in blobs], cfg))
    return hits


def data_file_hits(scans: Sequence[FileScan], cfg: LeakageConfig) -> list[LeakageHit]:
    """A data or binary file added under the surface: the surface is code, prompts and presets."""
    hits = []
    for scan in scans:
        f = scan.file
        if f.binary or f.path.lower().endswith(DATA_SUFFIXES):
            what = "is a binary file added under the surface" if f.binary else "is a data file added under the surface"
            first = f.lines[0][0] if f.lines else 0
            hits.append(LeakageHit("data_file", f.path, first, clip(scan.line_text(first), cfg.snippet_chars) or "(binary)", what))
    return hits


def levels(scans: Sequence[FileScan], index: LeakageIndex, cfg: LeakageConfig) -> dict[str, int]:
    """Each signal's raw measure on a diff (before its threshold): how close legitimate code comes.

    For tuning only (benchmarks/perf/bench_leakage.py reports history's maxima beside the thresholds).
    """
    questions = [question_matches(s.file, index) for s in scans]
    short = [sum(1 for q in f if len(words(index.questions[q])) < cfg.ngram) for f in questions]
    ids = [turn_ids(s.file) for s in scans]
    tables = [t for s in scans for t in file_tables(s, cfg)]
    big = [t for t in tables if t.literals >= cfg.table_min_literals]
    return {
        "long_questions": max((len(f) - n for f, n in zip(questions, short)), default=0),
        "short_questions": max(short, default=0),
        "answers": len(set().union(*(answer_matches(s, index, cfg) for s in scans))),
        "evidence_ids": len(set().union(*ids)),
        "evidence_ids_near_question": max((len(ids_near_questions(s, i, index, cfg)) for s, i in zip(scans, ids) if i),
                                          default=0),
        "question_ids": len(set().union(*(question_id_matches(s.file, index) for s in scans))),
        "table_literals": max((t.literals for t in tables), default=0),
        "table_records": max((len(t.records) for t in big), default=0),
        "blob_chars": max((len(lit.value) for s in scans for lit in s.literals if is_opaque(lit.value, cfg.opaque_min_chars)),
                          default=0),
        "data_files": len(data_file_hits(scans, cfg)),
    }
