"""Accounts across a cluster of three: tidings only, and tidings mixed with reference
servers (either one the seed), every server on the same accounts file. Interest and
messages cross the routes in their account (RS+ A ..., RMSG A ...): isolation holds from
server to server, a stream import delivers on every server what the exporter published on
any, and a request through a service import is answered by a responder on another server."""

from __future__ import annotations

from collections.abc import Iterator

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_reference, start_tidings
from tests.messaging import synced

from .conftest import Cluster, wait_interest

CONF = """
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{stream: "public.>"}, {service: "svc.echo"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {stream: {account: A, subject: "public.>"}, prefix: "fromA"}
      {service: {account: A, subject: "svc.echo"}, to: "echo"}
    ]
  }
}
"""

KINDS = {"tidings": "ttt", "mixed, tidings seed": "trr", "mixed, reference seed": "rtr"}


class AccountsCluster(Cluster):
    """A cluster whose members all run the accounts file."""

    def start(self, i: int) -> Server:
        m = self.members[i]
        if m.server is not None:
            return m.server.start()
        start = start_tidings if m.kind == "t" else start_reference
        m.server = start(extra_args=self.args(i), cluster=True, routes=self._routes(i),
                         config=CONF)
        return m.server

    def user_url(self, i: int, user: str) -> str:
        return self.url(i).replace("nats://", f"nats://{user}:{user}@")


@pytest.fixture(scope="module", params=list(KINDS), ids=list(KINDS))
def cluster(request: pytest.FixtureRequest) -> Iterator[AccountsCluster]:
    c = AccountsCluster(KINDS[request.param])
    try:
        c.start_all()
        yield c
    finally:
        c.stop()


async def connect(c: AccountsCluster, i: int, user: str) -> Client:
    return await nats.connect(c.user_url(i, user), allow_reconnect=False)


async def meshed(c: AccountsCluster) -> list[Client]:
    """Clients of account A on each server, once A's interest crosses every route."""
    clients = [await connect(c, i, "a") for i in range(3)]
    for i in range(3):
        for j in range(3):
            if i != j:
                await wait_interest(clients[i], clients[j], f"_mesh.a.{i}.{j}")
    return clients


async def quiet_next(sub: nats.aio.subscription.Subscription, timeout: float) -> bytes | None:
    try:
        return (await sub.next_msg(timeout=timeout)).data
    except nats.errors.TimeoutError:
        return None


async def test_isolation_holds_across_the_routes(cluster: AccountsCluster) -> None:
    a = await meshed(cluster)
    b2 = await connect(cluster, 2, "b")
    try:
        in_a = await a[0].subscribe("news.cluster")
        await synced(a[0])
        # A's interest reached server 2 (a message of A's from there arrives) ...
        await wait_interest(a[2], a[0], "news.probe")
        await b2.publish("news.cluster", b"from b")  # ... and B's same subject does not.
        await a[1].publish("news.cluster", b"from a")
        await b2.flush()
        await a[1].flush()
        assert await quiet_next(in_a, 5) == b"from a"
        assert await quiet_next(in_a, 0.5) is None
    finally:
        for nc in (*a, b2):
            await nc.close()


async def test_a_stream_import_across_the_routes(cluster: AccountsCluster) -> None:
    a = await meshed(cluster)
    b = [await connect(cluster, i, "b") for i in range(3)]
    try:
        subs = [await nc.subscribe("fromA.public.>") for nc in b]
        for nc in b:
            await synced(nc)
        # The importers' interest is in account A on each server: wait until it has
        # reached server 1, where the message is published.
        await wait_interest(a[1], a[0], "public.probe.x")
        for sub in subs:
            while await quiet_next(sub, 0.3) is not None:
                pass  # the probes (they are A's public messages too)
        await a[1].publish("public.news", b"hello")
        await a[1].flush()
        for sub in subs:
            msg = await sub.next_msg(timeout=5)
            assert (msg.subject, msg.data) == ("fromA.public.news", b"hello")
            assert await quiet_next(sub, 0.3) is None  # once on each server, not twice
    finally:
        for nc in (*a, *b):
            await nc.close()


async def test_a_service_import_answered_on_another_server(cluster: AccountsCluster) -> None:
    a = await meshed(cluster)
    b0 = await connect(cluster, 0, "b")
    try:
        async def echo(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"echo:" + msg.data)

        await a[2].subscribe("svc.echo", cb=echo)
        await synced(a[2])
        await wait_interest(a[0], a[2], "svc.probe")
        reply = None
        for _ in range(50):  # until the responder's interest has reached server 0
            try:
                reply = await b0.request("echo", b"hi", timeout=1)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                continue
        assert reply is not None and reply.data == b"echo:hi"
    finally:
        for nc in (*a, b0):
            await nc.close()
