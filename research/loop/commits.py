"""What the tree at a commit holds, as the loop needs to know it: its resolved memory config, the
levers its memsys lacks, and the effective key of what an evaluation there would measure.

Why apart from the loop: every answer here is a pure read of git objects (``Workspace.file_at`` /
``tree_id``), cached per commit because commits never change, while the loop owns mutable run state.
The configs are resolved under *this* checkout's schema and never imported from the tree, so a
hostile edit to ``memsys/config.py`` cannot run code in the trusted process.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from research.workspace.repo import Workspace

log = logging.getLogger(__name__)


class CommitView:
    def __init__(self, ws: Workspace, preset: str, on_event: Callable[[str, dict[str, Any]], None]):
        self.ws, self.preset, self.on_event = ws, preset, on_event
        self._configs: dict[str, Any] = {}
        self._absent: dict[str, frozenset[str]] = {}  # commit -> levers the memsys there lacks

    def config_at(self, commit: str, preset: str | None = None) -> Any:
        """The resolved memory config at ``commit`` under this checkout's schema (None when the
        tree's preset no longer parses with it, e.g. after an edit that added a field). ``preset``: another
        preset of that tree than the run's (``research.study.warm_start``)."""
        key = commit if preset is None else f"{commit}:{preset}"
        if key not in self._configs:
            from omegaconf import OmegaConf

            from harness.config import validate
            from memsys.config import MemoryConfig

            try:
                node = OmegaConf.create(self.ws.file_at(commit, f"configs/memory/{preset or self.preset}.yaml"))
                node.pop("defaults", None)
                self._configs[key] = validate(MemoryConfig, OmegaConf.merge(OmegaConf.structured(MemoryConfig), node))
            except Exception as exc:  # any failure means "not comparable", never a crash
                log.debug("no resolvable config at %s: %s", commit[:10], exc)
                self._configs[key] = None
        return self._configs[key]

    def absent_at(self, commit: str) -> frozenset[str]:
        """Levers of this checkout's catalogue that the memsys at ``commit`` does not declare (a run
        resumed after an upgrade, ``research.repo`` on an older tree, an edit that removed a field).
        Read from that tree's config source, never imported (research/levers/target_schema.py)."""
        if commit not in self._absent:
            from research.levers.scope import absent_levers
            from research.levers.target_schema import CONFIG_SOURCE, schema_paths

            try:
                paths = schema_paths(self.ws.file_at(commit, CONFIG_SOURCE))
            except Exception as exc:  # an unreadable tree: nothing is known to be absent
                log.debug("no config source at %s: %s", commit[:10], exc)
                paths = None
            absent = frozenset(absent_levers(paths) if paths is not None else ())
            if absent and absent not in self._absent.values():  # said once per distinct set
                self.on_event("note", {"text": f"not offered: {', '.join(sorted(absent))} (this checkout's "
                                               f"schema has them, the memsys at {commit[:10]} does not)"})
            self._absent[commit] = absent
        return self._absent[commit]

    def code_tree(self, commit: str) -> str:
        """The tree hash of memsys/ at ``commit``: code identity independent of commit history."""
        return self.ws.tree_id(commit, "memsys")

    def effective_key_at(self, commit: str) -> str:
        """What an evaluation of ``commit`` measures: its code tree and its effective config (the preset's
        tree when the config does not resolve), so two commits that differ only in no-op edits share a key."""
        from research.levers.effective import effective_key as cfg_key
        from research.loop.outcomes import effective_key

        cfg = self.config_at(commit)
        if cfg is not None:
            return effective_key(self.code_tree(commit), cfg_key(cfg))
        preset = self.ws.tree_id(commit, "configs/memory")
        return effective_key(self.code_tree(commit), preset)


def start_commit(ws: Workspace, head: str, preset: str, run_id: str, over: list[str]) -> str:
    """``head``, or ``head`` with the user's ``memory.*`` overrides ``over`` written into the run's preset
    and committed (on a scratch branch; the run's refs keep it). An evaluation reads its preset from the
    tree it evaluates, so overrides kept only in the trusted process's config would be dropped silently;
    as a commit they are the run's starting point for the baseline, every experiment, the best ref and a
    replay alike. The user's checkout is not touched."""
    from harness.errors import ConfigError
    from harness.surface import MUTABLE_SURFACE
    from research.errors import EditApplyError, ForbiddenEditError
    from research.failures import one_line
    from research.levers.presets import check_presets
    from research.workspace.edits import apply_config_overrides

    if not over:
        return head
    wt = ws.create("start", head)
    try:
        changed = apply_config_overrides(wt.path, preset, over, MUTABLE_SURFACE)
        check_presets(wt.path, changed)
        commit = ws.commit(wt, f"run {run_id} starts from {preset} with " + " ".join(over))
    except (EditApplyError, ForbiddenEditError) as exc:
        raise ConfigError(f"cannot start from memory={preset} with {' '.join(over)}: {one_line(exc)}") from exc
    finally:
        ws.discard(wt)
    log.info("the run starts from %s: %s", commit[:10], " ".join(over))
    return commit
