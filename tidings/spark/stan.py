"""The NATS Streaming protocol as the Spark connector needs it, on `tidings.client`.

What the connector does is narrower than a general streaming client and has its own costs, so it
speaks the protocol directly (the wire messages are `tidings.streaming.pb`):

- `StanConnection`: connect (ConnectRequest, heartbeat answers) and close (CloseRequest);
  `connect_nats` opens only the NATS connection (what a bulk fetch, `fetch.py`, needs).
- `probe`: the sequence of the first message a start position would deliver (LastReceived for
  a channel's last sequence, First for its first, TimeDeltaStart for "first at or after a
  time"), or None for an empty answer. The protocol has no request for a channel's bounds; a
  probe subscribes with maxInFlight=1 and closes the subscription at once. An initial message
  is sent by the server before it answers the subscription-close request that follows it on
  the same connection, so the close reply is the end of the answer (no timer involved).
- `RangeRead`: collects the messages `start`..`end` of a channel delivered to a SequenceStart
  subscription (a `raw_cb` subscription: no per-message objects); `reader.read_partition`
  drives it with at most `max_in_flight` unacknowledged (a range no longer than that is never
  acknowledged at all: the subscription is simply closed after the last wanted sequence).
- `Publisher`: PubMsg with a window of outstanding PubAcks; `flush_acks` waits for all.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from ..client import Client, Msg
from ..client import errors as nats_errors
from ..client.nuid import NUID
from ..streaming.pb import protocol_pb2 as pb
from .options import ConnectionOptions

NEW_ONLY = pb.NewOnly
LAST_RECEIVED = pb.LastReceived
TIME_DELTA_START = pb.TimeDeltaStart
SEQUENCE_START = pb.SequenceStart
FIRST = pb.First

_nuid = NUID()
_nuid_pid = os.getpid()


def unique_id() -> str:
    """A NUID, fresh per process: Spark forks its Python workers, and a forked copy of one
    generator would hand two workers the same streaming client id."""
    global _nuid, _nuid_pid
    if _nuid_pid != os.getpid():
        _nuid, _nuid_pid = NUID(), os.getpid()
    return _nuid.next().decode()


class StanError(Exception):
    """The streaming server refused a request, or did not answer it."""


class Probe(NamedTuple):
    """The message a probe subscription was sent first."""

    sequence: int
    timestamp: int  # Unix nanoseconds
    size: int  # bytes of data


class ChannelInfo(NamedTuple):
    first: int
    last: int
    msg_size: int  # an estimate of the size of one message's data


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def ack_prefix(channel: str) -> bytes:
    """Encoded `Ack.subject` field plus the tag of `Ack.sequence`: add `varint(seq)`."""
    raw = channel.encode()
    return b"\x0a" + varint(len(raw)) + raw + b"\x10"


class StanConnection:
    """One streaming-client connection (its own NATS connection and client id)."""

    def __init__(self, copts: ConnectionOptions, role: str) -> None:
        self.copts = copts
        self.client_id = f"{copts.client_id_prefix}-{role}-{unique_id()}"
        self.conn_id = unique_id().encode()
        self.nc: Client | None = None
        self.resp: Any = None

    async def connect_nats(self) -> StanConnection:
        """Only the NATS connection (enough for a fetch; `connect` registers the client)."""
        copts = self.copts
        self.nc = Client()
        try:
            await self.nc.connect(list(copts.servers), **copts.client_kwargs(self.client_id))
        except nats_errors.Error as exc:
            raise StanError(f"cannot connect to {', '.join(copts.servers)}: {exc}") from exc
        return self

    async def connect(self) -> StanConnection:
        copts = self.copts
        if self.nc is None:
            await self.connect_nats()
        hb_inbox = self.nc.new_inbox()

        async def heartbeat(msg: Msg) -> None:
            if msg.reply:
                await self.nc.publish(msg.reply, b"")

        await self.nc.subscribe(hb_inbox, cb=heartbeat)
        req = pb.ConnectRequest(clientID=self.client_id, heartbeatInbox=hb_inbox, protocol=1,
                                connID=self.conn_id, pingInterval=5, pingMaxOut=88)
        subject = f"_STAN.discover.{copts.cluster_id}"
        try:
            reply = await self.nc.request(subject, req.SerializeToString(),
                                          timeout=copts.request_timeout)
        except (nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
            await self.nc.close()
            raise StanError(
                f"no NATS Streaming server with cluster id {copts.cluster_id!r} answered at "
                f"{', '.join(copts.servers)} ({type(exc).__name__})") from exc
        resp = pb.ConnectResponse.FromString(reply.data)
        if resp.error:
            await self.nc.close()
            raise StanError(f"streaming connect refused: {resp.error}")
        self.resp = resp
        return self

    async def request(self, subject: str, message: Any, reply_type: Any) -> Any:
        try:
            reply = await self.nc.request(subject, message.SerializeToString(),
                                          timeout=self.copts.request_timeout)
        except (nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
            raise StanError(f"streaming server did not answer on {subject}: "
                            f"{type(exc).__name__}") from exc
        return reply_type.FromString(reply.data)

    async def subscribe(self, channel: str, inbox: str, position: int, *, sequence: int = 0,
                        delta_ns: int = 0, max_in_flight: int = 1024, ack_wait: int = 30
                        ) -> str:
        """Send a SubscriptionRequest (the caller subscribed to `inbox`); the ack inbox."""
        req = pb.SubscriptionRequest(
            clientID=self.client_id, subject=channel, inbox=inbox,
            maxInFlight=min(max_in_flight, 2**31 - 1), ackWaitInSecs=ack_wait,
            startPosition=position, startSequence=sequence, startTimeDelta=delta_ns)
        resp = await self.request(self.resp.subRequests, req, pb.SubscriptionResponse)
        if resp.error:
            raise StanError(f"subscription to channel {channel!r} refused: {resp.error}")
        return resp.ackInbox

    async def unsubscribe(self, channel: str, ack_inbox: str) -> None:
        req = pb.UnsubscribeRequest(clientID=self.client_id, subject=channel, inbox=ack_inbox)
        resp = await self.request(self.resp.unsubRequests, req, pb.SubscriptionResponse)
        if resp.error:
            raise StanError(f"unsubscribe from channel {channel!r} refused: {resp.error}")

    async def probe(self, channel: str, position: int, delta_ns: int = 0) -> Probe | None:
        """The first message `position` would deliver, or None."""
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            ack_inbox = await self.subscribe(channel, inbox, position, delta_ns=delta_ns,
                                             max_in_flight=1)
            await self.unsubscribe(channel, ack_inbox)
            if sub.pending_msgs == 0:
                return None
            msg = pb.MsgProto.FromString((await sub.next_msg(timeout=None)).data)
            return Probe(msg.sequence, msg.timestamp, len(msg.data))
        finally:
            await sub.unsubscribe()

    async def info(self, channel: str) -> ChannelInfo | None:
        """First and last sequence of a channel, or None when it holds no message."""
        last = await self.probe(channel, LAST_RECEIVED)
        if last is None:
            return None
        first = await self.probe(channel, FIRST)
        size = max(last.size, first.size) if first else last.size
        return ChannelInfo(first.sequence if first else last.sequence, last.sequence, size)

    async def close(self) -> None:
        nc, self.nc = self.nc, None
        if nc is None:
            return
        try:
            if self.resp is not None and nc.is_connected:
                await self.request_on(nc, self.resp.closeRequests,
                                      pb.CloseRequest(clientID=self.client_id))
        except (StanError, nats_errors.Error):
            pass
        finally:
            await nc.close()

    async def request_on(self, nc: Any, subject: str, message: Any) -> None:
        await nc.request(subject, message.SerializeToString(), timeout=self.copts.request_timeout)


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


class Publisher:
    """Publishes PubMsgs on one streaming connection, keeping a window of unacked ones."""

    def __init__(self, conn: StanConnection, max_in_flight: int, ack_wait: float) -> None:
        self.conn = conn
        self.max_in_flight = max_in_flight
        self.ack_wait = ack_wait
        self.outstanding: set[str] = set()
        self.errors: list[str] = []
        self.acked = 0
        self.ack_inbox = ""
        self._room: asyncio.Future[None] | None = None
        self._empty: asyncio.Future[None] | None = None
        self._sub: Any = None

    async def start(self) -> Publisher:
        self.ack_inbox = self.conn.nc.new_inbox()
        self._sub = await self.conn.nc.subscribe(self.ack_inbox, cb=self._on_ack,
                                                 pending_msgs_limit=0, pending_bytes_limit=0)
        return self

    def _on_ack(self, msg: Msg) -> None:
        ack = pb.PubAck.FromString(msg.data)
        try:
            self.outstanding.remove(ack.guid)
        except KeyError:
            return
        if ack.error:
            self.errors.append(ack.error)
        else:
            self.acked += 1
        if self._room is not None and len(self.outstanding) < self.max_in_flight:
            if not self._room.done():
                self._room.set_result(None)
        if self._empty is not None and not self.outstanding and not self._empty.done():
            self._empty.set_result(None)

    async def publish(self, channel: str, data: bytes) -> None:
        if self.errors:
            raise StanError(f"publish to channel refused: {self.errors[0]}")
        conn = self.conn
        while len(self.outstanding) >= self.max_in_flight:
            self._room = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._room, self.ack_wait)
            except asyncio.TimeoutError:
                raise StanError(f"no PubAck within {self.ack_wait:g} s "
                                f"({len(self.outstanding)} outstanding)") from None
            finally:
                self._room = None
        guid = unique_id()
        msg = pb.PubMsg(clientID=conn.client_id, guid=guid, subject=channel, data=data,
                        connID=conn.conn_id)
        self.outstanding.add(guid)
        await conn.nc.publish(f"{conn.resp.pubPrefix}.{channel}", msg.SerializeToString(),
                              reply=self.ack_inbox)

    async def flush_acks(self) -> None:
        """Until every published message is acknowledged; StanError on refusal or timeout."""
        if self.outstanding:
            self._empty = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._empty, self.ack_wait)
            except asyncio.TimeoutError:
                raise StanError(f"no PubAck within {self.ack_wait:g} s "
                                f"({len(self.outstanding)} outstanding)") from None
            finally:
                self._empty = None
        if self.errors:
            raise StanError(f"{len(self.errors)} messages refused: {self.errors[0]}")


def wait_for_streaming(url: str, timeout: float = 20.0, **options: str) -> None:
    """Block until a streaming server answers a connect at `url` (e.g. one embedded in a
    server that has just started); `options` are data source options such as clusterId,
    user, password. Raises TimeoutError after `timeout` seconds."""
    import time

    copts = ConnectionOptions.parse({"url": url, "requestTimeout": "1", **options})

    async def attempt() -> bool:
        try:
            conn = await StanConnection(copts, "probe").connect()
        except (StanError, OSError):
            return False
        await conn.close()
        return True

    deadline = time.monotonic() + timeout
    while not asyncio.run(attempt()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no streaming server at {url}")
        time.sleep(0.1)
