"""The JetStream tests' servers: tidings and the reference nats-server, each started with
`-js` on a store of its own (one of each per test module), and a nats-py client."""

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
