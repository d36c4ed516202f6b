"""Embedded services for the zero-configuration default: PostgreSQL and Redis, started
from the settings. Imports only the base modules; ``db`` stands on it for the embedded
server's URL."""
