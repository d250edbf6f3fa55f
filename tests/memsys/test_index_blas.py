"""FAISS's native libraries start with fitting settings, set only around its import (memsys.index.blas)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsys.index.blas import cpu_flags, faiss_native_settings, openblas_coretype


def test_coretype_follows_the_flags():
    avx512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"}
    assert openblas_coretype(frozenset(avx512)) == "SkylakeX"
    assert openblas_coretype(frozenset(avx512 - {"avx512bw"})) == "Haswell"
    assert openblas_coretype(frozenset({"avx2", "fma", "sse3"})) == "Haswell"
    assert openblas_coretype(frozenset({"sse3", "avx"})) is None
    assert openblas_coretype(frozenset()) is None


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel\t\t: 207\nflags\t\t: fpu sse3 avx2 fma\n")
    assert cpu_flags(str(info)) == frozenset({"fpu", "sse3", "avx2", "fma"})
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_settings_the_caller_made_are_kept(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    assert faiss_native_settings() == {}
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert faiss_native_settings() == {"OMP_WAIT_POLICY": "PASSIVE"}


_CHILD = """
import ctypes, glob, os
import memsys.index.dense, faiss  # memsys first: FAISS loads inside its settings
libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(faiss.__file__)), "faiss_cpu.libs", "libopenblas*"))
lib = ctypes.CDLL(libs[0])
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode(), os.environ.get("OPENBLAS_CORETYPE"), os.environ.get("OMP_WAIT_POLICY"))
"""


def _child(env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    return out.stdout.split()


def test_faiss_loads_the_chosen_kernels_and_the_environment_is_restored():
    import faiss

    if not glob.glob(os.path.join(os.path.dirname(os.path.dirname(faiss.__file__)), "faiss_cpu.libs", "libopenblas*")):
        pytest.skip("this FAISS build does not bundle OpenBLAS")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OMP_WAIT_POLICY")}
    want = openblas_coretype(cpu_flags())
    core, *after = _child(env)
    assert after == ["None", "None"]  # nothing left behind for other libraries or children
    if want is not None:
        assert core == want
    assert _child({**env, "OPENBLAS_CORETYPE": "Prescott"}) == ["Prescott", "Prescott", "None"]
