"""The bulk range fetch extension (`_TIDINGS.fetch.<cluster_id>`) over real sockets.

Replies are decoded here with `struct` straight from the documented layout (docs/streaming.md),
so these tests pin the wire format, not just one reader of it.
"""

from __future__ import annotations

import json
import struct
from typing import Any, NamedTuple

import pytest

from tidings.client import errors
from tidings.client.subscription import RawSubscription
from tidings.streaming.stores import StoreLimits

from .test_delivery import publish_n

HEADER = struct.Struct("<4sIIIqqq")


class Reply(NamedTuple):
    status: int
    flags: int
    first: int
    last: int
    next: int
    seqs: list[int]
    stamps: list[int]
    payloads: list[bytes]
    error: str


def decode(data: bytes) -> Reply:
    magic, status, n, flags, first, last, nxt = HEADER.unpack_from(data)
    assert magic == b"TFR1"
    at = HEADER.size
    if status:
        return Reply(status, flags, first, last, nxt, [], [], [], data[at:].decode())
    seqs = list(struct.unpack_from(f"<{n}q", data, at))
    stamps = list(struct.unpack_from(f"<{n}q", data, at + 8 * n))
    offs = struct.unpack_from(f"<{n + 1}i", data, at + 16 * n)
    body = data[at + 16 * n + 4 * (n + 1):]
    assert offs[0] == 0 and offs[-1] == len(body)
    payloads = [body[offs[i]:offs[i + 1]] for i in range(n)]
    return Reply(status, flags, first, last, nxt, seqs, stamps, payloads, "")


async def fetch(env: Any, raw: bytes | None = None, **req: Any) -> Reply:
    nc = env.ncs[0] if env.ncs else await env.nats()
    data = raw if raw is not None else json.dumps(req).encode()
    msg = await nc.request(f"_TIDINGS.fetch.{env.cluster_id}", data, timeout=5)
    return decode(msg.data)


async def test_a_range_in_one_reply_matches_the_store(stan):
    env = await stan()
    sc = await env.connect("f1")
    await publish_n(sc, "f.one", 10)
    r = await fetch(env, channel="f.one", start=3, end=7)
    assert r.status == 0 and r.flags == 0
    assert (r.first, r.last, r.next) == (1, 10, 8)
    stored = env.server.store.get_msgs("f.one", 3, 5)
    assert r.seqs == [m.seq for m in stored] == [3, 4, 5, 6, 7]
    assert r.stamps == [m.timestamp for m in stored]
    assert r.payloads == [b"m%d" % i for i in range(2, 7)]


async def test_byte_budget_splits_a_range_and_next_continues_it(stan):
    env = await stan()
    sc = await env.connect("f2")
    payloads = [bytes([65 + i % 26]) * (50 + 13 * i) for i in range(40)]
    for p in payloads:
        await sc.publish("f.big", p)
    got: list[bytes] = []
    seqs: list[int] = []
    pos, replies = 1, 0
    while pos <= 40:
        r = await fetch(env, channel="f.big", start=pos, end=40, max_bytes=1000)
        assert r.status == 0 and r.seqs
        size = HEADER.size + 4 + sum(20 + len(p) for p in r.payloads)
        assert size <= 1000 or len(r.seqs) == 1
        assert r.next == r.seqs[-1] + 1
        got += r.payloads
        seqs += r.seqs
        pos, replies = r.next, replies + 1
    assert seqs == list(range(1, 41)) and got == payloads
    assert replies > 5


async def test_a_message_larger_than_the_budget_still_comes_alone(stan):
    env = await stan()
    sc = await env.connect("f3")
    await sc.publish("f.huge", b"x" * 5000)
    await sc.publish("f.huge", b"y")
    r = await fetch(env, channel="f.huge", start=1, end=2, max_bytes=100)
    assert (r.seqs, r.payloads, r.next) == ([1], [b"x" * 5000], 2)


async def test_unknown_channel_is_an_error_and_is_not_created(stan):
    env = await stan()
    r = await fetch(env, channel="f.nothing", start=1, end=5)
    assert r.status == 2 and "unknown channel" in r.error and not r.seqs
    assert not env.server.store.has_channel("f.nothing")
    assert "f.nothing" not in env.server.channels


async def test_bad_requests_are_refused_with_the_reason(stan):
    env = await stan()
    sc = await env.connect("f4")
    await publish_n(sc, "f.ok", 2)
    cases = [
        (b"not json", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # too deep for the decoder
        (b"[1, 2]", "JSON object"),
        (json.dumps({"channel": "f.*", "start": 1, "end": 2}).encode(), "invalid channel"),
        (json.dumps({"channel": "f.ok", "start": 5, "end": 2}).encode(), "start (5) > end (2)"),
        (json.dumps({"channel": "f.ok", "start": 0, "end": 2}).encode(), "start must be >= 1"),
        (json.dumps({"channel": "f.ok", "start": 1}).encode(), "end must be an integer"),
        (json.dumps({"channel": "f.ok", "start": 1, "end": 2, "max_bytes": 0}).encode(),
         "max_bytes must be >= 1"),
    ]
    for raw, reason in cases:
        r = await fetch(env, raw=raw)
        assert r.status == 1 and reason in r.error, (raw, r)
    assert not env.server.store.has_channel("f.*")


async def test_a_start_below_the_first_sequence_is_clipped_and_said_so(stan):
    env = await stan(limits=StoreLimits(max_msgs=5))
    sc = await env.connect("f5")
    await publish_n(sc, "f.lim", 12)
    r = await fetch(env, channel="f.lim", start=2, end=10)
    assert r.flags == 1 and (r.first, r.last) == (8, 12)
    assert r.seqs == [8, 9, 10] and r.next == 11
    gone = await fetch(env, channel="f.lim", start=2, end=6)
    assert gone.status == 0 and gone.seqs == [] and gone.next == 8 and gone.flags == 1


async def test_a_range_past_the_last_sequence_is_empty(stan):
    env = await stan()
    sc = await env.connect("f6")
    await publish_n(sc, "f.short", 3)
    r = await fetch(env, channel="f.short", start=2, end=9)
    assert r.seqs == [2, 3] and r.next == 4
    r = await fetch(env, channel="f.short", start=4, end=9)
    assert r.status == 0 and r.seqs == [] and r.next == 4 and r.last == 3


async def test_fetch_is_read_only(stan):
    env = await stan()
    sc = await env.connect("f7")
    await publish_n(sc, "f.ro", 4)
    await sc.close()
    before = (env.server.num_subs(), len(env.server.clients))
    r = await fetch(env, channel="f.ro", start=1, end=4)
    assert r.seqs == [1, 2, 3, 4]
    assert (env.server.num_subs(), len(env.server.clients)) == before == (0, 0)
    assert env.server.store.channel_info("f.ro").msgs == 4


async def test_the_fetch_subscription_is_raw_and_goes_at_shutdown(stan):
    env = await stan()
    subs = env.server._extension_subs
    assert len(subs) == 1 and isinstance(subs[0], RawSubscription)
    await env.stop_streaming()
    nc = await env.nats()
    with pytest.raises(errors.NoRespondersError):
        await nc.request(f"_TIDINGS.fetch.{env.cluster_id}", b"{}", timeout=2)
