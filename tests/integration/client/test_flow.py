"""Bounds that hold against a frozen server (a proxy that stops reading): the bytes a publisher
may leave un-sent, and the time `drain(timeout=T)` takes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tidings.client
from tidings.client import errors

from .conftest import Events, Servers

CHUNK = b"x" * (32 * 1024)
TOTAL = 64 * 1024 * 1024  # far more than the kernel's socket buffers hold
# Far above what may be held (64 KiB buffered + the transport's high-water mark + a message),
# far below what an unbounded buffer would hold once the kernel's buffers are full.
BOUND = 1024 * 1024


async def _frozen_client(servers: Servers, proxy_factory: Any,
                         **options: Any) -> tuple[Any, Any]:
    """A client whose server stopped reading (and writing) right after the handshake."""
    server = servers.start()
    proxy = await proxy_factory(server.port)
    nc = await tidings.client.connect(proxy.url, **options)
    await nc.flush()
    proxy.freeze()
    return nc, proxy


async def test_publish_waits_whatever_the_publishers_rhythm(
    servers: Servers, proxy_factory: Any
) -> None:
    nc, proxy = await _frozen_client(servers, proxy_factory)
    state = {"sent": 0, "max_pending": 0, "inside": False}

    async def publisher() -> None:
        for _ in range(TOTAL // len(CHUNK)):
            state["inside"] = True
            await nc.publish("flow.frozen", CHUNK)
            state["inside"] = False
            state["sent"] += len(CHUNK)
            state["max_pending"] = max(state["max_pending"], nc.pending_data_size)
            await asyncio.sleep(0)  # it awaits something every 32 KiB

    task = asyncio.create_task(publisher())
    try:
        # Seen suspended inside publish(): it is waiting for the socket to take its bytes.
        while not task.done() and not state["inside"]:
            await asyncio.sleep(0)
        assert not task.done(), "64 MiB accepted by a server that reads nothing"
        assert state["sent"] < TOTAL
        assert state["max_pending"] <= BOUND
        assert nc.pending_data_size <= BOUND
    finally:
        task.cancel()
        proxy.drop()  # else close() gives the frozen socket its 2 s to take the bytes
        await nc.close()


async def test_publish_nowait_raises_over_the_pending_bound(
    servers: Servers, proxy_factory: Any
) -> None:
    nc, proxy = await _frozen_client(servers, proxy_factory, pending_size=BOUND)
    try:
        sent = 0
        with pytest.raises(errors.OutboundBufferLimitError):
            while sent < TOTAL:
                nc.publish_nowait("flow.frozen", CHUNK)
                sent += len(CHUNK)
                assert nc.pending_data_size <= BOUND
                await asyncio.sleep(0)
        assert nc.pending_data_size <= BOUND
        assert nc.is_connected  # refused, not dropped
    finally:
        proxy.drop()
        await nc.close()


async def test_drain_ends_within_its_timeout(
    servers: Servers, proxy_factory: Any, events: Events
) -> None:
    nc, _ = await _frozen_client(servers, proxy_factory, event_cb=events, pending_size=TOTAL)
    await nc.subscribe("flow.drain")
    for _ in range(256):  # 8 MiB the socket will never take
        nc.publish_nowait("flow.drain", CHUNK)
    # The server answers nothing; 10 s is 20 times the drain timeout (no fixed wait may remain).
    await asyncio.wait_for(nc.drain(timeout=0.5), 10)
    assert nc.is_closed
    await events.wait("closed")
    assert any(isinstance(arg, errors.DrainTimeoutError) for kind, arg in events.seen
               if kind == "error")
