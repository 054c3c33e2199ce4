"""The real NATS client from PyPI (nats-py) against tidings, and the same tests against the
reference nats-server so that they check the test as much as the server.

nats-py's flush() may send its PING ahead of commands still in its own write buffer, so a
bare flush() does not prove the server has seen a SUB. Where order across connections
matters, `synced(nc)` does a request to a responder on the same connection: the reply can
only come back after the server has processed everything the connection sent before it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError

from tests.harness import Server
from tests.harness.rawnats import RawConn
from tests.messaging import synced
from tidings.protocol.headers import Headers

from .conftest import ServerPair

_ids = itertools.count()


@pytest.fixture(params=["tidings", "reference"])
def server(request: pytest.FixtureRequest, server_pairs: ServerPair) -> Server:
    return server_pairs.get(request.param, "default")


async def connect(server: Server, **kw: object) -> NATS:
    return await nats.connect(
        server.url, allow_reconnect=False, connect_timeout=5, **kw  # type: ignore[arg-type]
    )


@pytest.fixture
async def nc(server: Server) -> AsyncIterator[NATS]:
    conn = await connect(server)
    yield conn
    if not conn.is_closed:
        await conn.close()


def unique(prefix: str) -> str:
    return f"{prefix}.{next(_ids)}"


async def collect(sub: object, n: int, timeout: float = 5) -> list[Msg]:
    out = []
    for _ in range(n):
        out.append(await sub.next_msg(timeout=timeout))  # type: ignore[attr-defined]
    return out


# -- connect ---------------------------------------------------------------------------------
async def test_connect(nc: NATS, server: Server) -> None:
    assert nc.is_connected
    assert nc.max_payload == 1024 * 1024
    assert nc.connected_url is not None and nc.connected_url.port == server.port
    info = nc._server_info
    assert info["headers"] is True
    assert info["proto"] == 1
    assert isinstance(info["client_id"], int)
    await nc.flush(timeout=5)


# -- publish / subscribe ---------------------------------------------------------------------
async def test_publish_subscribe_same_connection(nc: NATS) -> None:
    subject = unique("ps")
    sub = await nc.subscribe(subject)
    for i in range(50):
        await nc.publish(subject, b"m%d" % i, reply="r.x")
    msgs = await collect(sub, 50)
    assert [m.data for m in msgs] == [b"m%d" % i for i in range(50)]
    assert all(m.subject == subject and m.reply == "r.x" for m in msgs)


async def test_publish_subscribe_across_connections(nc: NATS, server: Server) -> None:
    subject = unique("across")
    sub = await nc.subscribe(subject)
    await synced(nc)
    other = await connect(server)
    try:
        await other.publish(subject, b"hello")
        await other.flush()
        assert (await sub.next_msg(timeout=5)).data == b"hello"
    finally:
        await other.close()


async def test_wildcards(nc: NATS) -> None:
    base = unique("wc")
    star = await nc.subscribe(f"{base}.*")
    full = await nc.subscribe(f"{base}.>")
    for suffix in ("a", "a.b", "b.c.d"):
        await nc.publish(f"{base}.{suffix}", suffix.encode())
    await nc.publish(base, b"not matched")
    await synced(nc)
    assert [m.subject for m in await collect(full, 3)] == [
        f"{base}.a", f"{base}.a.b", f"{base}.b.c.d"
    ]
    assert [m.data for m in await collect(star, 1)] == [b"a"]
    with pytest.raises(nats.errors.TimeoutError):
        await star.next_msg(timeout=0.05)
    with pytest.raises(nats.errors.TimeoutError):
        await full.next_msg(timeout=0.05)


async def test_queue_group_1000_messages_over_3_members(server: Server) -> None:
    subject = unique("q")
    members = [await connect(server) for _ in range(3)]
    pub = await connect(server)
    try:
        received: list[list[bytes]] = [[], [], []]
        subs = []
        for i, m in enumerate(members):
            async def cb(msg: Msg, i: int = i) -> None:
                received[i].append(msg.data)

            subs.append(await m.subscribe(subject, queue="workers", cb=cb))
            await synced(m)
        for n in range(1000):
            await pub.publish(subject, b"%d" % n)
        await synced(pub)  # the server has routed all 1,000
        for m in members:
            await synced(m)  # ...and each member has received what was routed to it
        everything = [d for r in received for d in r]
        assert len(everything) == 1000
        assert sorted(everything) == sorted(b"%d" % n for n in range(1000))
        assert all(len(r) > 0 for r in received), [len(r) for r in received]
    finally:
        for c in [*members, pub]:
            await c.close()


# -- headers ---------------------------------------------------------------------------------
async def test_headers_round_trip_case_preserved(nc: NATS, server: Server) -> None:
    subject = unique("hdr")
    sub = await nc.subscribe(subject)
    with RawConn(server.port) as raw:
        raw.connect(b'CONNECT {"verbose":false,"headers":true}\r\n')
        raw.send(b"SUB %s 1\r\n" % subject.encode())
        raw.barrier()
        await synced(nc)
        headers = {"Mixed-Case": "One", "lower": "two", "UPPER": "THREE", "Spaced": "a b  c"}
        await nc.publish(subject, b"body", headers=headers)
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"body"
        assert msg.headers == headers
        # The raw subscriber sees the exact block: names and values byte for byte.
        line = raw.read_line()
        assert line.startswith(b"HMSG %s 1 " % subject.encode())
        hdr_len, total = (int(x) for x in line.split()[-2:])
        raw.read_until(lambda b: len(b) >= total + 2)
        block = raw.take(total + 2)
        assert block[hdr_len:] == b"body\r\n"
        parsed = Headers.decode(block[:hdr_len])
        assert parsed.to_dict() == headers
        assert parsed.keys() == list(headers)


async def test_multi_value_headers_round_trip(nc: NATS, server: Server) -> None:
    """nats-py's API keeps one value per name, so the multi-value block is published raw and
    read raw; nats-py must still accept it."""
    subject = unique("multi")
    sub = await nc.subscribe(subject)
    await synced(nc)
    hdr = b"NATS/1.0\r\nBREAKFAST: donut\r\nBREAKFAST: eggs\r\nlunch: Soup\r\n\r\n"
    with RawConn(server.port) as raw:
        raw.connect(b'CONNECT {"verbose":false,"headers":true}\r\n')
        raw.send(b"SUB %s 1\r\nHPUB %s %d %d\r\n%sYum!\r\n"
                 % (subject.encode(), subject.encode(), len(hdr), len(hdr) + 4, hdr))
        got = raw.barrier()
    expected = b"HMSG %s 1 %d %d\r\n%sYum!\r\n" % (subject.encode(), len(hdr), len(hdr) + 4, hdr)
    assert got == expected
    parsed = Headers.decode(hdr)
    assert parsed.get_all("BREAKFAST") == ["donut", "eggs"]
    assert parsed.get("lunch") == "Soup"
    msg = await sub.next_msg(timeout=5)
    assert msg.data == b"Yum!"
    assert msg.headers is not None
    assert msg.headers["BREAKFAST"] in ("donut", "eggs")
    assert msg.headers["lunch"] == "Soup"


# -- request / reply -------------------------------------------------------------------------
async def test_request_reply(nc: NATS, server: Server) -> None:
    subject = unique("svc")

    async def handler(msg: Msg) -> None:
        await msg.respond(b"re: " + msg.data)

    await nc.subscribe(subject, cb=handler)
    await synced(nc)
    client = await connect(server)
    try:
        for i in range(20):
            reply = await client.request(subject, b"q%d" % i, timeout=5)
            assert reply.data == b"re: q%d" % i
    finally:
        await client.close()


async def test_no_responders(nc: NATS) -> None:
    with pytest.raises(NoRespondersError):
        await nc.request(unique("nobody"), b"anyone?", timeout=5)


# -- auto-unsubscribe, flush, drain ------------------------------------------------------------
async def test_auto_unsubscribe_after_n(nc: NATS, server: Server) -> None:
    subject = unique("auto")
    got: list[bytes] = []

    async def cb(msg: Msg) -> None:
        got.append(msg.data)

    sub = await nc.subscribe(subject, cb=cb)
    await sub.unsubscribe(limit=3)
    await synced(nc)
    before = nc.stats["in_msgs"]
    pub = await connect(server)
    try:
        for i in range(10):
            await pub.publish(subject, b"%d" % i)
        await synced(pub)
    finally:
        await pub.close()
    await synced(nc)
    assert got == [b"0", b"1", b"2"]
    # The server itself stopped after 3: nats-py counts every MSG that arrives, even those
    # it would drop; the sync adds 2 (its request to our responder, and the reply).
    assert nc.stats["in_msgs"] - before == 3 + 2


async def test_flush(nc: NATS) -> None:
    subject = unique("flush")
    sub = await nc.subscribe(subject)
    for _ in range(100):
        await nc.publish(subject, b"x")
    await nc.flush(timeout=5)
    await synced(nc)
    assert len(await collect(sub, 100)) == 100
    assert nc.stats["out_msgs"] >= 100


async def test_drain(server: Server) -> None:
    subject = unique("drain")
    conn = await connect(server)
    handled: list[bytes] = []

    async def slow(msg: Msg) -> None:
        await asyncio.sleep(0.001)
        handled.append(msg.data)

    await conn.subscribe(subject, cb=slow)
    await synced(conn)
    pub = await connect(server)
    try:
        for i in range(50):
            await pub.publish(subject, b"%d" % i)
        await synced(pub)
    finally:
        await pub.close()
    await synced(conn)  # all 50 have reached the client
    await conn.drain()
    assert conn.is_closed
    assert handled == [b"%d" % i for i in range(50)]


# -- payload sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 64 * 1024, 1024 * 1024])
async def test_payload_sizes(nc: NATS, size: int) -> None:
    subject = unique("size")
    payload = bytes((i * 7) % 256 for i in range(size)) if size < 4096 else (
        bytes(range(256)) * (size // 256)
    )
    sub = await nc.subscribe(subject)
    await nc.publish(subject, payload)
    msg = await sub.next_msg(timeout=10)
    assert len(msg.data) == size
    assert msg.data == payload


async def test_payload_over_max_payload_is_refused(nc: NATS) -> None:
    """nats-py refuses it from the max_payload the server announced in INFO (the server's
    own refusal is in test_raw_protocol.py)."""
    with pytest.raises(MaxPayloadError):
        await nc.publish(unique("big"), b"x" * (nc.max_payload + 1))
    assert nc.is_connected
    await synced(nc)
