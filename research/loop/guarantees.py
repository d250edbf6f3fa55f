"""What the run's sandbox guarantees, checked before the run starts and recorded with it.

A score is only as good as the wall between the scored code and the scorer: without
filesystem isolation the evaluated code can write the run folder, the git hooks or the
caches; without network isolation it can send the key anywhere. Such a backend (the
``process`` fallback) is refused unless the user accepts it explicitly.
"""

from __future__ import annotations

from typing import Any

from research.errors import WeakSandboxError
from sandbox.base import G_HIDDEN, G_NETWORK, G_READONLY

#: what the loop needs from a backend to trust a score
REQUIRED: tuple[str, ...] = (G_NETWORK, G_READONLY, G_HIDDEN)


def check_sandbox(sandbox: Any, *, allow_weak: bool) -> dict[str, Any]:
    """{backend, guarantees, missing, weak, passed_over}; raises WeakSandboxError when weak and not allowed."""
    ok, reason = sandbox.available()
    if not ok:
        raise WeakSandboxError(f"sandbox backend {sandbox.name!r} unavailable: {reason}")
    have = sorted(sandbox.guarantees())
    missing = [g for g in REQUIRED if g not in have]
    info = {"backend": sandbox.name, "guarantees": have, "missing": missing, "weak": bool(missing),
            "passed_over": dict(getattr(sandbox, "skipped", {}) or {})}
    if missing and not allow_weak:
        over = "; ".join(f"{k}: {v}" for k, v in info["passed_over"].items())
        raise WeakSandboxError(
            f"sandbox backend {sandbox.name!r} does not guarantee {', '.join(missing)}, so the evaluated code "
            f"could reach the scorer or the network{f' (passed over: {over})' if over else ''}; install bubblewrap "
            f"or start Docker, or accept it with research.sandbox.allow_weak=true")
    return info
