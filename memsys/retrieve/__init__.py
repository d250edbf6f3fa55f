"""Retrieval: dense + sparse search, merge strategies, graph augmentation, pyramid."""
