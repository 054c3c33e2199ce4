"""The bytes of a stream snapshot, as the reference writes and reads them (its 2.15
`CreateStreamSnapshotV2` and `RestoreStreamV2`): an archive of entries in the s2 stream
format, so that a snapshot of tidings restores on the reference and one of the reference
restores on tidings, and `nats stream backup` (which decodes the s2 stream as it counts
the bytes) takes tidings' as it takes the reference's.

The s2 stream (github.com/klauspost/compress/s2: Snappy's framing format, with S2's block
format)::

    chunk = u8 type, u24 length (little-endian), body
    0xff  stream identifier, body "S2sTwO" (or Snappy's "sNaPpY"), first
    0x00  compressed: u32 masked CRC-32C of the decoded bytes, an S2 block
    0x01  uncompressed: u32 masked CRC-32C, the bytes
    0x80-0xfe skipped; 0x02-0x7f refused

tidings writes uncompressed chunks of 64 KiB (it has no S2 encoder: a snapshot is as large
as its messages); it reads both kinds (the reference's are compressed). An S2 block is a
uvarint of its decoded length, then literals and copies (Snappy's tags, and S2's repeat:
a 1-byte-offset copy of offset 0 reuses the last offset, with a longer length).

The archive: "NATSARC1", then entries, each::

    uvarint len(name), varint timestamp (zigzag), uvarint sequence,
    uvarint header size, uvarint payload size, name, header bytes, payload bytes

In a snapshot: `state.json` (the stream's state) first, then `consumers/<name>` (a
consumer's config and state, JSON) for each consumer the state counts, then each message
(name: its subject; its time, sequence, headers and payload), then an entry of zeros (the
end: a snapshot without it was cut short).

Pure code: no asyncio, no I/O. Errors are :class:`FormatError`, with the reference's
words (`s2: corrupt input`, `archive: invalid archive stream`, `EOF`).
"""

from __future__ import annotations

import contextlib
import struct
from typing import NamedTuple

from ..varint import put_uvarint
from . import compressed

# -- CRC-32C (Castagnoli), as the s2 stream's chunks carry it ----------------------------------


def _crc_tables() -> list[list[int]]:
    """Slicing-by-8 tables of the reflected Castagnoli polynomial."""
    first = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        first.append(c)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ first[prev[i] & 0xFF] for i in range(256)])
    return tables


_TABLES = _crc_tables()
_PAIRS = struct.Struct("<II")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of `data` (eight bytes a step)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _TABLES
    crc = 0xFFFFFFFF
    view = memoryview(data)
    whole = len(view) // 8 * 8
    for a, b in _PAIRS.iter_unpack(view[:whole]):
        a ^= crc
        crc = (t7[a & 0xFF] ^ t6[(a >> 8) & 0xFF] ^ t5[(a >> 16) & 0xFF] ^ t4[a >> 24]
               ^ t3[b & 0xFF] ^ t2[(b >> 8) & 0xFF] ^ t1[(b >> 16) & 0xFF] ^ t0[b >> 24])
    for byte in view[whole:]:
        crc = t0[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    """The checksum a chunk carries: the CRC-32C rotated and offset (Snappy's mask)."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- the s2 stream ---------------------------------------------------------------------------------

class FormatError(ValueError):
    """A snapshot's bytes that cannot be read (the reference's words)."""


CORRUPT = "s2: corrupt input"
STREAM_IDENTIFIER = b"\xff\x06\x00\x00S2sTwO"
FRAME = 64 * 1024  # bytes of a chunk tidings writes
MAX_BLOCK = 4 << 20  # the largest decoded chunk (the reference's reader's)
MAX_CHUNK = (1 << 24) - 1
_U32 = struct.Struct("<I")


def frame(data: bytes | bytearray | memoryview) -> bytes:
    """One chunk holding `data` (at most FRAME bytes), Snappy-compressed (S2 decodes it)."""
    return compressed.chunk(data)


class S2Reader:
    """An s2 stream, fed as it arrives: the bytes it decodes."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._started = False

    def feed(self, data: bytes) -> list[bytes]:
        """What the chunks that `data` completes decode to."""
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            kind = buf[pos]
            size = buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16
            if not self._started and kind != 0xFF:
                raise FormatError(CORRUPT)
            if kind <= 0x01 and not 4 <= size <= MAX_BLOCK + 4 + 16:
                raise FormatError(CORRUPT)
            if len(buf) - pos - 4 < size:
                break
            body = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            decoded = self._chunk(kind, body)
            if decoded:
                out.append(decoded)
        del buf[:pos]
        return out

    def end(self) -> None:
        """The stream ended: a chunk cut short is corrupt input."""
        if self._buf:
            raise FormatError(CORRUPT)

    def _chunk(self, kind: int, body: bytes) -> bytes:
        if kind <= 0x01:  # Snappy's chunks decode in compiled code; S2's own, below
            with contextlib.suppress(compressed.CorruptChunk):
                return compressed.decode(_U32.pack(kind | len(body) << 8) + body)
        if kind == 0xFF:
            if body not in (b"S2sTwO", b"sNaPpY"):
                raise FormatError(CORRUPT)
            self._started = True
            return b""
        if kind == 0x00:
            decoded = s2_block(body[4:])
        elif kind == 0x01:
            decoded = body[4:]
            if len(decoded) > MAX_BLOCK:
                raise FormatError(CORRUPT)
        elif kind <= 0x7F:
            raise FormatError("s2: unsupported input")
        else:
            return b""  # padding, an index, a skippable chunk
        if masked_crc(decoded) != _U32.unpack_from(body)[0]:
            raise FormatError("s2: corrupt input, crc mismatch")
        return decoded


