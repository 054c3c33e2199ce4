"""Reconnect, buffering while disconnected, server pools and keep-alive, against both servers.

Servers are killed and restarted on the same port; a frozen proxy stands in for a half-open
connection. Waits are on client events and PONGs, never on sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tidings.client
from tidings.client import errors

from .conftest import Events, Servers


async def test_kill_and_restart_same_port(
    servers: Servers, fast_reconnect: dict[str, Any], events: Events
) -> None:
    server = servers.start()
    nc = await tidings.client.connect(server.url, event_cb=events, **fast_reconnect)
    try:
        sub = await nc.subscribe("rc.stream")
        limited = await nc.subscribe("rc.limited", max_msgs=5)
        for i in range(10):
            await nc.publish("rc.stream", b"before-%d" % i)
        await nc.publish("rc.limited", b"L0")
        await nc.publish("rc.limited", b"L1")
        await nc.flush()
        assert [(await sub.next_msg(2)).data for _ in range(10)] == [
            b"before-%d" % i for i in range(10)]

        server.kill()
        await events.wait("disconnected")
        assert not nc.is_connected
        assert nc.is_reconnecting
        for i in range(10):
            await nc.publish("rc.stream", b"during-%d" % i)  # buffered, not lost
        for i in range(2, 10):
            await nc.publish("rc.limited", b"L%d" % i)
        flushed = asyncio.ensure_future(nc.flush(timeout=10))  # waits across the reconnect

        await servers.restart(server)
        await events.wait("reconnected")
        await flushed
        assert nc.is_connected
        assert nc.connected_url is not None and nc.connected_url.port == server.port
        assert [(await sub.next_msg(2)).data for _ in range(10)] == [
            b"during-%d" % i for i in range(10)]
        # The subscription is live on the new server too.
        await nc.publish("rc.stream", b"after")
        assert (await sub.next_msg(2)).data == b"after"
        # Auto-unsubscribe resumed with what was left (5 - 2): exactly three more.
        got = [m.data async for m in limited.messages]
        assert got == [b"L0", b"L1", b"L2", b"L3", b"L4"]
        kinds = events.kinds()
        assert kinds[0] == "connected"
        assert kinds.index("disconnected") < kinds.index("reconnected")
    finally:
        await nc.close()


async def test_reconnect_buffer_bound_is_an_error(
    servers: Servers, fast_reconnect: dict[str, Any], events: Events
) -> None:
    server = servers.start()
    nc = await tidings.client.connect(
        server.url, event_cb=events, reconnect_buffer_size=2000, **fast_reconnect
    )
    try:
        # Its own subscription: on reconnect the SUB goes out before the buffered publishes.
        sub = await nc.subscribe("rc.bound")
        await nc.flush()
        server.kill()
        await events.wait("disconnected")
        accepted = 0
        with pytest.raises(errors.OutboundBufferLimitError):
            for i in range(1000):
                await nc.publish("rc.bound", b"%04d" % i + b"x" * 96)
                accepted += 1
        assert 0 < accepted < 1000
        await servers.restart(server)
        await events.wait("reconnected")
        await nc.flush()
        got = []
        while len(got) < accepted:
            got.append((await sub.next_msg(5)).data[:4])
        assert got == [b"%04d" % i for i in range(accepted)]
    finally:
        await nc.close()


async def test_two_server_pool_one_dies(
    servers: Servers, fast_reconnect: dict[str, Any], events: Events
) -> None:
    a = servers.start()
    b = servers.start()
    nc = await tidings.client.connect(
        [a.url, b.url], dont_randomize=True, event_cb=events, **fast_reconnect
    )
    try:
        assert nc.connected_url is not None and nc.connected_url.port == a.port
        sub = await nc.subscribe("pool.x")
        await nc.flush()
        a.kill()
        await events.wait("reconnected")
        assert nc.connected_url is not None and nc.connected_url.port == b.port
        other = await tidings.client.connect(b.url)
        try:
            await other.publish("pool.x", b"via-b")
            await other.flush()
        finally:
            await other.close()
        assert (await sub.next_msg(5)).data == b"via-b"
    finally:
        await nc.close()


async def test_half_open_connection_detected_by_pings(
    servers: Servers, proxy_factory: Any, events: Events, fast_reconnect: dict[str, Any]
) -> None:
    server = servers.start()
    proxy = await proxy_factory(server.port)
    nc = await tidings.client.connect(
        proxy.url, event_cb=events, ping_interval=0.1, max_outstanding_pings=2, **fast_reconnect
    )
    try:
        sub = await nc.subscribe("half.open")
        await nc.flush()
        proxy.freeze()  # the server side stops reading and writing; the socket stays open
        reason = await events.wait("disconnected", timeout=10)
        assert isinstance(reason, errors.StaleConnectionError)
        await events.wait("reconnected")  # a new connection through the proxy works
        await nc.publish("half.open", b"alive")
        assert (await sub.next_msg(5)).data == b"alive"
    finally:
        await nc.close()


async def test_reconnect_attempts_exhausted_closes(
    servers: Servers, events: Events
) -> None:
    server = servers.start()
    closed = asyncio.Event()
    nc = await tidings.client.connect(
        server.url, event_cb=events, closed_cb=closed.set, max_reconnect_attempts=4,
        reconnect_delay=lambda attempt: 0.1, connect_timeout=0.5,
    )
    server.kill()
    await events.wait("disconnected")
    pending = asyncio.ensure_future(nc.flush(timeout=30))  # waits for a reconnect
    await asyncio.wait_for(closed.wait(), 10)
    assert nc.is_closed
    with pytest.raises(errors.ConnectionClosedError):
        await pending
    with pytest.raises(errors.ConnectionClosedError):
        await nc.publish("x", b"")
    assert events.kinds()[-2:] == ["error", "closed"] or events.kinds()[-1] == "closed"
    assert isinstance(nc.last_error, errors.NoServersError)


async def test_no_reconnect_when_not_allowed(servers: Servers, events: Events) -> None:
    server = servers.start()
    nc = await tidings.client.connect(server.url, event_cb=events, allow_reconnect=False)
    server.kill()
    await events.wait("closed")
    assert nc.is_closed
    assert "reconnected" not in events.kinds()


async def test_close_while_reconnecting_returns(
    servers: Servers, events: Events, fast_reconnect: dict[str, Any]
) -> None:
    server = servers.start()
    nc = await tidings.client.connect(server.url, event_cb=events, **fast_reconnect)
    sub = await nc.subscribe("closing")
    server.kill()
    await events.wait("disconnected")
    await nc.publish("closing", b"buffered")
    await asyncio.wait_for(nc.close(), 5)
    assert nc.is_closed
    assert events.kinds()[-1] == "closed"
    with pytest.raises(errors.ConnectionClosedError):
        await sub.next_msg(0.1)


async def test_server_pings_are_answered(servers: Servers, events: Events) -> None:
    # The server pings every 50 ms and drops a client after 2 unanswered pings; 20 intervals
    # pass with the client answering, so the connection must still be the first one.
    server = servers.start(ping_interval=0.05, ping_max=2)
    nc = await tidings.client.connect(server.url, event_cb=events)
    try:
        await asyncio.sleep(1.0)
        await nc.flush()
        assert "disconnected" not in events.kinds()
        assert nc.stats["reconnects"] == 0
    finally:
        await nc.close()


async def test_server_killed_mid_stream(
    servers: Servers, fast_reconnect: dict[str, Any], events: Events
) -> None:
    """A publisher keeps going while the server dies and comes back: every message published
    once the client knew it was disconnected arrives, in order, exactly once."""
    server = servers.start()
    nc = await tidings.client.connect(server.url, event_cb=events, **fast_reconnect)
    try:
        sub = await nc.subscribe("mid.stream")
        await nc.flush()
        first_buffered: list[int] = []
        stop = asyncio.Event()

        async def publisher() -> int:
            seq = 0
            while not stop.is_set():
                if nc.is_reconnecting and not first_buffered:
                    first_buffered.append(seq)
                await nc.publish("mid.stream", b"%d" % seq)
                seq += 1
                if seq % 20 == 0:
                    await asyncio.sleep(0.001)  # let the loop run: reads, timers, events
            return seq

        task = asyncio.ensure_future(publisher())
        while sub.delivered < 200:
            await sub.next_msg(5)
        server.kill()
        await events.wait("disconnected")
        await servers.restart(server)
        await events.wait("reconnected")
        await nc.flush()
        stop.set()
        sent = await task
        await nc.flush()
        got = []
        while sub.pending_msgs:
            got.append(int((await sub.next_msg(1)).data))
        assert first_buffered, "the publisher never saw the disconnect"
        assert got == sorted(set(got))  # in order, no duplicates
        tail = [s for s in got if s >= first_buffered[0]]
        assert tail == list(range(first_buffered[0], sent))
    finally:
        await nc.close()


async def test_failover_tries_every_other_server_before_sleeping(
    servers: Servers, events: Events
) -> None:
    # Two of three servers die. The one tried first refuses; the back-off (30 s, far beyond
    # the wait below) applies to that server only, so the third is tried at once.
    a, b, c = servers.start(), servers.start(), servers.start()
    nc = await tidings.client.connect(
        [a.url, b.url, c.url], dont_randomize=True, event_cb=events,
        reconnect_time_wait=30, max_reconnect_attempts=-1,
    )
    try:
        assert nc.connected_url is not None and nc.connected_url.port == a.port
        b.kill()
        a.kill()
        await events.wait("reconnected", timeout=10)
        assert nc.connected_url is not None and nc.connected_url.port == c.port
    finally:
        await nc.close()


async def test_failover_goes_to_another_server_than_the_lost_one_whatever_its_name(
    servers: Servers, proxy_factory: Any, events: Events, fast_reconnect: dict[str, Any]
) -> None:
    # The server behind the proxy is listed twice (localhost and 127.0.0.1) and still answers
    # after the proxy drops the connection: the client must go to the other server all the same.
    a, b = servers.start(), servers.start()
    proxy = await proxy_factory(a.port)
    nc = await tidings.client.connect(
        [f"nats://localhost:{proxy.port}", f"nats://127.0.0.1:{proxy.port}", b.url],
        dont_randomize=True, event_cb=events, **fast_reconnect,
    )
    try:
        assert nc.connected_url is not None and nc.connected_url.port == proxy.port
        assert [u.port for u in nc.servers] == [proxy.port, b.port]  # one server, one entry
        proxy.drop()
        await events.wait("reconnected")
        assert nc.connected_url is not None and nc.connected_url.port == b.port
        assert proxy.accepted == 1
    finally:
        await nc.close()
