"""Publish, subscribe, acks and redelivery with tidings' streaming client."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness import eventually
from tidings.streaming.client import StanError

from .conftest import Inbox


async def publish_n(sc, subject: str, n: int, start: int = 0) -> list[str]:
    return [await sc.publish(subject, b"m%d" % i) for i in range(start, start + n)]


def seqs(msgs) -> list[int]:
    return [m.seq for m in msgs]


async def barrier(sc) -> None:
    """A round trip on the client's connection: what it sent before was processed."""
    await sc.publish("barrier", b"")


async def test_publish_sync_and_async_acks(stan):
    env = await stan()
    sc = await env.connect("pub")
    guid = await sc.publish("orders", b"one")
    assert guid
    acked: list[tuple[str, object]] = []
    done = asyncio.Event()

    def on_ack(g, err):
        acked.append((g, err))
        if len(acked) == 100:
            done.set()

    guids = [await sc.publish_async("orders", b"x%d" % i, ack_handler=on_ack) for i in range(100)]
    await asyncio.wait_for(done.wait(), 5)
    assert sorted(g for g, _ in acked) == sorted(guids)
    assert all(err is None for _, err in acked)
    info = env.server.store.channel_info("orders")
    assert (info.first_seq, info.last_seq, info.msgs) == (1, 101, 101)


async def test_pub_acks_in_flight_are_bounded(stan):
    env = await stan()
    sc = await env.connect("bounded", max_pub_acks_inflight=4)
    peak = 0
    for i in range(40):
        await sc.publish_async("b", b"%d" % i)
        peak = max(peak, sc.pub_acks_pending())
    assert peak <= 4
    await eventually(lambda: sc.pub_acks_pending() == 0)
    assert env.server.store.channel_info("b").msgs == 40


async def test_start_positions(stan):
    env = await stan()
    sc = await env.connect("sp")
    await publish_n(sc, "pos", 5)
    cases = {
        "first": dict(start_at="first"),
        "all": dict(deliver_all_available=True),
        "last": dict(start_at="last_received"),
        "seq3": dict(sequence=3),
        "seq0": dict(sequence=0),
        "seq99": dict(sequence=99),
        "new": dict(start_at="new_only"),
    }
    inboxes = {}
    for name, kw in cases.items():
        inboxes[name] = Inbox()
        await sc.subscribe("pos", cb=inboxes[name], **kw)
    await publish_n(sc, "pos", 1, start=5)  # seq 6, a new message for everybody
    assert seqs(await inboxes["first"].take(6)) == [1, 2, 3, 4, 5, 6]
    assert seqs(await inboxes["all"].take(6)) == [1, 2, 3, 4, 5, 6]
    assert seqs(await inboxes["last"].take(2)) == [5, 6]
    assert seqs(await inboxes["seq3"].take(4)) == [3, 4, 5, 6]
    assert seqs(await inboxes["seq0"].take(6)) == [1, 2, 3, 4, 5, 6]
    assert seqs(await inboxes["seq99"].take(1)) == [6]
    assert seqs(await inboxes["new"].take(1)) == [6]
    m = inboxes["first"].all[0]
    assert (m.subject, m.data, m.redelivered) == ("pos", b"m0", False)
    assert abs(m.timestamp / 1e9 - time.time()) < 60


async def test_start_by_time(stan):
    env = await stan()
    sc = await env.connect("tm")
    await publish_n(sc, "t", 1)
    await asyncio.sleep(0.3)  # a gap between the timestamps of message 1 and message 2
    await publish_n(sc, "t", 2, start=1)
    stored = [env.server.store.lookup("t", s).timestamp for s in (1, 2, 3)]
    assert stored[1] - stored[0] >= 0.3e9
    # reach back to the middle of the gap: messages 2 and 3
    delta = (time.time_ns() - stored[1]) / 1e9 + 0.15
    ib = Inbox()
    await sc.subscribe("t", cb=ib, time_delta=delta)
    assert seqs(await ib.take(2)) == [2, 3]
    ib_all, ib_none = Inbox(), Inbox()
    await sc.subscribe("t", cb=ib_all, time=time.time() - 3600)
    await sc.subscribe("t", cb=ib_none, time=time.time() + 3600)
    assert seqs(await ib_all.take(3)) == [1, 2, 3]
    await publish_n(sc, "t", 1, start=3)
    assert seqs(await ib_none.take(1)) == [4]
    assert seqs(await ib.take(1)) == [4]


