"""The streaming server standalone on the reference nats-server, with our streaming client."""

from __future__ import annotations

import pytest

from tests.harness import eventually
from tidings.streaming.client import StanError

from .conftest import Inbox
from .test_delivery import publish_n, seqs


async def test_streaming_on_the_reference_nats_server(reference_factory, stan):
    ref = reference_factory()
    env = await stan(nats_url=ref.url)
    sc = await env.connect("on-ref")
    await publish_n(sc, "ref", 5)
    first, last = Inbox(), Inbox()
    await sc.subscribe("ref", cb=first, deliver_all_available=True)
    await sc.subscribe("ref", cb=last, start_at="last_received")
    assert seqs(await first.take(5)) == [1, 2, 3, 4, 5]
    assert seqs(await last.take(1)) == [5]
    # durable resume
    dur = Inbox()
    sub = await sc.subscribe("ref", cb=dur, durable_name="d", deliver_all_available=True)
    assert seqs(await dur.take(5)) == [1, 2, 3, 4, 5]
    await sub.close()
    await publish_n(sc, "ref", 1, start=5)
    dur2 = Inbox()
    await sc.subscribe("ref", cb=dur2, durable_name="d", deliver_all_available=True)
    assert seqs(await dur2.take(1)) == [6]
    # queue group
    qa, qb = Inbox(), Inbox()
    await sc.subscribe("refq", cb=qa, queue="g")
    await sc.subscribe("refq", cb=qb, queue="g")
    await publish_n(sc, "refq", 20)
    await eventually(lambda: len(qa.all) + len(qb.all) == 20)
    assert sorted(seqs(qa.all) + seqs(qb.all)) == list(range(1, 21))
    # redelivery with the redelivered flag and count
    rd = Inbox()
    await sc.subscribe("refr", cb=rd, manual_acks=True, ack_wait=1)
    await publish_n(sc, "refr", 1)
    assert (await rd.next()).redelivered is False
    again = await rd.next(timeout=5)
    assert (again.seq, again.redelivered, again.redelivery_count) == (1, True, 1)
    with pytest.raises(StanError, match="clientID already registered"):
        await env.connect("on-ref")


async def test_second_server_with_same_cluster_id_refuses_to_start(reference_factory, stan):
    ref = reference_factory()
    await stan(nats_url=ref.url)
    with pytest.raises(RuntimeError, match="discovered another streaming server"):
        await stan(nats_url=ref.url)
    other = await stan(nats_url=ref.url, cluster_id="other-cluster")
    sc = await other.connect("x")
    assert await sc.publish("a", b"b")
