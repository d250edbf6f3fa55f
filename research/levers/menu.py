"""The schema-constrained menu: a small model's reply as a JSON schema over live levers, read back into
validated overrides.

Why a schema: a 1.5B reader-sized model cannot write working code edits, but under a grammar it can
pick a lever and a value that acts; what the grammar cannot express, it cannot propose.
"""

from __future__ import annotations

from typing import Any, Collection

from memsys.config import MemoryConfig
from research.errors import ProposalFormatError
from research.levers.catalogue import Lever, lever_by_id, offered_levers
from research.levers.effective import format_value

#: what a proposal says it aims at (the failure classes of research.evaluation.diagnosis, and "other")
FAILURE_TARGETS = ("retrieval_miss", "reader_miss", "abstention", "other")

#: most integers a menu lists for one lever; a wider span is offered on a round step
MENU_INTS = 64
_ROUND_STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)


def int_menu(lo: int, hi: int, most: int = MENU_INTS) -> list[int]:
    """The integers a menu offers for the span [lo, hi]: every one, or a round step from ``lo`` (with
    ``hi`` itself) when there are more than ``most``."""
    if hi < lo:
        return []
    step = next((s for s in _ROUND_STEPS if (hi - lo) // s + 1 <= most), _ROUND_STEPS[-1])
    values = list(range(lo, hi + 1, step))
    return values if values[-1] == hi else [*values, hi]


def _value_schema(lever: Lever, cfg: MemoryConfig) -> dict[str, Any]:
    """An int's bounds are also spelled out as an ``enum``: llama.cpp's json-schema-to-grammar (0.3.x)
    ignores ``minimum``/``maximum``, so the embedded model could answer ``dense_k=70`` to a [2..60] menu
    and lose the step to a format failure; an enum is a grammar it cannot leave."""
    if lever.kind == "int":
        lo, hi = lever.span(cfg)
        return {"type": "integer", "minimum": lo, "maximum": hi, "enum": int_menu(int(lo), int(hi))}
    return {"enum": lever.options(cfg)}  # bool, choice, float grid: the values that act


def menu_schema(cfg: MemoryConfig, max_changes: int = 2, *, reader_free: bool = False,
                withheld: Collection[str] = (), absent: Collection[str] = ()) -> dict[str, Any]:
    """JSON schema of a menu reply: 1..max_changes changes, each a live lever with a value that can act.
    Uses only what llama.cpp's json-schema-to-grammar supports (anyOf, const, enum, integer bounds).

    ``withheld`` levers are not in it (see ``offered_levers``): a 1.5B model told in words that a change
    did nothing proposes it again, step after step; a grammar that cannot express it ends that."""
    items = [{"type": "object",
              "properties": {"lever": {"const": lv.id}, "value": _value_schema(lv, cfg)},
              "required": ["lever", "value"], "additionalProperties": False}
             for lv in offered_levers(cfg, reader_free=reader_free, withheld=withheld, absent=absent)]
    if not items:
        raise ProposalFormatError("no live lever in this config")
    return {"type": "object",
            "properties": {"hypothesis": {"type": "string"},
                           "targets": {"type": "string", "enum": list(FAILURE_TARGETS)},
                           "why": {"type": "string"},
                           "changes": {"type": "array", "items": {"anyOf": items}, "minItems": 1, "maxItems": max_changes}},
            "required": ["hypothesis", "targets", "why", "changes"], "additionalProperties": False}


def parse_menu(data: Any, cfg: MemoryConfig) -> list[str]:
    """Overrides of a menu reply; ProposalFormatError for an unknown or dead lever, a bad value, or two
    changes writing different values to the same key."""
    changes = data.get("changes") if isinstance(data, dict) else None
    if not isinstance(changes, list) or not changes:
        raise ProposalFormatError("menu reply has no changes")
    written: dict[str, Any] = {}
    out: list[str] = []
    for ch in changes:
        lever = lever_by_id(ch.get("lever")) if isinstance(ch, dict) and isinstance(ch.get("lever"), str) else None
        if lever is None:
            raise ProposalFormatError(f"unknown lever in {ch!r}")
        if not lever.live_if(cfg):
            raise ProposalFormatError(f"lever {lever.id} is dead in this config (live when {lever.live_when})")
        value = lever.validate(ch.get("value"))
        for path, v in lever.values(value).items():
            if path in written and written[path] != v:
                raise ProposalFormatError(f"two changes set {path} ({format_value(written[path])} and {format_value(v)})")
            written[path] = v
        out += [o for o in lever.overrides(value) if o not in out]
    return out
