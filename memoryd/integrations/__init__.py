"""Adapters that plug memoryd into agent frameworks, each a thin layer over MemoryClient."""
