"""Fault-tolerant (FT) mode, as the reference nats-streaming-server's ``--ft_group``.

Servers of one FT group share a store (file directory or SQL database). Each starts in
standby and subscribes to ``_STAN.ft.<cluster_id>.<ft_group>``. While heartbeats arrive
there it waits; when none arrived for the missed-heartbeat interval (1.25 s, +/- 10 %) it
tries to take the store's exclusive lock (the file store's ``.lock`` flock, the SQLite
``DB.lock``, the PostgreSQL advisory lock): the store is simply opened, and a
:class:`StoreLockedError` means another server holds it, so back to standby. A standby that
cannot prove the lock is free never becomes active. With the lock it recovers the store,
logs "Server is active", answers the discover subject (it was not subscribed to it before)
and sends a heartbeat every second (+/- 10 %).

The heartbeat is the reference's ``spb.CtrlMsg`` (spb/protocol.proto: ``MsgType = 1``,
``ServerID = 2``, ``Data = 3``) with ``MsgType`` FTHeartbeat (3), the server id and the
activation time in Go's ``time.Time.MarshalBinary`` layout. tidings' protobuf modules have no
CtrlMsg, so it is encoded here by hand with those field numbers. An active server that sees
another server's heartbeat with an earlier activation time steps down at once (no last
write to the store), as the reference's panic: ``ft: serverID "X" claims to be active,
aborting``; a later one is only logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any

from ...varint import put_uvarint
from ..stores.base import StoreError, StoreLockedError

log = logging.getLogger("tidings.streaming")

FT_HB_PREFIX = "_STAN.ft"
FT_HB_INTERVAL = 1.0
FT_HB_MISSED_INTERVAL = 1.25
FT_STANDBY = "FT_STANDBY"
FT_ACTIVE = "FT_ACTIVE"
CTRL_FT_HEARTBEAT = 3  # spb.CtrlMsg_FTHeartbeat

# seconds from Go's zero time (January 1, year 1, UTC) to the Unix epoch
_GO_UNIX_OFFSET = 62_135_596_800


def ft_check(opts: Any) -> None:
    """Refuse FT mode with a store the group cannot share (the reference's ftSetup text)."""
    if opts.store not in ("file", "sql"):
        raise ValueError("ft: only FILE or SQL stores supported in FT mode")


def ft_subject(cluster_id: str, group: str) -> str:
    return f"{FT_HB_PREFIX}.{cluster_id}.{group}"


def random_interval(interval: float) -> float:
    """``interval`` with at most +/- 10 % of randomness (ftGetRandomInterval)."""
    return interval + random.uniform(-0.1, 0.1) * interval


# --- the heartbeat: spb.CtrlMsg on the wire ---------------------------------------------

def go_time_binary(unix_ns: int) -> bytes:
    """Go's ``time.Time.MarshalBinary`` (version 1) of a UTC instant."""
    sec, nsec = divmod(unix_ns, 1_000_000_000)
    return (b"\x01" + (sec + _GO_UNIX_OFFSET).to_bytes(8, "big", signed=True)
            + nsec.to_bytes(4, "big", signed=True) + (-1).to_bytes(2, "big", signed=True))


def parse_go_time_binary(data: bytes) -> int:
    """Unix nanoseconds from Go's ``MarshalBinary`` (versions 1 and 2); ValueError if not."""
    if len(data) not in (15, 16) or data[0] not in (1, 2) or (data[0] == 2) != (len(data) == 16):
        raise ValueError("invalid Go time encoding")
    sec = int.from_bytes(data[1:9], "big", signed=True) - _GO_UNIX_OFFSET
    nsec = int.from_bytes(data[9:13], "big", signed=True)
    return sec * 1_000_000_000 + nsec


def encode_ctrl_msg(msg_type: int, server_id: str, data: bytes) -> bytes:
    out = bytearray()
    if msg_type:
        out += b"\x08" + put_uvarint(msg_type)
    sid = server_id.encode()
    if sid:
        out += b"\x12" + put_uvarint(len(sid)) + sid
    if data:
        out += b"\x1a" + put_uvarint(len(data)) + data
    return bytes(out)


def decode_ctrl_msg(buf: bytes) -> tuple[int, str, bytes]:
    """(MsgType, ServerID, Data) of an encoded CtrlMsg; ValueError when malformed."""
    msg_type, server_id, data = 0, "", b""
    i, n = 0, len(buf)

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            if i >= n or shift > 63:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    while i < n:
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            v = varint()
            if field == 1:
                msg_type = v
        elif wire == 2:
            size = varint()
            if i + size > n:
                raise ValueError("truncated field")
            chunk = bytes(buf[i:i + size])
            i += size
            if field == 2:
                server_id = chunk.decode("utf-8", errors="replace")
            elif field == 3:
                data = chunk
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if i > n:
            raise ValueError("truncated field")
    return msg_type, server_id, data


def _abort(message: str) -> None:
    """Step down as the reference does (a panic): no shutdown, no last write to the store."""
    log.critical(message)
    logging.shutdown()
    os._exit(1)


class FaultTolerance:
    """One server's membership of an FT group, over the streaming server's NATS connection."""

    def __init__(self, opts: Any, conn: Any,
                 on_step_down: Callable[[str], None] = _abort) -> None:
        ft_check(opts)
        self.opts = opts
        self.conn = conn
        self.subject = ft_subject(opts.cluster_id, opts.ft_group)
        self.hb_interval = random_interval(FT_HB_INTERVAL)
        self.missed_interval = random_interval(FT_HB_MISSED_INTERVAL)
        self.on_step_down = on_step_down
        self.state = FT_STANDBY
        self.server_id = ""
        self.activation_ns = 0
        self._hb_seen = asyncio.Event()
        self._sub: Any = None
        self._hb_task: asyncio.Task[None] | None = None
        self._stepped_down = False
        self.store: Any = None  # the store whose lock makes us the active server
        self._check: asyncio.Future[bool] | None = None

    async def setup(self) -> None:
        self._sub = await self.conn.subscribe(self.subject, self._on_hb)
        await self.conn.flush()

    def _on_hb(self, subject: str, reply: str, data: bytes) -> None:
        if self.state == FT_STANDBY:
            # anything on the group's subject means an active server is there
            self._hb_seen.set()
            return
        try:
            msg_type, server_id, payload = decode_ctrl_msg(data)
        except ValueError:
            return
        if msg_type != CTRL_FT_HEARTBEAT or server_id == self.server_id:
            return
        err = f'ft: serverID "{server_id}" claims to be active'
        try:
            peer_ns = parse_go_time_binary(payload)
        except ValueError:
            log.error("Error decoding activation time: invalid encoding")
            return
        if peer_ns < self.activation_ns:
            if not self._stepped_down:
                self._stepped_down = True
                self.stop()
                self.on_step_down(f"{err}, aborting")
        else:
            log.error(err)

    async def wait_for_store(self, open_store: Callable[[], Any]) -> Any:
        """Standby until heartbeats stop and the store (with its lock) opens; returns it."""
        log.info("Starting in standby mode")
        loop = asyncio.get_running_loop()
        next_notice = 0.0
        backoff = 1.0
        while True:
            self._hb_seen.clear()
            try:
                await asyncio.wait_for(self._hb_seen.wait(), self.missed_interval)
                continue  # an active server is there
            except asyncio.TimeoutError:  # noqa: UP041 - distinct from TimeoutError on 3.10
                pass
            try:
                return await asyncio.to_thread(open_store)
            except StoreLockedError:
                if loop.time() >= next_notice:
                    log.info("ft: unable to get store lock at this time, going back to standby")
                    next_notice = loop.time() + backoff
                    backoff = min(backoff * 2, 60.0)
            except StoreError as exc:
                # maybe transient (a database unreachable): try again at the next interval
                log.error("ft: error attempting to get the store lock: %s", exc)

    def activate(self, server_id: str, store: Any = None) -> None:
        """The store is ours: note the activation time and send heartbeats from now on (while
        `store` still holds its lock: see _send_heartbeats)."""
        self.server_id = server_id
        self.store = store
        self.activation_ns = time.time_ns()
        self.state = FT_ACTIVE
        log.info("Server is active")
        self._hb_task = asyncio.get_running_loop().create_task(self._send_heartbeats())

    async def _send_heartbeats(self) -> None:
        hb = encode_ctrl_msg(CTRL_FT_HEARTBEAT, self.server_id,
                             go_time_binary(self.activation_ns))
        while True:
            if self.store is not None and not await self._still_locked():
                # A database lock lost with its connection: stop before a standby, which
                # tries the lock only once our heartbeats have stopped, can take it.
                self.stop()
                self.on_step_down("ft: lost the store lock, aborting")
                return
            self.conn.publish(self.subject, hb)
            await asyncio.sleep(self.hb_interval)

    async def _still_locked(self) -> bool:
        """The store's own answer, at most a heartbeat interval late: a database too slow to
        answer in time has not lost the lock for that."""
        check = self._check
        if check is None or check.done():  # one question at a time, however slow the answer
            check = self._check = asyncio.ensure_future(asyncio.to_thread(self.store.lock_held))
        done, _ = await asyncio.wait((check,), timeout=self.hb_interval)
        return not done or check.result()

    def stop(self) -> None:
        if self._hb_task is not None:
            self._hb_task.cancel()
            self._hb_task = None
