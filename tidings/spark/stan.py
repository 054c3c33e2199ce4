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
import contextlib
import os
from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeVar

from google.protobuf.message import DecodeError

from ..client import Client
from ..client import errors as nats_errors
from ..streaming.client import ERR_CONNECT_REQ_TIMEOUT, StanError, StreamingClient
from ..streaming.client import connect as stan_connect
from ..streaming.pb import protocol_pb2 as pb
from .connection import ConnectionLost, NatsConnection, unique_id
from .options import ConnectionOptions

T = TypeVar("T")

__all__ = ["ChannelInfo", "Probe", "RangeRead", "StanConnection", "StanError", "check_server",
           "wait_for_streaming", "wait_progress"]


class Probe(NamedTuple):
    """The message a probe subscription was sent first."""

    sequence: int
    timestamp: int  # Unix nanoseconds
    size: int  # bytes of data


class ChannelInfo(NamedTuple):
    first: int
    last: int
    msg_size: int  # an estimate of the size of one message's data


class StanConnection(NatsConnection):
    """A connection of the connector that speaks NATS Streaming: `connect_nats` opens only the
    NATS connection (what a bulk fetch, `fetch.py`, needs); `connect` registers a streaming
    client on it. A connection lost while in use also fails the streaming client's
    outstanding PubAcks with `ConnectionLost`.
    """

    def __init__(self, copts: ConnectionOptions, role: str, replaces: StanConnection | None = None
                 ) -> None:
        super().__init__(copts, role)
        # The lost connection this one takes over from: its streaming client, if it had one,
        # is closed on the server once this one is registered.
        self.replaces = (replaces.registered or replaces.replaces) if replaces else None
        self.registered: str | None = None
        self.sc: StreamingClient | None = None

    def lost(self, err: ConnectionLost) -> None:
        if self.sc is not None:
            self.sc.lose(err)
        super().lost(err)

    async def connect(self, **options: float | int) -> StreamingClient:
        """The streaming client on this connection (`options` for `StreamingClient.connect`,
        e.g. ack_timeout, max_pub_acks_inflight), made once."""
        if self.sc is not None:
            return self.sc
        copts = self.copts
        if self.nc is None:
            await self.connect_nats()

        async def attempt() -> StreamingClient:
            return await stan_connect(copts.cluster_id, self.client_id, nats=self.nc,
                                      connect_timeout=copts.request_timeout, **options)

        def retry(exc: BaseException) -> bool:  # nobody answers yet: it may be starting
            return str(exc) == ERR_CONNECT_REQ_TIMEOUT and self.alive()

        try:
            self.sc = await self.retrying(attempt, retry, "no NATS Streaming server with cluster "
                                          f"id {copts.cluster_id!r} answered")
            self.registered = self.client_id
        except StanError as exc:
            await self.close()
            if ERR_CONNECT_REQ_TIMEOUT in str(exc):
                raise
            raise StanError(f"streaming connect refused at {self.servers}: {exc}") from exc
        if self.replaces:
            # A restarted server recovers the old client from its store; gone already is fine.
            with contextlib.suppress(StanError, nats_errors.Error):
                await self.sc.close_client(self.replaces)
            self.replaces = None
        return self.sc

    def alive(self) -> bool:
        """Connected, and the streaming client (if registered) not closed or lost (its pings
        tell when the server no longer knows it)."""
        return super().alive() and (self.sc is None or not self.sc.closed)

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
        self._closing = True
        sc, self.sc = self.sc, None
        try:
            if sc is not None and self.nc is not None and self.nc.is_connected:
                await sc.close()
        except (StanError, nats_errors.Error):
            pass
        finally:
            await super().close()


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

    def fail(self, err: StanError) -> None:
        """End the read with `err` (e.g. the connection was lost); wakes the reader."""
        if self.error is None:
            self.error = err
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
    """Until `read` has enough to hand out or is done; StanError once no message has come for
    `timeout` seconds (checked every quarter of it)."""
    loop = asyncio.get_running_loop()
    seen, since = read.received, loop.time()
    while not read.done and len(read.seqs) < read.wake_every and read.error is None:
        read.waiter = loop.create_future()
        try:
            await asyncio.wait_for(read.waiter, timeout / 4)
        except asyncio.TimeoutError:
            now = loop.time()
            if read.received != seen:
                seen, since = read.received, now
            elif now - since >= timeout:
                raise StanError(f"no message for {timeout:g} s (readTimeout) while "
                                f"{what()}") from None
        finally:
            read.waiter = None
    if read.error is not None:
        raise read.error


