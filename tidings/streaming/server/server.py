"""The NATS Streaming server: a NATS client of a core server that implements the protocol.

It listens (with the cluster id ``<cid>``) on ``_STAN.discover.<cid>`` (connect requests) and
``.pings`` under it (client pings), ``_STAN.pub.<cid>.>`` (PubMsg), ``_STAN.sub.<cid>``,
``_STAN.unsub.<cid>``, ``_STAN.subclose.<cid>``, ``_STAN.close.<cid>``, and on
``_STAN.ack.<cid>.>``: every subscription's ackInbox is a fresh subject under it. A tidings
extension, the read-only bulk range fetch, answers on ``_TIDINGS.fetch.<cid>`` (:mod:`.fetch`).

Publishing is a group commit: the PubMsgs that arrive in one loop turn are stored together,
the store is synced once (in a worker thread, while the loop keeps storing the next batch),
and only then are their PubAcks sent and the messages delivered to subscribers. A message is
never delivered before it is durable, and a PubAck means the message is in the store under
its sync policy.

Redelivery runs one timer per subscription (not per message); the state machine follows the
reference server's (stalled subscriptions, queue group member choice, the transfer of a
leaving member's unacknowledged messages, durable queue group shadows, redelivery after a
restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import DecodeError

from ... import __version__
from ..pb import protocol_pb2 as pb
from ..stores import (
    ClientRecord,
    MsgRecord,
    Store,
    StoreError,
    StoreWriteError,
    SubRecord,
    UnknownSubscriptionError,
)
from . import errors as E
from .fetch import UNAVAILABLE, error_reply, fetch_subject, handle_fetch
from .options import (
    DEFAULT_ACKS_PREFIX,
    DEFAULT_CLOSE_PREFIX,
    DEFAULT_PUB_PREFIX,
    DEFAULT_SUB_CLOSE_PREFIX,
    DEFAULT_SUB_PREFIX,
    DEFAULT_UNSUB_PREFIX,
    StreamingOptions,
)
from .state import CLIENT_ID_RE, Channel, Client, QueueState, Sub, is_channel_name_valid

log = logging.getLogger("tidings.streaming")


class AnotherServerRunning(E.CannotStart):
    """A streaming server with our cluster id already answers on the discover subject."""


PROTOCOL_ONE = 1
_FETCH = 512  # messages read from the store per look-up when delivering
_PING_OK = pb.PingResponse().SerializeToString()
_PING_REPLACED = pb.PingResponse(error=E.PING_CLIENT_REPLACED).SerializeToString()
_EMPTY_SUB_RESPONSE = pb.SubscriptionResponse().SerializeToString()
_EMPTY_CLOSE_RESPONSE = pb.CloseResponse().SerializeToString()
# a PubAck with just a guid (field 1) of n < 128 bytes is b"\n" + bytes([n]) + guid
_PUBACK_HEADS = [b"\n" + bytes((n,)) for n in range(128)]
E_ROLLED_BACK = "store write failed: rolled back"

Handler = Callable[[str, str, bytes], None]


def _new_id() -> str:
    from ...client.nuid import NUID

    return NUID().next().decode()


class StreamingServer:
    """The streaming state machine over a :class:`Store`, talking through a NATS connection.

    ``conn`` is a :class:`~tidings.streaming.server.conn.StanConn` (or anything with its
    methods). Call :meth:`start` once the connection is up and :meth:`shutdown` to stop.
    """

    def __init__(self, opts: StreamingOptions, store: Store, conn: Any) -> None:
        self.opts = opts
        self.store = store
        self.conn = conn
        cid = opts.cluster_id
        self.server_id = _new_id()
        self.info = {
            "cluster_id": cid,
            "discovery": f"{opts.discover_prefix}.{cid}",
            "publish": f"{DEFAULT_PUB_PREFIX}.{cid}",
            "subscribe": f"{DEFAULT_SUB_PREFIX}.{cid}",
            "unsubscribe": f"{DEFAULT_UNSUB_PREFIX}.{cid}",
            "close": f"{DEFAULT_CLOSE_PREFIX}.{cid}",
            "sub_close": f"{DEFAULT_SUB_CLOSE_PREFIX}.{cid}",
            "acks": f"{DEFAULT_ACKS_PREFIX}.{cid}",
        }
        self.clients: dict[str, Client] = {}
        self.conn_ids: dict[bytes, Client] = {}
        self.channels: dict[str, Channel] = {}
        self.acks: dict[str, Sub] = {}
        self.start_time = time.time()
        self.state = "STANDALONE"
        self.ft: Any = None  # the FT group membership (ft.FaultTolerance) with --ft_group
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._dup_cids: set[str] = set()
        # PubMsgs of this loop turn by channel: ([(reply, data)], [(ack subject, guid)])
        self._pub_queue: dict[str, tuple[list[tuple[str, bytes]], list[tuple[str, str]]]] = {}
        self._pub_scheduled = False
        # publishes stored and waiting for the next sync, all in store epoch _waiting_epoch
        self._acks_waiting: list[tuple[str, str]] = []
        self._waiting_epoch = store.epoch
        self._unsynced: dict[Channel, int] = {}
        self._threaded_sync = store.kind != "memory"
        self._sync_inflight = False
        self._sync_scheduled = False
        self._dirty = False
        self._sync_idle: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._kick: dict[object, Channel] = {}
        # "sent" and "acked" events of subscriptions, written to the store once per loop turn
        self._sent_batch: dict[Sub, list[int]] = {}
        self._ack_batch: dict[Sub, list[int]] = {}
        self._events_scheduled = False
        self._scratch = pb.MsgProto()
        self._kick_scheduled = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._recovered: list[Sub] = []
        self._expire_timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._reads_failing = False  # a store read failed: deliveries wait for the store
        self._internal_subs: list[Any] = []
        self._extension_subs: list[Any] = []

    # ----------------------------------------------------------------------------------
    # lifecycle
    # ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._sync_idle = asyncio.Event()
        self._sync_idle.set()
        if self._threaded_sync:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="stan-sync")
        self._check_server_info()
        self._recover()
        self.store.on_available = self._store_available_threadsafe
        if not self.opts.ft_group:  # an FT group's active server holds the store's lock
            await self._ensure_standalone()
        info = self.info
        for subject, handler in (
            (info["discovery"], self._on_connect),
            (f"{info['publish']}.>", self._on_pub),
            (info["subscribe"], self._on_sub_request),
            (info["unsubscribe"], self._on_unsub_request),
            (info["sub_close"], self._on_sub_close_request),
            (info["close"], self._on_close_request),
            (f"{info['discovery']}.pings", self._on_client_ping),
            (f"{info['acks']}.>", self._on_ack),
        ):
            self._internal_subs.append(await self.conn.subscribe(subject, handler))
        # the tidings extensions, kept apart from the streaming protocol's subscriptions
        self._extension_subs.append(
            await self.conn.subscribe(fetch_subject(self.opts.cluster_id), self._on_fetch))
        await self.conn.flush()
        for client in self.clients.values():
            self._arm_hb(client)
        self._redeliver_on_startup()
        self._schedule_expiry()
        for ch in self.channels.values():
            self._maybe_start_delete_timer(ch)
        log.info(
            "Streaming server ready: cluster id %s, store %s, %d channel(s), %d client(s)",
            self.opts.cluster_id, self.store.kind, len(self.channels), len(self.clients),
        )

    async def shutdown(self) -> None:
        """Stop serving, wait for the pending group commit, close the store."""
        if self._closing:
            return
        self._closing = True
        self.state = "SHUTDOWN"
        if self.ft is not None:
            self.ft.stop()
        for isub in self._internal_subs + self._extension_subs:
            with contextlib.suppress(Exception):
                await isub.unsubscribe()
        self._internal_subs = []
        self._extension_subs = []
        for client in self.clients.values():
            if client.hb_timer is not None:
                client.hb_timer.cancel()
        for ch in self.channels.values():
            if ch.delete_timer is not None:
                ch.delete_timer.cancel()
            for sub in ch.all_subs():
                if sub.ack_timer is not None:
                    sub.ack_timer.cancel()
                    sub.ack_timer = None
        if self._expire_timer is not None:
            self._expire_timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._pub_queue:
            self._process_pubs()
        self._flush_sub_events()
        if self._sync_idle is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._sync_idle.wait(), 30)
        if self._acks_waiting or self._dirty:
            self._start_sync()
            if self._sync_idle is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._sync_idle.wait(), 30)
        with contextlib.suppress(Exception):
            await self.conn.flush()
        try:
            self.store.close()
        except StoreError as exc:
            log.error("closing the streaming store: %s", exc)
        except Exception:  # pragma: no cover - logged, nothing else to do at exit
            log.exception("closing the streaming store")
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        with contextlib.suppress(Exception):
            await self.conn.close()

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_fetch(self, subject: str, reply: str, data: bytes) -> None:
        """A bulk range fetch (a tidings extension, see :mod:`.fetch`): read-only."""
        if reply:
            max_payload = getattr(getattr(self.conn, "nc", None), "max_payload", 1 << 20)
            try:
                out = handle_fetch(self.store, data, max_payload, self._deliverable)
            except StoreError as exc:  # a database away: the reader may ask again
                out = error_reply(UNAVAILABLE, f"store read failed: {exc}")
            self.conn.publish(reply, out)

    def _deliverable(self, name: str) -> int:
        ch = self.channels.get(name)
        return 0 if ch is None else ch.deliverable

    def _check_server_info(self) -> None:
        info = self.store.server_info()
        stored = info.get("cluster_id")
        if stored and stored != self.opts.cluster_id:
            raise StoreError(
                f"the store belongs to cluster id {stored!r}, not {self.opts.cluster_id!r}"
            )
        if not stored:
            self.store.set_server_info(
                {"cluster_id": self.opts.cluster_id, **{k: v for k, v in self.info.items()
                                                        if k != "cluster_id"}}
            )

    async def _ensure_standalone(self) -> None:
        """Refuse to start when another streaming server answers for the cluster id."""
        req = pb.ConnectRequest(clientID=self.opts.cluster_id, heartbeatInbox=self.conn.new_inbox())
        try:
            raw = await self.conn.request(self.info["discovery"], req.SerializeToString(), 0.25)
        except Exception:
            return
        resp = pb.ConnectResponse()
        try:
            resp.ParseFromString(raw)
        except DecodeError as exc:
            raise E.CannotStart(
                "something other than a streaming server answers on "
                f"{self.info['discovery']}"
            ) from exc
        if resp.closeRequests:
            with contextlib.suppress(Exception):
                await self.conn.request(
                    resp.closeRequests,
                    pb.CloseRequest(clientID=self.opts.cluster_id).SerializeToString(), 0.25,
                )
        raise AnotherServerRunning(
            f"discovered another streaming server with cluster ID {self.opts.cluster_id!r}"
        )

    # ----------------------------------------------------------------------------------
    # recovery
    # ----------------------------------------------------------------------------------

    def _recover(self) -> None:
        store = self.store
        for rec in store.clients():
            client = Client(rec.client_id, rec.hb_inbox, bytes(rec.conn_id), rec.protocol,
                            rec.ping_interval, rec.ping_max_out)
            self.clients[client.id] = client
            if client.conn_id:
                self.conn_ids[client.conn_id] = client
        for name in store.channels():
            ch = Channel(name, self.opts.inactivity_for(name))
            self.channels[name] = ch
            _, last = store.first_last(name)
            ch.deliverable = ch.stored = last
            ch.last_activity = self._now()
            for rec in store.subs(name):
                sub = self._recover_sub(ch, rec)
                if sub is not None:
                    self._recovered.append(sub)

    def _recover_sub(self, ch: Channel, rec: SubRecord) -> Sub | None:
        sub = Sub.from_record(ch, rec)
        if sub.pending:
            sub.new_on_hold = True
            if len(sub.pending) >= sub.max_in_flight:
                sub.stalled = True
        if sub.is_plain_durable:
            sub.is_durable = True
            if sub.is_closed:
                self._offline_durable(ch, sub)
                return None
        client = self.clients.get(sub.client_id) if sub.client_id else None
        if client is not None:
            client.subs.append(sub)
        if client is not None or sub.is_durable:
            if client is None and sub.qgroup and sub.client_id:
                # a member of a durable queue group whose connection is gone
                self._store_delete_sub(ch, sub.id)
                return None
            if sub.is_plain_durable and client is None:
                self._offline_durable(ch, sub)
                return None
            self._add_to_channel(ch, sub)
            return None if sub.is_shadow else sub
        # a plain subscription of a client that is gone
        self._store_delete_sub(ch, sub.id)
        return None

    def _offline_durable(self, ch: Channel, sub: Sub) -> None:
        sub.saved_client_id = sub.client_id
        ch.durables[(sub.client_id, sub.durable_name)] = sub
        sub.client_id = ""

    def _redeliver_on_startup(self) -> None:
        queues: dict[QueueState, Channel] = {}
        for sub in self._recovered:
            sub.initialized = True
            if sub.removed:
                continue
            if sub.pending and sub.ack_timer is None:
                self._arm_ack_timer(sub, sub.ack_wait)
            self._ack_expired(sub, True)
            sub.new_on_hold = False
            if sub.qstate is not None:
                queues[sub.qstate] = sub.channel
            else:
                self._send_available(sub.channel, sub)
        for qs, ch in queues.items():
            qs.new_on_hold = False
            qs.rdlv = {}
            qs.stalled_count = sum(1 for s in qs.subs if s.stalled)
            self._send_available_queue(ch, qs)
        self._recovered = []

    # ----------------------------------------------------------------------------------
    # channels
    # ----------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.loop.time() if self.loop is not None else time.monotonic()

    def _lookup_or_create(self, name: str) -> Channel:
        ch = self.channels.get(name)
        if ch is not None:
            return ch
        self.store.create_channel(name)  # raises TooManyChannelsError
        ch = Channel(name, self.opts.inactivity_for(name))
        _, last = self.store.first_last(name)
        ch.deliverable = ch.stored = last
        ch.last_activity = self._now()
        self.channels[name] = ch
        self._maybe_start_delete_timer(ch)
        return ch

    def _maybe_start_delete_timer(self, ch: Channel) -> None:
        if ch.max_inactivity <= 0 or ch.deleted or self._closing or self.loop is None:
            return
        if ch.has_active_subs():
            if ch.delete_timer is not None:
                ch.delete_timer.cancel()
                ch.delete_timer = None
            return
        if ch.delete_timer is None:
            due = ch.last_activity + ch.max_inactivity - self._now()
            ch.delete_timer = self.loop.call_later(max(due, 0.0), self._check_delete, ch)

    def _check_delete(self, ch: Channel) -> None:
        ch.delete_timer = None
        if ch.deleted or ch.has_active_subs() or self.channels.get(ch.name) is not ch:
            return
        elapsed = self._now() - ch.last_activity
        if elapsed < ch.max_inactivity:
            ch.delete_timer = self.loop.call_later(
                ch.max_inactivity - elapsed, self._check_delete, ch
            )
            return
        if ch in self._unsynced or ch.name in self._pub_queue:
            ch.delete_timer = self.loop.call_later(0.1, self._check_delete, ch)
            return
        self._flush_sub_events()
        for sub in ch.all_subs():
            self._drop_sub_state(sub)
        ch.deleted = True
        del self.channels[ch.name]
        try:
            self.store.delete_channel(ch.name)
        except StoreError:
            log.exception("deleting channel %r", ch.name)
        self._mark_dirty()
        log.info("Channel %r has been deleted", ch.name)

    def _drop_sub_state(self, sub: Sub) -> None:
        sub.removed = True
        if sub.ack_timer is not None:
            sub.ack_timer.cancel()
            sub.ack_timer = None
        self.acks.pop(sub.ack_inbox, None)

    # ----------------------------------------------------------------------------------
    # connect, ping, close
    # ----------------------------------------------------------------------------------

    def _on_connect(self, subject: str, reply: str, data: bytes) -> None:
        req = pb.ConnectRequest()
        try:
            req.ParseFromString(data)
            ok = bool(req.heartbeatInbox)
        except DecodeError:
            ok = False
        if not ok:
            self._connect_err(reply, E.ERR_INVALID_CONN_REQ)
            return
        if not CLIENT_ID_RE.match(req.clientID):
            self._connect_err(reply, E.ERR_INVALID_CLIENT_ID)
            return
        old = self.clients.get(req.clientID)
        if old is not None or req.clientID in self._dup_cids:
            if req.clientID in self._dup_cids:
                self._connect_err(reply, E.ERR_INVALID_CLIENT)
                return
            self._dup_cids.add(req.clientID)
            self._spawn(self._connect_dup(req, reply, old))
            return
        self._finish_connect(req, reply, replace_old=False)

    async def _connect_dup(self, req: pb.ConnectRequest, reply: str, old: Client | None) -> None:
        try:
            alive = False
            if old is not None:
                try:
                    await self.conn.request(old.hb_inbox, b"", self.opts.dup_cid_timeout)
                    alive = True
                except Exception:
                    alive = False
            if alive:
                self._connect_err(reply, E.ERR_INVALID_CLIENT)
            else:
                self._finish_connect(req, reply, replace_old=True)
        finally:
            self._dup_cids.discard(req.clientID)

    def _finish_connect(self, req: pb.ConnectRequest, reply: str, replace_old: bool) -> None:
        if replace_old:
            self._close_client(req.clientID)
        if req.clientID in self.clients:
            self._connect_err(reply, E.ERR_INVALID_CLIENT)
            return
        client = Client(req.clientID, req.heartbeatInbox, bytes(req.connID), req.protocol,
                        req.pingInterval, req.pingMaxOut)
        try:
            self.store.add_client(ClientRecord(client.id, client.hb_inbox, client.conn_id,
                                               client.protocol, client.ping_interval,
                                               client.ping_max_out))
        except StoreError as exc:
            self._connect_err(reply, str(exc))
            return
        self._mark_dirty()
        self.clients[client.id] = client
        if client.conn_id:
            self.conn_ids[client.conn_id] = client
        self._arm_hb(client)
        info = self.info
        resp = pb.ConnectResponse(
            pubPrefix=info["publish"],
            subRequests=info["subscribe"],
            unsubRequests=info["unsubscribe"],
            subCloseRequests=info["sub_close"],
            closeRequests=info["close"],
        )
        if req.protocol >= PROTOCOL_ONE:
            resp.protocol = PROTOCOL_ONE
            resp.pingRequests = f"{info['discovery']}.pings"
            resp.pingInterval = req.pingInterval
            resp.pingMaxOut = req.pingMaxOut
        log.debug("[Client:%s] %s (inbox %s)", client.id,
                  "Replaced old client" if replace_old else "Connected", client.hb_inbox)
        self._publish(reply, resp.SerializeToString())

    def _connect_err(self, reply: str, err: str) -> None:
        self._publish(reply, pb.ConnectResponse(error=err).SerializeToString())

    def _on_client_ping(self, subject: str, reply: str, data: bytes) -> None:
        if not data:
            return
        ping = pb.Ping()
        try:
            ping.ParseFromString(data)
        except DecodeError:
            return
        client = self.conn_ids.get(bytes(ping.connID))
        if client is None:
            self._publish(reply, _PING_REPLACED)
            return
        if client.fhb > 0 and client.hb_task is None:
            # it is alive after all: heartbeat it now to clear the failures
            if client.hb_timer is not None:
                client.hb_timer.cancel()
            client.hb_timer = self.loop.call_later(0.001, self._hb_fire, client)
        self._publish(reply, _PING_OK)

    def _on_close_request(self, subject: str, reply: str, data: bytes) -> None:
        req = pb.CloseRequest()
        try:
            req.ParseFromString(data)
        except DecodeError:
            self._publish(reply, pb.CloseResponse(error=E.ERR_INVALID_CLOSE_REQ).SerializeToString())
            return
        err = self._close_client(req.clientID)
        if err:
            self._publish(reply, pb.CloseResponse(error=err).SerializeToString())
        else:
            self._publish(reply, _EMPTY_CLOSE_RESPONSE)

    def _close_client(self, client_id: str) -> str:
        client = self.clients.pop(client_id, None)
        if client is None:
            log.debug("Unknown client %r in close request", client_id)
            return E.ERR_UNKNOWN_CLIENT
        client.closed = True
        if client.conn_id and self.conn_ids.get(client.conn_id) is client:
            del self.conn_ids[client.conn_id]
        if client.hb_timer is not None:
            client.hb_timer.cancel()
            client.hb_timer = None
        if client.hb_task is not None:
            client.hb_task.cancel()
            client.hb_task = None
        with contextlib.suppress(StoreError):
            self.store.delete_client(client_id)
        subs, client.subs = client.subs, []
        for sub in subs:
            ch = sub.channel
            if ch.deleted:
                continue
            self._remove_sub(ch, sub, unsubscribe=False)
            self._maybe_start_delete_timer(ch)
        self._mark_dirty()
        log.debug("[Client:%s] Closed", client_id)
        return ""

    # --- heartbeats ----------------------------------------------------------------------

    def _arm_hb(self, client: Client) -> None:
        if self._closing or self.opts.hb_interval <= 0:
            return
        if client.hb_timer is not None:
            client.hb_timer.cancel()
        client.hb_timer = self.loop.call_later(self.opts.hb_interval, self._hb_fire, client)

    def _hb_fire(self, client: Client) -> None:
        client.hb_timer = None
        if client.closed or self._closing or client.hb_task is not None:
            return
        task = self.loop.create_task(self._hb_check(client))
        client.hb_task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hb_check(self, client: Client) -> None:
        try:
            try:
                await self.conn.request(client.hb_inbox, b"", self.opts.hb_timeout)
                ok = True
            except asyncio.CancelledError:
                raise
            except Exception:
                ok = False
        finally:
            client.hb_task = None
        if client.closed:
            return
        had_failed = client.fhb > 0
        if ok:
            client.fhb = 0
        else:
            client.fhb += 1
            if client.fhb > self.opts.hb_fail_count:
                log.info("[Client:%s] Timed out on heartbeats", client.id)
                if self.clients.get(client.id) is client:
                    self._close_client(client.id)
                return
        has_failed = client.fhb > 0
        if had_failed != has_failed:
            for sub in client.subs:
                sub.has_failed_hb = has_failed
        self._arm_hb(client)

    # ----------------------------------------------------------------------------------
    # publish and the group commit
    # ----------------------------------------------------------------------------------

    def _on_pub(self, subject: str, reply: str, data: bytes) -> None:
        pm = pb.PubMsg()
        try:
            pm.ParseFromString(data)
        except DecodeError:
            self._pub_err(reply, "", E.ERR_INVALID_PUB_REQ)
            return
        self.in_msgs += 1
        self.in_bytes += len(data)
        guid = pm.guid
        channel = pm.subject
        if not guid or not (channel in self.channels or is_channel_name_valid(channel)):
            self._pub_err(reply, guid, E.ERR_INVALID_PUB_REQ)
            return
        conn_id = pm.connID
        if conn_id:
            valid = conn_id in self.conn_ids
        else:
            valid = pm.clientID in self.clients
        if not valid:
            self._pub_err(reply, guid, E.ERR_INVALID_PUB_REQ)
            return
        g = self._pub_queue.get(channel)
        if g is None:
            g = self._pub_queue[channel] = ([], [])
        g[0].append((pm.reply, pm.data))
        g[1].append((reply, guid))
        if not self._pub_scheduled:
            self._pub_scheduled = True
            self.loop.call_soon(self._process_pubs)

    def _pub_err(self, reply: str, guid: str, err: str) -> None:
        if reply:
            self._publish(reply, pb.PubAck(guid=guid, error=err).SerializeToString())

    def _process_pubs(self) -> None:
        self._pub_scheduled = False
        groups, self._pub_queue = self._pub_queue, {}
        if not groups:
            return
        store = self.store
        now = self._now()
        for name, (msgs, acks) in groups.items():
            try:
                ch = self._lookup_or_create(name)
                seqs = store.store_msgs(name, msgs)
            except StoreWriteError as exc:
                # The store rolled back every message not yet synced, this one's too.
                log.error("streaming %s", exc)
                self._nack_waiting(f"stan: {exc}", store.epoch)
                for reply, guid in acks:
                    self._pub_err(reply, guid, f"stan: {exc}")
                continue
            except StoreError as exc:
                for reply, guid in acks:
                    self._pub_err(reply, guid, str(exc))
                continue
            stored_in = store.last_store_epoch
            if stored_in != self._waiting_epoch:
                # A rollback came since the others were stored: what was waiting is gone.
                # These wait in the epoch they were stored in, not in store.epoch, which a
                # failing sync may have moved on again since (and then they are gone too).
                self._nack_waiting(f"stan: {E_ROLLED_BACK}", stored_in)
            ch.stored = seqs[-1]
            ch.last_activity = now
            if self._threaded_sync:
                self._unsynced[ch] = ch.stored
                self._acks_waiting.extend(acks)
            else:
                ch.deliverable = ch.stored
                self._deliver(ch)
                self._send_pub_acks(acks)
        if self._threaded_sync:
            self._request_sync()

    def _nack_waiting(self, err: str, epoch: int) -> None:
        """The store rolled back what was not synced: nack the publishes waiting for a sync.

        What waits from now on was stored in store epoch ``epoch``.
        """
        waiting, self._acks_waiting = self._acks_waiting, []
        for reply, guid in waiting:
            self._pub_err(reply, guid, err)
        self._unsynced = {}
        self._waiting_epoch = epoch

    def _send_pub_acks(self, acks: list[tuple[str, str]]) -> None:
        heads = _PUBACK_HEADS
        out = []
        for reply, guid in acks:
            if not reply:
                continue
            g = guid.encode()
            if len(g) < 128:
                out.append((reply, heads[len(g)] + g))
            else:
                out.append((reply, pb.PubAck(guid=guid).SerializeToString()))
        if out:
            self.conn.publish_many(out)

    def _mark_dirty(self) -> None:
        if self._threaded_sync:
            self._dirty = True
            self._request_sync()

    def _request_sync(self) -> None:
        if not self._sync_scheduled and not self._sync_inflight:
            self._sync_scheduled = True
            self.loop.call_soon(self._start_sync)

    def _start_sync(self) -> None:
        self._sync_scheduled = False
        if self._sync_inflight or self._executor is None:
            return
        if self._sent_batch or self._ack_batch:
            self._flush_sub_events()
        if not (self._acks_waiting or self._unsynced or self._dirty):
            return
        acks, self._acks_waiting = self._acks_waiting, []
        chans, self._unsynced = self._unsynced, {}
        epoch = self._waiting_epoch
        self._dirty = False
        self._sync_inflight = True
        assert self._sync_idle is not None
        self._sync_idle.clear()
        fut = self.loop.run_in_executor(self._executor, self.store.sync)
        fut.add_done_callback(lambda f: self._sync_done(f, acks, chans, epoch))

    def _sync_done(self, fut: asyncio.Future[int], acks: list[tuple[str, str]],
                   chans: dict[Channel, int], epoch: int) -> None:
        """``acks`` are the publishes the sync was to cover, stored in store epoch ``epoch``."""
        self._sync_inflight = False
        exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        # Compare with the epoch the sync covered, not the store's epoch now: a write that
        # failed on this loop after the commit (before this callback ran) rolled back only
        # what came after it, and what the sync committed must still be acknowledged.
        if exc is None and fut.result() != epoch:
            exc = StoreWriteError(E_ROLLED_BACK)  # rolled back before this sync wrote them
        if exc is not None:
            log.error("streaming store sync failed: %s", exc)
            err = exc if isinstance(exc, StoreWriteError) else f"store sync failed: {exc}"
            for reply, guid in acks:
                self._pub_err(reply, guid, f"stan: {err}")
            if self.store.epoch != self._waiting_epoch:
                self._nack_waiting(f"stan: {err}", self.store.epoch)
        else:
            for ch, last in chans.items():
                if last > ch.deliverable:
                    ch.deliverable = last
                if not ch.deleted:
                    self._deliver(ch)
            self._send_pub_acks(acks)
        if self._acks_waiting or self._unsynced or self._dirty:
            self._start_sync()
        else:
            assert self._sync_idle is not None
            self._sync_idle.set()

    # ----------------------------------------------------------------------------------
    # a store whose database was away
    # ----------------------------------------------------------------------------------

    def _store_available_threadsafe(self) -> None:
        """The store's on_available callback (another thread): its database is back."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to resume
            self.loop.call_soon_threadsafe(self._store_available)

    def _store_available(self) -> None:
        """Write what waited for the database and resume what a failed read stopped."""
        if self._closing:
            return
        log.info("streaming store available again")
        self._mark_dirty()
        if self._reads_failing:
            self._reads_failing = False
            for ch in list(self.channels.values()):
                if ch.deleted:
                    continue
                self._deliver(ch)
                for sub in ch.all_subs():  # redeliveries a failed read put off
                    if sub.pending and sub.client_id and not sub.removed:
                        self._arm_ack_timer(sub, 0.0)

    def _read_failed(self, exc: StoreError) -> None:
        """A delivery could not read the store: it stops there, resumed when the store is
        available again (redeliveries retry at their ack wait). Logged once per outage."""
        if not self._reads_failing:
            self._reads_failing = True
            log.error("streaming store read failed, deliveries wait: %s", exc)

    # ----------------------------------------------------------------------------------
    # delivery
    # ----------------------------------------------------------------------------------

    def _publish(self, subject: str, data: bytes) -> None:
        if subject:
            self.conn.publish(subject, data)

    def _deliver(self, ch: Channel) -> None:
        for sub in ch.psubs:
            if not sub.stalled:
                self._send_available(ch, sub)
        for qs in ch.qsubs.values():
            self._send_available_queue(ch, qs)

    def _send_available(self, ch: Channel, sub: Sub) -> None:
        """Send a plain subscription what it may have (the delivery hot path, inlined)."""
        if sub.stalled or not sub.initialized or sub.new_on_hold or not sub.client_id:
            return
        limit = ch.deliverable
        start = sub.last_sent + 1
        if start > limit:
            return
        pending = sub.pending
        mif = sub.max_in_flight
        get_msgs = self.store.get_msgs
        publish = self.conn.publish
        inbox = sub.inbox
        p = self._scratch
        p.subject = ch.name
        serialize = p.SerializeToString
        expire = self.loop.time() + sub.ack_wait
        seqs = self._events(self._sent_batch, sub)
        out_bytes = sent = 0
        while start <= limit:
            room = mif - len(pending)
            if room <= 0:
                sub.stalled = True
                break
            try:
                msgs = get_msgs(ch.name, start, min(room, limit - start + 1, _FETCH))
            except StoreError as exc:
                self._read_failed(exc)
                break
            if not msgs:
                break
            for m in msgs:
                seq = m.seq
                p.sequence = seq
                p.reply = m.reply
                p.data = m.data
                p.timestamp = m.timestamp
                payload = serialize()
                publish(inbox, payload)
                out_bytes += len(payload)
                pending[seq] = expire
                seqs.append(seq)
            sent += len(msgs)
            start = msgs[-1].seq + 1
            sub.last_sent = start - 1
            if len(pending) >= mif:
                sub.stalled = True
                break
        if sent:
            self.out_msgs += sent
            self.out_bytes += out_bytes
            if sub.ack_timer is None:
                self._arm_ack_timer(sub, sub.ack_wait)
            if self._threaded_sync:
                self._dirty = True

    def _send_available_queue(self, ch: Channel, qs: QueueState) -> None:
        if not qs.subs or qs.new_on_hold:
            return
        limit = ch.deliverable
        start = qs.last_sent + 1
        while qs.stalled_count < len(qs.subs) and start <= limit:
            try:
                msgs = self.store.get_msgs(ch.name, start, min(limit - start + 1, _FETCH))
            except StoreError as exc:
                self._read_failed(exc)
                return
            if not msgs:
                return
            for m in msgs:
                if qs.stalled_count >= len(qs.subs):
                    return
                if m.seq - 1 > qs.last_sent:
                    qs.last_sent = m.seq - 1  # skipped over messages dropped by limits
                _, sent = self._send_to_queue(qs, m, False, False)
                if not sent:
                    return
            start = msgs[-1].seq + 1

    def _best_queue_sub(self, qs: QueueState) -> Sub | None:
        subs = qs.subs
        best: Sub | None = None
        least = 1 << 62
        for s in subs:
            if not s.stalled and not s.has_failed_hb:
                n = len(s.pending)
                if n < least:
                    least = n
                    best = s
        if best is None and subs:
            best = subs[0]
        if len(subs) > 1 and best is subs[0]:
            subs.append(subs.pop(0))
        return best

    def _send_to_queue(self, qs: QueueState, m: MsgRecord, redelivered: bool,
                       force: bool) -> tuple[Sub | None, bool]:
        sub = self._best_queue_sub(qs)
        if sub is None:
            return None, False
        was_stalled = sub.stalled
        sent, _ = self._send_msg(sub, m, redelivered, force)
        if not force and not was_stalled and sub.stalled:
            qs.stalled_count += 1
        if sent and sub.last_sent > qs.last_sent:
            qs.last_sent = sub.last_sent
        return sub, sent

    def _send_msg(self, sub: Sub, m: MsgRecord, redelivered: bool,
                  force: bool) -> tuple[bool, bool]:
        """Send one message to a subscription: (sent, may send more)."""
        if not sub.initialized or not sub.client_id or (sub.new_on_hold and not redelivered):
            return False, False
        pending = sub.pending
        n = len(pending)
        if not force and n >= sub.max_in_flight:
            sub.stalled = True
            return False, False
        seq = m.seq
        p = self._scratch
        p.sequence = seq
        p.subject = m.subject
        p.reply = m.reply
        p.data = m.data
        p.timestamp = m.timestamp
        if redelivered:
            counts = sub.qstate.rdlv if sub.qstate is not None else sub.rdlv
            count = counts.get(seq, 0) + 1
            if count > 0xFFFFFFFF:
                count = 1
            counts[seq] = count
            p.redelivered = True
            p.redeliveryCount = count
            payload = p.SerializeToString()
            p.redelivered = False
            p.redeliveryCount = 0
        else:
            payload = p.SerializeToString()
        self.conn.publish(sub.inbox, payload)
        self.out_msgs += 1
        self.out_bytes += len(payload)
        if sub.ack_timer is None:
            self._arm_ack_timer(sub, sub.ack_wait)
        expire = self.loop.time() + sub.ack_wait
        if seq in pending:
            del pending[seq]  # re-insert: the dict stays (mostly) in expiry order
            pending[seq] = expire
            return True, True
        self._events(self._sent_batch, sub).append(seq)
        if seq > sub.last_sent:
            sub.last_sent = seq
        pending[seq] = expire
        if not force and n + 1 >= sub.max_in_flight:
            sub.stalled = True
            return True, False
        return True, True

    def _events(self, batches: dict[Sub, list[int]], sub: Sub) -> list[int]:
        """This loop turn's list of sent (or acked) sequences of `sub`, written to the store
        once at the end of the turn."""
        seqs = batches.get(sub)
        if seqs is None:
            seqs = batches[sub] = []
            if not self._events_scheduled:
                self._schedule_events()
        return seqs

    def _schedule_events(self) -> None:
        self._events_scheduled = True
        self.loop.call_soon(self._flush_sub_events)

    def _flush_sub_events(self) -> None:
        """Write the sent and acked events collected in this loop turn to the store."""
        self._events_scheduled = False
        if not self._sent_batch and not self._ack_batch:
            return
        store = self.store
        sent, self._sent_batch = self._sent_batch, {}
        acks, self._ack_batch = self._ack_batch, {}
        for sub, seqs in sent.items():
            if not seqs:
                continue
            try:
                store.add_pending_many(sub.channel.name, sub.id, seqs)
            except StoreError as exc:
                log.error("recording messages sent to subid=%d: %s", sub.id, exc)
        for sub, seqs in acks.items():
            try:
                store.ack_many(sub.channel.name, sub.id, seqs)
            except StoreError as exc:
                log.error("recording acks of subid=%d: %s", sub.id, exc)
        if self._threaded_sync:
            self._dirty = True
            if not self._sync_scheduled and not self._sync_inflight:
                self._request_sync()

    # ----------------------------------------------------------------------------------
    # acks and redelivery
    # ----------------------------------------------------------------------------------

    def _on_ack(self, subject: str, reply: str, data: bytes) -> None:
        sub = self.acks.get(subject)
        if sub is None:
            return
        ack = pb.Ack()
        try:
            ack.ParseFromString(data)
        except DecodeError:
            return
        if ack.subject != sub.channel.name:
            return
        seq = ack.sequence
        pending = sub.pending
        if seq not in pending or sub.qstate is not None:
            self._process_ack(sub, seq, True)
            return
        # the common case, inlined: a plain subscription acknowledges a pending message
        del pending[seq]
        self._events(self._ack_batch, sub).append(seq)
        if sub.rdlv:
            sub.rdlv.pop(seq, None)
        if sub.stalled and len(pending) < sub.max_in_flight:
            sub.stalled = False
            if sub not in self._kick:
                self._kick[sub] = sub.channel
                if not self._kick_scheduled:
                    self._kick_scheduled = True
                    self.loop.call_soon(self._run_kicks)

    def _process_ack(self, sub: Sub, seq: int, from_user: bool) -> None:
        qs = sub.qstate
        ch = sub.channel
        if seq in sub.pending:
            if not self._store_ack(ch, sub, seq):
                return
            del sub.pending[seq]
            if from_user:
                (qs.rdlv if qs is not None else sub.rdlv).pop(seq, None)
        elif qs is not None and from_user:
            for other in qs.subs:
                if other is not sub and seq in other.pending:
                    del other.pending[seq]
                    self._store_ack(ch, other, seq)
                    qs.rdlv.pop(seq, None)
                    break
        if sub.stalled and len(sub.pending) < sub.max_in_flight:
            sub.stalled = False
            if qs is not None and qs.stalled_count > 0:
                qs.stalled_count -= 1
            key: object = qs if qs is not None else sub
            if key not in self._kick:
                self._kick[key] = ch
                if not self._kick_scheduled:
                    self._kick_scheduled = True
                    self.loop.call_soon(self._run_kicks)

    def _store_ack(self, ch: Channel, sub: Sub, seq: int) -> bool:
        self._events(self._ack_batch, sub).append(seq)
        return True

    def _run_kicks(self) -> None:
        self._kick_scheduled = False
        kicks, self._kick = self._kick, {}
        for key, ch in kicks.items():
            if ch.deleted:
                continue
            if isinstance(key, QueueState):
                self._send_available_queue(ch, key)
            else:
                assert isinstance(key, Sub)
                if not key.removed:
                    self._send_available(ch, key)

    def _arm_ack_timer(self, sub: Sub, delay: float) -> None:
        if sub.ack_timer is not None:
            sub.ack_timer.cancel()
        if self._closing:
            sub.ack_timer = None
            return
        sub.ack_timer = self.loop.call_later(max(delay, 0.0), self._ack_expired, sub, False)

    def _ack_expired(self, sub: Sub, is_startup: bool) -> None:
        """Redeliver every unacknowledged message whose ack wait is over, re-arm the timer."""
        if sub.ack_timer is not None and not is_startup:
            sub.ack_timer = None
        if sub.removed or self._closing:
            return
        pending = sub.pending
        if not pending:
            return
        qs = sub.qstate
        if qs is None and sub.has_failed_hb:
            self._arm_ack_timer(sub, sub.ack_wait)
            return
        ch = sub.channel
        if ch.deleted:
            return
        try:
            self._redeliver_due(sub, ch, is_startup)
        except StoreError as exc:  # the message could not be read: try again later
            self._read_failed(exc)
            if not sub.removed:
                self._arm_ack_timer(sub, sub.ack_wait)
            return
        if sub.removed:
            return
        if sub.pending:
            nxt = min(sub.pending.values())
            delay = nxt - self.loop.time()
            self._arm_ack_timer(sub, delay if delay > 0 else sub.ack_wait)
        elif sub.ack_timer is not None:
            sub.ack_timer.cancel()
            sub.ack_timer = None

    def _redeliver_due(self, sub: Sub, ch: Channel, is_startup: bool) -> None:
        """Resend the messages of ``sub`` whose ack wait is over (or nearly)."""
        pending = sub.pending
        qs = sub.qstate
        now = self.loop.time()
        if any(exp == 0.0 for exp in pending.values()):
            # recovered after a restart: the expiry counts from the message's timestamp
            wall = time.time_ns()
            for seq, exp in list(pending.items()):
                if exp == 0.0:
                    m = self.store.lookup(ch.name, seq)
                    ts = m.timestamp if m is not None else wall
                    pending[seq] = now + (ts - wall) / 1e9 + sub.ack_wait
        limit = now + 0.015
        due = sorted((exp, seq) for seq, exp in pending.items() if exp <= limit)
        for _, seq in due:
            if seq not in sub.pending:
                continue
            m = self.store.lookup(ch.name, seq)
            if m is None:
                # dropped by limits: ack it so that it does not come back after a restart
                self._process_ack(sub, seq, False)
                (qs.rdlv if qs is not None else sub.rdlv).pop(seq, None)
                continue
            if qs is not None and not is_startup:
                pick, sent = self._send_to_queue(qs, m, True, True)
                if pick is None:
                    log.error("[Client:%s] no queue member for redelivery of subid=%d",
                              sub.client_id, sub.id)
                    break
                if pick is not sub and sent:
                    self._process_ack(sub, seq, False)
            else:
                self._send_msg(sub, m, True, True)

    def _durable_redelivery(self, sub: Sub) -> None:
        """Resend what a resumed durable (or rejoining queue member) had not acknowledged."""
        ch = sub.channel
        if sub.client_id in self.clients:
            for seq in sorted(sub.pending):
                try:
                    m = self.store.lookup(ch.name, seq)
                except StoreError as exc:  # the ack timer resends the rest later
                    self._read_failed(exc)
                    break
                if m is None:
                    self._process_ack(sub, seq, False)
                    continue
                if seq in sub.pending:
                    self._send_msg(sub, m, True, True)
        sub.new_on_hold = False

    # ----------------------------------------------------------------------------------
    # subscriptions
    # ----------------------------------------------------------------------------------

    def _sub_err(self, reply: str, err: str) -> None:
        if reply:
            self._publish(reply, pb.SubscriptionResponse(error=err).SerializeToString())

    def _on_sub_request(self, subject: str, reply: str, data: bytes) -> None:
        sr = pb.SubscriptionRequest()
        try:
            sr.ParseFromString(data)
        except DecodeError:
            self._sub_err(reply, E.ERR_INVALID_SUB_REQ)
            return
        if not sr.clientID:
            self._sub_err(reply, E.ERR_MISSING_CLIENT)
            return
        if sr.ackWaitInSecs <= 0:
            self._sub_err(reply, E.ERR_INVALID_ACK_WAIT)
            return
        if sr.maxInFlight <= 0:
            self._sub_err(reply, E.ERR_INVALID_MAX_INFLIGHT)
            return
        if not (pb.NewOnly <= sr.startPosition <= pb.First):
            self._sub_err(reply, E.ERR_INVALID_START)
            return
        if not is_channel_name_valid(sr.subject):
            self._sub_err(reply, E.ERR_INVALID_SUBJECT)
            return
        client = self.clients.get(sr.clientID)
        if client is None:
            self._sub_err(reply, E.ERR_UNKNOWN_CLIENT)
            return
        try:
            ch = self._lookup_or_create(sr.subject)
        except StoreError as exc:
            self._sub_err(reply, str(exc))
            return
        try:
            sub = self._process_sub(ch, client, sr)
        except _SubError as exc:
            self._sub_err(reply, str(exc))
            self._maybe_start_delete_timer(ch)
            return
        self._publish(reply, pb.SubscriptionResponse(ackInbox=sub.ack_inbox).SerializeToString())
        sub.initialized = True
        if ch.delete_timer is not None:
            ch.delete_timer.cancel()
            ch.delete_timer = None
        self.loop.call_soon(self._start_sub, sub)

    def _start_sub(self, sub: Sub) -> None:
        if sub.removed or not sub.client_id:
            return
        ch = sub.channel
        if sub.is_durable:
            self._durable_redelivery(sub)
        if sub.qstate is not None:
            self._send_available_queue(ch, sub.qstate)
        else:
            self._send_available(ch, sub)

    def _process_sub(self, ch: Channel, client: Client, sr: pb.SubscriptionRequest) -> Sub:
        self._flush_sub_events()
        sub: Sub | None = None
        is_durable = False
        set_start = True
        qgroup = sr.qGroup
        durable_name = sr.durableName
        if qgroup:
            if durable_name:
                if ":" in durable_name:
                    raise _SubError(E.ERR_INVALID_DUR_NAME)
                is_durable = True
                qgroup = f"{durable_name}:{qgroup}"
                durable_name = ""
            qs = ch.qsubs.get(qgroup)
            if qs is not None:
                if qs.shadow is not None:
                    sub = qs.shadow
                    qs.shadow = None
                    qs.subs.append(sub)
                set_start = False
        elif durable_name:
            sub = ch.durables.get((sr.clientID, durable_name))
            if sub is not None:
                if sub.client_id:
                    raise _SubError(E.ERR_DUP_DURABLE)
                set_start = False
            is_durable = True
        ack_inbox = f"{self.info['acks']}.{_new_id()}"
        if sub is not None:
            # a durable resuming, or the first member rejoining a durable queue group
            sub.ack_inbox = ack_inbox
            sub.client_id = sr.clientID
            sub.saved_client_id = ""
            sub.inbox = sr.inbox
            sub.is_durable = True
            sub.max_in_flight = sr.maxInFlight
            sub.ack_wait = sr.ackWaitInSecs
            sub.stalled = False
            sub.is_closed = False
            sub.has_failed_hb = False
            sub.initialized = False
            sub.removed = False
            if sub.pending:
                sub.new_on_hold = True
                self._arm_ack_timer(sub, sub.ack_wait)
            try:
                self.store.update_sub(ch.name, sub.record())
            except StoreError as exc:
                raise _SubError(str(exc)) from exc
            if sub.qstate is None:
                ch.psubs.append(sub)
            self.acks[sub.ack_inbox] = sub
            ch.inboxes[sub.inbox] = sub
        else:
            sub = Sub(ch)
            sub.client_id = sr.clientID
            sub.qgroup = qgroup
            sub.inbox = sr.inbox
            sub.ack_inbox = ack_inbox
            sub.max_in_flight = sr.maxInFlight
            sub.ack_wait = sr.ackWaitInSecs
            sub.durable_name = durable_name
            sub.is_durable = is_durable
            if set_start:
                sub.last_sent = self._start_sequence(ch, sr)
            try:
                sub.id = self.store.create_sub(ch.name, sub.record())
            except StoreError as exc:
                raise _SubError(str(exc)) from exc
            self._add_to_channel(ch, sub)
        self._mark_dirty()
        client.subs.append(sub)
        return sub

    def _add_to_channel(self, ch: Channel, sub: Sub) -> None:
        """Index a subscription (the reference's subStore.updateState)."""
        if sub.qgroup:
            qs = ch.qsubs.get(sub.qgroup)
            if qs is None:
                qs = ch.qsubs[sub.qgroup] = QueueState(sub.qgroup)
            if not sub.client_id:
                if qs.shadow is None or sub.last_sent > qs.last_sent:
                    qs.shadow = sub
            else:
                self.acks[sub.ack_inbox] = sub
                ch.inboxes[sub.inbox] = sub
                qs.subs.append(sub)
                if sub.new_on_hold:
                    qs.new_on_hold = True
                if sub.stalled:
                    qs.stalled_count += 1
            if sub.last_sent > qs.last_sent:
                qs.last_sent = sub.last_sent
            sub.qstate = qs
        else:
            self.acks[sub.ack_inbox] = sub
            ch.inboxes[sub.inbox] = sub
            ch.psubs.append(sub)
            if sub.is_plain_durable:
                ch.durables[(sub.client_id, sub.durable_name)] = sub

    def _start_sequence(self, ch: Channel, sr: pb.SubscriptionRequest) -> int:
        """The subscription's initial last_sent for its start position."""
        first, last = self.store.first_last(ch.name)
        pos = sr.startPosition
        if pos == pb.NewOnly:
            return last
        if pos == pb.LastReceived:
            return last - 1 if last > 0 else 0
        if pos == pb.TimeDeltaStart:
            start = time.time_ns() - sr.startTimeDelta
            seq = self.store.seq_for_timestamp(ch.name, start)
            return min(seq - 1, last) if seq > 0 else 0
        if pos == pb.SequenceStart:
            if last < first:  # empty channel
                return last
            if sr.startSequence < first:
                return first - 1
            if sr.startSequence > last:
                return last
            return sr.startSequence - 1 if sr.startSequence > 0 else 0
        # First
        return first - 1 if first > 0 else 0

    # --- unsubscribe / close ---------------------------------------------------------

    def _on_unsub_request(self, subject: str, reply: str, data: bytes) -> None:
        self._unsub_or_close(reply, data, close=False)

    def _on_sub_close_request(self, subject: str, reply: str, data: bytes) -> None:
        self._unsub_or_close(reply, data, close=True)

    def _unsub_or_close(self, reply: str, data: bytes, close: bool) -> None:
        req = pb.UnsubscribeRequest()
        try:
            req.ParseFromString(data)
        except DecodeError:
            self._sub_err(reply, E.ERR_INVALID_UNSUB_REQ)
            return
        ch = self.channels.get(req.subject)
        if ch is None:
            self._sub_err(reply, E.ERR_UNKNOWN_CHANNEL)
            return
        sub = self.acks.get(req.inbox)
        if sub is None or sub.channel is not ch:
            sub = ch.inboxes.get(req.inbox)
        if sub is None:
            self._sub_err(reply, E.ERR_INVALID_SUB)
            return
        client = self.clients.get(req.clientID)
        if client is None or sub not in client.subs:
            self._sub_err(reply, E.ERR_UNKNOWN_CLIENT)
            return
        client.subs.remove(sub)
        self._remove_sub(ch, sub, unsubscribe=not close)
        self._mark_dirty()
        self._maybe_start_delete_timer(ch)
        self._publish(reply, _EMPTY_SUB_RESPONSE)

    def _store_delete_sub(self, ch: Channel, sub_id: int) -> None:
        try:
            self.store.delete_sub(ch.name, sub_id)
        except UnknownSubscriptionError:
            pass
        except StoreError as exc:
            log.error("deleting subscription %d on %r: %s", sub_id, ch.name, exc)

    def _remove_sub(self, ch: Channel, sub: Sub, unsubscribe: bool) -> None:
        """Remove a subscription; durables stay (offline) unless ``unsubscribe``."""
        self._flush_sub_events()
        client_id = sub.client_id
        plain_durable = sub.is_plain_durable
        key = (client_id, sub.durable_name)
        sub.saved_client_id = client_id
        sub.client_id = ""
        if self.acks.get(sub.ack_inbox) is sub:
            del self.acks[sub.ack_inbox]
        if ch.inboxes.get(sub.inbox) is sub:
            del ch.inboxes[sub.inbox]
        if sub.ack_timer is not None:
            sub.ack_timer.cancel()
            sub.ack_timer = None
        deleted = False
        if not sub.is_durable or (unsubscribe and plain_durable):
            self._store_delete_sub(ch, sub.id)
            deleted = True
        if unsubscribe and plain_durable and ch.durables.get(key) is sub:
            del ch.durables[key]
        transferred: list[Sub] = []
        qs = sub.qstate
        if qs is not None:
            if sub in qs.subs:
                qs.subs.remove(sub)
            storage_update = False
            if not qs.subs:
                if not sub.is_durable or unsubscribe:
                    if ch.qsubs.get(qs.name) is qs:
                        del ch.qsubs[qs.name]
                    if not deleted:
                        self._store_delete_sub(ch, sub.id)
                    sub.removed = True
                else:
                    qs.shadow = sub
                    qs.stalled_count = 0
                    storage_update = True
            else:
                if sub.stalled and qs.stalled_count > 0:
                    qs.stalled_count -= 1
                storage_update = sub.last_sent == qs.last_sent
                expire = self.loop.time() - 1.0
                members = qs.subs
                order = sorted(sub.pending.items(), key=lambda kv: (kv[1], kv[0]))
                for i, (seq, _) in enumerate(order):
                    q = members[i % len(members)]
                    try:
                        self.store.add_pending(ch.name, q.id, seq)
                    except StoreError as exc:
                        log.error("transferring seq %d to subid=%d: %s", seq, q.id, exc)
                        continue
                    if storage_update and seq == qs.last_sent:
                        storage_update = False
                    if seq > q.last_sent:
                        q.last_sent = seq
                    q.pending[seq] = expire
                    if q not in transferred:
                        transferred.append(q)
                sub.pending = {}
                if sub.is_durable and not deleted:
                    self._store_delete_sub(ch, sub.id)
                sub.removed = True
            if storage_update:
                q = qs.shadow if qs.shadow is not None else qs.subs[0]
                q.last_sent = qs.last_sent
                try:
                    self.store.update_sub(ch.name, q.record())
                except StoreError as exc:
                    log.error("updating subscription %d: %s", q.id, exc)
        else:
            if sub in ch.psubs:
                ch.psubs.remove(sub)
            if sub.is_durable and not unsubscribe:
                sub.is_closed = True
                try:
                    self.store.update_sub(ch.name, sub.record(client_id))
                except StoreError as exc:
                    log.error("updating subscription %d: %s", sub.id, exc)
            else:
                sub.removed = True
        for q in transferred:
            self._arm_ack_timer(q, 0.1)

    # ----------------------------------------------------------------------------------
    # message expiry (max_age)
    # ----------------------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        if self._closing:
            return
        if self._expire_timer is not None:
            self._expire_timer.cancel()
            self._expire_timer = None
        if not self._any_max_age():
            return
        nxt = self.store.expire_msgs()
        delay = 1.0 if nxt is None else max((nxt - time.time_ns()) / 1e9, 0.01)
        self._expire_timer = self.loop.call_later(min(delay, 1.0), self._expire_tick)

    def _expire_tick(self) -> None:
        self._expire_timer = None
        self._schedule_expiry()

    def _any_max_age(self) -> bool:
        lim = self.store.limits
        return bool(lim.max_age) or any(c.max_age for c in lim.channels.values())

    # ----------------------------------------------------------------------------------
    # monitoring data
    # ----------------------------------------------------------------------------------

    def num_subs(self) -> int:
        return sum(len(ch.all_subs()) for ch in self.channels.values())

    def msgs_state(self) -> tuple[int, int]:
        msgs = nbytes = 0
        for name in list(self.channels):
            try:
                info = self.store.channel_info(name)
            except StoreError:
                continue
            msgs += info.msgs
            nbytes += info.bytes
        return msgs, nbytes

    @property
    def version(self) -> str:
        return __version__


class _SubError(Exception):
    pass
