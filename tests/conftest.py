"""Fixtures shared by every test: real servers on free loopback ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .postgres import postgres_dsn, private_postgres  # noqa: F401  (fixtures for every test directory)
from .servers import RunningServer, start_reference, start_tidings

ServerFactory = Callable[..., RunningServer]


def server_factory(start: Callable[..., RunningServer]) -> Iterator[ServerFactory]:
    started: list[RunningServer] = []

    def make(**options: Any) -> RunningServer:
        server = start(**options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def tidings_factory() -> Iterator[ServerFactory]:
    """Start tidings servers with options; all are stopped after the test."""
    yield from server_factory(start_tidings)


@pytest.fixture
def reference_factory() -> Iterator[ServerFactory]:
    """Start reference nats-server instances with options; all are stopped after the test."""
    yield from server_factory(start_reference)


@pytest.fixture(scope="session")
def tidings_server() -> Iterator[RunningServer]:
    """One tidings server with default options, shared by the session."""
    server = start_tidings()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def reference_server() -> Iterator[RunningServer]:
    """One reference nats-server with default options, shared by the session."""
    server = start_reference()
    yield server
    server.stop()


@pytest.fixture(params=["tidings", "reference"])
def any_server(request: pytest.FixtureRequest) -> RunningServer:
    """Each test using this runs once against tidings and once against the reference."""
    return request.getfixturevalue(f"{request.param}_server")
