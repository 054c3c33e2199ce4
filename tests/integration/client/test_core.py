"""Core client behaviour against tidings and the reference nats-server: the same tests on both.

Connect, publish, subscribe (callback and iterator), queue groups, auto-unsubscribe,
request/reply with no-responders, headers, flush, drain, close.
"""

from __future__ import annotations

import asyncio

import pytest

import tidings.client
from tests.harness import Server
from tidings.client import Client, Msg, errors


async def test_connect_reports_state(nc: Client, any_server: Server) -> None:
    assert nc.is_connected
    assert not nc.is_closed
    assert nc.connected_url is not None
    assert nc.connected_url.port == any_server.port
    assert nc.max_payload > 0
    assert nc.client_id is not None


async def test_publish_subscribe_iterator(nc: Client) -> None:
    sub = await nc.subscribe("core.iter")
    for i in range(100):
        await nc.publish("core.iter", b"m%d" % i)
    got = []
    async for msg in sub.messages:
        got.append(msg.data)
        if len(got) == 100:
            break
    assert got == [b"m%d" % i for i in range(100)]
    assert msg.subject == "core.iter"
    assert msg.reply == ""
    assert msg.headers is None


async def test_publish_subscribe_callback(nc: Client) -> None:
    got: list[Msg] = []
    done = asyncio.Event()

    async def cb(msg: Msg) -> None:
        got.append(msg)
        if len(got) == 10:
            done.set()

    await nc.subscribe("core.cb.*", cb=cb)
    for i in range(10):
        await nc.publish(f"core.cb.{i}", b"%d" % i, reply="core.reply")
    await asyncio.wait_for(done.wait(), 5)
    assert [m.subject for m in got] == [f"core.cb.{i}" for i in range(10)]
    assert all(m.reply == "core.reply" for m in got)


async def test_next_msg_and_timeout(nc: Client) -> None:
    sub = await nc.subscribe("core.next")
    await nc.publish("core.next", b"one")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"one"
    with pytest.raises(errors.TimeoutError):
        await sub.next_msg(timeout=0.05)
    # Also an asyncio.TimeoutError, as with nats-py.
    with pytest.raises(asyncio.TimeoutError):
        await sub.next_msg(timeout=0.01)


async def test_large_and_empty_payloads(nc: Client) -> None:
    sub = await nc.subscribe("core.sizes")
    sizes = [0, 1, 4095, 4096, 70_000, 500_000]
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    for p in payloads:
        await nc.publish("core.sizes", p)
    for p in payloads:
        assert (await sub.next_msg(timeout=5)).data == p


async def test_headers_multi_value_and_status(nc: Client) -> None:
    sub = await nc.subscribe("core.hdr")
    headers = {"X-One": "1", "X-Many": ["a", "b"], "Content-Type": "text/plain"}
    await nc.publish("core.hdr", b"body", headers=headers)
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"body"
    assert msg.headers is not None
    assert msg.headers["X-One"] == "1"
    assert msg.headers.get_all("X-Many") == ["a", "b"]
    assert msg.headers.get("content-type") == "text/plain"
    assert msg.headers.status is None


async def test_request_reply(nc: Client) -> None:
    async def echo(msg: Msg) -> None:
        await msg.respond(b"echo:" + msg.data)

    await nc.subscribe("core.svc", cb=echo)
    replies = await asyncio.gather(*(nc.request("core.svc", b"%d" % i, timeout=5)
                                     for i in range(50)))
    assert [r.data for r in replies] == [b"echo:%d" % i for i in range(50)]
    # Sequential requests reuse the one inbox subscription.
    for _ in range(5):
        assert (await nc.request("core.svc", b"s", timeout=5)).data == b"echo:s"
    assert replies[0].subject.startswith("_INBOX.")


async def test_request_with_headers_reply_headers_not_echoed(nc: Client) -> None:
    async def svc(msg: Msg) -> None:
        assert msg.headers is not None and msg.headers["Req"] == "yes"
        await msg.respond(b"ok")

    await nc.subscribe("core.hsvc", cb=svc)
    reply = await nc.request("core.hsvc", b"", timeout=5, headers={"Req": "yes"})
    assert reply.data == b"ok"
    assert reply.headers is None  # nats-py would copy the request's headers into the reply


async def test_no_responders(nc: Client) -> None:
    with pytest.raises(errors.NoRespondersError):
        await nc.request("core.nobody.home", b"?", timeout=5)


async def test_request_timeout(nc: Client) -> None:
    sub = await nc.subscribe("core.silent")  # listens, never answers
    with pytest.raises(errors.TimeoutError):
        await nc.request("core.silent", b"?", timeout=0.1)
    assert (await sub.next_msg(timeout=1)).data == b"?"


