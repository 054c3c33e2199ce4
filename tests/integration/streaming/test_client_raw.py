"""The streaming client's pieces for bulk readers and writers (what the Spark connector uses):
raw_cb subscriptions acked by sequence, `peek`, and `wait_pub_acks`."""

from __future__ import annotations

import asyncio
import time

import pytest

from tidings.streaming.client import ERR_MANUAL_ACK, ERR_PUB_ACK_TIMEOUT, StanError
from tidings.streaming.pb import protocol_pb2 as pb


class RawInbox:
    """A raw_cb collecting decoded deliveries; `await until(n)` waits for n of them."""

    def __init__(self) -> None:
        self.msgs: list[pb.MsgProto] = []
        self.subjects: list[bytes] = []
        self._want = 0
        self._reached: asyncio.Future[None] | None = None

    def __call__(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                 payload: bytes) -> None:
        self.subjects.append(subject)
        self.msgs.append(pb.MsgProto.FromString(payload))
        if self._reached is not None and len(self.msgs) >= self._want:
            if not self._reached.done():
                self._reached.set_result(None)

    async def until(self, n: int, timeout: float = 5.0) -> None:
        if len(self.msgs) >= n:
            return
        self._want = n
        self._reached = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(self._reached, timeout)


async def test_raw_cb_gets_encoded_messages_and_is_acked_by_sequence(stan):
    env = await stan()
    sc = await env.connect("raw")
    for i in range(6):
        await sc.publish("r", b"m%d" % i)
    inbox = RawInbox()
    sub = await sc.subscribe("r", sequence=2, max_inflight=3, raw_cb=inbox)
    assert sub.manual_acks  # nothing is acked for a raw_cb subscription
    await inbox.until(3)
    assert [m.sequence for m in inbox.msgs] == [2, 3, 4]
    assert [m.data for m in inbox.msgs] == [b"m1", b"m2", b"m3"]
    assert all(s == sub.inbox.encode() for s in inbox.subjects)
    assert sub.received == 0  # no Msg was made
    await sub.ack_sequences([m.sequence for m in inbox.msgs])  # makes room for 5 and 6
    await inbox.until(5)
    assert [m.sequence for m in inbox.msgs] == [2, 3, 4, 5, 6]
    assert not any(m.redelivered for m in inbox.msgs)
    await sub.unsubscribe()
    with pytest.raises(StanError):
        await sub.ack_sequences([5])


async def test_unacked_raw_subscription_stops_at_max_inflight(stan):
    """A range read: maxInFlight = range size, no ack ever sent, closed at the end."""
    env = await stan()
    sc = await env.connect("range")
    for i in range(10):
        await sc.publish("rg", b"x%d" % i)
    inbox = RawInbox()
    sub = await sc.subscribe("rg", sequence=3, max_inflight=4, raw_cb=inbox)
    await inbox.until(4)
    # the server delivers before it answers the removal on the same connection, and the
    # inbox stays subscribed until that answer: anything beyond the window would be here
    await sub.unsubscribe()
    assert [m.sequence for m in inbox.msgs] == [3, 4, 5, 6]


async def test_ack_sequences_needs_manual_acks(stan):
    env = await stan()
    sc = await env.connect("auto")
    sub = await sc.subscribe("a", cb=lambda m: None)
    with pytest.raises(StanError, match=ERR_MANUAL_ACK):
        await sub.ack_sequences([1])


async def test_peek_finds_channel_bounds(stan):
    env = await stan()
    sc = await env.connect("peek")
    assert await sc.peek("p", "first") is None
    assert await sc.peek("p", "last_received") is None
    for i in range(5):
        await sc.publish("p", b"p%d" % i)
    first = await sc.peek("p", "first")
    last = await sc.peek("p", "last_received")
    assert first is not None and last is not None
    assert (first.sequence, first.data) == (1, b"p0")
    assert (last.sequence, last.data) == (5, b"p4")
    assert abs(last.timestamp / 1e9 - time.time()) < 60
    third = await sc.peek("p", sequence=3)
    assert third is not None and third.sequence == 3
    hour = await sc.peek("p", time_delta_ns=3600 * 10**9)
    assert hour is not None and hour.sequence == 1
    assert await sc.peek("p", time_delta_ns=1) is None  # nothing stored in the last 1 ns
    assert sc._subs == {}  # every probe subscription was removed
    # peeks consumed nothing: a subscriber still gets everything
    inbox = RawInbox()
    await sc.subscribe("p", start_at="first", raw_cb=inbox)
    await inbox.until(5)
    assert [m.sequence for m in inbox.msgs] == [1, 2, 3, 4, 5]


async def test_wait_pub_acks_returns_once_all_are_acknowledged(stan):
    env = await stan()
    sc = await env.connect("drain", max_pub_acks_inflight=16)
    await sc.wait_pub_acks()  # nothing outstanding: at once
    acked: list[tuple[str, StanError | None]] = []
    guids = [await sc.publish_async("d", b"%d" % i, ack_handler=lambda g, e: acked.append((g, e)))
             for i in range(200)]
    await asyncio.wait_for(sc.wait_pub_acks(), 10)
    assert sc.pub_acks_pending() == 0
    assert sorted(g for g, _ in acked) == sorted(guids)
    assert all(err is None for _, err in acked)
    assert env.server.store.channel_info("d").msgs == 200


async def test_wait_pub_acks_ends_with_timeouts_when_nobody_acks(stan):
    env = await stan()
    sc = await env.connect("lost", ack_timeout=0.3)
    await env.stop_streaming()  # the core server stays: publishes go out, no PubAck comes
    errors: list[StanError | None] = []
    for i in range(3):
        await sc.publish_async("gone", b"%d" % i, ack_handler=lambda g, e: errors.append(e))
    assert sc.pub_acks_pending() == 3
    await asyncio.wait_for(sc.wait_pub_acks(), 10)
    assert sc.pub_acks_pending() == 0
    assert [str(e) for e in errors] == [ERR_PUB_ACK_TIMEOUT] * 3


async def test_close_client_makes_the_server_forget_another_id(stan):
    env = await stan()
    gone = await env.connect("lost-one")
    await gone.subscribe("cc", raw_cb=RawInbox(), start_at="first")
    sc = await env.connect("taker")
    assert set(env.server.clients) == {"lost-one", "taker"}
    await sc.close_client("lost-one")
    assert set(env.server.clients) == {"taker"}  # its subscription went with it
    with pytest.raises(StanError, match="unknown clientID"):
        await sc.close_client("lost-one")