async def test_start_positions_on_an_empty_channel(stan):
    env = await stan()
    sc = await env.connect("empty")
    ibs = [Inbox() for _ in range(4)]
    await sc.subscribe("e", cb=ibs[0], start_at="last_received")
    await sc.subscribe("e", cb=ibs[1], deliver_all_available=True)
    await sc.subscribe("e", cb=ibs[2], sequence=10)
    await sc.subscribe("e", cb=ibs[3], time_delta=10)
    await publish_n(sc, "e", 2)
    for ib in ibs:
        assert seqs(await ib.take(2)) == [1, 2]


async def test_max_inflight_stalls_until_acked(stan):
    env = await stan(monitor=True)
    sc = await env.connect("mif")
    await publish_n(sc, "mif", 10)
    ib = Inbox()
    sub = await sc.subscribe("mif", cb=ib, deliver_all_available=True, max_inflight=3,
                             manual_acks=True)
    got = await ib.take(3)
    assert seqs(got) == [1, 2, 3]
    status, ch = await env.get("/streaming/channelsz?channel=mif&subs=1")
    assert status == 200
    (s,) = ch["subscriptions"]
    assert (s["pending_count"], s["is_stalled"], s["last_sent"], s["max_inflight"]) == (
        3, True, 3, 3)
    assert ib.empty()
    await got[0].ack()
    assert seqs(await ib.take(1)) == [4]
    for m in got[1:]:
        await sub.ack(m)
    assert seqs(await ib.take(2)) == [5, 6]
    with pytest.raises(StanError):
        other = await sc.subscribe("mif", cb=Inbox())
        await other.ack(got[0])  # not a manual-ack subscription


async def test_auto_ack_and_redelivery_after_ack_wait(stan):
    env = await stan()
    sc = await env.connect("rd")
    auto, manual = Inbox(), Inbox()
    await sc.subscribe("rd", cb=auto)
    await sc.subscribe("rd", cb=manual, manual_acks=True, ack_wait=1)
    await publish_n(sc, "rd", 2)
    assert seqs(await auto.take(2)) == [1, 2]
    first = await manual.take(2)
    assert [m.redelivered for m in first] == [False, False]
    await first[1].ack()
    again = await manual.next(timeout=5)
    assert (again.seq, again.redelivered, again.redelivery_count) == (1, True, 1)
    third = await manual.next(timeout=5)
    assert (third.seq, third.redelivered, third.redelivery_count) == (1, True, 2)
    await third.ack()
    await barrier(sc)
    # the auto-ack subscription has nothing outstanding, so nothing is redelivered to it
    sub_state = [s for s in env.server.channels["rd"].psubs if s.client_id == "rd"]
    assert sorted(len(s.pending) for s in sub_state) == [0, 0]
    assert auto.empty()


async def test_durable_resumes_after_reconnect(stan):
    env = await stan()
    pub = await env.connect("dpub")
    sc = await env.connect("dur-client")
    ib = Inbox()
    await sc.subscribe("d", cb=ib, durable_name="dur", deliver_all_available=True,
                       manual_acks=True, ack_wait=30)
    await publish_n(pub, "d", 5)
    got = await ib.take(5)
    for m in got[:3]:
        await m.ack()
    await sc.close()  # connection close: the durable goes offline with its position
    await publish_n(pub, "d", 2, start=5)
    sc2 = await env.connect("dur-client")
    ib2 = Inbox()
    await sc2.subscribe("d", cb=ib2, durable_name="dur", deliver_all_available=True,
                        manual_acks=True)
    back = await ib2.take(4)
    assert [(m.seq, m.redelivered) for m in back] == [(4, True), (5, True), (6, False),
                                                       (7, False)]
    # a different client id has its own durable of the same name
    other = await env.connect("someone-else")
    ib3 = Inbox()
    await other.subscribe("d", cb=ib3, durable_name="dur", start_at="last_received")
    assert seqs(await ib3.take(1)) == [7]


