"""Append-only files of typed records with a CRC each (the file store's clients and subs logs).

Layout: an 8-byte magic, then records ``u32 type << 24 | size, u32 crc32(payload), payload``
(little-endian). Writes are buffered until :meth:`RecordLog.flush`; records written since the
last :meth:`RecordLog.commit` are kept until then, so that after a failed write or fsync
:meth:`RecordLog.rollback` truncates the file back to its durable end and queues them again
(a torn record is never followed by later ones). Opening replays the
records; a torn or CRC-failing tail (a write cut short by a crash) is truncated, while a bad
record followed by a good one is corruption and raises :class:`CorruptStoreError`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from zlib import crc32

from ...fileio import fsync_dir, write_all
from .base import CorruptStoreError

HEADER = struct.Struct("<II")
MAX_PAYLOAD = 0xFFFFFF


def _record_ok(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(type, size) of a complete, CRC-valid record at pos, else None."""
    if pos + 8 > len(buf):
        return None
    word, crc = HEADER.unpack_from(buf, pos)
    size = word & MAX_PAYLOAD
    end = pos + 8 + size
    if word == 0 or end > len(buf) or crc32(buf[pos + 8 : end]) != crc:
        return None
    return word >> 24, size


def parse_records(
    buf: bytes, start: int, path: Path, truncate_corrupt: bool
) -> tuple[list[tuple[int, bytes]], int]:
    """Records from ``buf[start:]`` and the offset where the valid part ends."""
    out: list[tuple[int, bytes]] = []
    pos = start
    while pos < len(buf):
        ok = _record_ok(buf, pos)
        if ok is None:
            if not truncate_corrupt:
                # A torn write followed by later records must not silently lose them.
                for nxt in range(pos + 1, len(buf) - 8):
                    ok = _record_ok(buf, nxt)
                    if ok is not None and ok[1] > 0:
                        raise CorruptStoreError(
                            f"{path}: corrupt record at offset {pos} followed by valid records "
                            f"(at offset {nxt}); refusing to discard them "
                            "(--file_truncate_bad_eof would truncate the file there)"
                        )
            break
        rtype, size = ok
        out.append((rtype, buf[pos + 8 : pos + 8 + size]))
        pos += 8 + size
    return out, pos


def encode(rtype: int, payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("record too large")
    return HEADER.pack(rtype << 24 | len(payload), crc32(payload)) + payload


class RecordLog:
    """One typed record file, opened for appending."""

    def __init__(self, path: Path, magic: bytes, retire: Callable[[int], None]) -> None:
        self.path = path
        self.magic = magic
        self._retire = retire
        self.fd = -1
        self.buf: list[bytes] = []
        self.records = 0
        self.size = 0  # bytes in the file
        self.synced_size = 0  # bytes known durable
        self.unsynced: list[bytes] = []  # written since then

    def open(self, truncate_corrupt: bool = False) -> list[tuple[int, bytes]]:
        """Open (creating if needed) and return the stored records."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        data = b""
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        if len(data) < len(self.magic):
            if data and not self.magic.startswith(data):
                os.close(fd)
                raise CorruptStoreError(f"{self.path}: not a tidings record log")
            os.ftruncate(fd, 0)
            write_all(fd, self.magic)
            self.fd = fd
            self.size = self.synced_size = len(self.magic)
            return []
        if not data.startswith(self.magic):
            os.close(fd)
            raise CorruptStoreError(f"{self.path}: not a tidings record log")
        try:
            records, end = parse_records(data, len(self.magic), self.path, truncate_corrupt)
        except CorruptStoreError:
            os.close(fd)
            raise
        if end < len(data):
            os.ftruncate(fd, end)
            os.fsync(fd)
        self.fd = fd
        self.records = len(records)
        self.size = self.synced_size = end
        return records

    def append(self, rtype: int, payload: bytes) -> None:
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"{self.path}: record of {len(payload)} bytes is too large")
        self.buf.append(HEADER.pack(rtype << 24 | len(payload), crc32(payload)) + payload)
        self.records += 1

    def append_many(self, rtype: int, payloads: list[bytes]) -> None:
        """:meth:`append` of several small records of one type."""
        pack = HEADER.pack
        word = rtype << 24
        self.buf.extend(pack(word | len(p), crc32(p)) + p for p in payloads)
        self.records += len(payloads)

    def flush(self) -> bool:
        """Write buffered records; True if anything was written.

        On failure the file is cut back to where it was and the records stay buffered.
        """
        if not self.buf:
            return False
        data = b"".join(self.buf)
        try:
            write_all(self.fd, data)
        except OSError:
            os.ftruncate(self.fd, self.size)
            raise
        self.buf.clear()
        self.size += len(data)
        self.unsynced.append(data)
        return True

    def commit(self) -> None:
        """Everything written so far is durable."""
        self.synced_size = self.size
        self.unsynced.clear()

    def rollback(self) -> None:
        """Undo the writes since :meth:`commit`, keeping their records buffered."""
        os.ftruncate(self.fd, self.synced_size)
        self.size = self.synced_size
        self.buf[:0] = self.unsynced
        self.unsynced = []

    def rewrite(self, records: Iterable[tuple[int, bytes]]) -> None:
        """Atomically replace the file's content with ``records`` (compaction).

        The records must describe the whole live state: the buffer is dropped on success.
        """
        tmp = self.path.with_name(self.path.name + ".tmp")
        parts = [self.magic]
        count = 0
        for rtype, payload in records:
            parts.append(encode(rtype, payload))
            count += 1
        content = b"".join(parts)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, content)
            os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self._retire(self.fd)
        self.fd = fd
        self.records = count
        self.buf.clear()
        self.size = self.synced_size = len(content)
        self.unsynced = []
        fsync_dir(self.path.parent)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.flush()
            finally:
                self._retire(self.fd)
                self.fd = -1
