"""The mutable surface: the only paths the research agent may change, declared once.

Everything that checks an edit, a commit or a preset reads it from here; nothing
else in the repository may be changed by an experiment.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Iterable

#: path prefixes (repository-relative, POSIX) the agent may edit
MUTABLE_SURFACE: tuple[str, ...] = ("memsys/", "configs/memory/")


def in_surface(path: str, surface: Iterable[str] = MUTABLE_SURFACE) -> bool:
    """True when a repository-relative path lies inside the surface (no absolute paths, no '..')."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return False
    text = str(p)
    return any(text == s.rstrip("/") or text.startswith(s.rstrip("/") + "/") for s in surface)


def outside_surface(paths: Iterable[str], surface: Iterable[str] = MUTABLE_SURFACE) -> list[str]:
    """The paths that are not in the surface, in the order given."""
    allowed = tuple(surface)
    return [p for p in paths if not in_surface(p, allowed)]
