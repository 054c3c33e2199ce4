"""Helpers for tests that pass messages between nats-py clients."""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count()


async def synced(nc: Any) -> None:
    """Returns once the server has processed everything nats-py client `nc` sent before.

    nats-py's `flush()` is not enough: `subscribe()` leaves the SUB in its buffer for the
    flusher task while `flush()` writes its PING straight to the socket, so the PONG can come
    back before the server has the subscription (about 2 % of fresh connections with the
    reference server). A request to a responder on `nc` itself goes through the buffer."""
    inbox = f"_sync.{next(_ids)}"

    async def echo(msg: Any) -> None:
        await msg.respond(b"")

    sub = await nc.subscribe(inbox, cb=echo)
    await nc.request(inbox, b"", timeout=5)
    await sub.unsubscribe()
