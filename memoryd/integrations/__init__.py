"""Adapters that plug memoryd into agent frameworks, each a thin layer over MemoryClient.
They import the client and the base modules (types, errors, validation), nothing of
the server side."""
