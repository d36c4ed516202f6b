"""Helpers shared by the tests: processes, data, fakes."""
