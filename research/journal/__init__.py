"""The run's record: the trajectory (one JSON line per experiment), its tables and MLflow.

Owns: the trajectory records and their schema, the DataFrames and taxonomy tables built from them,
the discovery type of a change, and the MLflow tracking of a run.
May import: ``research.failures``, ``pandas``, ``mlflow``; nothing of the loop.
Called by: ``research.loop``, ``research.report``, ``research.replay``, ``research.proposers``.
"""
