"""What a change adds: the added lines of each surface file, read from git (the screen's only I/O).

Why added lines only: the screen judges what a candidate brings, not what the accepted tree already
holds; a line the change keeps was screened when it was added. A new file is added whole, and a data
or binary file under the surface is reported as such (its bytes are not text to scan).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

SURFACE = ("memsys/", "configs/memory/")
#: the text ``added_text_from_git`` gives a binary file (a NUL byte cannot be in a text file)
BINARY = "\0binary file\0"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_SNIFF = 8000  # bytes looked at for a NUL, as git does


@dataclass(frozen=True, slots=True)
class AddedFile:
    """The lines one change adds to one file, each with its line number in the new file."""

    path: str
    lines: tuple[tuple[int, str], ...]
    new: bool = False  # the whole file is new (``lines`` is all of it)
    binary: bool = False

    @classmethod
    def from_text(cls, path: str, text: str, *, new: bool = True) -> AddedFile:
        """A file given as text: lines numbered from 1 (a new file, or added lines without their numbers)."""
        if text == BINARY:
            return cls(path, (), new=new, binary=True)
        return cls(path, tuple(enumerate(text.split("\n"), start=1)), new=new)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def hunks(self) -> Iterator[tuple[tuple[int, str], ...]]:
        """Runs of consecutively numbered added lines: the units a fragment is parsed and counted in."""
        run: list[tuple[int, str]] = []
        for n, line in self.lines:
            if run and n != run[-1][0] + 1:
                yield tuple(run)
                run = []
            run.append((n, line))
        if run:
            yield tuple(run)


def in_surface(path: str, surface: Sequence[str]) -> bool:
    return any(path == s.rstrip("/") or path.startswith(s.rstrip("/") + "/") for s in surface)


def added_lines(patch: str) -> tuple[tuple[int, str], ...]:
    """(new line number, text) of each ``+`` line of a unified diff (any context width)."""
    out: list[tuple[int, str]] = []
    line_no = 0
    for raw in patch.split("\n"):
        m = _HUNK.match(raw)
        if m:
            line_no = int(m.group(1))
        elif raw.startswith("+") and not raw.startswith("+++ "):
            out.append((line_no, raw[1:]))
            line_no += 1
        elif raw.startswith(" "):
            line_no += 1
    return tuple(out)


def is_binary(data: bytes) -> bool:
    """Git's rule: a NUL in the first 8,000 bytes; also anything that is not UTF-8."""
    if b"\0" in data[:_SNIFF]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _blob_file(path: str, data: bytes, new: bool) -> AddedFile:
    if is_binary(data):
        return AddedFile(path, (), new=new, binary=True)
    text = data.decode("utf-8")
    return AddedFile(path, tuple(enumerate(text.split("\n"), start=1)), new=new)


def _diff_file(diff: object) -> AddedFile | None:
    """One gitpython ``Diff`` (base -> head) as an AddedFile; None for a deletion."""
    if diff.deleted_file or diff.b_blob is None:  # type: ignore[attr-defined]
        return None
    path = diff.b_path  # type: ignore[attr-defined]
    raw = diff.diff or b""  # type: ignore[attr-defined]
    patch = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if diff.new_file or patch.startswith("Binary files") or "GIT binary patch" in patch:  # type: ignore[attr-defined]
        return _blob_file(path, diff.b_blob.data_stream.read(), bool(diff.new_file))  # type: ignore[attr-defined]
    return AddedFile(path, added_lines(patch))


def added_files_from_git(repo_path: str | Path, base_ref: str | None, head_ref: str,
                         surface: Sequence[str] = SURFACE) -> dict[str, AddedFile]:
    """Path -> what ``base_ref..head_ref`` adds to it, for files under ``surface``.

    ``base_ref`` None means the empty tree (a root commit: every file is new). Renames and mode
    changes add nothing; files left without added lines are left out.
    """
    import git

    repo = git.Repo(str(repo_path))
    try:
        head = repo.commit(head_ref)
        paths = [s.rstrip("/") for s in surface]
        if base_ref is None:
            diffs = head.diff(git.NULL_TREE, paths=paths, create_patch=True, unified=0)  # gitpython >= 3.1.30: base -> head
        else:
            diffs = repo.commit(base_ref).diff(head, paths=paths, create_patch=True, unified=0)
        out: dict[str, AddedFile] = {}
        for d in diffs:
            added = _diff_file(d)
            if added is not None and in_surface(added.path, surface) and (added.lines or added.binary):
                out[added.path] = added
        return out
    finally:
        repo.close()


def added_text_from_git(repo_path: str | Path, base_ref: str | None, head_ref: str,
                        surface: Sequence[str] = SURFACE) -> dict[str, str]:
    """Path -> the lines ``base_ref..head_ref`` adds to it, joined (a new file: its whole text; a binary
    file: ``BINARY``). ``added_files_from_git`` keeps each line's number for the report."""
    return {p: BINARY if f.binary else f.text for p, f in added_files_from_git(repo_path, base_ref, head_ref, surface).items()}
