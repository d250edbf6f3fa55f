"""Config composition and validation, shared by the scorer, the loop and the memory system.

Hydra composes a primary config from a config folder with ``key=value`` overrides;
a structured dataclass schema then closes it (unknown keys and wrong types fail at
composition, not at first use). Which schemas exist is the caller's business: the
memory system registers its own (``memsys.config.register_schemas``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.errors import ConfigError
from harness.paths import config_dir

#: words YAML 1.1 (and so OmegaConf's loader) reads as booleans, besides true/false
_YAML11_BOOL_WORDS = frozenset({"on", "off", "yes", "no"})


def override_value(raw: str) -> Any:
    """The value of one ``key=value`` override's text, parsed as YAML except the words YAML 1.1 turns into
    booleans: they stay strings. Why: a string lever's ``answer.abstain=off`` was parsed as False and
    stored as the string 'False', a value outside the lever's choices (the Optuna study dropped it and
    the lever list showed it). A bool field still takes 'off': OmegaConf converts the word itself."""
    text = raw.strip()
    if text.lower() in _YAML11_BOOL_WORDS:
        return text
    return OmegaConf.create(f"v: {text}").v


def validate(schema: type, node: Any, where: str = "config") -> Any:
    """Merge ``node`` into the structured ``schema``; unknown keys and wrong types raise."""
    try:
        base = OmegaConf.structured(schema)
        OmegaConf.set_struct(base, True)
        if OmegaConf.is_config(node):  # a composed node may carry keys force-added with '+'
            node = OmegaConf.to_container(node, resolve=True)
            if isinstance(node, dict):
                node.pop("defaults", None)
        merged = OmegaConf.merge(base, node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        # the first line of a type error does not say which key: name it from full_key
        key = getattr(exc, "full_key", None)
        at = f" at '{key}'" if key else ""
        raise ConfigError(f"invalid {where}{at}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}") from exc


def compose(config_name: str, overrides: Sequence[str] = (), directory: Path | None = None) -> DictConfig:
    """Compose a primary config from ``configs/`` with Hydra-style ``key=value`` overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    directory = Path(directory or config_dir())
    if not (directory / f"{config_name}.yaml").exists():
        raise ConfigError(f"no config '{config_name}.yaml' in {directory}")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base="1.3"):
            return hydra_compose(config_name=config_name, overrides=list(overrides))
    except Exception as exc:  # hydra raises several unrelated types for bad overrides
        raise ConfigError(f"cannot compose '{config_name}' with {list(overrides)}: {str(exc).splitlines()[0]}") from exc
    finally:
        GlobalHydra.instance().clear()
