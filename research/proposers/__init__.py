"""Proposers: where the next experiment comes from (an LLM researcher or Optuna)."""

from research.proposers.base import Proposal, Proposer, ResearchContext

__all__ = ["Proposal", "Proposer", "ResearchContext"]
