"""A server of the cluster dies: the others carry on, its clients (nats-py and tidings.client)
fail over to servers they learnt from INFO connect_urls and get their subscriptions back,
and when it comes back on the same ports its interest flows again."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from nats.aio.msg import Msg

from tests.harness import eventually
from tidings.client import Client

from .conftest import Cluster, connect, wait_interest, wait_mesh

pytestmark = pytest.mark.timeout(90)
_ids = itertools.count()


def subject(base: str) -> str:
    return f"{base}.{next(_ids)}"


@pytest.mark.parametrize(("kinds", "victim"), [
    ("ttt", 1),  # a server that was given a route
    ("ttt", 0),  # the seed the others route to: they reconnect to it with back-off
    ("trr", 0),  # the tidings seed of two reference servers
    ("rtr", 1),  # a tidings server between reference servers
    ("rrr", 0),  # the reference alone: the test checks itself
])
async def test_a_server_dies_and_comes_back(fresh_cluster, kinds: str, victim: int) -> None:
    cluster: Cluster = fresh_cluster(kinds)
    await wait_mesh(cluster)
    others = [i for i in range(3) if i != victim]
    victim_port = cluster.members[victim].port

    # Clients of the victim that were given only its URL.
    py = await connect(cluster.url(victim), reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    ours = Client()
    await ours.connect(cluster.url(victim), reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    # (The victim may learn a server's client URL from a route INFO after the mesh carries
    # messages; it then sends the client an asynchronous INFO.)
    await eventually(lambda: {u.port for u in py.discovered_servers}
                     == {cluster.members[i].port for i in others}, 30)
    await eventually(lambda: {u.port for u in ours.discovered_servers}
                     == {cluster.members[i].port for i in others}, 30)

    topic = subject("fo")
    got_py: list[bytes] = []
    got_ours: list[bytes] = []

    async def on_py(msg: Msg) -> None:
        got_py.append(msg.data)

    async def on_ours(msg: object) -> None:
        got_ours.append(msg.data)  # type: ignore[attr-defined]

    await py.subscribe(topic, cb=on_py)
    await ours.subscribe(topic, cb=on_ours)
    await ours.flush()
    first, second = [await connect(cluster.url(i)) for i in others]
    await wait_interest(first, py, subject("probe"))
    await first.publish(topic, b"before")
    await eventually(lambda: got_py == [b"before"] and got_ours == [b"before"], 30)

    cluster.kill(victim)
    # The others carry on.
    await wait_interest(first, second, subject("after"), timeout=20)
    # The victim's clients fail over and their subscriptions come back with them.
    await eventually(lambda: py.is_connected and py.connected_url.port != victim_port, 20)
    await eventually(lambda: ours.is_connected and ours.connected_url is not None
                     and ours.connected_url.port != victim_port, 20)

    async def both_received() -> bool:
        await first.publish(topic, b"after")
        await asyncio.sleep(0.05)
        return b"after" in got_py and b"after" in got_ours

    for _ in range(200):
        if await both_received():
            break
    assert b"after" in got_py and b"after" in got_ours

    # Back on the same ports: interest flows to and from it again.
    cluster.start(victim)
    back = await connect(cluster.url(victim))
    await wait_interest(first, back, subject("back"), timeout=30)
    await wait_interest(back, second, subject("back"), timeout=30)
    await wait_interest(second, back, subject("back"), timeout=30)

    for nc in (py, first, second, back):
        await nc.close()
    await ours.close()


async def test_lame_duck_sends_clients_elsewhere(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGUSR2 to a tidings server of a cluster: its clients (nats-py, which learnt the other
    server from connect_urls) are closed after the grace period and go on on the other."""
    import signal

    conf = tmp_path / "ldm.conf"
    conf.write_text('lame_duck_grace_period: "200ms"\nlame_duck_duration: "30s"\n')
    cluster = Cluster("tt")
    original = cluster.args
    cluster.args = lambda i: [*original(i), *(["-c", str(conf)] if i == 0 else [])]  # type: ignore[method-assign]
    try:
        cluster.start_all()
        await wait_mesh(cluster)
        leaving = cluster.members[0]
        nc = await connect(leaving.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
        got: list[bytes] = []

        async def take(msg: Msg) -> None:
            got.append(msg.data)

        await nc.subscribe("ldm.topic", cb=take)
        await nc.flush()
        other = await connect(cluster.url(1))
        assert leaving.server is not None
        leaving.server.proc.send_signal(signal.SIGUSR2)
        await eventually(lambda: nc.is_connected and nc.connected_url.port != leaving.port, 20)
        for _ in range(200):
            await other.publish("ldm.topic", b"after")
            await asyncio.sleep(0.05)
            if got:
                break
        assert got and got[0] == b"after"
        assert leaving.server.proc.wait(10) == 0
        await nc.close()
        await other.close()
    finally:
        cluster.stop()