def wait_for_streaming(url: str, timeout: float = 20.0, **options: str) -> None:
    """Block until a streaming server answers a connect at `url` (e.g. one embedded in a
    server that has just started); `options` are data source options such as clusterId,
    user, password. Raises TimeoutError after `timeout` seconds (at once for a refusal that
    waiting will not change, such as a wrong password)."""
    # (requestTimeout also bounds the close request: a server still reading its store back
    # answers it late, and a probe it never heard close from stays registered)
    copts = ConnectionOptions.parse({"url": url, "requestTimeout": "5",
                                     "reconnectTimeout": str(timeout), **options})

    async def attempt() -> None:  # the connection's own retries do the waiting
        conn = StanConnection(copts, "probe")
        try:
            await conn.connect()
        finally:
            await conn.close()

    try:
        asyncio.run(attempt())
    except StanError as exc:
        raise TimeoutError(f"no streaming server at {url}: {exc}") from exc


def check_server(options: Mapping[str, str]) -> None:
    """Connect once to the server of the data source `options` and register with its
    streaming server, no retries: a StanError whose message names the cause in one line
    (`cannot connect to nats://h:1: connection refused`). For a job to fail fast, before
    Spark starts, on a wrong URL, credentials or cluster id."""
    copts = ConnectionOptions.parse(options)
    servers = ", ".join(copts.servers)

    try:
        kwargs = copts.client_kwargs(f"{copts.client_id_prefix}-check")
    except OSError as exc:  # the TLS files
        raise StanError(f"cannot load the TLS files (tlsCaFile, tlsCertFile, tlsKeyFile): "
                        f"{_cause(exc, copts)}") from None

    async def attempt() -> None:
        nc = Client()
        try:
            await nc.connect(list(copts.servers), **kwargs)
        except (nats_errors.Error, OSError) as exc:
            raise StanError(f"cannot connect to {servers}: {_cause(exc, copts)}") from None
        try:
            sc = await stan_connect(copts.cluster_id, f"{copts.client_id_prefix}-check-"
                                    f"{unique_id()}", nats=nc,
                                    connect_timeout=copts.request_timeout)
            await sc.close()
        except StanError as exc:
            if str(exc) != ERR_CONNECT_REQ_TIMEOUT:
                raise StanError(f"streaming connect refused at {servers}: {exc}") from None
            raise StanError(f"no NATS Streaming server with cluster id {copts.cluster_id!r} "
                            f"answers at {servers} (clusterId)") from None
        finally:
            await nc.close()

    asyncio.run(attempt())


def _cause(exc: BaseException, copts: ConnectionOptions) -> str:
    """The root of a failed connect, in words (`connection refused`, not an errno)."""
    while isinstance(exc, nats_errors.NoServersError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, (asyncio.TimeoutError, nats_errors.TimeoutError)):
        return f"no answer within {copts.connect_timeout:g} s (connectTimeout)"
    if isinstance(exc, OSError) and exc.errno is not None:
        words = (os.strerror(exc.errno) if exc.errno > 0 else exc.strerror) or str(exc)
        return words.lower() + (f": {exc.filename}" if exc.filename else "")
    return str(exc) or type(exc).__name__
