"""Cold tier: raw content (text, images, audio, video) as content-addressed files.

Only the MAU's pointer reaches a file here; identical content is stored once.
Pointers look like ``cold:<sha256>.<ext>`` so they survive moving the store.
"""

from __future__ import annotations

from pathlib import Path

from memsys.errors import StoreCorruptError, StoreError
from memsys.store.atomic import atomic_write_bytes, sha256_bytes

POINTER_PREFIX = "cold:"


class ColdStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, digest_ext: str) -> Path:
        return self.root / digest_ext[:2] / digest_ext

    def put(self, data: bytes, ext: str = "bin") -> str:
        """Store bytes once; returns the pointer. Safe to call concurrently."""
        name = f"{sha256_bytes(data)}.{ext.lstrip('.')}"
        path = self._path(name)
        if not path.exists():
            atomic_write_bytes(path, data)
        return POINTER_PREFIX + name

    def put_text(self, text: str) -> str:
        return self.put(text.encode("utf-8"), "txt")

    def path(self, pointer: str) -> Path:
        if not pointer.startswith(POINTER_PREFIX):
            raise StoreError(f"not a cold-storage pointer: {pointer!r}")
        return self._path(pointer[len(POINTER_PREFIX):])

    def get(self, pointer: str, *, verify: bool = False) -> bytes:
        path = self.path(pointer)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreCorruptError(f"cold content missing: {path}") from exc
        if verify and sha256_bytes(data) != path.name.split(".")[0]:
            raise StoreCorruptError(f"cold content does not match its hash: {path}")
        return data

    def get_text(self, pointer: str) -> str:
        return self.get(pointer).decode("utf-8")

    def size(self, pointer: str) -> int:
        return self.path(pointer).stat().st_size
