"""Fixtures for the client tests: a connected client per server kind, and server helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import tidings.client
from tests.servers import RunningServer


@pytest.fixture
async def nc(any_server: RunningServer) -> AsyncIterator[tidings.client.Client]:
    """A client connected to the parametrised server (tidings, then the reference)."""
    client = await tidings.client.connect(any_server.url, name="test")
    yield client
    await client.close()


@pytest.fixture
def connect_opts() -> dict[str, Any]:
    """Options that keep reconnect tests short."""
    return {
        "reconnect_delay": lambda attempt: 0.05,
        "max_reconnect_attempts": -1,
        "connect_timeout": 1.0,
    }
