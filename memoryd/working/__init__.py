"""Working memory: each thread's live state in Redis, beside long-term memory
(``docs/architecture.md``, "Working memory"). The layer just above the broker: the thin
client and the gateway use it without any worker."""
