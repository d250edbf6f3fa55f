"""Selective ingestion: novelty gates per modality, then MAU construction."""
