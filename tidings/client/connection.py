"""The engine of one server connection: handshake, reads, writes, keep-alive.

`Connection` is an `asyncio.Protocol`. Every read is fed whole to the sans-IO
`ServerOpParser`, which calls the client's `on_msg` directly for each MSG/HMSG (no per-message
tasks or queues here). Writes go straight to the transport; the client batches publishes in a
`WriteBuffer` first (small operations flattened into one bytearray, large payloads kept as
their own chunks so the transport can write them vectored, without a copy).

Keep-alive: a PING every `ping_interval`; a PING that would make more than `max_pings_out`
unanswered marks the connection stale and aborts it, so a half-open socket cannot hang us.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, Protocol

from ..protocol.encode import PING, PONG
from ..protocol.errors import ProtocolError as WireProtocolError
from ..protocol.parser import ServerOpParser
from ..turns import InputBudget, LoopTurns
from . import errors
from .transport import upgrade_tls

LARGE_PAYLOAD = 4096  # payloads from this size on are written as their own chunk
CRLF = b"\r\n"

_INFO, _PONG, _LIVE, _DEAD = range(4)


class ConnectionHandler(Protocol):
    """What the client implements to hear from a live connection."""

    def on_msg(self, subject: bytes, sid: bytes, reply: bytes | None, hdr: bytes | None,
               payload: bytes) -> None: ...
    def on_async_info(self, info: dict[str, Any]) -> None: ...
    def on_server_error(self, message: str) -> None: ...
    def on_write_paused(self, conn: Connection, paused: bool) -> None: ...
    def on_connection_lost(self, conn: Connection, reason: BaseException) -> None: ...


class WriteBuffer:
    """Outbound bytes not yet handed to the transport, in order.

    `flat` collects small operations; a large payload closes `flat` into `chunks` and is
    appended as a chunk of its own. `size` is the total held.
    """

    __slots__ = ("flat", "chunks", "chunked")

    def __init__(self) -> None:
        self.flat = bytearray()
        self.chunks: list[bytes | bytearray | memoryview] = []
        self.chunked = 0  # bytes in chunks

    @property
    def size(self) -> int:
        return len(self.flat) + self.chunked

    def add_large(self, head: bytes, payload: bytes | bytearray | memoryview) -> None:
        if type(payload) is not bytes:
            payload = bytes(payload)  # the caller may reuse its buffer once publish returns
        flat = self.flat
        flat += head
        self.chunks.append(flat)
        self.chunks.append(payload)
        self.chunked += len(flat) + len(payload)
        self.flat = bytearray(CRLF)

    def take(self) -> list[bytes | bytearray | memoryview]:
        """Everything held, as chunks to write; the buffer is empty afterwards."""
        chunks = self.chunks
        if self.flat:
            chunks.append(self.flat)
            self.flat = bytearray()
        self.chunks = []
        self.chunked = 0
        return chunks

    def clear(self) -> None:
        self.flat = bytearray()
        self.chunks = []
        self.chunked = 0


class Connection(asyncio.Protocol):
    """One transport to one server, from the first INFO to connection_lost."""

    def __init__(self, handler: ConnectionHandler) -> None:
        self.handler = handler
        self.on_msg = handler.on_msg  # bound before the parser takes it, so MSG goes straight
        self.parser = ServerOpParser(self)
        self.transport: asyncio.Transport | None = None
        self.info: dict[str, Any] = {}
        self.stage = _INFO
        self._loop = asyncio.get_running_loop()
        self._stage_fut = self._new_stage_fut()
        self._lost_fut: asyncio.Future[None] = self._loop.create_future()
        self.lost_reason: BaseException | None = None
        self.pongs: deque[asyncio.Future[None] | None] = deque()
        self.pings_out = 0
        self.max_pings_out = 2
        self._ping_interval = 0.0
        self._ping_timer: asyncio.TimerHandle | None = None
        self.paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._budget = InputBudget(LoopTurns(self._loop))

    @property
    def is_live(self) -> bool:
        return self.stage == _LIVE

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._budget.start()
        try:
            self.parser.feed(data)
        except WireProtocolError as exc:
            self.fail(errors.ProtocolError(str(exc)))
        transport = self.transport
        if self._budget.spent() and not transport.is_closing():
            # This turn's input budget is spent: the next read waits for the next turn.
            transport.pause_reading()
            self._loop.call_soon(self._resume_reading)

    def _resume_reading(self) -> None:
        if self.stage != _DEAD and not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stage == _DEAD:
            return
        prev = self.stage
        self.stage = _DEAD
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        if self.lost_reason is None:
            self.lost_reason = errors.UnexpectedEOF() if exc is None else exc
        if not self._stage_fut.done():
            self._stage_fut.set_exception(self.lost_reason)
        self._lost_fut.set_result(None)
        self._wake_drain_waiters()
        if prev == _LIVE:
            self.handler.on_connection_lost(self, self.lost_reason)

    def pause_writing(self) -> None:
        self.paused = True
        self.handler.on_write_paused(self, True)

    def resume_writing(self) -> None:
        self.paused = False
        self.handler.on_write_paused(self, False)
        self._wake_drain_waiters()

    # -- ServerOpHandler -----------------------------------------------------
    def on_info(self, info: dict[str, Any]) -> None:
        if self.stage == _INFO:
            self.info = info
            self.stage = _PONG
            if not self._stage_fut.done():
                self._stage_fut.set_result(None)
        elif self.stage == _LIVE:
            self.handler.on_async_info(info)
        else:
            self.info.update(info)

    def on_ping(self) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(PONG)

    def on_pong(self) -> None:
        if self.stage == _PONG:
            if not self._stage_fut.done():
                self._stage_fut.set_result(None)
            return
        self.pings_out = 0
        if self.pongs:
            fut = self.pongs.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)

    def on_ok(self) -> None:
        pass

    def on_err(self, message: str) -> None:
        if self.stage in (_INFO, _PONG):
            err = errors.server_error(message)
            if not self._stage_fut.done():
                self._stage_fut.set_exception(err)
            elif self.lost_reason is None:
                # Right behind the INFO (e.g. 'maximum connections exceeded'): the stage
                # that waits next reports it instead of a bare EOF.
                self.lost_reason = err
            return
        self.handler.on_server_error(message)

    # -- handshake -----------------------------------------------------------
    async def _wait_stage(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._stage_fut), timeout)
        except asyncio.TimeoutError:
            raise errors.TimeoutError() from None
        finally:
            self._stage_fut = self._new_stage_fut()

    def _new_stage_fut(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        # An error may land after the waiter timed out; mark it seen so asyncio stays quiet.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        return fut

    async def wait_info(self, timeout: float) -> dict[str, Any]:
        """Wait for the server's first INFO."""
        await self._wait_stage(timeout)
        return self.info

    async def upgrade_tls(self, tls: ssl.SSLContext, hostname: str, timeout: float) -> None:
        assert self.transport is not None
        self.transport = await upgrade_tls(self.transport, self, tls, hostname, timeout)

    async def finish_handshake(self, connect_cmd: bytes, timeout: float) -> None:
        """Send CONNECT and PING; return at the PONG, raise the typed error of an -ERR."""
        if self.stage == _DEAD or self.transport is None:
            raise self.lost_reason or errors.UnexpectedEOF()
        self.transport.write(connect_cmd + PING)
        await self._wait_stage(timeout)

    def go_live(self, ping_interval: float, max_pings_out: int) -> None:
        self.stage = _LIVE
        self.max_pings_out = max_pings_out
        self._ping_interval = ping_interval
        if ping_interval > 0:
            self._ping_timer = self._loop.call_later(ping_interval, self._keepalive)

    # -- keep-alive ----------------------------------------------------------
    def _keepalive(self) -> None:
        self._ping_timer = None
        if self.stage != _LIVE:
            return
        self.pings_out += 1
        if self.pings_out > self.max_pings_out:
            self.fail(errors.StaleConnectionError())
            return
        self.pongs.append(None)
        self.write(PING)
        self._ping_timer = self._loop.call_later(self._ping_interval, self._keepalive)

    # -- writing -------------------------------------------------------------
    def write(self, data: bytes | bytearray) -> None:
        t = self.transport
        if t is not None and self.stage != _DEAD:
            t.write(data)

    def writelines(self, chunks: list[bytes | bytearray | memoryview]) -> None:
        t = self.transport
        if t is not None and self.stage != _DEAD:
            if len(chunks) == 1:
                t.write(chunks[0])
            else:
                t.writelines(chunks)

    def ping(self, fut: asyncio.Future[None] | None) -> None:
        """Send a PING whose PONG resolves `fut` (PONGs come back in order)."""
        self.pongs.append(fut)
        self.write(PING)

    @property
    def buffered(self) -> int:
        """Bytes the transport holds that the socket has not taken yet."""
        t = self.transport
        return t.get_write_buffer_size() if t is not None and self.stage != _DEAD else 0

    async def drained(self) -> None:
        """Wait until the transport takes writes again (or the connection is gone)."""
        if not self.paused or self.stage == _DEAD:
            return
        fut = self._loop.create_future()
        self._drain_waiters.append(fut)
        await fut

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- ending --------------------------------------------------------------
    def fail(self, reason: BaseException) -> None:
        """Drop the connection now because of `reason` (stale, protocol error, ...)."""
        if self.lost_reason is None:
            self.lost_reason = reason
        t = self.transport
        if t is not None:
            t.abort()
        else:
            self.connection_lost(None)

    async def close(self, timeout: float = 2.0) -> None:
        """Send what the transport holds, then close; abort if that takes too long."""
        if self.lost_reason is None:
            self.lost_reason = errors.ConnectionClosedError()
        t = self.transport
        if t is None or self.stage == _DEAD:
            if self.stage != _DEAD:
                self.connection_lost(None)
            return
        t.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._lost_fut), timeout)
        except asyncio.TimeoutError:
            t.abort()
            try:
                await asyncio.wait_for(asyncio.shield(self._lost_fut), 1.0)
            except asyncio.TimeoutError:
                self.connection_lost(None)

    def abort(self) -> None:
        """Drop the connection without ceremony (failed handshake)."""
        if self.lost_reason is None:
            self.lost_reason = errors.ConnectionClosedError()
        t = self.transport
        if t is not None and self.stage != _DEAD:
            t.abort()
        if self.stage != _DEAD and t is None:
            self.connection_lost(None)