async def test_queue_group_splits_messages(nc: Client) -> None:
    a = await nc.subscribe("core.q", queue="workers")
    b = await nc.subscribe("core.q", queue="workers")
    for i in range(200):
        await nc.publish("core.q", b"%d" % i)
    await nc.flush()
    await nc.flush()  # the second PONG comes after every MSG for the first batch
    assert a.pending_msgs + b.pending_msgs == 200
    assert a.pending_msgs > 0 and b.pending_msgs > 0


async def test_auto_unsubscribe(nc: Client) -> None:
    sub = await nc.subscribe("core.auto", max_msgs=3)
    for i in range(10):
        await nc.publish("core.auto", b"%d" % i)
    got = [m.data async for m in sub.messages]
    assert got == [b"0", b"1", b"2"]


async def test_unsubscribe_with_limit(nc: Client) -> None:
    sub = await nc.subscribe("core.limit")
    await sub.unsubscribe(limit=2)
    for i in range(5):
        await nc.publish("core.limit", b"%d" % i)
    got = [m.data async for m in sub.messages]
    assert got == [b"0", b"1"]
    assert sub.delivered == 2


async def test_unsubscribe_stops_delivery(nc: Client) -> None:
    sub = await nc.subscribe("core.unsub")
    other = await nc.subscribe("core.unsub")
    await sub.unsubscribe()
    await nc.publish("core.unsub", b"x")
    assert (await other.next_msg(timeout=2)).data == b"x"
    assert sub.pending_msgs == 0
    with pytest.raises(errors.BadSubscriptionError):
        await sub.unsubscribe()


async def test_flush_orders_publishes(nc: Client, any_server: Server) -> None:
    other = await tidings.client.connect(any_server.url)
    try:
        sub = await other.subscribe("core.flush")
        await other.flush()
        for i in range(1000):
            await nc.publish("core.flush", b"%d" % i)
        await nc.flush()
        await other.flush()  # PONG after every MSG the server routed before it
        assert sub.pending_msgs == 1000
    finally:
        await other.close()


async def test_max_payload_error(nc: Client) -> None:
    with pytest.raises(errors.MaxPayloadError):
        await nc.publish("core.big", b"x" * (nc.max_payload + 1))


async def test_bad_subjects(nc: Client) -> None:
    with pytest.raises(errors.BadSubjectError):
        await nc.publish("bad subject", b"")
    with pytest.raises(errors.BadSubjectError):
        await nc.publish("", b"")
    with pytest.raises(errors.BadSubjectError):
        await nc.subscribe("a.>.b")
    with pytest.raises(errors.BadSubjectError):
        await nc.publish("ok", b"", reply="bad\r\nreply")


async def test_drain_handles_queued_messages(any_server: Server) -> None:
    closed = asyncio.Event()
    nc = await tidings.client.connect(any_server.url, closed_cb=closed.set)
    handled: list[bytes] = []

    async def slow(msg: Msg) -> None:
        await asyncio.sleep(0)
        handled.append(msg.data)

    await nc.subscribe("core.drain", cb=slow)
    it = await nc.subscribe("core.drain")
    for i in range(50):
        await nc.publish("core.drain", b"%d" % i)
    await nc.flush()

    async def consume() -> list[bytes]:
        return [m.data async for m in it.messages]

    consumer = asyncio.create_task(consume())
    await nc.drain()
    assert nc.is_closed
    assert handled == [b"%d" % i for i in range(50)]
    assert await asyncio.wait_for(consumer, 5) == [b"%d" % i for i in range(50)]
    await asyncio.wait_for(closed.wait(), 5)
    with pytest.raises(errors.ConnectionClosedError):
        await nc.publish("core.drain", b"late")


async def test_close_is_idempotent_and_ends_consumers(any_server: Server) -> None:
    events: list[str] = []
    nc = await tidings.client.connect(
        any_server.url,
        disconnected_cb=lambda: events.append("disconnected"),
        closed_cb=lambda: events.append("closed"),
    )
    sub = await nc.subscribe("core.close")
    waiter = asyncio.create_task(sub.next_msg(timeout=None))
    iterating = asyncio.create_task(anext(sub.messages, None))
    pending_request = asyncio.create_task(nc.request("core.close", b"", timeout=30))
    await asyncio.sleep(0)
    await nc.close()
    await nc.close()
    with pytest.raises(errors.ConnectionClosedError):
        await waiter
    assert await iterating is None
    with pytest.raises(errors.ConnectionClosedError):
        await pending_request
    assert events == ["disconnected", "closed"]
    with pytest.raises(errors.ConnectionClosedError):
        await nc.flush()


