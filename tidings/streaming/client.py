"""A NATS Streaming client on top of :mod:`tidings.client`.

    sc = await tidings.streaming.client.connect("test-cluster", "me", url="nats://127.0.0.1:4222")
    await sc.publish("orders", b"one")                      # waits for the PubAck
    await sc.publish_async("orders", b"two", ack_handler=cb)  # returns the guid at once
    sub = await sc.subscribe("orders", cb=handle, start_at="first", durable_name="d")
    await sub.close()        # durable: keeps its position; sub.unsubscribe() removes it
    await sc.close()

The API follows the official Go and Python streaming clients: ``publish`` /
``publish_async`` with ack handlers and a bound on PubAcks in flight, ``subscribe`` with every
start position (``new_only``, ``last_received``, ``first`` / ``deliver_all_available``,
``sequence=``, ``time=`` / ``time_delta=``), ``max_inflight``, ``ack_wait``, ``manual_acks``,
``queue``, ``durable_name``. Client pings (protocol 1) detect a connection the server no
longer knows (replaced by a client with the same id, or closed after missed heartbeats); the
``conn_lost_cb`` then gets the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from google.protobuf.message import DecodeError

from ..client import Client
from ..client import connect as nats_connect
from ..client import errors as nerr
from ..client.nuid import NUID
from ..varint import put_uvarint
from .pb import protocol_pb2 as pb

__all__ = [
    "DEFAULT_ACK_WAIT",
    "DEFAULT_MAX_INFLIGHT",
    "DEFAULT_MAX_PUB_ACKS_INFLIGHT",
    "Msg",
    "StanError",
    "StreamingClient",
    "Subscription",
    "connect",
]

DEFAULT_DISCOVER_PREFIX = "_STAN.discover"
DEFAULT_ACK_PREFIX = "_STAN.acks"
DEFAULT_CONNECT_WAIT = 2.0
DEFAULT_ACK_TIMEOUT = 30.0
DEFAULT_MAX_PUB_ACKS_INFLIGHT = 16384
DEFAULT_ACK_WAIT = 30
DEFAULT_MAX_INFLIGHT = 1024
DEFAULT_PING_INTERVAL = 5
DEFAULT_PING_MAX_OUT = 88
PROTOCOL_ONE = 1

ERR_CONNECT_REQ_TIMEOUT = "stan: connect request timeout (possibly wrong cluster ID?)"
ERR_CLOSE_REQ_TIMEOUT = "stan: close request timeout"
ERR_SUB_REQ_TIMEOUT = "stan: subscribe request timeout"
ERR_UNSUB_REQ_TIMEOUT = "stan: unsubscribe request timeout"
ERR_CONNECTION_CLOSED = "stan: connection closed"
ERR_PUB_ACK_TIMEOUT = "stan: publish ack timeout"
ERR_BAD_SUBSCRIPTION = "stan: invalid subscription"
ERR_MAX_PINGS = "stan: connection lost due to PING failure"
ERR_MANUAL_ACK = "stan: cannot manually ack in auto-ack mode"
ERR_NO_SERVER_SUPPORT = "stan: not supported by server"

START_POSITIONS = {
    "new_only": pb.NewOnly,
    "last_received": pb.LastReceived,
    "time": pb.TimeDeltaStart,
    "sequence": pb.SequenceStart,
    "first": pb.First,
}

AckHandler = Callable[[str, "StanError | None"], Any]
MsgHandler = Callable[["Msg"], Any]
# raw_cb of `subscribe`: (subject, reply, headers block, payload) as the core client's raw_cb;
# the payload is an encoded MsgProto
RawHandler = Callable[[bytes, "bytes | None", "bytes | None", bytes], None]


_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


class StanError(Exception):
    """A streaming error: the server's error string, or one of the client's (timeouts)."""


class Msg:
    """A message delivered to a subscription."""

    __slots__ = ("proto", "sub")

    def __init__(self, proto: pb.MsgProto, sub: Subscription) -> None:
        self.proto = proto
        self.sub = sub

    @property
    def seq(self) -> int:
        return self.proto.sequence

    sequence = seq

    @property
    def subject(self) -> str:
        return self.proto.subject

    @property
    def reply(self) -> str:
        return self.proto.reply

    @property
    def data(self) -> bytes:
        return self.proto.data

    @property
    def timestamp(self) -> int:
        """Unix nanoseconds when the server stored the message."""
        return self.proto.timestamp

    @property
    def redelivered(self) -> bool:
        return self.proto.redelivered

    @property
    def redelivery_count(self) -> int:
        return self.proto.redeliveryCount

    async def ack(self) -> None:
        """Acknowledge (subscriptions with ``manual_acks=True``)."""
        await self.sub.ack(self)

    def __repr__(self) -> str:
        return (f"<stan.Msg seq={self.seq} subject={self.subject!r} "
                f"redelivered={self.redelivered} data={self.data[:40]!r}>")


class Subscription:
    """A streaming subscription; ``unsubscribe()`` removes it, ``close()`` keeps a durable."""

    def __init__(self, sc: StreamingClient, subject: str, queue: str, durable_name: str,
                 cb: MsgHandler | None, manual_acks: bool, inbox: str) -> None:
        self.sc = sc
        self.subject = subject
        self.queue = queue
        self.durable_name = durable_name
        self.cb = cb
        self.manual_acks = manual_acks
        self.inbox = inbox
        self.ack_inbox = ""
        self._nats_sub: Any = None
        self._closed = False
        self._queue: asyncio.Queue[Msg] | None = None if cb is not None else asyncio.Queue()
        self._is_coro = cb is not None and inspect.iscoroutinefunction(cb)
        self.received = 0
        raw = subject.encode()
        # an encoded Ack up to its sequence: `Ack.subject` and the tag of `Ack.sequence`
        self._ack_prefix = b"\x0a" + put_uvarint(len(raw)) + raw + b"\x10"

    @property
    def closed(self) -> bool:
        return self._closed

    async def _on_msg(self, nmsg: Any) -> None:
        if self._closed:
            return
        proto = pb.MsgProto()
        try:
            proto.ParseFromString(nmsg.data)
        except DecodeError:
            return
        msg = Msg(proto, self)
        self.received += 1
        if self.cb is None:
            assert self._queue is not None
            self._queue.put_nowait(msg)
            return
        if self._is_coro:
            await self.cb(msg)
        else:
            res = self.cb(msg)
            if inspect.isawaitable(res):
                await res
        if not self.manual_acks and not self._closed:
            await self._send_ack(proto.subject, proto.sequence)

    async def _send_ack(self, subject: str, seq: int) -> None:
        ack = pb.Ack(subject=subject, sequence=seq).SerializeToString()
        with contextlib.suppress(nerr.Error):
            await self.sc.nc.publish(self.ack_inbox, ack)

    async def ack(self, msg: Msg) -> None:
        if not self.manual_acks:
            raise StanError(ERR_MANUAL_ACK)
        if self._closed or self.sc.closed:
            raise StanError(ERR_BAD_SUBSCRIPTION)
        await self._send_ack(msg.subject, msg.seq)

    async def ack_sequences(self, seqs: Iterable[int]) -> None:
        """Acknowledge messages by sequence (``manual_acks`` or ``raw_cb`` subscriptions,
        which have no :class:`Msg` to ack); each Ack is encoded without a protobuf object."""
        if not self.manual_acks:
            raise StanError(ERR_MANUAL_ACK)
        if self._closed or self.sc.closed:
            raise StanError(ERR_BAD_SUBSCRIPTION)
        publish, inbox, prefix = self.sc.nc.publish, self.ack_inbox, self._ack_prefix
        try:
            for seq in seqs:
                await publish(inbox, prefix + put_uvarint(seq))
        except nerr.Error as exc:
            raise StanError(str(exc)) from exc

    async def next_msg(self, timeout: float | None = 1.0) -> Msg:
        """The next message of a subscription without a callback (``cb=None``)."""
        if self._queue is None:
            raise StanError("stan: next_msg needs a subscription without a callback")
        if timeout is None:
            return await self._queue.get()
        return await asyncio.wait_for(self._queue.get(), timeout)

    def pending(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    async def unsubscribe(self) -> None:
        """Remove the subscription (a durable loses its position)."""
        await self._finish(self.sc._unsub_requests, ERR_UNSUB_REQ_TIMEOUT)

    async def close(self) -> None:
        """Close the subscription; a durable keeps its position for a later resume."""
        if not self.sc._sub_close_requests:
            raise StanError(ERR_NO_SERVER_SUPPORT)
        await self._finish(self.sc._sub_close_requests, ERR_UNSUB_REQ_TIMEOUT)

    async def _finish(self, subject: str, timeout_err: str) -> None:
        sc = self.sc
        if sc.closed:
            raise StanError(ERR_CONNECTION_CLOSED)
        if self._closed:
            raise StanError(ERR_BAD_SUBSCRIPTION)
        self._closed = True
        sc._subs.pop(self.ack_inbox, None)
        req = pb.UnsubscribeRequest(clientID=sc.client_id, subject=self.subject,
                                    inbox=self.ack_inbox)
        if self.durable_name:
            req.durableName = self.durable_name
        # The inbox stays subscribed until the server has answered: whatever it delivered
        # before the answer still reaches a raw_cb (see `StreamingClient.peek`); a callback or
        # queue subscription drops it (it is closed already).
        try:
            raw = await sc.nc.request(subject, req.SerializeToString(),
                                      timeout=sc.connect_timeout)
        except nerr.TimeoutError as exc:
            raise StanError(timeout_err) from exc
        finally:
            if self._nats_sub is not None:
                with contextlib.suppress(nerr.Error):
                    await self._nats_sub.unsubscribe()
        resp = pb.SubscriptionResponse()
        resp.ParseFromString(raw.data)
        if resp.error:
            raise StanError(resp.error)


class _PubAck:
    __slots__ = ("fut", "handler", "deadline")

    def __init__(self, fut: asyncio.Future[str] | None, handler: AckHandler | None,
                 deadline: float) -> None:
        self.fut = fut
        self.handler = handler
        self.deadline = deadline


class StreamingClient:
    """A connection to a NATS Streaming server. Create with :func:`connect`."""

    def __init__(self) -> None:
        self.cluster_id = ""
        self.client_id = ""
        self.nc: Client = None  # type: ignore[assignment]
        self._nc_owned = False
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._nuid = NUID()
        self.conn_id = b""
        self._pub_prefix = ""
        self._sub_requests = ""
        self._unsub_requests = ""
        self._sub_close_requests = ""
        self._close_requests = ""
        self._ping_requests = ""
        self._ack_subject = ""
        self._pub_acks: dict[str, _PubAck] = {}
        self._pub_fields: dict[str, tuple[str, bytes]] = {}  # channel -> (subject, field)
        self._pub_head = b""  # PubMsg clientID, encoded
        self._pub_tail = b""  # PubMsg connID, encoded
        self._pub_ack_room: asyncio.Event | None = None
        self._pub_acks_drained: list[asyncio.Future[None]] = []
        self._subs: dict[str, Subscription] = {}
        self._internal: list[Any] = []
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_out = 0
        self._ping_bytes = b""
        self._ping_inbox = ""
        self._ping_interval = 0.0
        self._ping_max_out = 0
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._conn_lost_cb: Callable[[StanError], Any] | None = None
        self.connect_timeout = DEFAULT_CONNECT_WAIT
        self.ack_timeout = DEFAULT_ACK_TIMEOUT
        self.max_pub_acks_inflight = DEFAULT_MAX_PUB_ACKS_INFLIGHT
        self.lost_error: StanError | None = None

    # -- connect / close ---------------------------------------------------------------

    async def connect(
        self,
        cluster_id: str,
        client_id: str,
        nats: Client | None = None,
        url: str = "nats://127.0.0.1:4222",
        connect_timeout: float = DEFAULT_CONNECT_WAIT,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        max_pub_acks_inflight: int = DEFAULT_MAX_PUB_ACKS_INFLIGHT,
        ping_interval: float = DEFAULT_PING_INTERVAL,
        ping_max_out: int = DEFAULT_PING_MAX_OUT,
        discover_prefix: str = DEFAULT_DISCOVER_PREFIX,
        conn_lost_cb: Callable[[StanError], Any] | None = None,
        **nats_options: Any,
    ) -> None:
        """Connect (over ``nats``, or a new connection to ``url`` that this client owns)."""
        if not cluster_id:
            raise StanError("stan: cluster ID must be supplied")
        if not client_id:
            raise StanError("stan: client ID must be supplied")
        self._loop = asyncio.get_running_loop()
        self.cluster_id = cluster_id
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.ack_timeout = ack_timeout
        self.max_pub_acks_inflight = max(1, max_pub_acks_inflight)
        self._conn_lost_cb = conn_lost_cb
        self._pub_ack_room = asyncio.Event()
        self._pub_ack_room.set()
        if nats is None:
            nats_options.setdefault("max_reconnect_attempts", -1)
            nats_options.setdefault("reconnect_time_wait", 0.25)
            nats = await nats_connect(url, **nats_options)
            self._nc_owned = True
        self.nc = nats
        try:
            await self._handshake(discover_prefix, ping_interval, ping_max_out)
        except BaseException:
            await self._teardown()
            raise

    async def _handshake(self, discover_prefix: str, ping_interval: float,
                         ping_max_out: int) -> None:
        nc = self.nc
        hb_inbox = nc.new_inbox()
        self._internal.append(await nc.subscribe(hb_inbox, cb=self._on_heartbeat))
        self._ack_subject = f"{DEFAULT_ACK_PREFIX}.{self._nuid.next().decode()}"
        self._internal.append(await nc.subscribe(self._ack_subject, raw_cb=self._on_pub_ack))
        self._ping_inbox = nc.new_inbox()
        self._internal.append(await nc.subscribe(self._ping_inbox, cb=self._on_ping_response))
        self.conn_id = self._nuid.next()
        req = pb.ConnectRequest(
            clientID=self.client_id,
            heartbeatInbox=hb_inbox,
            protocol=PROTOCOL_ONE,
            connID=self.conn_id,
            pingInterval=max(1, math.ceil(ping_interval)),
            pingMaxOut=ping_max_out,
        )
        try:
            raw = await nc.request(f"{discover_prefix}.{self.cluster_id}",
                                   req.SerializeToString(), timeout=self.connect_timeout)
        except (nerr.TimeoutError, nerr.NoRespondersError) as exc:
            raise StanError(ERR_CONNECT_REQ_TIMEOUT) from exc
        resp = pb.ConnectResponse()
        resp.ParseFromString(raw.data)
        if resp.error:
            raise StanError(resp.error)
        self._pub_prefix = resp.pubPrefix
        cid = self.client_id.encode()
        self._pub_head = b"\n" + put_uvarint(len(cid)) + cid
        self._pub_tail = b"2" + put_uvarint(len(self.conn_id)) + self.conn_id
        self._sub_requests = resp.subRequests
        self._unsub_requests = resp.unsubRequests
        self._sub_close_requests = resp.subCloseRequests
        self._close_requests = resp.closeRequests
        if resp.protocol >= PROTOCOL_ONE and resp.pingInterval > 0:
            self._ping_requests = resp.pingRequests
            self._ping_interval = float(resp.pingInterval)
            self._ping_max_out = resp.pingMaxOut
            self._ping_bytes = pb.Ping(connID=self.conn_id).SerializeToString()
            self._ping_timer = self._loop.call_later(self._ping_interval, self._ping)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Tell the server we are leaving, then release everything (and an owned NATS conn)."""
        if self._closed:
            return
        err: StanError | None = None
        if self._close_requests and not self.nc.is_closed:
            err = await self._close_request(self.client_id)
        await self._teardown(StanError(ERR_CONNECTION_CLOSED))
        if err is not None:
            raise err

    async def close_client(self, client_id: str) -> None:
        """Ask the server to forget another client id of this application (e.g. one whose
        NATS connection was lost, which would otherwise stay registered, its subscriptions
        being delivered to, until its heartbeats fail). StanError if the server refuses
        (e.g. it does not know that id)."""
        if self._closed:
            raise StanError(ERR_CONNECTION_CLOSED)
        err = await self._close_request(client_id)
        if err is not None:
            raise err

    async def _close_request(self, client_id: str) -> StanError | None:
        req = pb.CloseRequest(clientID=client_id).SerializeToString()
        try:
            raw = await self.nc.request(self._close_requests, req, timeout=self.connect_timeout)
        except (nerr.TimeoutError, nerr.NoRespondersError):
            return StanError(ERR_CLOSE_REQ_TIMEOUT)
        except nerr.Error as exc:
            return StanError(str(exc))
        resp = pb.CloseResponse()
        resp.ParseFromString(raw.data)
        return StanError(resp.error) if resp.error else None

    async def _teardown(self, reason: StanError | None = None) -> None:
        self._closed = True
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        self._fail_pub_acks(reason or StanError(ERR_CONNECTION_CLOSED))
        for sub in list(self._subs.values()):
            sub._closed = True
        self._subs.clear()
        if self.nc is None:
            return
        if self._nc_owned:
            with contextlib.suppress(Exception):
                await self.nc.close()
        else:
            for s in self._internal:
                with contextlib.suppress(Exception):
                    await s.unsubscribe()
        self._internal = []

    def _fail_pub_acks(self, err: StanError) -> None:
        acks, self._pub_acks = self._pub_acks, {}
        for guid, pa in acks.items():
            self._resolve(guid, pa, err)
        if self._pub_ack_room is not None:
            self._pub_ack_room.set()
        self._note_drained()

    def lose(self, err: StanError) -> None:
        """The connection is gone (the server no longer knows it, or the NATS connection it
        runs on was lost): close without a CloseRequest, fail what is outstanding (PubAcks get
        `err`), tell the application."""
        if self._closed:
            return
        self.lost_error = err
        self._closed = True

        async def finish() -> None:
            await self._teardown(err)
            cb = self._conn_lost_cb
            if cb is not None:
                res = cb(err)
                if inspect.isawaitable(res):
                    await res

        self._loop.create_task(finish())

    # -- heartbeats and pings ----------------------------------------------------------

    async def _on_heartbeat(self, msg: Any) -> None:
        if msg.reply:
            with contextlib.suppress(nerr.Error):
                await self.nc.publish(msg.reply, b"")

    def _ping(self) -> None:
        self._ping_timer = None
        if self._closed:
            return
        self._ping_out += 1
        if self._ping_out > self._ping_max_out:
            self.lose(StanError(ERR_MAX_PINGS))
            return
        self._loop.create_task(self._send_ping())
        self._ping_timer = self._loop.call_later(self._ping_interval, self._ping)

    async def _send_ping(self) -> None:
        with contextlib.suppress(nerr.Error):
            await self.nc.publish(self._ping_requests, self._ping_bytes, reply=self._ping_inbox)

    async def _on_ping_response(self, msg: Any) -> None:
        if msg.data:
            resp = pb.PingResponse()
            try:
                resp.ParseFromString(msg.data)
            except DecodeError:
                return
            if resp.error:
                self.lose(StanError(resp.error))
                return
        self._ping_out = 0

    # -- publish -----------------------------------------------------------------------

    async def publish(self, subject: str, data: bytes = b"") -> str:
        """Publish and wait for the PubAck; returns the guid, raises :class:`StanError`."""
        fut: asyncio.Future[str] = self._loop.create_future()
        await self._publish(subject, data, fut, None)
        return await fut

    async def publish_async(self, subject: str, data: bytes = b"",
                            ack_handler: AckHandler | None = None, guid: str | None = None
                            ) -> str:
        """Publish without waiting for the PubAck; ``ack_handler(guid, error)`` gets it.

        Waits only while ``max_pub_acks_inflight`` PubAcks are outstanding. ``guid``: the
        message's id (unique among this client's outstanding ones), when the caller must know
        it before the PubAck can come; by default a fresh NUID.
        """
        return await self._publish(subject, data, None, ack_handler, guid)

    async def _publish(self, subject: str, data: bytes, fut: asyncio.Future[str] | None,
                       handler: AckHandler | None, guid: str | None = None) -> str:
        if self._closed:
            raise StanError(ERR_CONNECTION_CLOSED)
        if len(self._pub_acks) >= self.max_pub_acks_inflight:
            await self._wait_for_room()
        if guid is None:
            guid = self._nuid.next().decode()
        self._pub_acks[guid] = _PubAck(fut, handler, self._loop.time() + self.ack_timeout)
        if self._sweep_timer is None:
            self._sweep_timer = self._loop.call_later(self.ack_timeout, self._sweep)
        fields = self._pub_fields.get(subject)
        if fields is None:
            fields = self._pub_fields_of(subject)
        try:
            await self.nc.publish(fields[0], self._encode_pub_msg(guid, fields[1], data),
                                  reply=self._ack_subject)
        except nerr.Error as exc:
            self._pub_acks.pop(guid, None)
            self._note_drained()
            raise StanError(str(exc)) from exc
        return guid

    async def _wait_for_room(self) -> None:
        room = self._pub_ack_room
        assert room is not None
        while len(self._pub_acks) >= self.max_pub_acks_inflight:
            room.clear()
            await room.wait()
            if self._closed:
                raise StanError(ERR_CONNECTION_CLOSED)

    def _pub_fields_of(self, subject: str) -> tuple[str, bytes]:
        """The NATS subject a channel's PubMsgs go to, and the channel's encoded field."""
        if len(self._pub_fields) >= 1024:
            self._pub_fields.clear()
        raw = subject.encode()
        fields = (f"{self._pub_prefix}.{subject}", b"\x1a" + put_uvarint(len(raw)) + raw)
        self._pub_fields[subject] = fields
        return fields

    def _encode_pub_msg(self, guid: str, subject_field: bytes, data: bytes) -> bytes:
        """A PubMsg as protobuf encodes it (fields in order; empty data left out), without
        building a message object: publishing is the client's hot path."""
        raw = guid.encode()
        n = len(data)
        return b"".join((
            self._pub_head, b"\x12", _SMALL_VARINTS[len(raw)] if len(raw) < 128 else
            put_uvarint(len(raw)), raw, subject_field,
            (b"*" + (_SMALL_VARINTS[n] if n < 128 else put_uvarint(n))) if n else b"", data,
            self._pub_tail))

    def _on_pub_ack(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                    payload: bytes) -> None:
        # A PubAck is guid=1 (and error=2 when refused): a short guid alone is parsed here.
        n = len(payload)
        if n > 2 and payload[0] == 0x0A and payload[1] == n - 2:
            guid, error = payload[2:].decode(), ""
        else:
            ack = pb.PubAck()
            try:
                ack.ParseFromString(payload)
            except DecodeError:
                return
            guid, error = ack.guid, ack.error
        pa = self._pub_acks.pop(guid, None)
        if pa is None:
            return
        self._resolve(guid, pa, StanError(error) if error else None)
        room = self._pub_ack_room
        if room is not None and not room.is_set() and (
                len(self._pub_acks) < self.max_pub_acks_inflight):
            room.set()
        if not self._pub_acks:
            self._note_drained()

    def _resolve(self, guid: str, pa: _PubAck, err: StanError | None) -> None:
        if pa.fut is not None:
            if not pa.fut.done():
                if err is None:
                    pa.fut.set_result(guid)
                else:
                    pa.fut.set_exception(err)
        elif pa.handler is not None:
            try:
                res = pa.handler(guid, err)
                if inspect.isawaitable(res):
                    self._loop.create_task(_swallow(res))
            except Exception:  # an application error in its handler: not ours to raise
                pass

    def _sweep(self) -> None:
        """Fail the PubAcks that timed out; one timer for all of them."""
        self._sweep_timer = None
        now = self._loop.time()
        expired = []
        for guid, pa in self._pub_acks.items():
            if pa.deadline > now:
                break
            expired.append(guid)
        for guid in expired:
            pa = self._pub_acks.pop(guid)
            self._resolve(guid, pa, StanError(ERR_PUB_ACK_TIMEOUT))
        if expired and self._pub_ack_room is not None:
            self._pub_ack_room.set()
        self._note_drained()
        if self._pub_acks and not self._closed:
            first = next(iter(self._pub_acks.values()))
            self._sweep_timer = self._loop.call_later(max(first.deadline - now, 0.01),
                                                      self._sweep)

    def pub_acks_pending(self) -> int:
        return len(self._pub_acks)

    def _note_drained(self) -> None:
        if self._pub_acks or not self._pub_acks_drained:
            return
        waiters, self._pub_acks_drained = self._pub_acks_drained, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait_pub_acks(self) -> None:
        """Until no PubAck is outstanding: every message published so far was acknowledged,
        refused, or failed with a publish ack timeout (the handlers / futures have been told
        which). Ends within ``ack_timeout`` of the last publish."""
        if not self._pub_acks:
            return
        w: asyncio.Future[None] = self._loop.create_future()
        self._pub_acks_drained.append(w)
        await w

    # -- subscribe ---------------------------------------------------------------------

    async def subscribe(
        self,
        subject: str,
        cb: MsgHandler | None = None,
        queue: str = "",
        durable_name: str = "",
        start_at: str = "new_only",
        sequence: int | None = None,
        time: float | None = None,
        time_delta: float | None = None,
        deliver_all_available: bool = False,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        ack_wait: int = DEFAULT_ACK_WAIT,
        manual_acks: bool = False,
        pending_limits: int = 65536,
        time_delta_ns: int | None = None,
        raw_cb: RawHandler | None = None,
    ) -> Subscription:
        """Subscribe. Start at ``start_at`` ("new_only", "last_received", "first"), or at
        ``sequence=``, ``time=`` (Unix seconds) or ``time_delta=`` (seconds ago; or
        ``time_delta_ns=``, exact), or from the beginning with ``deliver_all_available=True``.

        ``raw_cb=fn``: ``fn(subject, reply, headers, payload)`` is called synchronously from the
        NATS read path with each delivery's encoded MsgProto (no :class:`Msg`, no task, no
        queue; ``cb`` is not used). Nothing is acknowledged for it: ack with
        :meth:`Subscription.ack_sequences`, or never (a subscription whose ``max_inflight``
        covers everything it will read and is then closed)."""
        if self._closed:
            raise StanError(ERR_CONNECTION_CLOSED)
        req = pb.SubscriptionRequest(
            clientID=self.client_id, subject=subject, qGroup=queue, durableName=durable_name,
            maxInFlight=max_inflight, ackWaitInSecs=int(ack_wait),
        )
        if deliver_all_available:
            start_at = "first"
        if sequence is not None:
            req.startPosition = pb.SequenceStart
            req.startSequence = sequence
        elif time_delta_ns is not None:
            req.startPosition = pb.TimeDeltaStart
            req.startTimeDelta = time_delta_ns
        elif time is not None or time_delta is not None:
            req.startPosition = pb.TimeDeltaStart
            if time_delta is None:
                assert time is not None
                time_delta = _now() - time
            req.startTimeDelta = int(time_delta * 1e9)
        else:
            if start_at not in START_POSITIONS:
                raise StanError(f"stan: unknown start position {start_at!r}")
            req.startPosition = START_POSITIONS[start_at]
        inbox = self.nc.new_inbox()
        if raw_cb is not None:
            sub = Subscription(self, subject, queue, durable_name, None, True, inbox)
            sub._queue = None
            sub._nats_sub = await self.nc.subscribe(inbox, raw_cb=raw_cb)
        else:
            sub = Subscription(self, subject, queue, durable_name, cb, manual_acks, inbox)
            sub._nats_sub = await self.nc.subscribe(inbox, cb=sub._on_msg,
                                                    pending_msgs_limit=pending_limits)
        req.inbox = inbox
        try:
            raw = await self.nc.request(self._sub_requests, req.SerializeToString(),
                                        timeout=self.connect_timeout)
        except (nerr.TimeoutError, nerr.NoRespondersError) as exc:
            await _unsub_quietly(sub._nats_sub)
            raise StanError(ERR_SUB_REQ_TIMEOUT) from exc
        except BaseException:
            await _unsub_quietly(sub._nats_sub)
            raise
        resp = pb.SubscriptionResponse()
        resp.ParseFromString(raw.data)
        if resp.error:
            await _unsub_quietly(sub._nats_sub)
            raise StanError(resp.error)
        sub.ack_inbox = resp.ackInbox
        self._subs[sub.ack_inbox] = sub
        return sub

    async def peek(self, subject: str, start_at: str = "first", *, sequence: int | None = None,
                   time_delta_ns: int | None = None) -> pb.MsgProto | None:
        """The first message a subscription starting there would be sent, or None.

        The protocol has no request for a channel's bounds: ``peek(ch, "last_received")`` is
        the channel's last message, ``peek(ch, "first")`` its first, ``time_delta_ns=`` the
        first stored at most that long ago. A subscription with ``max_inflight=1`` is removed at
        once; the server sends its initial message before it answers the removal, so the
        answer ends the wait (no timer involved).
        """
        got: list[bytes] = []

        def first(subj: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes) -> None:
            if not got:
                got.append(payload)

        sub = await self.subscribe(subject, start_at=start_at, sequence=sequence,
                                   time_delta_ns=time_delta_ns, max_inflight=1, raw_cb=first)
        await sub.unsubscribe()
        return pb.MsgProto.FromString(got[0]) if got else None

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._closed:
            with contextlib.suppress(StanError):
                await self.close()


def _now() -> float:
    return time.time()


async def _swallow(aw: Awaitable[Any]) -> None:
    with contextlib.suppress(Exception):
        await aw


async def _unsub_quietly(sub: Any) -> None:
    with contextlib.suppress(Exception):
        await sub.unsubscribe()


async def connect(cluster_id: str, client_id: str, **options: Any) -> StreamingClient:
    """Connect to a NATS Streaming server; see :meth:`StreamingClient.connect`."""
    sc = StreamingClient()
    await sc.connect(cluster_id, client_id, **options)
    return sc