async def test_subscription_close_keeps_a_durable_unsubscribe_removes_it(stan):
    env = await stan()
    sc = await env.connect("dc")
    await publish_n(sc, "dc", 3)
    ib = Inbox()
    sub = await sc.subscribe("dc", cb=ib, durable_name="keep", deliver_all_available=True)
    assert seqs(await ib.take(3)) == [1, 2, 3]
    await sub.close()
    await publish_n(sc, "dc", 1, start=3)
    ib2 = Inbox()
    sub2 = await sc.subscribe("dc", cb=ib2, durable_name="keep", deliver_all_available=True)
    assert seqs(await ib2.take(1)) == [4]  # resumed: not from the start
    await sub2.unsubscribe()
    ib3 = Inbox()
    await sc.subscribe("dc", cb=ib3, durable_name="keep", deliver_all_available=True)
    assert seqs(await ib3.take(4)) == [1, 2, 3, 4]  # a new durable: from the start again
    with pytest.raises(StanError, match="invalid subscription"):
        await sub2.unsubscribe()


async def test_connection_close_removes_plain_subscriptions(stan):
    env = await stan()
    sc = await env.connect("plain")
    await sc.subscribe("p1", cb=Inbox())
    await sc.subscribe("p2", cb=Inbox(), durable_name="d")
    assert env.server.num_subs() == 2
    await sc.close()
    assert "plain" not in env.server.clients
    assert env.server.channels["p1"].all_subs() == []
    (offline,) = env.server.channels["p2"].all_subs()
    assert offline.is_offline and offline.saved_client_id == "plain"
    assert env.server.store.subs("p1") == []
    (rec,) = env.server.store.subs("p2")
    assert rec.is_closed and rec.client_id == "plain"


async def test_queue_group_each_message_to_one_member(stan):
    env = await stan()
    sc = await env.connect("q")
    a, b = Inbox(), Inbox()
    await sc.subscribe("q", cb=a, queue="workers")
    await sc.subscribe("q", cb=b, queue="workers")
    await publish_n(sc, "q", 40)
    await eventually(lambda: len(a.all) + len(b.all) == 40)
    got = sorted(seqs(a.all) + seqs(b.all))
    assert got == list(range(1, 41))
    assert a.all and b.all  # both members got work
    assert set(seqs(a.all)).isdisjoint(seqs(b.all))


async def test_queue_member_leaving_hands_unacked_to_the_others(stan):
    env = await stan()
    sc = await env.connect("qx")
    keeper, leaver = Inbox(), Inbox()
    await sc.subscribe("qx", cb=keeper, queue="g", manual_acks=True, ack_wait=30)
    sub_l = await sc.subscribe("qx", cb=leaver, queue="g", manual_acks=True, ack_wait=30)
    await publish_n(sc, "qx", 10)
    await eventually(lambda: len(keeper.all) + len(leaver.all) == 10)
    for m in keeper.all:
        await m.ack()
    acked_by_leaver = leaver.all[:1]
    for m in acked_by_leaver:
        await m.ack()
    unacked = sorted(seqs(leaver.all[1:]))
    assert unacked, "the leaving member must hold unacknowledged messages"
    kept_before = len(keeper.all)
    await sub_l.close()
    await eventually(lambda: len(keeper.all) >= kept_before + len(unacked))
    moved = keeper.all[kept_before:]
    assert sorted(seqs(moved)) == unacked
    assert all(m.redelivered for m in moved)
    assert len(keeper.all) == kept_before + len(unacked)
    # nothing acknowledged by one member is ever given to another
    assert set(seqs(moved)).isdisjoint(seqs(acked_by_leaver))


