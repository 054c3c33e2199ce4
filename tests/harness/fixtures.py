"""The harness's fixtures (a pytest plugin: tests/conftest.py loads it).

- `tidings_factory`, `reference_factory`: start servers with options, stopped after the test;
- `tidings_server`, `reference_server`: one of each with default options, for the session;
  `any_server`: each test using it runs once against each;
- `proxy_factory`: `await proxy_factory(port)`, a Proxy (proxy.py) closed after the test;
- `refused_port`: a port where connections are refused during the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from .ports import refused_port as _refused_port
from .proxy import ProxyFactory, proxies
from .servers import Server, start_reference, start_tidings

ServerFactory = Callable[..., Server]


def server_factory(start: Callable[..., Server]) -> Iterator[ServerFactory]:
    """`make(**options)` starts a server with `start`; all stop when the generator ends."""
    started: list[Server] = []

    def make(*args: Any, **options: Any) -> Server:
        started.append(start(*args, **options))
        return started[-1]

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def tidings_factory() -> Iterator[ServerFactory]:
    """Start tidings servers with options (start_tidings'); all stopped after the test."""
    yield from server_factory(start_tidings)


@pytest.fixture
def reference_factory() -> Iterator[ServerFactory]:
    """Start reference nats-servers with options; all stopped after the test."""
    yield from server_factory(start_reference)


@pytest.fixture(scope="session")
def tidings_server() -> Iterator[Server]:
    """One tidings server with default options, shared by the session."""
    server = start_tidings()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def reference_server() -> Iterator[Server]:
    """One reference nats-server with default options, shared by the session."""
    server = start_reference()
    yield server
    server.stop()


@pytest.fixture(params=["tidings", "reference"])
def any_server(request: pytest.FixtureRequest) -> Server:
    """Each test using this runs once against tidings and once against the reference."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.fixture
async def proxy_factory() -> AsyncIterator[ProxyFactory]:
    """`proxy = await proxy_factory(port)`: a freezable TCP proxy to `port`."""
    async with proxies() as make:
        yield make


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A 127.0.0.1 port where connections are refused while the test runs."""
    with _refused_port() as port:
        yield port
