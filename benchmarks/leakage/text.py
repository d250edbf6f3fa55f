"""Text helpers of the leakage screen: one normal form shared by the index and the screened diff.

Why one module: a question must normalise to the same words whether it is read from the dataset or
from a hostile comment, or the screen misses it; so both sides call these functions.
All functions are pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9]+")
#: a dialogue turn id as LoCoMo (dia_id) and Mem-Gallery (round, clue) write them: "D12:3"
TURN_ID = re.compile(r"(?<![A-Za-z0-9])D\d{1,3}:\d{1,4}(?![0-9])")
#: a benchmark question id: "<conversation id>:q<index>" (benchmarks/datasets/schema.py)
QUESTION_ID = re.compile(r"(?<![\w-])([A-Za-z0-9][\w-]*):q(\d{1,5})(?!\w)")
_TRIPLE = re.compile(r'("""|\'\'\')(.*?)\1', re.S)
_SINGLE = r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\''
#: a single-line string, or a comment: scanned left to right, a "#" inside a string is not a comment
_SINGLE_OR_COMMENT = re.compile(_SINGLE + r"|#[^\n]*")
_SINGLE_ONLY = re.compile(_SINGLE)
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_-]+")
_QUESTION_START = re.compile(
    r"^\s*(what|when|where|who|whom|whose|why|how|which|did|does|do|is|was|were|are|has|have|had|can|could|would|will)\b",
    re.I)


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words: punctuation, case and spacing never hide a quoted question."""
    return _WORD.findall(text.lower())


def normal(text: str) -> str:
    """The words of ``text`` joined by one space: the key answers and literals are compared by."""
    return " ".join(words(text))


@dataclass(frozen=True, slots=True)
class Literal:
    """A string literal (or, in a data or text file, one field of a line) with the line it starts on."""

    line: int
    value: str


def line_at(starts: list[int], offset: int) -> int:
    """Index of the line holding ``offset`` given each line's start offset (binary search)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _blank(text: str, start: int, end: int) -> str:
    """``text`` with [start, end) replaced by spaces, newlines kept (offsets and lines stay put)."""
    return text[:start] + "".join(c if c == "\n" else " " for c in text[start:end]) + text[end:]


def quoted_literals(text: str, numbers: list[int], *, hash_comments: bool = False) -> list[Literal]:
    """Quoted strings of ``text`` (triple-quoted first, then single-line ones), each with its file line.

    A regex, not ``ast``: added lines of a changed file are fragments that seldom parse, and a literal
    is a literal in Python, YAML or JSON alike. ``numbers[i]`` is the file line of the text's line i.
    With ``hash_comments`` (Python, YAML), ``#`` comments are left out: a quote in a comment is not a
    value the code can read.
    """
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    out: list[Literal] = []
    rest = text
    for m in _TRIPLE.finditer(text):
        out.append(Literal(numbers[line_at(starts, m.start())], m.group(2)))
        rest = _blank(rest, m.start(), m.end())
    for m in (_SINGLE_OR_COMMENT if hash_comments else _SINGLE_ONLY).finditer(rest):
        if not m.group(0).startswith("#"):
            value = m.group(1) if m.group(1) is not None else m.group(2)
            out.append(Literal(numbers[line_at(starts, m.start())], value))
    return sorted(out, key=lambda lit: lit.line)


def field_literals(lines: list[tuple[int, str]], separators: str, *, hash_comments: bool = False) -> list[Literal]:
    """Fields of each line of a structured file (split at ``:``, ``,`` and the separators): YAML or CSV
    values carry answers without quotes. With ``hash_comments``, a line's ``#`` comment is left out."""
    pattern = re.compile("[" + re.escape(separators + ":,") + "]")
    out = []
    for n, line in lines:
        code = _SINGLE_OR_COMMENT.sub(lambda m: "" if m.group(0).startswith("#") else m.group(0), line) if hash_comments else line
        out.extend(Literal(n, f.strip()) for f in pattern.split(code) if f.strip())
    return out


def pieces(value: str, separators: str) -> list[str]:
    """A literal and its parts split at ``separators``: one string may pack many records ("q|a;q|a")."""
    parts = re.split("[" + re.escape(separators) + "\n]", value) if any(s in value for s in separators + "\n") else []
    return [value, *(p for p in parts if p.strip())]


def is_opaque(value: str, min_chars: int) -> bool:
    """A hash-like token (hex, base64, no spaces, letters and digits mixed): what a hashed question
    looks like when a table hides its keys."""
    v = value.strip()
    return (len(v) >= min_chars and _OPAQUE.fullmatch(v) is not None
            and any(c.isdigit() for c in v) and any(c.isalpha() for c in v))


def is_question_like(value: str, min_words: int) -> bool:
    """A sentence that asks (a wh-word or auxiliary first, or a question mark) with enough words."""
    return len(words(value)) >= min_words and (value.rstrip().endswith("?") or _QUESTION_START.match(value) is not None)


def clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, for a hit's snippet."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
