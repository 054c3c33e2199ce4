"""Fixtures shared by every test: the harness's (tests/harness/fixtures.py: servers on
ports of their own, the proxy) and a private PostgreSQL."""

from __future__ import annotations

from .postgres import postgres_dsn, private_postgres  # noqa: F401  (fixtures for every test directory)

pytest_plugins = ["tests.harness.fixtures"]
