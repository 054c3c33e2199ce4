"""Compressed blocks of the file store (``compression: s2``): a sealed block's records as a
Snappy framed stream, the chunked format of the s2 package whose readers (and every snappy
framed reader, and :class:`tidings.jetstream.archive.S2Reader`) decode it to the plain block.

A block is cut into chunks of at most ``CHUNK`` decoded bytes, each compressed on its own, so
that reading one message decodes one chunk (~20 µs), never the block; a record may span two.
A tombstone written after the block was compressed is appended as a chunk of its own: the
file stays append-only and its decoded bytes stay a plain block. :class:`Chunks` maps decoded
offsets (what the store's index holds) to chunks in the file.

The codec is cramjam's Snappy (Rust; CRC-32C checked on every chunk). No asyncio.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

import cramjam

IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"  # the stream identifier chunk that opens the file
CHUNK = 64 * 1024  # decoded bytes a chunk holds at most (the framing format's bound)
_MAX_BODY = CHUNK + 4 + CHUNK // 6 + 32  # a chunk's body at most (checksum, worst expansion)


class CorruptChunk(ValueError):
    """A chunk that does not decode (its checksum or its Snappy data is wrong)."""


def chunk(data: bytes | bytearray | memoryview) -> bytes:
    """`data` (at most CHUNK bytes) as one chunk: its 4-byte header and body."""
    return bytes(cramjam.snappy.compress(bytes(data)))[len(IDENTIFIER):]


def decode(body_chunk: bytes | memoryview) -> bytes:
    """One whole chunk (header and body) decoded, its checksum checked."""
    try:
        return bytes(cramjam.snappy.decompress(IDENTIFIER + bytes(body_chunk)))
    except cramjam.DecompressionError as exc:
        raise CorruptChunk(str(exc)) from None


class Chunks:
    """Where a compressed block's chunks are: chunk k holds decoded bytes from starts[k]
    and is the file's bytes [offs[k], offs[k] + lens[k]) (header included)."""

    __slots__ = ("starts", "offs", "lens", "decoded", "file_end")

    def __init__(self) -> None:
        self.starts = array("q")
        self.offs = array("q")
        self.lens = array("I")
        self.decoded = 0  # decoded bytes (the plain block's length)
        self.file_end = len(IDENTIFIER)

    def add(self, size: int, length: int) -> None:
        """A chunk of `length` file bytes decoding to `size` bytes, at the file's end."""
        self.starts.append(self.decoded)
        self.offs.append(self.file_end)
        self.lens.append(length)
        self.decoded += size
        self.file_end += length

    def find(self, offset: int) -> int:
        """The chunk holding decoded byte `offset`."""
        return bisect_right(self.starts, offset) - 1


def read(buf: bytes) -> tuple[bytearray, Chunks, int, str]:
    """A compressed block file's bytes: its decoded bytes, its chunks, where its good part
    ends in the file, and why it ends there ("" at the file's end; else a chunk cut short,
    which a crash while appending leaves, or one that does not decode)."""
    out, chunks = bytearray(), Chunks()
    pos, size = len(IDENTIFIER), len(buf)
    while pos < size:
        if size - pos < 4:
            return out, chunks, pos, "torn"
        length = 4 + (buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16)
        if length > _MAX_BODY + 4 or buf[pos] > 1:
            return out, chunks, pos, "corrupt"
        if size - pos < length:
            return out, chunks, pos, "torn"
        try:
            data = decode(memoryview(buf)[pos:pos + length])
        except CorruptChunk:
            return out, chunks, pos, "corrupt"
        out += data
        chunks.add(len(data), length)
        pos += length
    return out, chunks, pos, ""


def is_compressed(head: bytes) -> bool:
    """Whether a block file (its first bytes) is a compressed one."""
    return head[:len(IDENTIFIER)] == IDENTIFIER
