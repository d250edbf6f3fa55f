"""The fixed base both halves of an evaluation import.

Nothing here is on the research agent's mutable surface (see ``harness.surface``):
paths, atomic writes, the error base, config composition, date parsing of gold
data, token counting the scorer trusts, and the records that cross the sandbox
boundary (the public view and predictions). It imports no other project package,
so the scorer can rely on it without importing code the agent edits.
"""
