"""Run untrusted evaluation code under limits, behind one interface.

`make_sandbox("auto" | "docker" | "bwrap" | "process")` returns a `Sandbox`;
`sandbox.run(SandboxSpec(...))` returns a `SandboxResult`. Generic on purpose: this
package imports no project package. Guarantees per backend: sandbox/README.md.
"""

from __future__ import annotations

from typing import Any

from sandbox.base import (
    NETWORK_MODES,
    Sandbox,
    SandboxError,
    SandboxResult,
    SandboxSpec,
    SandboxUnavailableError,
)

BACKENDS: tuple[str, ...] = ("auto", "docker", "bwrap", "process")


def make_sandbox(name: str, **options: Any) -> Sandbox:
    """The backend called `name`, constructed with `options` (see each class). Lazy imports."""
    if name == "process":
        from sandbox.process import ProcessSandbox

        return ProcessSandbox(**options)
    if name == "bwrap":
        from sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(**options)
    if name == "docker":
        from sandbox.docker import DockerSandbox

        return DockerSandbox(**options)
    if name == "auto":
        from sandbox.auto import AutoSandbox

        return AutoSandbox(**options)
    raise SandboxError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "NETWORK_MODES",
    "Sandbox",
    "SandboxError",
    "SandboxResult",
    "SandboxSpec",
    "SandboxUnavailableError",
    "make_sandbox",
]