def _uvarint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A uvarint at pos and the position after it; (-1, pos) if the data ends first."""
    value = shift = 0
    for i in range(pos, min(len(data), pos + 10)):
        byte = data[i]
        if i - pos == 9 and byte > 1:
            raise FormatError("overflow")
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    if len(data) - pos >= 10:
        raise FormatError("overflow")
    return -1, pos


def s2_block(src: bytes) -> bytes:
    """An S2 (or Snappy) block decoded."""
    try:
        size, s = _uvarint(src, 0)
    except FormatError:
        raise FormatError(CORRUPT) from None
    if size < 0 or size > MAX_BLOCK:
        raise FormatError(CORRUPT)
    dst = bytearray()
    offset = 0
    end = len(src)
    while s < end:
        tag = src[s]
        kind = tag & 3
        if kind == 0:
            s, length = _literal_length(src, s, tag)
            if length > size - len(dst) or s + length > end:
                raise FormatError(CORRUPT)
            dst += src[s:s + length]
            s += length
            continue
        s, length, offset = _copy(src, s, tag, kind, offset)
        d = len(dst)
        if offset <= 0 or d < offset or length > size - d:
            raise FormatError(CORRUPT)
        start = d - offset
        if offset >= length:
            dst += dst[start:start + length]
        else:  # overlapping: the last `offset` bytes, repeated
            dst += (dst[start:d] * (length // offset + 1))[:length]
    if len(dst) != size:
        raise FormatError(CORRUPT)
    return bytes(dst)


def _literal_length(src: bytes, s: int, tag: int) -> tuple[int, int]:
    x = tag >> 2
    if x < 60:
        return s + 1, x + 1
    n = x - 59  # 1 to 4 bytes of length
    if s + 1 + n > len(src):
        raise FormatError(CORRUPT)
    return s + 1 + n, int.from_bytes(src[s + 1:s + 1 + n], "little") + 1


def _copy(src: bytes, s: int, tag: int, kind: int, offset: int) -> tuple[int, int, int]:
    """(position after, length, offset) of a copy tag; S2's repeat keeps the offset."""
    if kind == 1:
        if s + 2 > len(src):
            raise FormatError(CORRUPT)
        length = (tag >> 2) & 7
        given = (tag & 0xE0) << 3 | src[s + 1]
        s += 2
        if given:
            return s, length + 4, given
        extra = {5: 1, 6: 2, 7: 3}.get(length, 0)  # a repeat's longer length
        if s + extra > len(src):
            raise FormatError(CORRUPT)
        if extra:
            base = {1: 4, 2: 1 << 8, 3: 1 << 16}[extra]
            length = int.from_bytes(src[s:s + extra], "little") + base
        return s + extra, length + 4, offset
    width = 2 if kind == 2 else 4
    if s + 1 + width > len(src):
        raise FormatError(CORRUPT)
    return s + 1 + width, 1 + (tag >> 2), int.from_bytes(src[s + 1:s + 1 + width], "little")


