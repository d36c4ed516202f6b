"""Celery tasks: thin wrappers that open the store, call a plain function, and log."""
