"""Where evaluations run: the local or Ray executor, the worker that runs one sandbox, node caches, relay.

Owns: handing an evaluation's sandbox spec to a process or a Ray node and bringing back its result.
May import: ``research.gateway`` (a node's reader endpoint), ``research.config``/``errors``, ``sandbox``;
the worker itself imports neither the scorer nor the system under test.
Called by: ``research.evaluation``.
"""
