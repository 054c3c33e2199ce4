"""Three servers routed together, with nats-py: messages cross exactly one route, queue groups
deliver once cluster-wide, requests find remote responders, the cluster's client URLs reach
clients. Every test runs on tidings, on the reference and on mixed clusters (conftest.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from tests.harness import eventually
from tests.messaging import synced

from .conftest import Cluster, connect, wait_interest

_ids = itertools.count()
END = b"END"


def subject(base: str) -> str:
    return f"{base}.{next(_ids)}"


async def publish_numbered(pub: Any, subj: str, count: int, subscribers: Any) -> None:
    """Once the subscribers' connections have been served and their interest has reached
    the publisher's server, publish messages b"0", b"1", ... on `subj`."""
    for nc in subscribers:
        await synced(nc)
        if nc is not pub:
            await wait_interest(pub, nc, subject("probe"))
    for i in range(count):
        await pub.publish(subj, b"%d" % i)


class Collector:
    """Messages of a subscription until the END marker (published last) arrives: since a
    route keeps order, anything duplicated would come before it."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self.done = asyncio.Event()

    async def on_msg(self, msg: Msg) -> None:
        if msg.data == END:
            self.done.set()
        else:
            self.msgs.append(msg)

    async def wait(self) -> list[Msg]:
        await asyncio.wait_for(self.done.wait(), 30)
        return self.msgs


async def test_pubsub_across_servers(cluster: Cluster) -> None:
    a, b, c = [await connect(cluster.url(i)) for i in range(3)]
    base = subject("x")
    subs = {
        "b literal": (b, f"{base}.foo"),
        "c literal": (c, f"{base}.foo"),
        "b star": (b, f"{base}.*"),
        "c full": (c, f"{base}.>"),
        "a local": (a, f"{base}.foo"),
    }
    got = {}
    for name, (nc, subj) in subs.items():
        got[name] = Collector()
        await nc.subscribe(subj, cb=got[name].on_msg)
    for nc in (a, b, c):
        await synced(nc)
    await wait_interest(a, b, subject("probe"))
    await wait_interest(a, c, subject("probe"))
    for i in range(100):
        await a.publish(f"{base}.foo", b"m%d" % i)
    await a.publish(f"{base}.foo", b"with headers", reply="r.1", headers={"X-Seq": "1"})
    await a.publish(f"{base}.foo", END)
    for name, coll in got.items():
        msgs = await coll.wait()
        assert [m.data for m in msgs] == [b"m%d" % i for i in range(100)] + [b"with headers"], name
        last = msgs[-1]
        assert (last.reply, last.headers) == ("r.1", {"X-Seq": "1"}), name
        assert {m.subject for m in msgs} == {f"{base}.foo"}
    for nc in (a, b, c):
        await nc.close()


async def test_messages_from_a_route_go_to_local_subscribers_only(cluster: Cluster) -> None:
    """B publishes; C receives directly over the B-C route that gossip made (one hop:
    without it nothing would arrive), exactly once."""
    a, b, c = [await connect(cluster.url(i)) for i in range(3)]
    base = subject("hop")
    coll = Collector()
    await c.subscribe(base, cb=coll.on_msg)
    await synced(c)
    await wait_interest(b, c, subject("probe"))
    for i in range(50):
        await b.publish(base, b"%d" % i)
    await b.publish(base, END)
    assert [m.data for m in await coll.wait()] == [b"%d" % i for i in range(50)]
    for nc in (a, b, c):
        await nc.close()


async def test_queue_group_delivers_once_cluster_wide(cluster: Cluster) -> None:
    """10,000 messages from A to a group with members on B and C only (so they must cross
    routes): each message to exactly one member; a plain subscriber gets them all."""
    a, b, c = [await connect(cluster.url(i)) for i in range(3)]
    base = subject("q")
    members = []
    for nc in (b, b, c, c):
        coll: list[bytes] = []
        members.append(coll)

        async def take(msg: Msg, coll: list[bytes] = coll) -> None:
            coll.append(msg.data)

        await nc.subscribe(base, queue="workers", cb=take)
    plain = Collector()
    await c.subscribe(base, cb=plain.on_msg)
    count = 10_000
    await publish_numbered(a, base, count, (b, c))
    await a.publish(base, END)
    assert len(await plain.wait()) == count

    def delivered() -> list[bytes]:
        return [m for coll in members for m in coll if m != END]

    await eventually(lambda: len(delivered()) >= count, 30)
    await synced(b)
    await synced(c)
    assert len(delivered()) == count
    assert set(delivered()) == {b"%d" % i for i in range(count)}
    assert sum(bool(coll) for coll in members[:2]) >= 1 and any(members[2:]), \
        "both servers' members should take turns"
    for nc in (a, b, c):
        await nc.close()


async def test_queue_group_members_take_turns_cluster_wide(cluster: Cluster) -> None:
    """As the reference: a message from a client goes to any member of the cluster alike,
    here as well as on another server (local members are preferred only for a message that
    came over a route, which is delivered here or nowhere)."""
    a, b, c = [await connect(cluster.url(i)) for i in range(3)]
    base = subject("ql")
    counts = {"a": 0, "b": 0, "c": 0}
    for name, nc in (("a", a), ("b", b), ("c", c)):
        async def take(msg: Msg, name: str = name) -> None:
            counts[name] += 1

        await nc.subscribe(base, queue="g", cb=take)
    total = 600
    await publish_numbered(a, base, total, (a, b, c))
    await eventually(lambda: sum(counts.values()) >= total, 30)
    for nc in (a, b, c):
        await synced(nc)
    assert sum(counts.values()) == total
    assert all(n > total // 10 for n in counts.values()), counts
    for nc in (a, b, c):
        await nc.close()


async def test_request_reply_and_no_responders_across_servers(cluster: Cluster) -> None:
    a, b, c = [await connect(cluster.url(i)) for i in range(3)]
    service = subject("svc")

    async def respond(msg: Msg) -> None:
        await msg.respond(b"answer to " + msg.data)

    await c.subscribe(service, cb=respond)
    await synced(c)
    await wait_interest(a, c, subject("probe"))
    reply = await a.request(service, b"q1", timeout=5)
    assert reply.data == b"answer to q1"
    with pytest.raises(NoRespondersError):
        await a.request(subject("nobody"), b"q2", timeout=5)
    for nc in (a, b, c):
        await nc.close()


def test_clients_learn_the_cluster_urls(cluster: Cluster) -> None:
    """INFO connect_urls lists this server's client URL first, then the others'."""
    urls = [f"127.0.0.1:{m.port}" for m in cluster.members]
    for i, m in enumerate(cluster.members):
        with socket.create_connection(("127.0.0.1", m.port)) as s:
            line = s.makefile("rb").readline()
        info = json.loads(line[5:])
        assert info["cluster"] == cluster.name
        assert info["connect_urls"][0] == urls[i]
        assert sorted(info["connect_urls"]) == sorted(urls)
