"""The lever catalogue: what the research loop may change in a memory config, and when a change matters.

One source of truth. A field is a lever when memsys/config.py declares it with ``lever(...)`` (effect,
kind, range or choices); this module adds, keyed by path, the rule saying when the field is live (its
value can change what the reader is given), and macro levers for knobs that only act together. From those:

- ``effective_view(cfg)`` (research/levers/effective.py, re-exported): the config with dead fields replaced by
  ``DEAD`` and coupled fields by the value that acts, so configs that differ only in dead fields share an
  ``effective_key`` (the loop judges repeats on it);
- ``live_levers`` / ``render_levers``: what a researcher can usefully change, one prompt line each;
- ``static_noop``: why a set of overrides changes nothing, before anything is evaluated.

Built on it: research/levers/menu.py (a small model's schema-constrained reply, turned into overrides),
research/levers/scope.py (the levers a run holds fixed or its memsys lacks) and research/levers/study.py (the
same levers for a shared Optuna study).

tests/research/levers/test_catalogue.py checks the rules against the real pipeline: for every preset and lever
value it renders the reader input of LoCoMo questions and compares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

from harness.errors import ConfigError
from memsys.config import MemoryConfig
from research.errors import ProposalFormatError
from research.levers.effective import (  # noqa: F401 - effective_view/effective_key/DEAD are part of this module's API
    DEAD,
    DENSE_CUT,
    TIME_LIFT_MIN_POOL,
    compressed,
    dense_text_acts,
    effective_key,
    effective_view,
    facts_shown,
    format_value,
    get_path,
    graph_active,
    graph_reach,
    level1_bound,
    pyramid_expands,
    retrieval_pool,
    with_values,
)

Rule = Callable[[MemoryConfig], bool]
_MISSING = object()


# ---------------------------------------------------------------- when a field lever is live
def _merge_is(*names: str) -> Rule:
    return lambda c: c.retrieval.merge in names


def _field_meta(path: str) -> dict[str, Any]:
    return _declared_map()[path]


#: path -> (human-readable rule, rule over the resolved config); a lever without an entry is always live
LIVE_RULES: dict[str, tuple[str, Rule]] = {
    "retrieval.top_k": ("always; set_union/dense_only keep min(dense_k, top_k) dense hits, bm25_only "
                        "min(sparse_k, top_k)", lambda c: True),
    "retrieval.dense_k": ("merge != bm25_only; set_union/dense_only keep min(dense_k, top_k)",
                          _merge_is("set_union", "dense_only", "rrf", "linear")),
    "retrieval.sparse_k": ("merge != dense_only; bm25_only keeps min(sparse_k, top_k)",
                           _merge_is("set_union", "bm25_only", "rrf", "linear")),
    "retrieval.sparse_fields": ("merge != dense_only and ingest.compression.enabled (a raw turn has no text "
                                "beyond its summary)", lambda c: c.retrieval.merge != "dense_only" and compressed(c)),
    "retrieval.rrf_k": ("merge == rrf", _merge_is("rrf")),
    "retrieval.linear_alpha": ("merge == linear", _merge_is("linear")),
    "pyramid.enabled": ("answer.context_text != summary", lambda c: c.answer.context_text != "summary"),
    "answer.context_text": ("pyramid.enabled; both == full_text unless compressed", lambda c: c.pyramid.enabled),
    "pyramid.theta": ("pyramid.enabled and context_text != summary", pyramid_expands),
    "pyramid.level3": ("pyramid expands and (ingest.compression.enabled or pyramid.level3_media): a raw turn's "
                       "raw content is its full text", lambda c: pyramid_expands(c) and (compressed(c) or c.pyramid.level3_media)),
    "pyramid.budget_tokens": ("pyramid expands, graph facts shown, or level-1 summaries can exceed the budget",
                              lambda c: pyramid_expands(c) or facts_shown(c)
                              or level1_bound(c) > _field_meta("pyramid.budget_tokens")["low"]),
    "graph.enabled": ("graph.max_maus > 0 or graph facts shown",
                      lambda c: c.graph.max_maus > 0 or (c.answer.include_graph_facts and c.graph.max_facts > 0)),
    "graph.hops": ("graph active; hops past the last with beta^d >= min_score are dead", graph_active),
    "graph.beta": ("graph active and hops >= 1", lambda c: graph_active(c) and c.graph.hops >= 1),
    "graph.max_seeds": ("graph active", graph_active),
    "graph.min_score": ("graph active", graph_active),
    "graph.max_maus": ("graph.enabled", lambda c: c.graph.enabled),
    "graph.max_facts": ("graph.enabled and answer.include_graph_facts",
                        lambda c: c.graph.enabled and c.answer.include_graph_facts),
    "answer.include_graph_facts": ("graph.enabled and graph.max_facts > 0",
                                   lambda c: c.graph.enabled and c.graph.max_facts > 0),
    "ingest.text.reject_above": ("ingest.text.enabled", lambda c: c.ingest.text.enabled),
    "ingest.index_text.dense": ("merge != bm25_only, or the pyramid expands (similarity gates level 2)",
                                dense_text_acts),
    "ingest.index_text.sparse": ("merge != dense_only", _merge_is("set_union", "bm25_only", "rrf", "linear")),
    "retrieval.expand_window": ("retrieval.expand_top > 0", lambda c: c.retrieval.expand_top > 0),
    "retrieval.speaker_lift": ("retrieval.speaker_first is false (all of the speaker's turns already lead)",
                               lambda c: not c.retrieval.speaker_first),
    "retrieval.time_lift": (f"the merged list holds at least {TIME_LIFT_MIN_POOL} candidates",
                            lambda c: retrieval_pool(c) >= TIME_LIFT_MIN_POOL),
    "answer.abstain_margin": ("answer.abstain reads retrieval's margin", lambda c: c.answer.abstains_by_margin()),
    "answer.abstain_signal": ("answer.abstain reads retrieval's margin", lambda c: c.answer.abstains_by_margin()),
    "answer.abstain_logprob": ("answer.abstain reads the reader's confidence", lambda c: c.answer.abstains_by_confidence()),
    "graph.placement": ("graph.enabled and graph.max_maus > 0", lambda c: c.graph.enabled and c.graph.max_maus > 0),
    # extractive differs from the cut for any summary of two or more sentences (most raw turns), not only one
    # over summary_max_tokens; such a summary reaches the reader whenever a candidate stays at level 1 (pyramid
    # off, summaries only, similarity <= theta, or no budget left for level 2), and the level-1 sizes decide
    # what fits a binding budget: no config rules it out
    "pyramid.summary_mode": ("always: a candidate left at level 1 shows its summary", lambda c: True),
    "answer.type_hints": ("always (a prompt line); reader-only, so dead for a reader-free objective", lambda c: True),
    "answer.image_ids": ("always (a prompt line on 'which image' questions); reader-only", lambda c: True),
    "answer.resolve_times": ("always (rewrites the reply); reader-only, so dead for a reader-free objective",
                             lambda c: True),
    "answer.abstain_attribution": ("always (checks the reply); reader-only, so dead for a reader-free objective",
                                   lambda c: True),
    "answer.graph_facts_style": ("graph facts shown (graph.enabled, include_graph_facts, max_facts > 0)", facts_shown),
}

#: path -> the highest value that can still act, given the rest of the config (None: no cap)
SPAN_CAPS: dict[str, Callable[[MemoryConfig], int | None]] = {
    "retrieval.top_k": lambda c: (c.retrieval.dense_k if c.retrieval.merge in DENSE_CUT else c.retrieval.sparse_k
                                  if c.retrieval.merge == "bm25_only" else c.retrieval.dense_k + c.retrieval.sparse_k),
    "retrieval.dense_k": lambda c: c.retrieval.top_k if c.retrieval.merge in DENSE_CUT else None,
    "retrieval.sparse_k": lambda c: c.retrieval.top_k if c.retrieval.merge == "bm25_only" else None,
    "graph.hops": lambda c: graph_reach(c, hops=_field_meta("graph.hops")["high"]),
    "pyramid.budget_tokens": lambda c: None if pyramid_expands(c) or facts_shown(c) else level1_bound(c),
}


# ---------------------------------------------------------------- levers
@dataclass(frozen=True)
class Lever:
    id: str
    sets: tuple[str, ...]  # config paths it writes
    kind: str  # int | float | bool | choice
    effect: str
    live_when: str
    live_if: Callable[[MemoryConfig], bool] = field(repr=False, compare=False)
    low: Any = None
    high: Any = None
    choices: tuple[Any, ...] | None = None
    step: float | None = None  # the grid a menu offers for a float
    writes: Callable[[Any], dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    reads: Callable[[MemoryConfig], Any] | None = field(default=None, repr=False, compare=False)
    cap: Callable[[MemoryConfig], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def is_macro(self) -> bool:
        return self.sets != (self.id,)

    def values(self, value: Any) -> dict[str, Any]:
        """Config path -> value that setting this lever to ``value`` writes."""
        return self.writes(value) if self.writes else {self.id: value}

    def overrides(self, value: Any) -> list[str]:
        return [f"{k}={format_value(v)}" for k, v in self.values(value).items()]

    def apply(self, cfg: MemoryConfig, value: Any) -> MemoryConfig:
        return with_values(cfg, self.values(value))

    def current(self, cfg: MemoryConfig) -> Any:
        """The lever's value in ``cfg`` (None for a macro whose knobs are not in its shape)."""
        return self.reads(cfg) if self.reads else get_path(cfg, self.id)

    def validate(self, value: Any) -> Any:
        """``value`` as the lever's type; ProposalFormatError if it is not one of its values."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ProposalFormatError(f"{self.id}: expected true or false, got {value!r}")
            return value
        if self.kind == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ProposalFormatError(f"{self.id}: unknown choice {value!r} (one of {' | '.join(self.choices)})")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProposalFormatError(f"{self.id}: expected a number, got {value!r}")
        if self.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ProposalFormatError(f"{self.id}: expected an integer, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if not self.low <= value <= self.high:
            raise ProposalFormatError(f"{self.id}={value} is outside [{self.low}..{self.high}]")
        return value

    def span(self, cfg: MemoryConfig) -> tuple[Any, Any]:
        """(low, high) of the values that can act in ``cfg`` (high < low: none)."""
        cap = self.cap(cfg) if self.cap else None
        return self.low, self.high if cap is None else min(self.high, cap)

    def grid(self) -> list[Any]:
        """Every value of a bool, choice or float lever (floats on their step), for probing and menus."""
        if self.kind == "bool":
            return [True, False]
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "float" and self.step:
            n = int(round((self.high - self.low) / self.step))
            return [round(self.low + i * self.step, 6) for i in range(n + 1)]
        return [self.low, self.high]

    def options(self, cfg: MemoryConfig) -> list[Any]:
        """Values that change the effective config (for an int: the ends of its live span that do)."""
        lo, hi = self.span(cfg)
        if self.kind == "int":
            probe = [lo, hi] if lo <= hi else []
        else:
            probe = [v for v in self.grid() if self.kind != "float" or lo <= v <= hi]
        base = effective_key(cfg)
        return [v for v in dict.fromkeys(probe) if effective_key(self.apply(cfg, v)) != base]


def _declared() -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, lever metadata) of every field memsys/config.py declares with ``lever(...)``."""
    def walk(obj: Any, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from walk(value, f"{prefix}{f.name}.")
            elif "lever" in f.metadata:
                yield prefix + f.name, f.metadata["lever"]

    return walk(MemoryConfig(), "")


@lru_cache(maxsize=1)
def _declared_map() -> dict[str, dict[str, Any]]:
    return dict(_declared())


def _make(rule: Rule, **kw: Any) -> Lever:
    """A lever whose live_if is its rule and at least one value that changes the effective config."""
    box: list[Lever] = []
    lever = Lever(live_if=lambda cfg: rule(cfg) and bool(box[0].options(cfg)), **kw)
    box.append(lever)
    return lever


def _field_lever(path: str, meta: dict[str, Any]) -> Lever:
    when, rule = LIVE_RULES.get(path, ("always", lambda c: True))
    return _make(rule, id=path, sets=(path,), kind=meta["kind"], effect=meta["effect"], live_when=when,
                 low=meta["low"], high=meta["high"], choices=meta["choices"], step=meta["step"], cap=SPAN_CAPS.get(path))


def _hybrid_width(cfg: MemoryConfig) -> int | None:
    r = cfg.retrieval
    return r.sparse_k if r.merge == "set_union" and min(r.dense_k, r.top_k) == r.sparse_k else None


def _macros() -> list[Lever]:
    k = _field_meta("retrieval.top_k")
    return [
        _make(_merge_is(*DENSE_CUT), id="widen_dense", sets=("retrieval.dense_k", "retrieval.top_k"), kind="int",
              low=k["low"], high=k["high"], effect="Dense hits kept: sets dense_k and top_k together (one alone is cut by the other)",
              live_when="merge is set_union or dense_only",
              writes=lambda v: {"retrieval.dense_k": v, "retrieval.top_k": v},
              reads=lambda c: min(c.retrieval.dense_k, c.retrieval.top_k)),
        _make(_merge_is("bm25_only"), id="widen_bm25", sets=("retrieval.sparse_k", "retrieval.top_k"), kind="int",
              low=k["low"], high=k["high"], effect="BM25 hits kept: sets sparse_k and top_k together",
              live_when="merge == bm25_only",
              writes=lambda v: {"retrieval.sparse_k": v, "retrieval.top_k": v},
              reads=lambda c: min(c.retrieval.sparse_k, c.retrieval.top_k)),
        _make(lambda c: True, id="widen_hybrid",
              sets=("retrieval.merge", "retrieval.dense_k", "retrieval.sparse_k", "retrieval.top_k"), kind="int",
              low=k["low"], high=k["high"], effect="Hybrid retrieval: set_union of v dense hits and v BM25 hits the dense list missed",
              live_when="when it changes the config",
              writes=lambda v: {"retrieval.merge": "set_union", "retrieval.dense_k": v, "retrieval.sparse_k": v,
                                "retrieval.top_k": v},
              reads=_hybrid_width),
        _make(lambda c: True, id="full_text_context", sets=("pyramid.enabled", "answer.context_text", "pyramid.level3"),
              kind="bool", effect="Full text for candidates above theta (pyramid on, context_text=full_text); false: summaries only",
              live_when="when it changes the config",
              writes=lambda v: {"pyramid.enabled": v, "answer.context_text": "full_text" if v else "summary",
                                "pyramid.level3": v},
              reads=pyramid_expands),
        _make(lambda c: True, id="graph_on", sets=("graph.enabled", "answer.include_graph_facts"), kind="bool",
              effect="Knowledge graph on, with its fact lines shown to the reader (false: off)",
              live_when="when it changes the config",
              writes=lambda v: {"graph.enabled": v, "answer.include_graph_facts": v},
              reads=lambda c: c.graph.enabled and c.answer.include_graph_facts),
    ]


_SECTIONS = ("retrieval", "pyramid", "graph", "answer", "ingest")  # the order levers are shown in


@lru_cache(maxsize=1)
def _catalogue() -> tuple[Lever, ...]:
    fields = sorted(_declared(), key=lambda pm: _SECTIONS.index(pm[0].split(".")[0]))  # stable: schema order within
    return (*(_field_lever(p, m) for p, m in fields), *_macros())


def catalogue() -> list[Lever]:
    """Every lever: the schema's field levers, then the macros."""
    return list(_catalogue())


def lever_by_id(lever_id: str) -> Lever | None:
    return next((lv for lv in _catalogue() if lv.id == lever_id), None)


def reader_only(lever: Lever) -> bool:
    """A lever that changes only what the reader is asked, not the context: dead for a reader-free objective."""
    return all(p.startswith("answer.") for p in lever.sets)


def live_levers(cfg: MemoryConfig, *, reader_free: bool = False, absent: Collection[str] = ()) -> list[Lever]:
    """``absent``: ids of levers the evaluated memsys does not have (see ``absent_levers``), never live."""
    return [lv for lv in _catalogue()
            if lv.id not in absent and lv.live_if(cfg) and not (reader_free and reader_only(lv))]


def _probes(lever: Lever) -> list[Any]:
    return lever.grid() if lever.kind != "float" else [lever.low, lever.high]


def coupled_levers(cfg: MemoryConfig, chosen: Sequence[str], *, reader_free: bool = False,
                   most: int = 6, absent: Collection[str] = ()) -> list[str]:
    """Field levers that must move with ``chosen`` for a change of them to reach its range.

    A menu shows only live levers, so a model that picks ``retrieval.merge`` under ``dense_only`` cannot
    also pick ``sparse_k``: it is dead until the merge changes. And an int lever can be capped by
    another (``top_k`` keeps at most ``dense_k`` dense hits). So a subspace is closed over (1) levers
    that some value of a chosen lever brings to life, and (2) levers that lift the cap of a chosen or
    newly live lever, in the current config or once a chosen value is set. Found by probing each
    lever's ends and choices, not from a hand-written table, so it follows LIVE_RULES and SPAN_CAPS.
    At most ``most`` are added, in catalogue order.
    """
    fields = [lv for lv in _catalogue()
              if not lv.is_macro and lv.id not in absent and not (reader_free and reader_only(lv))]
    by_id = {lv.id: lv for lv in fields}
    picked = [by_id[i] for i in chosen if i in by_id]
    live_now = {lv.id for lv in fields if lv.live_if(cfg)}
    worlds, woken = [cfg], set()
    for lv in picked:
        for v in _probes(lv):
            probed = lv.apply(cfg, v)
            worlds.append(probed)
            woken |= {f.id for f in fields if f.id not in live_now and f.live_if(probed)}

    def lifters(levers: list[Lever]) -> set[str]:
        out = set()
        for world in worlds:
            for lv in (x for x in levers if x.cap is not None):
                span = lv.span(world)
                out |= {f.id for f in fields if f is not lv and any(lv.span(f.apply(world, v))[1] > span[1] for v in _probes(f))}
        return out

    in_order = [lv.id for lv in fields]
    ranked = [*(i for i in in_order if i in woken), *(i for i in in_order if i in lifters(picked)),
              *(i for i in in_order if i in lifters([by_id[i] for i in woken]))]
    return [i for i in dict.fromkeys(ranked) if i not in chosen][:most]


def _values_text(lever: Lever, cfg: MemoryConfig) -> str:
    """What a lever's line shows beside its current value: a range for a number, the other values for a
    bool or a choice. A range always holds the current value (``range_text``)."""
    cur = lever.current(cfg)
    if lever.kind == "int":
        lo, hi = lever.span(cfg)
        return range_text(lo, hi, cur, declared=(lever.low, lever.high))
    opts = lever.options(cfg)
    if lever.kind == "float":  # the grid less the current value (which changes nothing): put it back
        return range_text(min([*opts, cur]), max([*opts, cur]), cur, declared=(lever.low, lever.high))
    return "{" + "|".join(format_value(v) for v in opts) + "}"


def range_text(lo: Any, hi: Any, cur: Any, *, declared: tuple[Any, Any]) -> str:
    """``[lo..hi]`` widened to hold ``cur``, with a note saying why when it had to be.

    Why: a capable researcher read ``pyramid.budget_tokens = 6000 [1000..4000]`` as a contradiction (is
    6000 allowed? did it act?). Past the cap of the values that act (``hi`` below the declared high), a
    larger value acts as the cap does; past the declared range, the value came from the preset itself."""
    if cur is None or isinstance(cur, bool) or lo <= cur <= hi:
        return f"[{format_value(lo)}..{format_value(hi)}]"
    low, high = declared
    if cur > hi:
        why = f"above {format_value(hi)} acts as {format_value(hi)} here" if hi < high else \
            f"the preset's value, above the declared {format_value(high)}"
        return f"[{format_value(lo)}..{format_value(cur)}] ({why})"
    return f"[{format_value(cur)}..{format_value(hi)}] (the preset's value, below the declared {format_value(low)})"


def offered_levers(cfg: MemoryConfig, *, reader_free: bool = False,
                   withheld: Collection[str] = (), absent: Collection[str] = ()) -> list[Lever]:
    """The live levers a menu offers: ``withheld`` ones left out, unless that would leave none
    (``absent`` ones always: the evaluated memsys lacks them)."""
    live = live_levers(cfg, reader_free=reader_free, absent=absent)
    offered = [lv for lv in live if lv.id not in withheld]
    return offered or live


def levers_of(overrides: Sequence[str]) -> list[str]:
    """Ids of the levers a set of overrides writes: each field lever whose path is set, and each
    macro whose every path is set (so a menu reply maps back to the levers it named)."""
    paths = {_split(o)[0] for o in overrides if "=" in o}
    return [lv.id for lv in _catalogue() if lv.sets and set(lv.sets) <= paths]


def render_levers(cfg: MemoryConfig, *, reader_free: bool = False, withheld: Mapping[str, str] | None = None,
                  absent: Collection[str] = ()) -> str:
    """One line per live lever, ``id = current  [values that act]  effect`` (dead levers left out).

    ``withheld``: lever id -> why it is not offered now; those leave the list for one closing line
    that says why, so the model knows they exist and what became of them."""
    withheld = withheld or {}
    offered = offered_levers(cfg, reader_free=reader_free, withheld=withheld, absent=absent)
    lines = []
    for lv in offered:
        cur = lv.current(cfg)
        lines.append(f"{lv.id} = {'-' if cur is None else format_value(cur)}  {_values_text(lv, cfg)}  {lv.effect}")
    shown = {lv.id for lv in offered}
    live = {lv.id for lv in live_levers(cfg, reader_free=reader_free, absent=absent)}  # dead: not shown either way
    left_out = [f"{i} ({why})" for i, why in withheld.items() if i in live and i not in shown]
    if left_out:
        lines.append("Not offered now: " + "; ".join(left_out))
    return "\n".join(lines)


# ---------------------------------------------------------------- overrides
def _split(override: str) -> tuple[str, str]:
    if "=" not in override:
        raise ConfigError(f"override {override!r} is not key=value")
    key, raw = (s.strip() for s in override.split("=", 1))
    return key.removeprefix("memory."), raw


def resolve(cfg: MemoryConfig, overrides: Sequence[str]) -> MemoryConfig:
    """The config after ``key=value`` overrides (keys relative to the memory config, ``memory.`` allowed;
    values parsed as YAML, as research/workspace/edits.py writes them). Unknown key or bad type: ConfigError."""
    if not overrides:
        return cfg
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from harness.config import override_value

    node = OmegaConf.structured(cfg)
    OmegaConf.set_struct(node, True)
    for ov in overrides:
        key, raw = _split(ov)
        try:
            if OmegaConf.select(node, key, default=_MISSING) is _MISSING:
                raise ConfigError(f"override {ov!r}: unknown key '{key}'")
            OmegaConf.update(node, key, override_value(raw), merge=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override {ov!r}: {str(exc).splitlines()[0]}") from exc
    return OmegaConf.to_object(node)


def expand_macros(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with each macro lever's ``id=value`` replaced by the memory keys the macro writes.

    Why: the lever list offers macros (``widen_hybrid = -  [2..60]``) and says an override is "the lever
    id=value", but a preset has no key ``widen_hybrid``: written as is, it failed the proposal with a
    ConfigKeyError. Expanded by the catalogue's own definition (``Lever.overrides``), it writes exactly
    what the menu would. A value the macro does not take raises ProposalFormatError, as a menu reply's does."""
    out: list[str] = []
    for ov in overrides:
        lever = lever_by_id(_split(ov)[0]) if "=" in ov else None
        if lever is None or not lever.is_macro:
            out.append(ov)
            continue
        value = lever.validate(_parse_value(_split(ov)[1], ov))
        out += [o for o in lever.overrides(value) if o not in out]
    return out


def _parse_value(raw: str, override: str) -> Any:
    """A value as YAML reads it (as research/workspace/edits.py writes it into a preset)."""
    import yaml
    from omegaconf.errors import OmegaConfBaseException

    from harness.config import override_value

    try:
        return override_value(raw)
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise ProposalFormatError(f"override {override!r}: {str(exc).splitlines()[0]}") from exc


def static_noop(cfg: MemoryConfig, overrides: Sequence[str]) -> str | None:
    """Why ``overrides`` change nothing effective in ``cfg`` (every touched key dead in the result or
    already at its value), or None when they change the effective config."""
    if not overrides:
        return "no overrides"
    new = resolve(cfg, overrides)
    if effective_key(new) != effective_key(cfg):
        return None
    reasons = []
    for ov in overrides:
        key, raw = _split(ov)
        lever = lever_by_id(key)
        if get_path(new, key) == get_path(cfg, key):
            reasons.append(f"{key} is already {raw}")
        elif lever is None:
            reasons.append(f"{key}={raw} does not change what the reader is given")
        elif lever.kind == "int" and lever.live_if(new):
            reasons.append(f"{key}={raw} acts only in [{'..'.join(map(str, lever.span(new)))}] here ({lever.live_when})")
        else:
            reasons.append(f"{key}={raw} is dead here (live when {lever.live_when})")
    return "no effective change: " + "; ".join(reasons)
