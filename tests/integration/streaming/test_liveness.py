"""Server heartbeats to clients, client pings, replaced connections."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import eventually
from tidings.streaming.client import StanError

from .conftest import Inbox


def core_port(env) -> int:
    return env.core.port


async def test_heartbeats_close_a_dead_client_and_its_subscriptions(stan, proxy_factory):
    env = await stan(hb_interval=0.1, hb_timeout=0.5, hb_fail_count=2)
    proxy = await proxy_factory(core_port(env))
    alive = await env.connect("alive")
    doomed = await env.connect("doomed", url=proxy.url, ping_interval=60, connect_timeout=0.5)
    await doomed.subscribe("hb", cb=Inbox())
    await doomed.subscribe("hb", cb=Inbox(), durable_name="stays")
    assert env.server.num_subs() == 2
    proxy.freeze()  # the process hangs: no heartbeat replies
    await eventually(lambda: "doomed" not in env.server.clients, timeout=10)
    ch = env.server.channels["hb"]
    (offline,) = ch.all_subs()
    assert offline.durable_name == "stays" and offline.is_offline
    # the live client answers its heartbeats and is still registered
    assert "alive" in env.server.clients
    assert await alive.publish("hb", b"still here")
    proxy.thaw()


async def test_client_ping_detects_it_was_replaced(stan, proxy_factory):
    env = await stan()
    proxy = await proxy_factory(core_port(env))
    lost: asyncio.Queue[StanError] = asyncio.Queue()
    old = await env.connect("same-id", url=proxy.url, ping_interval=1, ping_max_out=100,
                            conn_lost_cb=lost.put_nowait)
    proxy.freeze()
    # the server asks the old client (no answer: frozen), then replaces it
    new = await env.connect("same-id")
    assert await new.publish("r", b"new one")
    proxy.thaw()
    err = await asyncio.wait_for(lost.get(), 10)
    assert str(err) == "client has been replaced or is no longer registered"
    assert old.closed and old.lost_error is err
    try:
        await old.publish("r", b"x")
    except StanError as exc:
        assert "closed" in str(exc)
    else:
        raise AssertionError("publishing on a lost connection must fail")


async def test_client_ping_max_out_when_server_unreachable(stan, proxy_factory):
    env = await stan()
    proxy = await proxy_factory(core_port(env))
    lost: asyncio.Queue[StanError] = asyncio.Queue()
    sc = await env.connect("pinger", url=proxy.url, ping_interval=1, ping_max_out=1,
                           conn_lost_cb=lost.put_nowait)
    proxy.freeze()
    err = await asyncio.wait_for(lost.get(), 10)
    assert str(err) == "stan: connection lost due to PING failure"
    assert sc.closed
    proxy.thaw()


@pytest.mark.parametrize("store", ["file", "sql"])
async def test_clients_survive_a_streaming_server_restart(stan, tmp_path, store):
    env = await stan(store=store, dir=str(tmp_path / "data"))
    sc = await env.connect("survivor")
    ib = Inbox()
    await sc.subscribe("surv", cb=ib, durable_name="d", manual_acks=True, ack_wait=1)
    await sc.publish("surv", b"one")
    first = await ib.next()
    await first.ack()
    await sc.publish("surv", b"two")
    second = await ib.next()
    assert second.seq == 2  # delivered, not acknowledged
    await env.restart()
    # same client, same subscription: the server recovered both from the store
    assert "survivor" in env.server.clients
    again = await ib.next(timeout=10)
    assert (again.seq, again.redelivered) == (2, True)
    await again.ack()
    await sc.publish("surv", b"three")
    third = await ib.next()
    assert (third.seq, third.data, third.redelivered) == (3, b"three", False)
