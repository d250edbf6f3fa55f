"""Micro-benchmarks of the research loop's own machinery (not of memsys)."""
