"""The JetStream tests' servers: tidings and the reference nats-server, each started with
`-js` on a store of its own (one of each per test module): `server` one after the other
(with `nc`, a nats-py client), `servers` both at once (tidings first) for tests that
compare their answers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_reference, start_tidings

KINDS = ["tidings", "reference"]


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("js")
    if request.param == "tidings":
        srv = start_tidings(extra_args=["-js", "-sd", str(store)])
    else:
        srv = start_reference(extra_args=["-js", "-sd", str(store)])
    yield srv
    srv.stop()


@pytest.fixture
async def nc(server: Server) -> AsyncIterator[Client]:
    client = await nats.connect(server.url)
    yield client
    await client.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    store = tmp_path_factory.mktemp("pair")
    pair = [start_tidings(extra_args=["-js", "-sd", str(store / "t")]),
            start_reference(extra_args=["-js", "-sd", str(store / "r")])]
    yield pair
    for srv in pair:
        srv.stop()