async def test_no_echo(any_server: Server) -> None:
    nc = await tidings.client.connect(any_server.url, no_echo=True)
    other = await tidings.client.connect(any_server.url)
    try:
        mine = await nc.subscribe("core.echo")
        theirs = await other.subscribe("core.echo")
        await other.flush()
        await nc.publish("core.echo", b"x")
        assert (await theirs.next_msg(timeout=2)).data == b"x"
        await nc.flush()
        assert mine.pending_msgs == 0
    finally:
        await nc.close()
        await other.close()


async def test_context_manager_and_connect_refused(refused_port: int) -> None:
    with pytest.raises(errors.NoServersError):
        await tidings.client.connect(f"nats://127.0.0.1:{refused_port}", connect_timeout=1)


async def test_close_after_a_failed_connect_returns(refused_port: int) -> None:
    nc = tidings.client.Client()
    with pytest.raises(errors.NoServersError):
        await nc.connect(f"nats://127.0.0.1:{refused_port}", connect_timeout=1)
    await asyncio.wait_for(nc.close(), 5)  # hung forever: the closed future was never set
    assert nc.is_closed


async def test_nats_py_style_client_class(any_server: Server) -> None:
    nc = tidings.client.NATS()
    await nc.connect(servers=[any_server.url])
    async with nc:
        sub = await nc.subscribe("core.ctx")
        await nc.publish("core.ctx", b"hi")
        assert (await sub.next_msg()).data == b"hi"
    assert nc.is_closed


async def test_silent_server_times_out_and_close_interrupts_connect() -> None:
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # accepts, never sends INFO
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        with pytest.raises(errors.NoServersError):
            await tidings.client.connect(url, connect_timeout=0.2)
        nc = tidings.client.Client()
        connecting = asyncio.ensure_future(nc.connect(url, connect_timeout=30))
        accepted.clear()
        await asyncio.wait_for(accepted.wait(), 5)
        await asyncio.wait_for(nc.close(), 5)
        with pytest.raises(errors.ConnectionClosedError):
            await asyncio.wait_for(connecting, 5)
        assert nc.is_closed
    finally:
        server.close()


async def test_old_style_request_rtt_and_inbox(nc: Client) -> None:
    async def svc(msg: Msg) -> None:
        await msg.respond(msg.data[::-1])

    await nc.subscribe("core.old", cb=svc)
    reply = await nc.request("core.old", b"abc", timeout=5, old_style=True)
    assert reply.data == b"cba"
    assert await nc.rtt() > 0
    a, b = nc.new_inbox(), nc.new_inbox()
    assert a != b and a.startswith("_INBOX.")


async def test_subscription_drain_keeps_queued(nc: Client) -> None:
    sub = await nc.subscribe("core.sdrain")
    for i in range(5):
        await nc.publish("core.sdrain", b"%d" % i)
    await nc.flush()
    consumer = asyncio.ensure_future(_collect(sub))
    await sub.drain()
    assert await consumer == [b"%d" % i for i in range(5)]
    await nc.publish("core.sdrain", b"late")
    await nc.flush()
    assert sub.pending_msgs == 0


async def _collect(sub: tidings.client.Subscription) -> list[bytes]:
    return [m.data async for m in sub.messages]


async def test_future_subscription_and_sync_callback(nc: Client) -> None:
    fut: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
    await nc.subscribe("core.fut", future=fut)
    seen: list[bytes] = []
    got_two = asyncio.Event()

    def plain(msg: Msg) -> None:  # not a coroutine: also accepted
        seen.append(msg.data)
        if len(seen) == 2:
            got_two.set()

    await nc.subscribe("core.fut", cb=plain)
    await nc.publish("core.fut", b"1")
    await nc.publish("core.fut", b"2")
    assert (await asyncio.wait_for(fut, 5)).data == b"1"
    await asyncio.wait_for(got_two.wait(), 5)
    assert seen == [b"1", b"2"]


async def test_bytes_subjects_and_header_objects(nc: Client) -> None:
    from tidings.protocol.headers import Headers

    sub = await nc.subscribe("core.bytes")
    await nc.publish(b"core.bytes", b"raw")  # type: ignore[arg-type]
    assert (await sub.next_msg(2)).data == b"raw"
    hdrs = Headers([("A", "1"), ("A", "2")])
    await nc.publish("core.bytes", b"h", headers=hdrs)
    msg = await sub.next_msg(2)
    assert msg.headers is not None
    assert msg.headers.get_all("A") == ["1", "2"]
    assert msg.headers == {"A": "2"}  # compares like nats-py's dict (last value wins)
    with pytest.raises(errors.BadHeaderError):
        await nc.publish("core.bytes", b"", headers={"bad name": "x"})
