"""The trusted scorer: benchmark datasets, metrics and splits.

Nothing here may be edited by the research agent. ``benchmarks`` imports ``memsys``
(never ``research``): it evaluates the memory system, it does not drive it.
"""
