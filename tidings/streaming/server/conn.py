"""The streaming server's NATS connection: a thin layer over :mod:`tidings.client`.

The state machine is synchronous (it runs inside message callbacks and timers). Messages are
handed to it straight from the client's read path when the client allows (see
:func:`_direct_delivery_supported`), else through the public callback. It also needs a
publish that does not have to be awaited. ``Client.publish`` is a coroutine that appends the
message to the client's write buffer at once and suspends only to wait for the socket to
drain past 64 KiB. :meth:`StanConn.publish` runs it to its first suspension point: the bytes
are buffered in order either way, and only the wait for the drain is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...client import Client
from ...client import errors as nerr

log = logging.getLogger("tidings.streaming")

Handler = Callable[[str, str, bytes], None]

# The streaming server's own subscriptions (publishes, acks, requests) may hold this much
# before the client drops messages (and the publishers time out and retry).
PENDING_MSGS_LIMIT = 2_000_000
PENDING_BYTES_LIMIT = 1 << 30


def _direct_delivery_supported(sub: Any) -> bool:
    """Whether the client calls ``sub._deliver(subject, reply, hdr, payload)`` per message.

    That is tidings.client's read path today; if it changes, the public callback is used.
    """
    import inspect

    fn = getattr(type(sub), "_deliver", None)
    if fn is None:
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["self", "subject", "reply", "hdr", "payload"]


class StanConn:
    """What the streaming server needs from a NATS connection."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self._pub = nc.publish
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
            **opts,
        )
        return cls(nc)

    def publish(self, subject: str, data: bytes) -> None:
        coro = self._pub(subject, data)
        try:
            coro.send(None)
        except StopIteration:
            return
        except nerr.Error as exc:
            self.dropped += 1
            log.debug("streaming: publish to %s failed: %s", subject, exc)
            return
        # Suspended waiting for the socket to drain: the message is already buffered.
        coro.close()

    async def subscribe(self, subject: str, handler: Handler) -> Any:
        def cb(msg: Any) -> None:
            handler(msg.subject, msg.reply, msg.data)

        sub = await self.nc.subscribe(
            subject, cb=cb, pending_msgs_limit=PENDING_MSGS_LIMIT,
            pending_bytes_limit=PENDING_BYTES_LIMIT,
        )
        if _direct_delivery_supported(sub):
            # Hand each message to the handler from the client's read path: no Msg object,
            # no queue, no task switch. The handler is synchronous and never blocks.
            def deliver(subject: bytes, reply: bytes | None, hdr: bytes | None,
                        payload: bytes) -> None:
                try:
                    handler(subject.decode(), reply.decode() if reply else "", payload)
                except Exception:
                    log.exception("streaming: handling a message on %s", subject)

            sub._deliver = deliver
        return sub

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
