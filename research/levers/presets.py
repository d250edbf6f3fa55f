"""Checks of memory presets an experiment changed: they may describe ``memory`` and nothing else.

The trusted side never composes a worktree's preset (the sandbox composes it from its own
tree, and the benchmark, split and objective are composed here from this checkout), so a
preset cannot change what is scored. This check only turns an attempt at it into a clear,
early ``forbidden_edit`` instead of a confusing failure inside the sandbox: a Hydra
``@package`` directive, a defaults entry that reaches another config group, or a ``hydra``
key are refused before evaluation.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from research.errors import PresetError

PRESET_DIR = "configs/memory"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
_PACKAGE = re.compile(r"^\s*#\s*@package\b", re.MULTILINE)


def check_preset_text(name: str, text: str, known: set[str]) -> None:
    """Raise PresetError when ``text`` (a file of configs/memory) reaches outside ``memory``."""
    if _PACKAGE.search(text):
        raise PresetError(f"{name}: a '# @package' directive moves the preset out of 'memory'")
    try:
        node = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except Exception as exc:  # omegaconf/yaml raise several types for bad YAML
        raise PresetError(f"{name}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(node, DictConfig):
        raise PresetError(f"{name}: a preset must be a mapping")
    if "hydra" in node:
        raise PresetError(f"{name}: a preset may not configure hydra")
    defaults = node.get("defaults")
    if defaults is None:
        return
    if not isinstance(defaults, ListConfig):
        raise PresetError(f"{name}: defaults must be a list")
    for entry in defaults:
        if not isinstance(entry, str) or not _NAME.match(entry) or (entry not in ("_self_", "_schema")
                                                                     and entry not in known):
            raise PresetError(f"{name}: defaults entry {entry!r} is not another memory preset "
                              "(only _schema, _self_ and files of configs/memory)")


def check_presets(root: Path, changed: Iterable[str]) -> list[str]:
    """Check every changed file under configs/memory in the tree ``root``; returns the presets checked."""
    folder = root / PRESET_DIR
    known = {p.stem for p in folder.glob("*.yaml")} if folder.is_dir() else set()
    checked = []
    for rel in changed:
        p = PurePosixPath(rel)
        if str(p.parent) != PRESET_DIR:
            if str(p).startswith(PRESET_DIR + "/"):
                raise PresetError(f"{rel}: presets live directly in {PRESET_DIR}/ (no sub-folders)")
            continue
        path = root / rel
        if not path.exists():
            continue  # deleted
        if p.suffix != ".yaml":
            raise PresetError(f"{rel}: only .yaml presets may live in {PRESET_DIR}/")
        check_preset_text(rel, path.read_text(encoding="utf-8"), known)
        checked.append(p.stem)
    return checked