# -- the archive -----------------------------------------------------------------------------------

MAGIC = b"NATSARC1"
INVALID = "archive: invalid archive stream"
MAX_NAME = 1 << 20


class Entry(NamedTuple):
    """One entry of an archive: a message's subject, time, sequence, headers and payload
    (or a named document, sequence 0)."""

    name: str
    ts: int
    seq: int
    headers: bytes
    payload: bytes


def entry_head(name: bytes, ts: int, seq: int, header_size: int, payload_size: int) -> bytes:
    """An entry's fields and name (its bytes follow)."""
    zigzag = ts << 1 if ts >= 0 else ((-ts) << 1) - 1
    return (put_uvarint(len(name)) + put_uvarint(zigzag) + put_uvarint(seq)
            + put_uvarint(header_size) + put_uvarint(payload_size) + name)


def document(name: str, body: bytes, ts: int) -> bytes:
    """A named entry holding `body` (state.json, a consumer)."""
    return entry_head(name.encode(), ts, 0, 0, len(body)) + body


END = entry_head(b"", 0, 0, 0, 0)


class ArchiveReader:
    """An archive, fed as it is decoded: its entries, each whole. `limit(name, seq,
    header_size, payload_size)` sees an entry's fields before its bytes are kept (and
    raises to refuse it)."""

    def __init__(self, limit: object = None) -> None:
        self._buf = bytearray()
        self._magic = False
        self._limit = limit

    def feed(self, data: bytes) -> list[Entry]:
        buf = self._buf
        buf += data
        out: list[Entry] = []
        pos = 0
        if not self._magic:
            if len(buf) < len(MAGIC):
                return out
            if buf[:len(MAGIC)] != MAGIC:
                raise FormatError(INVALID)
            self._magic = True
            pos = len(MAGIC)
        while True:
            found = self._entry(buf, pos)
            if found is None:
                break
            entry, pos = found
            out.append(entry)
        del buf[:pos]
        return out

    def end(self) -> None:
        """The input ended: between entries it is the end of the archive (`EOF`), within
        one a cut (`archive: invalid archive stream`)."""
        if not self._buf:
            raise FormatError("EOF")
        raise FormatError(INVALID if self._magic else "unexpected EOF")

    def _entry(self, buf: bytearray, pos: int) -> tuple[Entry, int] | None:
        fields = []
        at = pos
        for _ in range(5):
            try:
                value, at = _uvarint(buf, at)
            except FormatError:
                raise FormatError(INVALID) from None
            if value < 0:
                return None
            fields.append(value)
        name_len, zigzag, seq, header_size, payload_size = fields
        if name_len > MAX_NAME or header_size >= 1 << 63 or payload_size >= 1 << 63 \
                or header_size + payload_size >= 1 << 63:
            raise FormatError(INVALID)
        if len(buf) - at < name_len:
            return None
        name = buf[at:at + name_len].decode("utf-8", "replace")
        if self._limit is not None:
            self._limit(name, seq, header_size, payload_size)  # type: ignore[operator]
        body_at = at + name_len
        if len(buf) - body_at < header_size + payload_size:
            return None
        ts = zigzag >> 1 if not zigzag & 1 else ~(zigzag >> 1)
        headers = bytes(buf[body_at:body_at + header_size])
        payload = bytes(buf[body_at + header_size:body_at + header_size + payload_size])
        return Entry(name, ts, seq, headers, payload), body_at + header_size + payload_size
