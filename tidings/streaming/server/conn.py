"""The streaming server's NATS connection: a thin layer over :mod:`tidings.client`.

The state machine is synchronous (it runs inside message callbacks and timers), so it takes
messages through raw subscriptions (straight from the client's read path: no Msg object, no
queue, no task switch) and publishes with ``publish_nowait`` (buffered at once; the server's
own in-flight limits bound what it sends).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...client import Client
from ...client import errors as nerr

log = logging.getLogger("tidings.streaming")

Handler = Callable[[str, str, bytes], None]

class StanConn:
    """What the streaming server needs from a NATS connection."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.dropped = 0

    @classmethod
    async def connect(cls, url: str, name: str = "tidings-streaming", **opts: Any) -> StanConn:
        from ...client import connect

        nc = await connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            ping_interval=30,
            # Deliveries and PubAcks may burst far past a client's usual 8 MiB bound; what
            # the core server holds for one connection (its max_pending) bounds them here.
            pending_size=64 * 1024 * 1024,
            **opts,
        )
        return cls(nc)

    def publish(self, subject: str, data: bytes) -> None:
        try:
            self.nc.publish_nowait(subject, data)
        except nerr.Error as exc:
            self.dropped += 1
            log.debug("streaming: publish to %s failed: %s", subject, exc)

    def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        try:
            self.nc.publish_many_nowait(messages)
        except nerr.Error as exc:
            self.dropped += len(messages)
            log.debug("streaming: publishing %d messages failed: %s", len(messages), exc)

    async def subscribe(self, subject: str, handler: Handler) -> Any:
        def deliver(subject: bytes, reply: bytes | None, hdr: bytes | None,
                    payload: bytes) -> None:
            try:
                handler(subject.decode(), reply.decode() if reply else "", payload)
            except Exception:
                log.exception("streaming: handling a message on %s", subject)

        return await self.nc.subscribe(subject, raw_cb=deliver)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        msg = await self.nc.request(subject, data, timeout=timeout)
        return msg.data

    def new_inbox(self) -> str:
        return self.nc.new_inbox()

    async def flush(self, timeout: float = 5.0) -> None:
        await self.nc.flush(timeout)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.close()
