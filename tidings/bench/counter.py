"""Exact MSG frame counting from byte counts, at close to memcpy speed.

A bench subscriber receives a stream of identical MSG frames (same subject, sid and payload
size), so the number of messages is ``bytes // frame_len``. Each chunk is checked in O(1) by
looking at the last frame boundary inside it, which must start with ``MSG ``. Anything else on
the stream (a keep-alive PING, +OK, -ERR) shifts the boundaries, fails that check, and switches
the counter to a slower exact mode that counts ``MSG `` markers and control lines.

Fast mode samples one boundary per read, so it relies on control lines being rare: several
of them inside one read whose lengths add up to a multiple of the frame length would go
unnoticed. Servers send PING every couple of minutes and the bench never asks for +OK, so in
practice the count is exact; check_end() cross-checks the total at the end of a slow-mode run.
"""

from __future__ import annotations

MARKER = b"MSG "
TAIL = 5  # longest control pattern (PING\r\n) minus one


class FrameCounter:
    __slots__ = ("frame_len", "nbytes", "fast", "verified", "pending", "markers", "extra",
                 "tail", "errors")

    def __init__(self, frame_len: int):
        self.frame_len = frame_len
        self.nbytes = 0
        self.fast = True
        self.verified = 0  # stream offset of the last boundary checked to start with MARKER
        self.pending = bytearray()  # stream[verified:nbytes] while in fast mode
        self.markers = 0  # slow mode: MARKER occurrences seen
        self.extra = 0  # slow mode: bytes of control lines seen
        self.tail = b""  # slow mode: last TAIL bytes, for patterns split across reads
        self.errors: list[str] = []

    @property
    def count(self) -> int:
        """Complete MSG frames received so far."""
        if self.fast:
            return self.nbytes // self.frame_len
        return min(self.markers, (self.nbytes - self.extra) // self.frame_len)

    @property
    def failed(self) -> bool:
        return any(e.startswith("-ERR") for e in self.errors)

    def feed(self, buf: bytearray, view: memoryview, n: int) -> int:
        """Account for ``buf[:n]``; return how many PINGs in it the caller must answer."""
        start = self.nbytes
        end = start + n
        self.nbytes = end
        if not self.fast:
            return self._slow(buf, view, n)
        boundary = ((end - 4) // self.frame_len) * self.frame_len  # last one with 4 bytes in
        if boundary <= self.verified:  # no new boundary to check yet
            self.pending += view[:n]
            return 0
        if boundary >= start:
            i = boundary - start
            if buf[i : i + 4] == MARKER:
                self.verified = boundary
                self.pending = bytearray(view[i:n])
                return 0
            region = bytes(self.pending) + bytes(view[:n])
        else:  # the marker began in an earlier read: check it in `pending` (a small copy)
            self.pending += view[:n]
            i = boundary - self.verified
            if self.pending[i : i + 4] == MARKER:
                self.verified = boundary
                del self.pending[:i]
                return 0
            region = bytes(self.pending)
        # Misaligned: rescan everything since the last verified boundary, then stay slow.
        self.pending = bytearray()
        self.fast = False
        self.markers = self.verified // self.frame_len + region.count(MARKER)
        self.tail = region[-TAIL:]
        return self._control(region, len(region))

    def _slow(self, buf: bytearray, view: memoryview, n: int) -> int:
        # Patterns split between the previous read and this one are found in `edge` only.
        edge = self.tail + bytes(view[: min(n, TAIL)])
        self.markers += self._straddling(edge, MARKER) + buf.count(MARKER, 0, n)
        pings = self._straddling(edge, b"PING\r\n")
        self.extra += 6 * pings + 5 * self._straddling(edge, b"+OK\r\n")
        if self._straddling(edge, b"-ERR"):
            self.errors.append("-ERR (split across reads)")
        self.tail = (self.tail + bytes(view[max(0, n - TAIL) : n]))[-TAIL:]
        return pings + self._control(buf, n)

    def _straddling(self, edge: bytes, pattern: bytes) -> int:
        """Occurrences of ``pattern`` in ``edge`` that begin in the old tail and end in the new."""
        cut = len(self.tail)
        found = 0
        i = edge.find(pattern)
        while 0 <= i < cut:
            if i + len(pattern) > cut:
                found += 1
            i = edge.find(pattern, i + 1)
        return found

    def _control(self, data: bytes | bytearray, n: int) -> int:
        pings = data.count(b"PING\r\n", 0, n)
        self.extra += 6 * pings + 5 * data.count(b"+OK\r\n", 0, n)
        i = data.find(b"-ERR", 0, n)
        if i >= 0:
            j = data.find(b"\r\n", i, n)
            line = bytes(data[i : j if j > 0 else min(n, i + 120)])
            self.errors.append(line.decode(errors="replace"))
        return pings

    def check_end(self) -> str | None:
        """Cheap final check that the stream stopped on a frame boundary with a sane last frame."""
        if not self.fast:
            if self.nbytes - self.extra != self.markers * self.frame_len:
                return "unexpected non-MSG data in the stream"
            return None
        if self.nbytes == 0:
            return None
        if self.nbytes % self.frame_len:
            return f"stream ended mid-frame after {self.nbytes} bytes"
        last = self.nbytes - self.frame_len - self.verified
        if last >= 0 and (
            bytes(self.pending[last : last + 4]) != MARKER or bytes(self.pending[-2:]) != b"\r\n"
        ):
            return "last frame malformed"
        return None
