"""memsys: an Omni-SimpleMem memory system (the research loop's mutable surface).

The names below are its public API, the only part the scorer (``benchmarks``) may import;
the untrusted half of an evaluation is ``python -m memsys.predict``. Import cost matters
for the CLI, so the public names load lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Memory", "MemoryConfig", "LLMConfig", "compose_config", "Turn", "MAU", "Modality", "Scope"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from memsys.memory import Memory

        return Memory
    if name in ("MemoryConfig", "LLMConfig"):
        from memsys import config

        return getattr(config, name)
    if name == "compose_config":  # Hydra composition with the memory and LLM schemas registered
        from memsys.config import compose

        return compose
    if name == "Scope":
        from memsys.index.scope import Scope

        return Scope
    if name in ("Turn", "MAU", "Modality"):
        from memsys import records

        return getattr(records, name)
    raise AttributeError(name)
