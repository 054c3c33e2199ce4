"""The connector's side of the tidings bulk range fetch (`_TIDINGS.fetch.<cluster_id>`).

A tidings streaming server answers a fetch request with a run of consecutive stored messages
in one columnar reply (layout: `tidings.streaming.server.fetch`, docs/streaming.md). A
partition read asks for its range from the start; the first reply tells whether the server
speaks the extension (no responders or no answer: it does not, and the caller falls back to
the subscription read) and how many messages one reply holds. The rest of the range is then cut
into pieces of that many messages, fetched with a few requests in flight and handed out in
sequence order; a piece whose reply falls short asks again from the `next` sequence it was
told.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

from ..client import errors as nats_errors
from .stan import StanError

FETCH_PREFIX = "_TIDINGS.fetch"
MAGIC = b"TFR1"
HEADER = struct.Struct("<4sIIIqqq")
OK, BAD_REQUEST, UNKNOWN_CHANNEL, TOO_LARGE, UNAVAILABLE = 0, 1, 2, 3, 4
CLIPPED = 1
# Asked for per reply (the server caps it at its max_payload). Not 1 MiB: the core server
# handles messages past about 600 KiB with fresh memory each time (page faults: a 1 MiB reply
# cost it 2 ms against 0.4 ms for 384 KiB), and more replies cost the reader next to nothing.
MAX_BYTES = 384 * 1024


class FetchUnsupported(StanError):
    """The server does not answer fetch requests (e.g. the reference streaming server)."""


class FetchReply(NamedTuple):
    """One decoded reply; `data` is the whole reply (the column buffers are slices of it)."""

    status: int
    count: int
    flags: int
    first: int
    last: int
    next: int
    data: bytes

    @property
    def error(self) -> str:
        return self.data[HEADER.size:].decode(errors="replace")


def fetch_subject(cluster_id: str) -> str:
    return f"{FETCH_PREFIX}.{cluster_id}"


def encode_request(channel: str, start: int, end: int, max_bytes: int = MAX_BYTES) -> bytes:
    return json.dumps({"channel": channel, "start": start, "end": end,
                       "max_bytes": max_bytes}).encode()


def decode_reply(data: bytes) -> FetchReply:
    if len(data) < HEADER.size or data[:4] != MAGIC:
        raise StanError(f"not a fetch reply ({len(data)} bytes)")
    _, status, count, flags, first, last, nxt = HEADER.unpack_from(data)
    return FetchReply(status, count, flags, first, last, nxt, data)


async def fetch_once(nc: Any, subject: str, channel: str, start: int, end: int,
                     timeout: float) -> FetchReply:
    """One request; StanError when the server refuses it (bad request, oversized message)."""
    msg = await nc.request(subject, encode_request(channel, start, end), timeout=timeout)
    reply = decode_reply(msg.data)
    if reply.status not in (OK, UNKNOWN_CHANNEL):
        raise StanError(f"fetch of channel {channel!r} {start}..{end} refused: {reply.error}")
    return reply


async def fetch_range(nc: Any, cluster_id: str, channel: str, start: int, end: int,
                      window: int = 4, timeout: float = 10.0) -> AsyncIterator[FetchReply]:
    """The replies covering `start`..`end` of `channel`, in sequence order.

    Raises FetchUnsupported (before yielding anything) when nobody answers the fetch subject.
    Stops early when the channel is unknown or does not (any longer, or yet) hold the rest of
    the range: the messages are gone, as a subscription read would skip them.
    """
    subject = fetch_subject(cluster_id)
    try:
        first = await fetch_once(nc, subject, channel, start, end, timeout)
    except (nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
        raise FetchUnsupported(f"{subject}: {type(exc).__name__}") from exc
    if first.status != OK or first.count == 0:
        return
    yield first
    per = first.count

    async def piece(lo: int, hi: int) -> list[FetchReply]:
        out = []
        while lo <= hi:
            try:
                reply = await fetch_once(nc, subject, channel, lo, hi, timeout)
            except (nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
                raise StanError(f"fetch of channel {channel!r} {lo}..{hi}: "
                                f"{type(exc).__name__}") from exc
            if reply.status != OK or reply.count == 0:
                break
            out.append(reply)
            lo = reply.next
        return out

    bounds = deque((lo, min(lo + per - 1, end)) for lo in range(first.next, end + 1, per))
    running: deque[asyncio.Task[list[FetchReply]]] = deque()
    try:
        while bounds or running:
            while bounds and len(running) < window:
                running.append(asyncio.ensure_future(piece(*bounds.popleft())))
            for reply in await running.popleft():
                yield reply
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
