"""memoryd's front door: an HTTP API and an MCP server over HTTP, for everything that is
not a trusted Python process. Both are thin clients of the same Celery tasks as
``MemoryClient``; an agent's identity comes from its API key, never from a parameter.
Imports the base modules, the client and ``auth`` (keys live in the database); never
the memory layer, tasks or workers, which it reaches through the client."""
