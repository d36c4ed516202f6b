"""Celery tasks: thin wrappers that open the store, call a plain function, and log.
They may import every layer below them (memory, maintenance, schedules, the worker's
app); only the CLI stands above them, and workers find them by module name."""
