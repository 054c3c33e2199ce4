"""A raw-socket NATS client for protocol tests: send exact bytes, read exact bytes.

No protocol logic lives here beyond finding line ends: tests decide what to send and assert
on what comes back. Reads wait for a condition (a PONG barrier, a line, EOF) with a generous
timeout that only fails a test; it never decides what the server did.
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

from tidings.protocol.parser import ServerOpParser

TIMEOUT = 5.0
CONNECT_QUIET = b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true}\r\n'
CONNECT_PLAIN = b'CONNECT {"verbose":false,"pedantic":false}\r\n'

_PONG = b"PONG\r\n"
_PING_LINE = re.compile(rb"(?i)(?:^|\n)ping")


class Timeout(AssertionError):
    """The server neither answered nor closed the connection in time."""


class RawConn:
    """One TCP connection to a server. `buf` holds bytes received and not yet consumed."""

    def __init__(
        self,
        port: int,
        *,
        read_info: bool = True,
        timeout: float = TIMEOUT,
        rcvbuf: int | None = None,
    ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting, so the window starts small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.eof = False
        self._counter: _Counter | None = None
        self._frames: ServerOpParser | None = None
        self.info: dict[str, Any] = {}
        self.info_line = b""
        if read_info:
            self.info_line = self.read_line()
            assert self.info_line.startswith(b"INFO "), self.info_line
            self.info = json.loads(self.info_line[5:])

    # -- context manager -----------------------------------------------------
    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending -------------------------------------------------------------
    def send(self, data: bytes) -> bool:
        """Send bytes; False when the server has already closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def connect(self, connect: bytes = CONNECT_QUIET) -> bytes:
        """Send CONNECT and wait until the server has processed it (a PING barrier); for
        protocol 1 also take the INFO that follows the first PONG and return it."""
        self.send(connect)
        before = self.barrier()
        assert before in (b"", b"+OK\r\n"), before
        if b'"protocol":1' in connect:
            line = self.read_line()
            assert line.startswith(b"INFO "), line
            return line
        return b""

    # -- receiving -----------------------------------------------------------
    def _recv(self, deadline: float) -> bool:
        """Read once into buf; False at EOF. Raises Timeout after `deadline`."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout(f"no answer in time; received so far: {self.buf[-300:]!r}")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError as exc:
            raise Timeout(f"no answer in time; received so far: {self.buf[-300:]!r}") from exc
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_until(self, pred: Any, timeout: float | None = None) -> bool:
        """Read until pred(buf) is true (True) or the connection closes (False)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while not pred(self.buf):
            if not self._recv(deadline):
                return bool(pred(self.buf))
        return True

    def take(self, n: int | None = None) -> bytes:
        """Consume and return the first n bytes of buf (all of it when n is None)."""
        if n is None:
            n = len(self.buf)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_line(self, timeout: float | None = None) -> bytes:
        """One line including its CRLF; b'' when the connection closes first."""
        if not self.read_until(lambda b: b"\n" in b, timeout):
            return b""
        return self.take(self.buf.index(b"\n") + 1)

    def expect(self, data: bytes, timeout: float | None = None) -> None:
        """Assert that the next bytes received are exactly `data`."""
        self.read_until(lambda b: len(b) >= len(data), timeout)
        got = self.take(len(data))
        assert got == data, f"expected {data!r}, got {got!r} (then {self.buf[:200]!r})"

    def count_msgs(self, total: int, timeout: float | None = None) -> int:
        """Read (and discard) until `total` MSG/HMSG frames have arrived on this connection
        in all; server PINGs among them are answered. Returns the frames counted so far,
        which may exceed `total` if more had already arrived."""
        if self._counter is None:
            self._counter = _Counter(self)
            self._frames = ServerOpParser(self._counter)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if self.buf:
                self._frames.feed(self.take())
            if self._counter.msgs >= total:
                return self._counter.msgs
            if not self._recv(deadline):
                raise AssertionError(f"closed after {self._counter.msgs} of {total} messages")

    def read_to_eof(self, timeout: float | None = None) -> bytes:
        """Everything until the server closes the connection."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while self._recv(deadline):
            pass
        return self.take()

    def barrier(self, pongs: int = 1) -> bytes:
        """Send PING and return what arrived before its PONG (the PONG is consumed).

        `pongs` > 1 when earlier input still owes PONGs: the last of that many is ours.
        Raises AssertionError if the connection closes instead.
        """
        self.send(b"PING\r\n")
        ok = self.read_until(lambda b: b.count(_PONG) >= pongs and b.endswith(_PONG))
        assert ok, f"connection closed before PONG; received {self.buf!r}"
        return self.take()[: -len(_PONG)]

    def is_closed(self, timeout: float | None = None) -> bool:
        """Send PING: True when the connection closes, False when PONG comes (consumed)."""
        self.send(b"PING\r\n")
        ok = self.read_until(lambda b: b.endswith(_PONG), timeout)
        if ok:
            self.buf = self.buf[: -len(_PONG)]
        return not ok

    def nothing_more(self, quiet: float = 0.1) -> bytes:
        """Bytes arriving within `quiet` seconds (b'' when nothing more comes), then a barrier
        proves the connection is still served. Use only where the connection stays open."""
        end = time.monotonic() + quiet
        try:
            while time.monotonic() < end:
                self.sock.settimeout(max(end - time.monotonic(), 0.001))
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.eof = True
                    break
                self.buf += chunk
        except TimeoutError:
            pass
        return self.barrier()


class _Counter:
    """Counts messages for RawConn.count_msgs and answers the server's PINGs."""

    def __init__(self, conn: RawConn) -> None:
        self.conn = conn
        self.msgs = 0

    def on_msg(self, *args: object) -> None:
        self.msgs += 1

    def on_ping(self) -> None:
        self.conn.send(b"PONG\r\n")

    def on_info(self, info: object) -> None: ...
    def on_pong(self) -> None: ...
    def on_ok(self) -> None: ...
    def on_err(self, message: str) -> None: ...


@dataclass
class Outcome:
    """What a server did with one exchange: the bytes it sent, and how the exchange ended."""

    data: bytes
    closed: bool  # the server closed the connection (else it answered the trailing PING)
    timed_out: bool = False


def count_pings(data: bytes) -> int:
    return len(_PING_LINE.findall(data))


def run_exchange(
    port: int,
    pieces: list[bytes],
    *,
    pongs: int | None = None,
    pause: float = 0.01,
    timeout: float = 3.0,
) -> Outcome:
    """Send `pieces` (one write each, a short pause between so they arrive in separate
    reads) on a new connection, then a PING barrier; collect the reply until the barrier's
    PONG or until the server closes. The initial INFO is not part of the outcome."""
    whole = b"".join(pieces)
    if pongs is None:
        pongs = count_pings(whole)
    conn = RawConn(port)
    try:
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(pause)  # only to make the pieces separate reads; not a sync
            if not conn.send(piece):
                break
        conn.send(b"PING\r\n")
        want = pongs + 1
        try:
            done = conn.read_until(
                lambda b: b.count(_PONG) >= want and b.endswith(_PONG), timeout
            )
        except Timeout:
            return Outcome(conn.take(), closed=False, timed_out=True)
        if done:
            return Outcome(conn.take()[: -len(_PONG)], closed=False)
        return Outcome(conn.take(), closed=True)
    finally:
        conn.close()


def info_of(line: bytes) -> dict[str, Any]:
    assert line.startswith(b"INFO ") and line.endswith(b"\r\n"), line
    return json.loads(line[5:])
