"""A raw-socket WebSocket client for framing tests: the upgrade request, frames built byte by
byte (any mask, bits, opcode and length, right or wrong), and what the server answers.

Nothing here hides the framing: a test says exactly which bytes go out, and gets back the
server's frames as they came (opcode, payload), its close frame, and whether it closed the
connection. No protocol decision is made here; reads wait for an answer or for the server to
close, with a timeout that only fails a test.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

TIMEOUT = 5.0

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
FIN, RSV1, RSV2, RSV3 = 0x80, 0x40, 0x20, 0x10
KEY = b"\x37\xfa\x21\x3d"


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True, mask: bool = True,
          rsv: int = 0, length: int | None = None, key: bytes = KEY) -> bytes:
    """One frame: the first byte from `fin`, `rsv` (RSV1|RSV2|RSV3 bits) and `opcode`; the
    length as the RFC encodes it (7 bits, 16 or 64), `length` overriding the payload's; the
    payload masked with `key` when `mask`."""
    size = len(payload) if length is None else length
    head = bytes([(FIN if fin else 0) | rsv | (opcode & 0x0F)])
    bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([bit | size])
    elif size < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", size)
    if not mask:
        return head + payload
    return head + key + masked(payload, key)


def masked(payload: bytes, key: bytes = KEY) -> bytes:
    return bytes(b ^ key[i & 3] for i, b in enumerate(payload))


def deflated(data: bytes) -> bytes:
    """`data` compressed as permessage-deflate sends a message (RFC 7692 7.2.1): raw
    deflate, flushed, without the final 00 00 ff ff."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


def close_payload(status: int, reason: bytes = b"") -> bytes:
    return struct.pack("!H", status) + reason


@dataclass
class Outcome:
    """What the server did: the payloads of its data frames (joined), its PONG payloads, its
    close frame (status, reason; (None, "") for one without a status) if it sent one, and
    whether it closed the connection."""

    data: bytes = b""
    pongs: list[bytes] = field(default_factory=list)
    close: tuple[int | None, str] | None = None
    closed: bool = False


class RawWebSocket:
    """One WebSocket connection over a plain socket, upgraded with `headers` added."""

    def __init__(self, port: int, headers: dict[str, str] | None = None,
                 timeout: float = TIMEOUT, read_info: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET / HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = self._read_until(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        self.response_head = head.decode(errors="replace")
        self.info: dict[str, Any] = {}
        if self.status == 101 and read_info:
            opcode, payload = self.read_frame()
            assert opcode == BINARY and payload.startswith(b"INFO "), (opcode, payload)
            self.info = json.loads(payload[5:])

    def __enter__(self) -> RawWebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def header(self, name: str) -> str | None:
        """A header of the server's answer to the upgrade (any case), or None."""
        for line in self.response_head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None

    def send(self, data: bytes) -> bool:
        """Send raw bytes; False when the server has closed already."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _fill(self) -> bool:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        return bool(chunk)

    def _read_until(self, end: bytes) -> bytes:
        while end not in self.buf:
            if not self._fill():
                raise EOFError(f"closed before {end!r}: {self.buf!r}")
        head, _, self.buf = self.buf.partition(end)
        return head

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError("closed within a frame")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> tuple[int, bytes]:
        """The next frame from the server (which never masks): (opcode, payload)."""
        b0, b1 = self._take(2)
        assert not b1 & 0x80, "a server frame is never masked"
        size = b1 & 0x7F
        if size == 126:
            size = struct.unpack("!H", self._take(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self._take(8))[0]
        payload = self._take(size)
        if b0 & RSV1:
            payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        return b0 & 0x0F, payload

    def outcome(self, until: bytes | None = None) -> Outcome:
        """Read until the server closes the connection (or, with `until`, until the data
        frames hold it): everything it sent on the way."""
        out = Outcome()
        while until is None or until not in out.data:
            try:
                opcode, payload = self.read_frame()
            except EOFError:
                out.closed = True
                break
            if opcode == CLOSE:
                status = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                out.close = (status, payload[2:].decode(errors="replace"))
            elif opcode == PONG:
                out.pongs.append(payload)
            else:
                out.data += payload
        return out
