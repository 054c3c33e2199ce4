"""The Spark connector's glue on `tidings.streaming.client`.

The protocol itself (connect with heartbeats and pings, subscriptions, acks, publishing with
PubAck tracking, close) is `tidings.streaming.client`; what is here is what only the connector
needs:

- `StanConnection`: a connection made from the data source options, with a client id unique
  per Spark worker process. `connect_nats` opens only the NATS connection (what a bulk fetch,
  `fetch.py`, needs); `connect` registers a `StreamingClient` on it.
- `probe` / `info`: a channel's bounds from `StreamingClient.peek` (the first message a start
  position would deliver: LastReceived for the last sequence, First for the first,
  TimeDeltaStart for "first at or after a time").
- `RangeRead`: collects the messages `start`..`end` of a channel delivered to a `raw_cb`
  subscription of the streaming client (no per-message objects) as column lists;
  `reader.read_partition` drives it with at most `max_in_flight` unacknowledged (a range no
  longer than that is never acknowledged at all: the subscription is simply closed after the
  last wanted sequence).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import NamedTuple

from google.protobuf.message import DecodeError

from ..client import Client
from ..client import errors as nats_errors
from ..client.nuid import NUID
from ..streaming.client import ERR_CONNECT_REQ_TIMEOUT, StanError, StreamingClient
from ..streaming.client import connect as stan_connect
from ..streaming.pb import protocol_pb2 as pb
from .options import ConnectionOptions

__all__ = ["ChannelInfo", "Probe", "RangeRead", "StanConnection", "StanError", "unique_id",
           "wait_for_streaming", "wait_progress"]

_nuid = NUID()
_nuid_pid = os.getpid()


def unique_id() -> str:
    """A NUID, fresh per process: Spark forks its Python workers, and a forked copy of one
    generator would hand two workers the same streaming client id."""
    global _nuid, _nuid_pid
    if _nuid_pid != os.getpid():
        _nuid, _nuid_pid = NUID(), os.getpid()
    return _nuid.next().decode()


class Probe(NamedTuple):
    """The message a probe subscription was sent first."""

    sequence: int
    timestamp: int  # Unix nanoseconds
    size: int  # bytes of data


class ChannelInfo(NamedTuple):
    first: int
    last: int
    msg_size: int  # an estimate of the size of one message's data


class StanConnection:
    """One connection of the connector: its own NATS connection and streaming client id."""

    def __init__(self, copts: ConnectionOptions, role: str) -> None:
        self.copts = copts
        self.client_id = f"{copts.client_id_prefix}-{role}-{unique_id()}"
        self.nc: Client | None = None
        self.sc: StreamingClient | None = None

    async def connect_nats(self) -> StanConnection:
        """Only the NATS connection (enough for a fetch; `connect` registers the client)."""
        copts = self.copts
        self.nc = Client()
        try:
            await self.nc.connect(list(copts.servers), **copts.client_kwargs(self.client_id))
        except nats_errors.Error as exc:
            raise StanError(f"cannot connect to {', '.join(copts.servers)}: {exc}") from exc
        return self

    async def connect(self, **options: float | int) -> StreamingClient:
        """The streaming client on this connection (`options` for `StreamingClient.connect`,
        e.g. ack_timeout, max_pub_acks_inflight), made once."""
        if self.sc is not None:
            return self.sc
        copts = self.copts
        if self.nc is None:
            await self.connect_nats()
        try:
            self.sc = await stan_connect(copts.cluster_id, self.client_id, nats=self.nc,
                                         connect_timeout=copts.request_timeout, **options)
        except StanError as exc:
            await self.close()
            if str(exc) == ERR_CONNECT_REQ_TIMEOUT:
                raise StanError(
                    f"no NATS Streaming server with cluster id {copts.cluster_id!r} answered "
                    f"at {', '.join(copts.servers)} ({exc})") from exc
            raise StanError(f"streaming connect refused: {exc}") from exc
        return self.sc

    def alive(self) -> bool:
        """Connected, and the streaming client (if registered) not closed or lost (its pings
        tell when the server no longer knows it)."""
        if self.nc is None or not self.nc.is_connected:
            return False
        return self.sc is None or not self.sc.closed

    async def probe(self, channel: str, start_at: str, delta_ns: int | None = None
                    ) -> Probe | None:
        """The first message `start_at` ("last_received", "first"; or `delta_ns` ago) would
        deliver, or None."""
        sc = await self.connect()
        msg = await sc.peek(channel, start_at, time_delta_ns=delta_ns)
        return None if msg is None else Probe(msg.sequence, msg.timestamp, len(msg.data))

    async def info(self, channel: str) -> ChannelInfo | None:
        """First and last sequence of a channel, or None when it holds no message."""
        last = await self.probe(channel, "last_received")
        if last is None:
            return None
        first = await self.probe(channel, "first")
        size = max(last.size, first.size) if first else last.size
        return ChannelInfo(first.sequence if first else last.sequence, last.sequence, size)

    async def close(self) -> None:
        """Close the streaming client (CloseRequest), then the NATS connection."""
        sc, self.sc = self.sc, None
        nc, self.nc = self.nc, None
        try:
            if sc is not None and nc is not None and nc.is_connected:
                await sc.close()
        except (StanError, nats_errors.Error):
            pass
        finally:
            if nc is not None:
                await nc.close()


class RangeRead:
    """Collects a channel's messages `start`..`end` delivered to one subscription.

    The NATS read path calls `on_msg`; columns grow until the consumer `take`s them. Messages
    arrive in sequence order; a redelivery (a sequence already seen) is dropped, so every
    sequence is produced once. The range is done at the first sequence >= `end` (a message of
    `end` itself is kept; later ones, present when the server skipped expired messages, are not).
    Messages stored before `min_time` (Unix ns) are passed over.
    """

    def __init__(self, channel: str, start: int, end: int, wake_every: int,
                 min_time: int = 0) -> None:
        self.channel = channel
        self.end = end
        self.min_time = min_time
        self.expected = start
        self.seqs: list[int] = []
        self.data: list[bytes] = []
        self.stamps: list[int] = []
        self.redelivered: list[bool] = []
        self.done = False
        self.error: StanError | None = None
        self.received = 0
        self.wake_every = wake_every
        self.waiter: asyncio.Future[None] | None = None
        self._parse = pb.MsgProto.FromString

    def on_msg(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
               payload: bytes) -> None:
        """A `raw_cb` of the client: called from its read path for every message."""
        try:
            m = self._parse(payload)
        except DecodeError as exc:
            self.error = StanError(f"channel {self.channel!r}: undecodable message: {exc}")
            self.done = True
            self._wake()
            return
        seq = m.sequence
        self.received += 1
        if seq < self.expected or self.done:
            return
        if seq <= self.end and m.timestamp >= self.min_time:
            self.seqs.append(seq)
            self.data.append(m.data)
            self.stamps.append(m.timestamp)
            self.redelivered.append(m.redelivered)
        self.expected = seq + 1
        if seq >= self.end:
            self.done = True
            self._wake()
        elif len(self.seqs) >= self.wake_every:
            self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def take(self) -> tuple[list[int], list[bytes], list[int], list[bool]]:
        out = (self.seqs, self.data, self.stamps, self.redelivered)
        self.seqs, self.data, self.stamps, self.redelivered = [], [], [], []
        return out


async def wait_progress(read: RangeRead, timeout: float, what: Callable[[], str]) -> None:
    """Until `read` has enough to hand out or is done; StanError after `timeout` idle seconds."""
    loop = asyncio.get_running_loop()
    while not read.done and len(read.seqs) < read.wake_every:
        before = read.received
        read.waiter = loop.create_future()
        try:
            await asyncio.wait_for(read.waiter, timeout)
        except asyncio.TimeoutError:
            if read.received == before:
                raise StanError(f"no message for {timeout:g} s while {what()}") from None
        finally:
            read.waiter = None
    if read.error is not None:
        raise read.error


def wait_for_streaming(url: str, timeout: float = 20.0, **options: str) -> None:
    """Block until a streaming server answers a connect at `url` (e.g. one embedded in a
    server that has just started); `options` are data source options such as clusterId,
    user, password. Raises TimeoutError after `timeout` seconds."""
    import time

    copts = ConnectionOptions.parse({"url": url, "requestTimeout": "1", **options})

    async def attempt() -> bool:
        conn = StanConnection(copts, "probe")
        try:
            await conn.connect()
        except (StanError, OSError):
            return False
        await conn.close()
        return True

    deadline = time.monotonic() + timeout
    while not asyncio.run(attempt()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no streaming server at {url}")
        time.sleep(0.1)
