"""Persistent memory store: hot tier (SQLite), cold tier (content-addressed files), indices."""

from memsys.store.store import MemoryStore, STORE_FORMAT, STORE_VERSION

__all__ = ["MemoryStore", "STORE_FORMAT", "STORE_VERSION"]
