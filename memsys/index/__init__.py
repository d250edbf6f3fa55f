"""Search indices over MAUs: dense (FAISS) and sparse (BM25)."""
