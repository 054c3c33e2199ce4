"""The command-line tests' fixtures: a port some other socket holds."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port of 127.0.0.1 a listening socket holds for the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]
