"""Which levers a run may move: those it holds at its own values, and those its memsys lacks.

Why apart from the catalogue: these read a run's settings (``research.fixed_levers``) and the schema of
the tree it evaluates, which can be older than this checkout; the catalogue itself only knows this
checkout's schema.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from harness.errors import ConfigError
from memsys.config import MemoryConfig
from research.levers.catalogue import catalogue
from research.levers.effective import get_path


@dataclass(frozen=True)
class Held:
    """What ``research.fixed_levers`` keeps at the run's own values: the memory keys, and every lever that
    writes one of them (never offered, sampled or accepted, so a reader run can keep, say, its context
    budget, and the search stays in the part of the space the user asked about)."""

    keys: frozenset[str] = frozenset()
    lever_ids: frozenset[str] = frozenset()

    def moved(self, before: MemoryConfig, after: MemoryConfig) -> list[str]:
        """``key before -> after`` for each held key whose value differs (an override or a code edit)."""
        return [f"{k} {get_path(before, k)!r} -> {get_path(after, k)!r}" for k in sorted(self.keys)
                if get_path(before, k) != get_path(after, k)]


def held_levers(entries: Sequence[str]) -> Held:
    """``research.fixed_levers`` read: each entry is a lever id (a macro holds every key it writes) or a
    memory key path (``pyramid.budget_tokens``; ``memory.`` allowed). ConfigError names an entry that is
    neither, with the levers it could have meant."""
    from memsys.config import to_container

    by_id = {lv.id: lv for lv in catalogue()}
    known = flat_paths(to_container(MemoryConfig()))
    keys: set[str] = set()
    for entry in entries:
        name = str(entry).strip().removeprefix("memory.")
        if name in by_id:
            keys |= set(by_id[name].sets)
        elif name in known:
            keys.add(name)
        else:
            near = difflib.get_close_matches(name, sorted(set(by_id) | known), n=3, cutoff=0.75)
            raise ConfigError(f"research.fixed_levers: {entry!r} is neither a lever nor a memory key"
                              + (f" (did you mean {', '.join(near)}?)" if near else " (e.g. pyramid.budget_tokens)"))
    # a key is held with everything under it (``answer`` holds answer.prompt ...)
    ids = frozenset(lv.id for lv in by_id.values() if any(s == k or s.startswith(k + ".") for s in lv.sets for k in keys))
    return Held(frozenset(keys), ids)


def flat_paths(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every dotted key path of a nested mapping, inner nodes included (``answer``, ``answer.prompt``)."""
    out: set[str] = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out.add(path)
        if isinstance(value, Mapping):
            out |= flat_paths(value, path + ".")
    return out


def absent_levers(known_paths: Collection[str]) -> list[str]:
    """Ids of the levers that set a key the evaluated memsys lacks.

    The catalogue is this checkout's schema; the run evaluates its repo's memsys/, which can be older (a
    run resumed after the harness was upgraded, or ``research.repo`` on an older tree) or edited. A lever
    it lacks fails every evaluation at config composition, so it must not be offered nor sampled.
    ``known_paths``: the keys of the memory config the run's own code resolved (``flat_paths``)."""
    known = set(known_paths)
    return [lv.id for lv in catalogue() if any(p not in known for p in lv.sets)]
