"""The trusted LLM gateway: the one way sandboxed code reaches a model.

Owns: the Unix-socket server a sandboxed reader talks to, the upstream client, the run's token and USD
budget, the reply cache and usage counters. The key and the budget never enter the sandbox.
May import: ``harness`` (the fixed base) only; never ``memsys`` (the mutable surface).
Called by: ``research.execution`` and ``research.evaluation``.
"""
