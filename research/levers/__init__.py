"""The search space: levers, the researcher's menu, what a run holds fixed, Optuna's distributions.

Owns: the lever catalogue (built from ``memsys.config``), the schema-constrained menu, the scope a run
allows, the study (Optuna), the effective view of a config, presets and the target schema read from source.
May import: ``memsys.config`` (the catalogue's schema), ``research.errors``.
Called by: ``research.proposers``, ``research.loop`` and ``research.config``.
"""
