"""Embedded services for the zero-configuration default: PostgreSQL and Redis."""
