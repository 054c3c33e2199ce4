"""Events and flow control: slow consumers, server errors, lame duck, discovered servers,
and publishers held at the soft write limit."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import tidings.client
from tests.harness import Server, start_reference
from tidings.client import Msg, errors

from .conftest import Events


async def test_slow_consumer_event_once_per_episode(any_server: Server,
                                                    events: Events) -> None:
    nc = await tidings.client.connect(any_server.url, event_cb=events)
    try:
        sub = await nc.subscribe("ev.slow", pending_msgs_limit=10)
        for i in range(100):
            await nc.publish("ev.slow", b"%d" % i)
        await nc.flush()
        await nc.flush()
        err = await events.wait("slow_consumer")
        assert isinstance(err, errors.SlowConsumerError)
        assert err.sid == sub.sid and err.subject == "ev.slow"
        assert events.count("slow_consumer") == 1
        assert sub.pending_msgs == 10
        assert sub.dropped == 90
        assert sub.delivered == 100
        # The first ten are kept; nothing after the limit was queued.
        assert [(await sub.next_msg(1)).data for _ in range(10)] == [b"%d" % i for i in range(10)]
    finally:
        await nc.close()


async def test_pending_bytes_limit(any_server: Server, events: Events) -> None:
    nc = await tidings.client.connect(any_server.url, event_cb=events)
    try:
        sub = await nc.subscribe("ev.bytes", pending_bytes_limit=1000)
        for _ in range(5):
            await nc.publish("ev.bytes", b"x" * 300)
        await nc.flush()
        await nc.flush()
        await events.wait("slow_consumer")
        assert sub.pending_msgs == 3
        assert sub.pending_bytes == 900
    finally:
        await nc.close()


async def test_callback_error_goes_to_error_cb(any_server: Server) -> None:
    seen: list[Exception] = []
    got_error = asyncio.Event()

    async def error_cb(exc: Exception) -> None:
        seen.append(exc)
        got_error.set()

    nc = await tidings.client.connect(any_server.url, error_cb=error_cb)
    handled: list[bytes] = []
    all_handled = asyncio.Event()

    async def cb(msg: Msg) -> None:
        if msg.data == b"boom":
            raise ValueError("boom")
        handled.append(msg.data)
        if len(handled) == 3:
            all_handled.set()

    try:
        await nc.subscribe("ev.cb", cb=cb)
        for data in (b"a", b"boom", b"b"):
            await nc.publish("ev.cb", data)
        await asyncio.wait_for(got_error.wait(), 5)
        await nc.flush()
        assert isinstance(seen[0], ValueError)
        # The callback task survived the error.
        await nc.publish("ev.cb", b"c")
        await asyncio.wait_for(all_handled.wait(), 5)
        assert handled == [b"a", b"b", b"c"]
    finally:
        await nc.close()


async def test_permissions_violation_is_an_event_not_a_disconnect(events: Events) -> None:
    server = start_reference(authorization="""{
      users = [ { user: "u", password: "p", permissions: { publish: { deny: "secret.>" } } } ]
    }""")
    try:
        nc = await tidings.client.connect(server.url, user="u", password="p", event_cb=events)
        try:
            await nc.publish("secret.plans", b"x")
            err = await events.wait("error")
            assert isinstance(err, errors.PermissionsError)
            sub = await nc.subscribe("open.topic")
            await nc.publish("open.topic", b"fine")
            assert (await sub.next_msg(2)).data == b"fine"
            assert "disconnected" not in events.kinds()
        finally:
            await nc.close()
    finally:
        server.stop()


async def test_lame_duck_mode_event(events: Events) -> None:
    server = start_reference(lame_duck_grace_period='"5s"', lame_duck_duration='"30s"')
    ldm = asyncio.Event()
    try:
        nc = await tidings.client.connect(server.url, event_cb=events,
                                          lame_duck_mode_cb=ldm.set)
        try:
            os.kill(server.pid, signal.SIGUSR2)  # the reference enters lame duck mode
            await asyncio.wait_for(ldm.wait(), 10)
            assert "lame_duck" in events.kinds()
        finally:
            await nc.close()
    finally:
        server.stop()


async def test_discovered_servers_join_the_pool(events: Events) -> None:
    a = start_reference(config='cluster { name: "c", listen: "127.0.0.1:-1" }')
    b = start_reference(config=f'cluster {{ name: "c", listen: "127.0.0.1:-1", routes: '
                               f'["nats://127.0.0.1:{a.ports["route"]}"] }}')
    try:
        # `a` by name: INFO's connect_urls name it 127.0.0.1, which is the same server.
        nc = await tidings.client.connect(
            f"nats://localhost:{a.port}", event_cb=events, reconnect_delay=lambda attempt: 0.05,
            max_reconnect_attempts=-1,
        )
        try:
            if not any(u.port == b.port for u in nc.discovered_servers):
                await events.wait("discovered_server")
            assert [u.port for u in nc.discovered_servers] == [b.port]
            assert sorted(u.port for u in nc.servers) == sorted([a.port, b.port])
            sub = await nc.subscribe("cluster.x")
            await nc.flush()
            a.kill()
            await events.wait("reconnected")
            assert nc.connected_url is not None and nc.connected_url.port == b.port
            await nc.publish("cluster.x", b"on-b")
            assert (await sub.next_msg(5)).data == b"on-b"
        finally:
            await nc.close()
    finally:
        a.stop()
        b.stop()


async def test_publisher_held_at_soft_limit_loses_nothing(any_server: Server) -> None:
    nc = await tidings.client.connect(any_server.url)
    rx = await tidings.client.connect(any_server.url)
    try:
        sub = await rx.subscribe("ev.flood", pending_msgs_limit=0, pending_bytes_limit=0)
        await rx.flush()
        count, payload = 20_000, b"y" * 1000  # 20 MB in one burst
        for i in range(count):
            await nc.publish("ev.flood", payload)
            if i == 0:
                assert nc.pending_data_size > 0  # buffered, not yet written
        await nc.flush(timeout=30)
        await rx.flush(timeout=30)
        assert sub.delivered == count
        assert sub.dropped == 0
    finally:
        await nc.close()
        await rx.close()


@pytest.mark.parametrize("size", [0, 4095, 4096, 100_000])
async def test_large_payload_with_headers(any_server: Server, size: int) -> None:
    nc = await tidings.client.connect(any_server.url)
    try:
        sub = await nc.subscribe("ev.big")
        data = os.urandom(size)
        await nc.publish("ev.big", data, headers={"N": str(size)})
        msg = await sub.next_msg(5)
        assert msg.data == data
        assert msg.headers is not None and msg.headers["N"] == str(size)
    finally:
        await nc.close()
