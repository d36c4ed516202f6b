"""memoryd's front door: an HTTP API and an MCP server over HTTP, for everything that is
not a trusted Python process. Both are thin clients of the same Celery tasks as
``MemoryClient``; an agent's identity comes from its API key, never from a parameter."""
