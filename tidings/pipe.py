"""An in-process byte pipe: two asyncio transports joined in memory, no socket between them.

The servers that run inside `tidings server` (embedded streaming, and JetStream's internal
clients next) talk to the core through one: a client `Connection` on one end, the core's
`ClientConnection` on the other, each an ordinary `asyncio.Protocol` that cannot tell it from
a socket. What one end writes reaches the other's `data_received` in a later callback of the
loop (never inside `write`, so neither side is re-entered while it works), at most
`READ_SIZE` bytes per callback as a socket read would be. Reading can be paused like a
socket's, and the bytes a paused reader has not taken count as the writer's write buffer, so
flow control, slow consumers and write deadlines work as over TCP.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

READ_SIZE = 256 * 1024  # at most this much per data_received, as a large socket read
_HIGH_WATER = 64 * 1024


class PipeEnd(asyncio.Transport):
    """One end of a pipe: `write` sends to the other end's protocol."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: tuple[str, int] | None) -> None:
        super().__init__()
        self._loop = loop
        self._name = name
        self._protocol: asyncio.Protocol | None = None
        self._peer: PipeEnd = self
        # Written here, not yet read by the peer (a view: the rest of a chunk partly read).
        self._pending: collections.deque[bytes | memoryview] = collections.deque()
        self._size = 0
        self._scheduled = False
        self._reading = True
        self._closing = False  # close(): the peer reads what is pending, then both are lost
        self._lost = False
        self._high = _HIGH_WATER
        self._low = _HIGH_WATER // 4
        self._write_paused = False

    # -- writing -------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._lost or not data:
            return
        self._pending.append(data if type(data) is bytes else bytes(data))
        self._size += len(data)
        self._schedule()
        if not self._write_paused and self._size > self._high:
            self._write_paused = True
            self._protocol.pause_writing()  # type: ignore[union-attr]

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def get_write_buffer_size(self) -> int:
        return self._size

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = _HIGH_WATER if high is None else high
        self._low = self._high // 4 if low is None else low

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def can_write_eof(self) -> bool:
        return False

    def _schedule(self) -> None:
        if not self._scheduled and self._peer._reading:
            self._scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        """Hand the peer's protocol what is pending (up to READ_SIZE), as one read."""
        self._scheduled = False
        peer = self._peer
        if self._lost or not peer._reading:
            return
        pending = self._pending
        if pending:
            data = self._take(pending)
            self._size -= len(data)
            if self._write_paused and self._size <= self._low:
                self._write_paused = False
                self._protocol.resume_writing()  # type: ignore[union-attr]
            peer._protocol.data_received(data)  # type: ignore[union-attr]
        if self._pending:
            self._schedule()
        elif self._closing:
            self._lose(None)

    @staticmethod
    def _take(pending: collections.deque[bytes | memoryview]) -> bytes:
        """The first READ_SIZE bytes (or fewer) of `pending`, taken off it. Only what is
        taken is copied: a large chunk stays where it is, a view past what was taken."""
        first = pending[0]
        if len(first) >= READ_SIZE:
            if len(first) == READ_SIZE:
                pending.popleft()
                return first if type(first) is bytes else bytes(first)
            view = first if type(first) is memoryview else memoryview(first)
            pending[0] = view[READ_SIZE:]
            return bytes(view[:READ_SIZE])
        if len(pending) == 1:
            pending.popleft()
            return first if type(first) is bytes else bytes(first)
        parts: list[bytes | memoryview] = []
        room = READ_SIZE
        while pending and len(pending[0]) <= room:
            chunk = pending.popleft()
            parts.append(chunk)
            room -= len(chunk)
        if pending and room:
            view = pending[0]
            view = view if type(view) is memoryview else memoryview(view)
            parts.append(view[:room])
            pending[0] = view[room:]
        return b"".join(parts)

    # -- reading -------------------------------------------------------------
    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            if self._peer._pending or self._peer._closing:
                self._peer._schedule()

    def is_reading(self) -> bool:
        return self._reading

    # -- ending --------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing or self._lost or self._peer._closing

    def close(self) -> None:
        """Let the peer read what was written, then end the pipe for both ends."""
        if self._closing or self._lost:
            return
        self._closing = True
        if self._pending:
            self._schedule()
        else:
            self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        """End the pipe now; what was not read yet is dropped."""
        if self._lost:
            return
        self._closing = True
        self._pending.clear()
        self._size = 0
        self._loop.call_soon(self._lose, None)

    def _lose(self, exc: Exception | None) -> None:
        """Both ends are lost: each protocol hears connection_lost once, this one first."""
        for end in (self, self._peer):
            if not end._lost:
                end._lost = True
                end._pending.clear()
                end._size = 0
                end._protocol.connection_lost(exc)  # type: ignore[union-attr]

    # -- the rest of a transport ----------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return self._name if self._name is not None else default
        return default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]


def open_pipe(
    loop: asyncio.AbstractEventLoop,
    near: asyncio.Protocol,
    far: asyncio.Protocol,
    name: tuple[str, int] | None = None,
) -> tuple[PipeEnd, PipeEnd]:
    """Join `near` and `far` with a pipe; returns (near's end, far's end). `far` hears
    connection_made first (it is the accepting side, which speaks first), then `near`.
    `name` is what either end reports as its peer's and its own address."""
    a, b = PipeEnd(loop, name), PipeEnd(loop, name)
    a._peer, b._peer = b, a
    a.set_protocol(near)
    b.set_protocol(far)
    far.connection_made(b)
    near.connection_made(a)
    return a, b
