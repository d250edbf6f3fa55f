"""memsys: an Omni-SimpleMem memory system (the research loop's mutable surface).

Import cost matters for the CLI, so the public names load lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Memory", "MemoryConfig", "Turn", "MAU", "Modality"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from memsys.memory import Memory

        return Memory
    if name == "MemoryConfig":
        from memsys.config import MemoryConfig

        return MemoryConfig
    if name in ("Turn", "MAU", "Modality"):
        from memsys import records

        return getattr(records, name)
    raise AttributeError(name)
