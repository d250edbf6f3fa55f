"""The two-half evaluation and what the loop asks of it.

Owns: the trusted half that scores what the sandboxed half answered (``two_half``), the caches a sandbox
may read, the fixed-config evaluation (``memsys eval``) and its sweeps, the reader link, the scored rows'
diagnosis and the paired statistics every decision uses.
May import: ``research.execution``, ``research.gateway``, ``benchmarks``, ``harness``; never the loop.
Called by: ``research.loop`` (experiments, confirmation) and ``research.commands`` (``memsys eval``).
"""
