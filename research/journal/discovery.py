"""Which of the six discovery types (docs/design.md section 4) a change is, from what it touched. Pure.

The proposer names a type with its hypothesis; the trajectory keeps that label as
``proposed_type`` and records this classification as ``discovery_type``, so the
taxonomy of a run reflects the files that changed, not what the researcher said.

Each changed path falls in one area:

==================================================  =============================
``configs/memory/`` or a config override            hyperparameter_tuning
prompt files (a ``prompts/`` folder under memsys)   prompt_engineering
``memsys/answer/generate.py`` (answer output)       evaluation_format_alignment
``memsys/ingest``, ``media``, ``store``,            data_pipeline_repair
``memsys/temporal.py``
any other memsys code (retrieve, index, graph,      architectural_change
``memory.py``, ...)
==================================================  =============================

A change that repairs a failing behaviour (``repairs_failure``) is a bug fix whatever
it touched. A change spanning areas takes the area highest in ``PRECEDENCE``: the
most structural code wins, because the smaller edits beside it (a threshold, a prompt
line) usually serve it, and its effect is what the delta measures. Paths outside
memsys and the memory configs (the agent may not change them) do not count.
"""

from __future__ import annotations

import re
from typing import Sequence

from research.journal.trajectory import DISCOVERY_TYPES

#: most structural first: a mixed change is classified by the first type it touches
PRECEDENCE: tuple[str, ...] = (
    "architectural_change",
    "data_pipeline_repair",
    "evaluation_format_alignment",
    "prompt_engineering",
    "hyperparameter_tuning",
)
assert set(PRECEDENCE) | {"bug_fix"} == set(DISCOVERY_TYPES)

_DATA_PIPELINE = ("memsys/ingest/", "memsys/media/", "memsys/store/", "memsys/temporal.py")
_ANSWER_FORMAT = ("memsys/answer/generate.py",)


def path_area(path: str) -> str | None:
    """The discovery type a change to ``path`` alone would be; None outside memsys and configs/memory."""
    p = path.strip().removeprefix("./")
    if p.startswith("configs/memory/"):
        return "hyperparameter_tuning"
    if not p.startswith("memsys/"):
        return None
    if "/prompts/" in p:
        return "prompt_engineering"
    if p in _ANSWER_FORMAT:
        return "evaluation_format_alignment"
    if p.startswith(_DATA_PIPELINE):
        return "data_pipeline_repair"
    return "architectural_change"


def classify_change(paths: Sequence[str], overrides: Sequence[str], *, repairs_failure: bool = False) -> tuple[str, str]:
    """(discovery type, one-line reason) of a change that touched ``paths`` and set ``overrides``."""
    areas: dict[str, list[str]] = {}
    ignored: list[str] = []
    for path in dict.fromkeys(paths):
        area = path_area(path)
        if area is None:
            ignored.append(path)
        else:
            areas.setdefault(area, []).append(path)
    if overrides:
        areas.setdefault("hyperparameter_tuning", []).extend(f"override {o}" for o in overrides)
    touched = _summary(areas)
    if repairs_failure:
        return "bug_fix", f"repairs a failing behaviour ({touched or 'no file named'})"
    if not areas:
        what = f" (only {', '.join(ignored[:3])})" if ignored else ""
        return "architectural_change", f"touches no memsys code or memory config{what}: architectural_change by default"
    kinds = [t for t in PRECEDENCE if t in areas]
    chosen = kinds[0]
    if len(kinds) == 1:
        return chosen, f"{_AREA_NAMES[chosen]} only: {touched}"
    others = ", ".join(_AREA_NAMES[t] for t in kinds[1:])
    return chosen, f"mixed change, {_AREA_NAMES[chosen]} takes precedence over {others}: {touched}"


_AREA_NAMES = {
    "architectural_change": "memsys code",
    "data_pipeline_repair": "ingestion/media/store code",
    "evaluation_format_alignment": "answer output code",
    "prompt_engineering": "prompt files",
    "hyperparameter_tuning": "configuration",
}


def _summary(areas: dict[str, list[str]], shown: int = 3) -> str:
    items = [x for t in PRECEDENCE for x in areas.get(t, [])]
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


_DIFF_GIT = re.compile(r"^diff --git (.+)$")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def paths_from_diff(diff: str) -> list[str]:
    """Repository-relative paths a unified git diff touches, in order, each once.

    Reads the file headers only (``diff --git``, ``rename from/to``, ``---``/``+++`` before
    the first hunk), never hunk lines, so added, deleted, renamed (both names) and binary
    files count and a removed line that starts with "-- " does not; quoted names (spaces,
    non-ASCII) are unquoted.
    """
    out: dict[str, None] = {}
    in_header = False
    for line in diff.splitlines():
        m = _DIFF_GIT.match(line)
        if m:
            in_header = True
            for name in _header_names(m.group(1)):
                out.setdefault(name)
        elif not in_header:
            continue
        elif line.startswith("@@"):
            in_header = False
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            out.setdefault(_unquote(line.split(" ", 2)[2]))
        elif line.startswith(("--- ", "+++ ")):
            name = _unquote(line[4:].split("\t", 1)[0])
            if name != "/dev/null":
                out.setdefault(_strip_prefix(name))
    return list(out)


def _header_names(rest: str) -> list[str]:
    """The names of ``diff --git a/x b/y`` (one when both are the same file)."""
    if '"' in rest:  # git quotes a name with special characters: read the two tokens
        names = _quoted_tokens(rest)
    else:
        parts = rest.split(" ")
        for i in range(1, len(parts)):  # "a/x y b/x y": the split whose halves name the same file
            left, right = " ".join(parts[:i]), " ".join(parts[i:])
            if left.startswith("a/") and right.startswith("b/") and left[2:] == right[2:]:
                return [left[2:]]
        # an unquoted rename with spaces is ambiguous here: its rename from/to lines name both files
        names = parts if len(parts) == 2 else []
    return list(dict.fromkeys(_strip_prefix(n) for n in names))


def _quoted_tokens(text: str) -> list[str]:
    tokens, rest = [], text.strip()
    while rest:
        if rest.startswith('"'):
            end = 1
            while end < len(rest) and rest[end] != '"':
                end += 2 if rest[end] == "\\" else 1
            tokens.append(_unquote(rest[:end + 1]))
            rest = rest[end + 1:].lstrip()
        else:
            token, _, rest = rest.partition(" ")
            tokens.append(token)
            rest = rest.lstrip()
    return tokens


def _strip_prefix(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _unquote(name: str) -> str:
    """Git's C-style quoting ("a/caf\\303\\251.py"): escapes and octal UTF-8 bytes decoded."""
    if len(name) < 2 or name[0] != '"' or name[-1] != '"':
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 == len(body):
            out += ch.encode()
            i += 1
        elif body[i + 1] in "01234567":
            out.append(int(body[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(_ESCAPES.get(body[i + 1], ord(body[i + 1])))
            i += 2
    return out.decode("utf-8", errors="replace")
