"""Retrieval benchmarks for memoryd (run as ``python -m bench.<name>``; see bench/README.md)."""