async def test_queue_redelivery_never_duplicates_an_acked_message(stan):
    env = await stan()
    sc = await env.connect("qr")
    a, b = Inbox(), Inbox()
    await sc.subscribe("qr", cb=a, queue="g", manual_acks=True, ack_wait=1)
    await sc.subscribe("qr", cb=b, queue="g", manual_acks=True, ack_wait=1)
    await publish_n(sc, "qr", 6)
    await eventually(lambda: len(a.all) + len(b.all) >= 6)
    acked = set()
    for m in a.all:  # a acks everything it got; b acks nothing
        await m.ack()
        acked.add(m.seq)
    b_first = set(seqs(b.all))
    assert b_first
    # b's messages come back after the ack wait (to a or b); a's acked ones never do
    redelivered: set[int] = set()

    def seen():
        for m in a.all + b.all:
            if m.redelivered:
                redelivered.add(m.seq)
        return b_first <= redelivered

    await eventually(seen, timeout=10)
    assert redelivered.isdisjoint(acked)


async def test_durable_queue_group_survives_all_members_leaving(stan):
    env = await stan()
    sc = await env.connect("dq")
    m1 = Inbox()
    sub = await sc.subscribe("dq", cb=m1, queue="g", durable_name="dqn",
                             deliver_all_available=True, manual_acks=True)
    await publish_n(sc, "dq", 4)
    got = await m1.take(4)
    await got[0].ack()
    await got[1].ack()
    await sub.close()  # last member leaves: the group is kept (shadow)
    ch = env.server.channels["dq"]
    qs = ch.qsubs["dqn:g"]
    assert qs.subs == [] and qs.shadow is not None and len(qs.shadow.pending) == 2
    await publish_n(sc, "dq", 1, start=4)
    m2 = Inbox()
    await sc.subscribe("dq", cb=m2, queue="g", durable_name="dqn", deliver_all_available=True,
                       manual_acks=True)
    back = await m2.take(3)
    assert [(m.seq, m.redelivered) for m in back] == [(3, True), (4, True), (5, False)]
    for m in back:
        await m.ack()
    # a non-durable group of the same name is a different group
    m3 = Inbox()
    await sc.subscribe("dq", cb=m3, queue="g", deliver_all_available=True)
    assert seqs(await m3.take(5)) == [1, 2, 3, 4, 5]


async def test_durable_queue_unsubscribe_of_last_member_removes_the_group(stan):
    env = await stan()
    sc = await env.connect("dqu")
    await publish_n(sc, "dqu", 2)
    ib = Inbox()
    sub = await sc.subscribe("dqu", cb=ib, queue="g", durable_name="n",
                             deliver_all_available=True)
    assert seqs(await ib.take(2)) == [1, 2]
    await sub.unsubscribe()
    assert "n:g" not in env.server.channels["dqu"].qsubs
    assert env.server.store.subs("dqu") == []


async def test_client_on_a_shared_nats_connection_and_next_msg(stan):
    env = await stan()
    nc = await env.nats()
    sc = await env.connect("shared", nats=nc)
    sub = await sc.subscribe("nm", deliver_all_available=True, manual_acks=True)
    await sc.publish("nm", b"a")
    await sc.publish("nm", b"b")
    first = await sub.next_msg(timeout=5)
    second = await sub.next_msg(timeout=5)
    assert (first.seq, first.data, second.seq) == (1, b"a", 2)
    await first.ack()
    await second.ack()
    await sc.close()
    assert not nc.is_closed  # the connection belongs to the application
    assert "shared" not in env.server.clients
    with pytest.raises(StanError, match="closed"):
        await sc.publish("nm", b"c")
