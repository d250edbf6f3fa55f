"""Persistent memory store: hot tier (SQLite), cold tier (content-addressed files), indices."""

from memsys.store.store import STORE_FORMAT, STORE_VERSION, MemoryStore

__all__ = ["MemoryStore", "STORE_FORMAT", "STORE_VERSION"]
