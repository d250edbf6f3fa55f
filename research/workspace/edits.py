"""SEARCH/REPLACE edits and config overrides, applied to a worktree. Pure where possible.

SEARCH/REPLACE blocks (the aider / OpenEvolve convention) are robust and reviewable:
the search text must occur exactly; we also accept a match that differs only in
trailing whitespace per line, because models often drop it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Sequence

from research.errors import EditApplyError, ForbiddenEditError
from research.journal.trajectory import Edit


def apply_block(text: str, search: str, replace: str, where: str) -> str:
    if search == "":
        raise EditApplyError(f"{where}: empty SEARCH text (to create a file, give its whole content as REPLACE with path of a new file)")
    if search in text:
        return text.replace(search, replace, 1)
    # tolerate trailing-whitespace differences line by line
    pattern = r"\n".join(re.escape(line.rstrip()) + r"[ \t]*" for line in search.split("\n"))
    m = re.search(pattern, text)
    if m:
        return text[: m.start()] + replace + text[m.end():]
    first = search.strip().splitlines()[0][:60] if search.strip() else ""
    raise EditApplyError(f"{where}: SEARCH text not found (first line: {first!r})")


def check_surface(paths: Sequence[str], surface: Sequence[str]) -> None:
    """Every path must lie inside one of the mutable-surface prefixes."""
    for p in paths:
        pp = PurePosixPath(p)
        if pp.is_absolute() or ".." in pp.parts:
            raise ForbiddenEditError(f"edit path {p!r} leaves the repository")
        if not any(str(pp) == s.rstrip("/") or str(pp).startswith(s.rstrip("/") + "/") for s in surface):
            raise ForbiddenEditError(f"edit to {p!r} is outside the mutable surface ({', '.join(surface)})")


def apply_edits(root: Path, edits: Sequence[Edit], surface: Sequence[str]) -> list[str]:
    """Apply blocks in order (all or nothing); returns the changed paths."""
    check_surface([e.path for e in edits], surface)
    new: dict[str, str] = {}
    for n, e in enumerate(edits, start=1):
        path = root / e.path
        if e.path in new:
            text = new[e.path]
        elif path.exists():
            text = path.read_text(encoding="utf-8")
        elif e.search.strip() == "":
            new[e.path] = e.replace  # a new file
            continue
        else:
            raise EditApplyError(f"edit {n}: file {e.path} does not exist")
        new[e.path] = apply_block(text, e.search, e.replace, f"edit {n} ({e.path})")
    for rel, text in new.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return list(new)


def apply_config_overrides(root: Path, preset: str, overrides: Sequence[str], surface: Sequence[str]) -> list[str]:
    """Write ``memory.x.y=value`` overrides into configs/memory/<preset>.yaml (so they are committed).

    The keys are validated against the MemoryConfig schema: a typo is an error, not a no-op.
    """
    if not overrides:
        return []
    from omegaconf import OmegaConf

    from harness.config import override_value
    from memsys.config import MemoryConfig, validate

    rel = f"configs/memory/{preset}.yaml"
    check_surface([rel], surface)
    path = root / rel
    cfg = OmegaConf.load(path) if path.exists() else OmegaConf.create({})
    for ov in overrides:
        if "=" not in ov:
            raise EditApplyError(f"config override {ov!r} is not key=value")
        key, value = ov.split("=", 1)
        key = key.strip()
        if key.startswith("memory."):
            key = key[len("memory."):]
        try:
            OmegaConf.update(cfg, key, override_value(value), force_add=True)
        except Exception as exc:
            raise EditApplyError(f"config override {ov!r}: {str(exc).splitlines()[0]}") from exc
    try:
        body = {k: v for k, v in OmegaConf.to_container(cfg).items() if k != "defaults"}  # Hydra's list
        validate(MemoryConfig, body, where=f"{rel} after overrides")
    except Exception as exc:
        raise EditApplyError(str(exc)) from exc
    path.write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
    return [rel]
