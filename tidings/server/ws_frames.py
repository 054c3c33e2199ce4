"""WebSocket framing (RFC 6455, permessage-deflate of RFC 7692) as nats-server's websocket.go
reads and writes it, sans-IO: bytes of a client in, the payload bytes for the NATS parser
out; frame headers and close frames for what the server sends.

`FrameReader` is incremental (a frame, its header or its mask may be split at any byte) and
streams: a data frame's payload goes to the parser as it arrives, before the frame, let alone
the message, is complete, as the reference does (a PING inside an unfinished message is
answered; garbage is a parse error at its first byte; a frame announcing more bytes than it
will ever send holds nothing). Only a compressed message is held until its last frame (it
cannot be inflated before), within the reference's bounds.

The rules, checked in the reference's order, each failing the connection with its words
(`FrameError`): RSV2 and RSV3 clear; RSV1 only with permessage-deflate negotiated, only on
a message's first frame, never on a control frame; the mask bit set (unless the client asked
for no masking with the reference's `Nats-No-Masking` header); control frames final and at
most 125 bytes; known opcodes; a continuation only inside a message, a new message only after
the last one ended; a 64-bit length without its top bit; a close frame not of 1 byte, with a
valid status.
"""

from __future__ import annotations

import os
import struct
import zlib


