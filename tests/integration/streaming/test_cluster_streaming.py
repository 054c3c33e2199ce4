"""Streaming in a cluster: the unmodified node-nats-streaming client connected to one tidings
server reaches the streaming server embedded in another server of the cluster (all of its
requests, acks, deliveries and heartbeats cross the route)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import nats
import pytest

from tests.harness import Server, eventually, start_tidings

from .test_node_client import drive, node_client  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(120)
CLUSTER_ID = "test-cluster"


@pytest.fixture
def pair(tmp_path) -> Iterator[tuple[Server, Server]]:
    """A (embedded streaming on a file store) and B (no streaming), routed together."""
    a = start_tidings(cluster=True, cluster_name="stan", extra_args=[
        "-cid", CLUSTER_ID, "--store", "file", "--dir", str(tmp_path / "store"),
    ])
    b = start_tidings(cluster=True, cluster_name="stan", routes=[a],
                      extra_args=["--no_streaming"])
    try:
        yield a, b
    finally:
        b.stop()
        a.stop()


async def wait_for_route(a: Server, b: Server) -> None:
    """Until the streaming server's discover subject on A is seen from B."""
    nc = await nats.connect(b.url)

    async def answered() -> bool:
        try:
            # An empty (not protobuf) connect request: the server answers with an error,
            # which proves the request reached it and the answer came back.
            await nc.request(f"_STAN.discover.{CLUSTER_ID}", b"", timeout=0.5)
            return True
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return False

    try:
        await eventually(answered, 10, "the route up", interval=0.05)
    finally:
        await nc.close()


async def test_node_client_on_another_server(pair, node_client) -> None:  # noqa: F811
    a, b = pair
    await wait_for_route(a, b)
    via_b = SimpleNamespace(url=b.url, cluster_id=CLUSTER_ID)
    out = await drive(node_client, "pubsub", via_b, "node-cluster")
    assert out["guids"] == out["unique"] == 10
    assert out["subs"]["all"] == list(range(1, 12))
    assert out["subs"]["seq"] == [7, 8, 9, 10, 11]

    out = await drive(node_client, "queue", via_b, "node-cluster-q")
    assert sorted(out["a"] + out["b"]) == list(range(1, 41))
    assert not set(out["a"]) & set(out["b"])

    # A durable made through B resumes through A, the streaming server's own NATS server.
    first = await drive(node_client, "durableFirst", via_b, "node-cluster-dur")
    assert first["got"] == [1, 2, 3, 4, 5]
    via_a = SimpleNamespace(url=a.url, cluster_id=CLUSTER_ID)
    resumed = await drive(node_client, "durableResume", via_a, "node-cluster-dur")
    assert [(m["seq"], m["redelivered"]) for m in resumed["got"]] == [
        (4, True), (5, True), (6, True)]


async def test_one_streaming_server_per_cluster_id() -> None:
    """Three tidings servers started with their default embedded streaming: the first serves
    it, the others find it once their seed route is up and run without (a warning, not an
    exit): a discover request gets one answer, and clients of every server are served."""
    from tidings.streaming.client import connect as stan_connect

    servers: list[Server] = []
    try:
        for i in range(3):
            servers.append(start_tidings(cluster=True, cluster_name="stan3",
                                         routes=servers[:1]))
            if not i:
                # The first serves it once its streaming server is up (INFO comes sooner).
                await wait_for_route(servers[0], servers[0])
        for server in servers[1:]:
            await wait_for_route(servers[0], server)
        nc = await nats.connect(servers[2].url)
        answers: list[bytes] = []

        async def answer(msg: nats.aio.msg.Msg) -> None:
            answers.append(msg.data)

        await nc.subscribe("discover.answers", cb=answer)
        await nc.publish(f"_STAN.discover.{CLUSTER_ID}", b"", reply="discover.answers")
        await nc.flush()
        await eventually(lambda: answers, 5, "an answer")
        await asyncio.sleep(0.3)  # a second streaming server would answer by now
        assert len(answers) == 1
        await nc.close()
        for i, server in enumerate(servers):
            sc = await stan_connect(CLUSTER_ID, f"via-{i}", url=server.url)
            await sc.publish("one.store", b"m%d" % i)
            await sc.close()
        assert all(s.proc.poll() is None for s in servers)
    finally:
        for server in servers:
            server.stop()
