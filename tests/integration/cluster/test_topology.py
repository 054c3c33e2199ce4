"""The cluster's shape: clients told of servers that come and go (asynchronous INFO to
protocol-1 clients), --no_advertise, two servers that both route to each other end with one
route (no message twice)."""

from __future__ import annotations

import json

import pytest

from tests.harness import eventually
from tests.harness.rawnats import CONNECT_PLAIN, CONNECT_QUIET, RawConn
from tests.messaging import synced

from .conftest import Cluster, connect, wait_interest, wait_mesh

pytestmark = pytest.mark.timeout(60)


def urls(line: bytes) -> list[str]:
    return json.loads(line[5:]).get("connect_urls", [])


def next_info(c: RawConn) -> bytes:
    """The next INFO, answering the server's keep-alive PINGs meanwhile."""
    while True:
        line = c.read_line(timeout=15)
        if line == b"PING\r\n":
            c.send(b"PONG\r\n")
            continue
        assert line.startswith(b"INFO "), line
        return line


@pytest.mark.parametrize("kinds", ["tt", "rr", "tr", "rt"])
def test_protocol_1_clients_hear_of_servers_joining_and_leaving(
    fresh_cluster, kinds: str
) -> None:
    cluster: Cluster = fresh_cluster(kinds[0])  # the first server alone
    cluster.members.append(Cluster(kinds[1]).members[0])
    cluster.seeds[1] = [0]
    a = f"127.0.0.1:{cluster.members[0].port}"
    with RawConn(cluster.members[0].port) as c:
        c.send(CONNECT_QUIET + b"PING\r\n")
        assert c.read_line() == b"PONG\r\n"
        second_info = c.read_line()  # a protocol-1 client's INFO after its first PONG
        assert "connect_urls" not in json.loads(second_info[5:])  # alone: no list yet
        cluster.start(1)
        b = f"127.0.0.1:{cluster.members[1].port}"
        line = next_info(c)
        assert line.endswith(b" \r\n"), line
        assert urls(line) == [a, b]  # its own first
        cluster.kill(1)
        assert urls(next_info(c)) == [a]  # the list stays, with itself alone


@pytest.mark.parametrize("kinds", ["tt", "rt", "tr"])
async def test_no_advertise_keeps_the_cluster_from_clients(kinds: str) -> None:
    cluster = Cluster(kinds)
    original = cluster.args

    def args(i: int) -> list[str]:
        return [*original(i), *(["--no_advertise"] if i == 0 else [])]

    cluster.args = args  # type: ignore[method-assign]
    try:
        cluster.start_all()
        await wait_mesh(cluster)
        for m in cluster.members:
            with RawConn(m.port) as c:
                # A says nothing to its clients, and B hears no client URL from A.
                assert "connect_urls" not in c.info, (m.kind, c.info)
    finally:
        cluster.stop()


@pytest.mark.parametrize("kinds", ["tt", "tr", "rt"])
@pytest.mark.parametrize("name", ["tc", ""], ids=["named", "unnamed"])
async def test_routes_both_ways_end_as_one(kinds: str, name: str) -> None:
    """Also without a cluster name, where the servers first disagree on the names they
    made up and settle on one (a route refused for its name, then made again)."""
    cluster = Cluster(kinds, name=name)
    cluster.seeds = {0: [1], 1: [0]}
    try:
        cluster.start_all()
        await wait_mesh(cluster)
        a, b = await connect(cluster.url(0)), await connect(cluster.url(1))
        got: list[bytes] = []

        async def take(msg) -> None:  # type: ignore[no-untyped-def]
            got.append(msg.data)

        await b.subscribe("twice", cb=take)
        await synced(b)
        await wait_interest(a, b, "twice.probe")
        for i in range(100):
            await a.publish("twice", b"%d" % i)
        await a.publish("twice", b"end")
        await synced(a)
        for _ in range(500):
            if got and got[-1] == b"end":
                break
            await synced(b)
        assert got == [b"%d" % i for i in range(100)] + [b"end"]
        await a.close()
        await b.close()
    finally:
        cluster.stop()


@pytest.mark.parametrize("kinds", ["rt", "tr", "tt"])
def test_an_unnamed_cluster_settles_and_loses_nothing(kinds: str) -> None:
    """Without cluster names the first route may be refused for its made-up name (the
    servers settle on the greater one): once a message has crossed, a burst arrives whole."""
    cluster = Cluster(kinds, name="")
    try:
        cluster.start_all()
        with RawConn(cluster.members[1].port, timeout=30) as sub, \
                RawConn(cluster.members[0].port, timeout=30) as pub:
            sub.connect(CONNECT_PLAIN)
            sub.send(b"SUB burst 1\r\nSUB probe 2\r\n")
            sub.barrier()
            pub.connect(CONNECT_PLAIN)
            # As soon as a probe crosses, the interest in burst (sent before) has too.
            for _ in range(3000):
                pub.send(b"PUB probe 0\r\n\r\n")
                pub.barrier()
                if sub.nothing_more(0.005):
                    break
            else:
                raise AssertionError("no route formed")
            count = 100_000
            pub.send(b"PUB burst 1\r\nx\r\n" * count)
            assert sub.count_msgs(count, timeout=30) == count
    finally:
        cluster.stop()


@pytest.mark.parametrize("kinds", ["tt", "rt", "tr"])
async def test_client_advertise(kinds: str) -> None:
    """--client_advertise: what the other servers tell their clients about this one, and
    what this one tells its own in INFO host/port, as the reference does."""
    cluster = Cluster(kinds)
    original = cluster.args
    cluster.args = lambda i: [  # type: ignore[method-assign]
        *original(i), *(["--client_advertise", "10.9.9.9:4222"] if i == 1 else [])]
    try:
        cluster.start_all()
        await wait_mesh(cluster)
        with RawConn(cluster.members[1].port) as c:
            assert (c.info["host"], c.info["port"]) == ("10.9.9.9", 4222)
        # The others learn it from the route's INFO, which may come after the first
        # interest has crossed: asked again until it is there (a deadline only fails).

        def connect_urls() -> list[str]:
            with RawConn(cluster.members[0].port) as c:
                return list(c.info.get("connect_urls", []))

        urls = await eventually(lambda: "10.9.9.9:4222" in connect_urls() and connect_urls(),
                                10, "the advertised URL in connect_urls")
        assert "10.9.9.9:4222" in urls
    finally:
        cluster.stop()