def unmask_pure(data: bytes, key: bytes, offset: int) -> bytes:
    """`data` XOR the masking `key` repeated, starting at key[offset % 4]."""
    n = len(data)
    k = key[offset & 3:] + key[:offset & 3]
    stream = k * (n >> 2) + k[:n & 3]
    return (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(
        n, "little")


try:
    if os.environ.get("TIDINGS_PURE_PYTHON"):
        raise ImportError("pure Python requested")
    from ..protocol._speedups import ws_unmask
except ImportError:  # no compiler at install time, or TIDINGS_PURE_PYTHON set
    ws_unmask = unmask_pure

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_FIN, _RSV1, _RSV23, _MASK = 0x80, 0x40, 0x30, 0x80
MAX_CONTROL_PAYLOAD = 125
# A compressed message's bytes are held until its last frame: at most this many times
# max_payload (and never more than 64 MiB), as the reference's wsMaxMessageSize.
COMPRESSED_MULTIPLE = 8
COMPRESSED_LIMIT = 64 * 1024 * 1024
DEFAULT_MAX_PAYLOAD = 1024 * 1024
# Below this many bytes an outgoing message is not worth compressing (the reference's).
COMPRESS_THRESHOLD = 64
_DEFLATE_TAIL = b"\x00\x00\xff\xff"

STATUS_PROTOCOL_ERROR = 1002
STATUS_INVALID_PAYLOAD = 1007


class FrameError(Exception):
    """The client broke a framing rule, or a compressed message its bounds: the connection
    fails ("read error: <reason>"). `protocol`: a close frame with status 1002 and the
    reason goes out first (the reference's wsHandleProtocolError); otherwise the connection
    closes as a read error."""

    def __init__(self, reason: str, protocol: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.protocol = protocol


class FrameReader:
    """A client's frames, read incrementally. `feed` returns the payload bytes for the
    parser and sets, for the caller to act on after delivering them: `pings` (payloads to
    answer with PONG frames), `close` (the payload of the close frame to answer with; the
    client is done) and `error` (a FrameError: fail the connection). Once `close` or `error`
    is set nothing more is read."""

    __slots__ = ("masked", "compressed", "max_payload", "pings", "close", "error", "_rest",
                 "_rem", "_key", "_pos", "_final", "_in_message", "_inflating", "_held",
                 "_held_size")

    def __init__(self, masked: bool = True, compressed: bool = False,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.masked = masked  # the client masks its frames (unless it asked not to)
        self.compressed = compressed  # permessage-deflate was negotiated
        self.max_payload = max_payload
        self.pings: list[bytes] = []
        self.close: bytes | None = None
        self.error: FrameError | None = None
        self._rest = b""  # an incomplete frame header (or control frame) from the last read
        self._rem = 0  # payload bytes of the current data frame still to come
        self._key = b""  # its masking key
        self._pos = 0  # how far into its payload we are (the key's phase)
        self._final = True  # the current data frame ends its message
        self._in_message = False  # a message's first frame came, its last not yet
        self._inflating = False  # the current message is compressed
        self._held: list[bytes] = []  # its compressed bytes so far
        self._held_size = 0

    @property
    def done(self) -> bool:
        return self.close is not None or self.error is not None

    def feed(self, data: bytes) -> bytes:
        """The payload bytes (unmasked, inflated) of the frames in `data`, in order."""
        if self.done:
            return b""
        if self._rest:
            data = self._rest + data
            self._rest = b""
        out: list[bytes] = []
        try:
            self._read(data, out)
        except FrameError as exc:
            self.error = exc
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _read(self, data: bytes, out: list[bytes]) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._rem:
                pos = self._payload(data, pos, out)
                continue
            start = pos
            pos = self._header(data, pos, out)
            if pos < 0:  # incomplete: wait for more
                self._rest = data[start:]
                return
            if self.done:
                return

    def _payload(self, data: bytes, pos: int, out: list[bytes]) -> int:
        """The next bytes of the current data frame's payload."""
        take = min(self._rem, len(data) - pos)
        piece = data[pos:pos + take] if take < len(data) else data
        if self._key:
            piece = ws_unmask(piece, self._key, self._pos)
        self._pos += take
        self._rem -= take
        if self._inflating:
            self._hold(piece)
            if not self._rem and self._final:
                self._inflate(out)
        else:
            out.append(piece)
        return pos + take

    def _header(self, data: bytes, pos: int, out: list[bytes]) -> int:
        """A frame header at `pos` (and a control frame's payload): the position after it,
        or -1 if it is not all there yet."""
        avail = len(data) - pos
        if avail < 2:
            return -1
        b0, b1 = data[pos], data[pos + 1]
        opcode = b0 & 0x0F
        final = bool(b0 & _FIN)
        rsv1 = bool(b0 & _RSV1)
        self._check(opcode, final, rsv1, b0, b1)
        size = b1 & 0x7F
        length = 2 + (2 if size == 126 else 8 if size == 127 else 0)
        need = length + (4 if self.masked else 0)
        if avail < need:
            return -1
        if size == 126:
            size = struct.unpack_from("!H", data, pos + 2)[0]
        elif size == 127:
            size = struct.unpack_from("!Q", data, pos + 2)[0]
            if size >> 63:
                raise FrameError("invalid 64-bit payload length")
        key = data[pos + length:pos + need] if self.masked else b""
        pos += need
        if opcode >= CLOSE:
            if len(data) - pos < size:
                return -1  # a control frame is taken whole (at most 125 bytes)
            payload = data[pos:pos + size]
            self._control(opcode, ws_unmask(payload, key, 0) if key else payload)
            return pos + size
        self._start_data(opcode, final, rsv1, size, key, out)
        return pos

    def _check(self, opcode: int, final: bool, rsv1: bool, b0: int, b1: int) -> None:
        """The rules of a frame's first two bytes, in the reference's order."""
        if b0 & _RSV23:
            raise FrameError("RSV2 and RSV3 must be clear")
        if rsv1 and not self.compressed:
            raise FrameError("compressed frame received without negotiated permessage-deflate")
        if self.masked and not b1 & _MASK:
            raise FrameError("mask bit missing")
        if opcode >= CLOSE and opcode <= PONG:
            if b1 & 0x7F > MAX_CONTROL_PAYLOAD:
                raise FrameError("control frame length bigger than maximum allowed of "
                                 f"{MAX_CONTROL_PAYLOAD} bytes")
            if not final:
                raise FrameError("control frame does not have final bit set")
            if rsv1:
                raise FrameError("control frame must not be compressed")
        elif opcode == TEXT or opcode == BINARY:
            if self._in_message:
                raise FrameError("new message started before final frame for previous "
                                 "message was received")
        elif opcode == CONTINUATION:
            if not self._in_message or rsv1:
                raise FrameError("invalid continuation frame")
        else:
            raise FrameError(f"unknown opcode {opcode}")

    def _start_data(self, opcode: int, final: bool, rsv1: bool, size: int, key: bytes,
                    out: list[bytes]) -> None:
        if opcode != CONTINUATION:
            self._inflating = rsv1
        self._in_message = not final
        self._final = final
        self._rem, self._key, self._pos = size, key, 0
        if not size and final and self._inflating:
            self._inflate(out)

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == PING:
            self.pings.append(payload)
        elif opcode == CLOSE:
            self.close = close_answer(payload)

    # -- compressed messages ----------------------------------------------------------------
    def _limit(self) -> int:
        return self.max_payload if self.max_payload > 0 else DEFAULT_MAX_PAYLOAD

    def _hold(self, piece: bytes) -> None:
        if self._held_size + len(piece) > min(self._limit() * COMPRESSED_MULTIPLE,
                                              COMPRESSED_LIMIT):
            raise FrameError("maximum payload exceeded", protocol=False)
        self._held.append(piece)
        self._held_size += len(piece)

    def _inflate(self, out: list[bytes]) -> None:
        """The message's compressed bytes, inflated: at most max_payload of them reach the
        parser; past that the connection fails (after those), as the reference's."""
        held, self._held, self._held_size = self._held, [], 0
        limit = self._limit()
        try:
            plain = zlib.decompressobj(-15).decompress(b"".join(held) + _DEFLATE_TAIL,
                                                       limit + 1)
        except zlib.error as exc:
            raise FrameError(f"invalid compressed data: {exc}", protocol=False) from None
        if len(plain) > limit:
            out.append(plain[:limit])
            raise FrameError("maximum payload exceeded", protocol=False)
        out.append(plain)


def close_answer(payload: bytes) -> bytes:
    """The payload of the close frame answering a client's close frame with `payload`: the
    same status and reason (none if it gave none), 1007 for a reason that is not UTF-8.
    FrameError for a payload of one byte or a status no endpoint may send."""
    if not payload:
        return b""
    if len(payload) == 1:
        raise FrameError("close frame payload cannot be 1 byte")
    status = struct.unpack_from("!H", payload)[0]
    if not valid_close_status(status):
        raise FrameError(f"invalid close status code {status}")
    try:
        payload[2:].decode()
    except UnicodeDecodeError:
        return close_payload(STATUS_INVALID_PAYLOAD, "invalid utf8 body in close frame")
    return payload


def valid_close_status(status: int) -> bool:
    """Whether a close frame may carry `status` (RFC 6455 7.4, as the reference checks)."""
    if status in (1004, 1005, 1006, 1015) or not 1000 <= status < 5000:
        return False
    return not 1016 <= status <= 2999


def close_payload(status: int, reason: str) -> bytes:
    """A close frame's payload: the status, then the reason, cut to fit a control frame
    (with "..." when cut), as the reference's wsCreateCloseMessage."""
    body = reason.encode()
    if len(body) > MAX_CONTROL_PAYLOAD - 2:
        body = body[:MAX_CONTROL_PAYLOAD - 5] + b"..."
    return struct.pack("!H", status) + body


def header(opcode: int, size: int, compressed: bool = False) -> bytes:
    """The header of a final, unmasked frame (what a server sends) of `size` bytes."""
    b0 = _FIN | opcode | (_RSV1 if compressed else 0)
    if size < 126:
        return bytes((b0, size))
    if size < 65536:
        return struct.pack("!BBH", b0, 126, size)
    return struct.pack("!BBQ", b0, 127, size)


def control_frame(opcode: int, payload: bytes = b"") -> bytes:
    return header(opcode, len(payload)) + payload


class Deflater:
    """permessage-deflate of outgoing messages, each on its own (no context takeover, as the
    reference negotiates it): a full flush after each, its empty-block tail left off."""

    __slots__ = ("_compressor",)

    def __init__(self) -> None:
        self._compressor = zlib.compressobj(1, zlib.DEFLATED, -15)

    def deflate(self, data: bytes) -> bytes:
        c = self._compressor
        out = c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)
        return out[:-4] if out.endswith(_DEFLATE_TAIL) else out
