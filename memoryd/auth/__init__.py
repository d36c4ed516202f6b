"""API keys for the front door: what a key may touch (``scope``) and where keys live
(``keys``). An agent's identity comes from its key, never from a request parameter.
Imports the base modules and ``db``; the gateway and the CLI stand on it."""
