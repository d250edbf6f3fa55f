"""How FAISS's bundled native libraries run: OpenBLAS kernels and OpenMP waiting (issue #16).

faiss-cpu 1.15 ships its own OpenBLAS 0.3.15 and libgomp, both configured only by environment
variables read once, when FAISS is imported. Two defaults cost ingest most of its FAISS time here:

- OpenBLAS 0.3.15 does not recognise recent x86 server CPUs and falls back to its 2004
  "Prescott" kernels (seen on this project's machines: Intel family 6, model 207, with AVX-512),
  so every FAISS matrix product ran ~3-4x slower: IVF training at 50k MAUs took 19.4 s of CPU
  instead of 4.6 s. ``OPENBLAS_CORETYPE`` names the kernels instead, chosen from the CPU's own
  feature flags, never kernels it cannot run.
- libgomp's idle threads spin after every parallel region, so each 1,000-vector IVF add left a
  second core busy doing nothing: 35 us of CPU per MAU for the add instead of 10, and the spinning
  thread competed with tantivy's indexing thread. ``OMP_WAIT_POLICY=PASSIVE`` lets them sleep.

Both are set only while FAISS is imported, only if unset, and the environment is restored after,
so other libraries (torch's own OpenMP, numpy's OpenBLAS) and child processes are unaffected.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

_SKYLAKEX = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
_HASWELL = frozenset({"avx2", "fma"})


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux); empty where they cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def openblas_coretype(flags: frozenset[str]) -> str | None:
    """The fastest OpenBLAS 0.3.15 kernel family these flags can run, if it beats the fallback."""
    if _SKYLAKEX <= flags:
        return "SkylakeX"
    if _HASWELL <= flags:
        return "Haswell"
    return None


def faiss_native_settings() -> dict[str, str]:
    """The variables FAISS's native libraries should start with (those the caller has not set)."""
    want = {"OMP_WAIT_POLICY": "PASSIVE"}
    core = openblas_coretype(cpu_flags())
    if core:
        want["OPENBLAS_CORETYPE"] = core
    return {k: v for k, v in want.items() if k not in os.environ}


@contextmanager
def faiss_native_env() -> Iterator[dict[str, str]]:
    """Around ``import faiss``: its native libraries start with :func:`faiss_native_settings`.
    A no-op once FAISS is loaded (the libraries read their settings only at load)."""
    settings = {} if "faiss" in sys.modules else faiss_native_settings()
    os.environ.update(settings)
    try:
        yield settings
    finally:
        for key in settings:
            os.environ.pop(key, None)
