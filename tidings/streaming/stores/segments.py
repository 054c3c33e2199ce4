"""A channel's messages on disk: append-only segment files, each with an index file.

``msgs.<first seq, 20 digits>.dat``: an 8-byte magic, then records
``u32 body size, u32 crc32(body), body`` where body is
``u64 seq, i64 timestamp, u16 reply size, reply, data`` (little-endian).

``msgs.<first seq>.idx``: an 8-byte magic, then 32-byte entries
``u64 seq, u64 offset, i64 timestamp, u32 data size, u32 crc32(previous 28 bytes)``. The
index only speeds up opening: it is checked against its segment and rebuilt when wrong.

``first``: the first sequence still available and the last sequence ever stored
(``u64, u64, u32 crc``), so dropped messages stay dropped and sequences are never reused.

Opening scans the last segment and truncates a torn or CRC-failing tail; a bad record that
is followed by a valid one is corruption and raises :class:`CorruptStoreError`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from zlib import crc32

from ...fileio import fsync_dir, write_all
from .base import CorruptStoreError, MsgRecord
from .common import IndexedMsgLog

DAT_MAGIC = b"TDMSGS01"
IDX_MAGIC = b"TDMIDX01"
PREFIX = struct.Struct("<II")
BODY = struct.Struct("<QqH")
IDX = struct.Struct("<QQqII")
IDX28 = struct.Struct("<QQqI")
FIRST = struct.Struct("<QQI")
U32 = struct.Struct("<I")
OVERHEAD = PREFIX.size + BODY.size
_new_record = tuple.__new__
_FLUSH_AT = 1 << 20
_NAME_DIGITS = 20


class Segment:
    """One data file and its index; ``end`` counts bytes written or buffered."""

    __slots__ = ("first_seq", "count", "end", "first_ts", "dat", "idx", "fd", "ifd")

    def __init__(self, directory: Path, first_seq: int) -> None:
        self.first_seq = first_seq
        self.count = 0
        self.end = len(DAT_MAGIC)
        self.first_ts = 0
        name = f"msgs.{first_seq:0{_NAME_DIGITS}d}"
        self.dat = directory / f"{name}.dat"
        self.idx = directory / f"{name}.idx"
        self.fd = -1
        self.ifd = -1

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


def _scan(
    seg: Segment, data: bytes, truncate_corrupt: bool
) -> tuple[list[tuple[int, int, int, int]], int]:
    """Index entries (seq, offset, ts, data size) of the valid records and where they end."""
    entries: list[tuple[int, int, int, int]] = []
    pos = len(DAT_MAGIC)
    n = len(data)
    expect = seg.first_seq
    while pos + OVERHEAD <= n:
        size, crc = PREFIX.unpack_from(data, pos)
        end = pos + 8 + size
        if size < BODY.size or end > n or crc32(data[pos + 8 : end]) != crc:
            if not truncate_corrupt:
                after = _valid_record_after(data, pos, expect)
                if after is not None:
                    raise CorruptStoreError(
                        f"{seg.dat}: corrupt record at offset {pos} followed by valid records "
                        f"(at offset {after}); refusing to discard them "
                        "(--file_truncate_bad_eof would truncate the file there)"
                    )
            break
        seq, ts, rlen = BODY.unpack_from(data, pos + 8)
        if seq != expect:
            break
        entries.append((seq, pos, ts, size - BODY.size - rlen))
        expect += 1
        pos = end
    return entries, pos


def _valid_record_after(data: bytes, pos: int, seq: int) -> int | None:
    """Offset of a valid record of sequence ``seq`` or ``seq + 1`` after a bad one at pos.

    Records carry their sequence, so this finds both a record written again after a torn
    one (same sequence) and the record following a damaged one.
    """
    for want in (seq, seq + 1):
        needle = struct.pack("<Q", want)
        i = data.find(needle, pos + 1)
        while i >= 0:
            start = i - PREFIX.size
            if start > pos:
                size, crc = PREFIX.unpack_from(data, start)
                end = start + 8 + size
                if size >= BODY.size and end <= len(data) and crc32(data[i:end]) == crc:
                    return start
            i = data.find(needle, i + 1)
    return None


def _read_index(seg: Segment, data_size: int) -> list[tuple[int, int, int, int]] | None:
    """The segment's index if it is consistent with the data file, else None."""
    try:
        raw = seg.idx.read_bytes()
    except FileNotFoundError:
        return None
    body = len(raw) - len(IDX_MAGIC)
    if not raw.startswith(IDX_MAGIC) or body <= 0 or body % IDX.size:
        return None
    entries = []
    expect = seg.first_seq
    for seq, off, ts, dsize, crc in IDX.iter_unpack(memoryview(raw)[len(IDX_MAGIC) :]):
        if seq != expect or crc32(IDX28.pack(seq, off, ts, dsize)) != crc:
            return None
        entries.append((seq, off, ts, dsize))
        expect += 1
    # The last entry must describe the last record of the data file.
    seq, off, ts, dsize = entries[-1]
    with open(seg.dat, "rb") as f:
        f.seek(off)
        head = f.read(OVERHEAD)
    if len(head) < OVERHEAD:
        return None
    size, _ = PREFIX.unpack_from(head)
    rseq, rts, rlen = BODY.unpack_from(head, 8)
    if rseq != seq or rts != ts or off + 8 + size != data_size:
        return None
    return entries


def _write_index(seg: Segment, entries: list[tuple[int, int, int, int]]) -> None:
    parts = [IDX_MAGIC]
    for seq, off, ts, dsize in entries:
        head = IDX28.pack(seq, off, ts, dsize)
        parts.append(head + U32.pack(crc32(head)))
    tmp = seg.idx.with_name(seg.idx.name + ".tmp")
    tmp.write_bytes(b"".join(parts))
    os.replace(tmp, seg.idx)


class FileMsgLog(IndexedMsgLog):
    """Messages of one channel in segment files under ``directory``.

    ``retire(fd)`` is called for descriptors no longer needed, so that the store can close
    them only once no fsync may be running on them.

    The durable mark (``durable_last`` and where the last durable record ends) is what a
    failed write rolls back to: the files are truncated there and the buffers dropped, so a
    torn record is never followed by later ones.
    """

    def __init__(
        self,
        directory: Path,
        retire: Callable[[int], None],
        *,
        segment_bytes: int,
        segment_msgs: int,
        segment_age_ns: int,
        cache_msgs: int,
        subject: str,
        dirty: set[FileMsgLog],
        sync_on_rotate: bool = True,
    ) -> None:
        super().__init__(cache_msgs)
        self.dir = directory
        self.subject = subject
        self._dirty = dirty
        self.sync_on_rotate = sync_on_rotate
        self._retire = retire
        self.segment_bytes = segment_bytes
        self.segment_msgs = segment_msgs
        self.segment_age_ns = segment_age_ns
        self.segs: list[Segment] = []
        # (first seq, end offset) of the segment holding durable_last, None if no segment
        self.durable_seg: tuple[int, int] | None = None
        self.wbuf: list[bytes] = []
        self.ibuf: list[bytes] = []
        self.wbuf_bytes = 0
        self.flushed_last = 0
        self.first_dirty = False
        self.first_fd = -1
        self.dirty_fds: set[int] = set()

    # --- opening --------------------------------------------------------------------

    def recover(self, truncate_corrupt: bool) -> None:
        """Load the segments, repairing the tail. The directory must exist."""
        firsts = []
        for p in self.dir.iterdir():
            name = p.name
            if name.startswith("msgs.") and name.endswith(".dat"):
                try:
                    firsts.append(int(name[5:-4]))
                except ValueError:
                    continue
        firsts.sort()
        stored_first, stored_last = self._read_first()
        prev_last: int | None = None
        for i, first in enumerate(firsts):
            seg = Segment(self.dir, first)
            data_size = seg.dat.stat().st_size
            tail = i == len(firsts) - 1
            entries = None if tail else _read_index(seg, data_size)
            if entries is None:
                data = seg.dat.read_bytes()
                if not data.startswith(DAT_MAGIC) and len(data) >= len(DAT_MAGIC):
                    raise CorruptStoreError(f"{seg.dat}: not a tidings segment")
                entries, end = _scan(seg, data, truncate_corrupt)
                if end < len(data) and not tail and not truncate_corrupt:
                    raise CorruptStoreError(f"{seg.dat}: damaged record at offset {end}")
                if end != len(data) or len(data) < len(DAT_MAGIC):
                    with open(seg.dat, "r+b") as f:
                        if len(data) < len(DAT_MAGIC):
                            f.write(DAT_MAGIC)
                            end = len(DAT_MAGIC)
                        f.truncate(end)
                        os.fsync(f.fileno())
                data_size = end
                _write_index(seg, entries)
            if not entries:
                seg.dat.unlink()
                seg.idx.unlink(missing_ok=True)
                continue
            if prev_last is not None and entries[0][0] != prev_last + 1:
                raise CorruptStoreError(f"{self.dir}: a segment is missing before {seg.dat.name}")
            seg.count = len(entries)
            seg.end = data_size
            seg.first_ts = entries[0][2]
            prev_last = entries[-1][0]
            self.segs.append(seg)
            for _seq, off, ts, dsize in entries:
                self.ix.append(ts, dsize, off)
            self.last_ts = entries[-1][2]
        if self.segs:
            self.ix.first = self.segs[0].first_seq
            self.first_seq = self.ix.first
            self.last_seq = self.ix.last
            if stored_first > self.first_seq:
                self._drop_to(min(stored_first, self.last_seq + 1))
        else:
            # No message on disk: the first file keeps the sequences from being reused.
            self.last_seq = stored_last
            self.ix.reset(stored_last + 1)
            self.first_seq = stored_last + 1
        self.flushed_last = self.last_seq
        if self.segs:
            self._open_write_segment(self.segs[-1])
        self.commit(self.mark())

    def _read_first(self) -> tuple[int, int]:
        try:
            raw = (self.dir / "first").read_bytes()
        except FileNotFoundError:
            return 0, 0
        if len(raw) != FIRST.size:
            return 0, 0
        first, last, crc = FIRST.unpack(raw)
        if crc32(raw[:16]) != crc:
            return 0, 0
        return first, last

    def _open_write_segment(self, seg: Segment) -> None:
        seg.fd = os.open(seg.dat, os.O_RDWR | os.O_APPEND)
        seg.ifd = os.open(seg.idx, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(seg.ifd).st_size == 0:
            write_all(seg.ifd, IDX_MAGIC)

    # --- writing --------------------------------------------------------------------

    def _new_segment(self, first_seq: int, ts: int) -> Segment:
        self._flush_buffers()
        if self.segs and self.segs[-1].count == 0:
            self._remove_segment(self.segs.pop())
        if self.segs:
            old = self.segs[-1]
            # A closed segment is synced once, so its index is trusted when reopening.
            if old.fd >= 0:
                if self.sync_on_rotate:
                    os.fsync(old.fd)
                    os.fsync(old.ifd)
                self.dirty_fds.discard(old.fd)
                self.dirty_fds.discard(old.ifd)
                self._retire(old.fd)
                self._retire(old.ifd)
                old.fd = old.ifd = -1
        seg = Segment(self.dir, first_seq)
        seg.first_ts = ts
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
        try:
            seg.fd = os.open(seg.dat, flags, 0o644)
            write_all(seg.fd, DAT_MAGIC)
            seg.ifd = os.open(seg.idx, flags, 0o644)
            write_all(seg.ifd, IDX_MAGIC)
            if self.sync_on_rotate:
                fsync_dir(self.dir)
        except OSError:
            self._remove_segment(seg)  # a full disk: neither its files nor their fds stay
            raise
        self.segs.append(seg)
        return seg

    def _needs_new_segment(self, seg: Segment | None, seq: int, ts: int) -> bool:
        if seg is None or seq != seg.first_seq + seg.count:
            return True
        if seg.count == 0:
            return False
        return (
            seg.end >= self.segment_bytes
            or (self.segment_msgs and seg.count >= self.segment_msgs)
            or (self.segment_age_ns and ts - seg.first_ts >= self.segment_age_ns)
        )

    def append(self, recs: list[MsgRecord]) -> None:
        seg = self.segs[-1] if self.segs else None
        if seg is not None and seg.count and self._fits(seg, recs):
            self._append_fast(seg, recs)
            return
        wbuf = self.wbuf
        ibuf = self.ibuf
        ring = self._ring
        mask = self._mask
        ix = self.ix
        for r in recs:
            seq = r.seq
            ts = r.timestamp
            if self._needs_new_segment(seg, seq, ts):
                seg = self._new_segment(seq, ts)
            reply = r.reply.encode() if r.reply else b""
            data = r.data
            body = BODY.pack(seq, ts, len(reply)) + reply + data
            off = seg.end
            wbuf.append(PREFIX.pack(len(body), crc32(body)))
            wbuf.append(body)
            head = IDX28.pack(seq, off, ts, len(data))
            ibuf.append(head + U32.pack(crc32(head)))
            size = 8 + len(body)
            seg.end = off + size
            if seg.count == 0:
                seg.first_ts = ts
            seg.count += 1
            self.wbuf_bytes += size
            ix.append(ts, len(data), off)
            ring[seq & mask] = r
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        self._dirty.add(self)
        if self.wbuf_bytes >= _FLUSH_AT:
            self._flush_buffers()

    def _fits(self, seg: Segment, recs: list[MsgRecord]) -> bool:
        """Whether every record of the batch goes into ``seg`` (no rotation on the way)."""
        n = len(recs)
        if recs[0].seq != seg.first_seq + seg.count:
            return False
        if self.segment_msgs and seg.count + n - 1 >= self.segment_msgs:
            return False
        if self.segment_age_ns and recs[-1].timestamp - seg.first_ts >= self.segment_age_ns:
            return False
        # an upper bound of the bytes written before the last record (4 bytes per character
        # of a reply subject at most)
        size = 0
        for r in recs:
            size += len(r.data) + 4 * len(r.reply)
        return seg.end + size + n * OVERHEAD < self.segment_bytes

    def _append_fast(self, seg: Segment, recs: list[MsgRecord]) -> None:
        """:meth:`append` of a batch that stays in the current segment (the common case)."""
        wbuf = self.wbuf
        ibuf = self.ibuf
        ring = self._ring
        mask = self._mask
        bpack = BODY.pack
        ppack = PREFIX.pack
        ipack = IDX28.pack
        upack = U32.pack
        start = off = seg.end
        tss: list[int] = []
        sizes: list[int] = []
        offs: list[int] = []
        for r in recs:
            seq = r.seq
            ts = r.timestamp
            data = r.data
            reply = r.reply
            if reply:
                rb = reply.encode()
                body = bpack(seq, ts, len(rb)) + rb + data
            else:
                body = bpack(seq, ts, 0) + data
            wbuf.append(ppack(len(body), crc32(body)))
            wbuf.append(body)
            head = ipack(seq, off, ts, len(data))
            ibuf.append(head + upack(crc32(head)))
            tss.append(ts)
            sizes.append(len(data))
            offs.append(off)
            off += 8 + len(body)
            ring[seq & mask] = r
        seg.end = off
        seg.count += len(recs)
        self.wbuf_bytes += off - start
        self.ix.extend(tss, sizes, offs)
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        self._dirty.add(self)
        if self.wbuf_bytes >= _FLUSH_AT:
            self._flush_buffers()

    def append_one(self, rec: MsgRecord) -> None:
        self.append([rec])

    def _flush_buffers(self) -> None:
        if self.wbuf:
            seg = self.segs[-1]
            write_all(seg.fd, b"".join(self.wbuf))
            write_all(seg.ifd, b"".join(self.ibuf))
            self.wbuf.clear()
            self.ibuf.clear()
            self.wbuf_bytes = 0
            self.dirty_fds.add(seg.fd)
        self.flushed_last = self.last_seq

    def flush(self) -> None:
        self._flush_buffers()
        if self.first_dirty:
            raw = FIRST.pack(self.first_seq, self.last_seq, 0)[:16]
            if self.first_fd < 0:
                self.first_fd = os.open(self.dir / "first", os.O_RDWR | os.O_CREAT, 0o644)
            os.pwrite(self.first_fd, raw + U32.pack(crc32(raw)), 0)
            self.first_dirty = False

    def reset_first(self, first_seq: int) -> None:
        self._flush_buffers()
        for seg in self.segs:
            self._remove_segment(seg)
        self.segs.clear()
        self.ix.reset(first_seq)
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.flushed_last = self.last_seq
        self.first_dirty = True
        self._dirty.add(self)
        self.commit(self.mark())

    # --- the durable mark -------------------------------------------------------------

    def mark(self) -> tuple[int, tuple[int, int] | None]:
        """Where the written records end (call after :meth:`flush`)."""
        if not self.segs:
            return self.last_seq, None
        seg = self.segs[-1]
        return self.last_seq, (seg.first_seq, seg.end)

    def commit(self, mark: tuple[int, tuple[int, int] | None]) -> None:
        """The records up to ``mark`` are durable."""
        self.durable_last, self.durable_seg = mark

    def rollback(self) -> None:
        """Truncate the files to the durable mark and forget every record after it."""
        self.wbuf.clear()
        self.ibuf.clear()
        self.wbuf_bytes = 0
        last = self.durable_last
        segs = self.segs
        while segs and segs[-1].first_seq > last:
            self._remove_segment(segs.pop())
        self._forget_after(last)
        self.flushed_last = min(self.flushed_last, last)
        self._dirty.add(self)
        if self.first_seq > last:
            # Limits dropped every durable record meanwhile: the log is empty.
            for seg in segs:
                self._remove_segment(seg)
            segs.clear()
            self.first_dirty = True
            return
        seg = segs[-1]
        assert self.durable_seg is not None and self.durable_seg[0] == seg.first_seq
        for fd in (seg.fd, seg.ifd):
            if fd >= 0:
                self.dirty_fds.discard(fd)
                self._retire(fd)
        seg.fd = seg.ifd = -1
        seg.count = last - seg.first_seq + 1
        seg.end = self.durable_seg[1]
        os.truncate(seg.dat, seg.end)
        os.truncate(seg.idx, len(IDX_MAGIC) + seg.count * IDX.size)
        self._open_write_segment(seg)

    # --- reading --------------------------------------------------------------------

    def _segment_for(self, seq: int) -> Segment:
        segs = self.segs
        if seq >= segs[-1].first_seq:
            return segs[-1]
        lo, hi = 0, len(segs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if segs[mid].first_seq <= seq:
                lo = mid
            else:
                hi = mid - 1
        return segs[lo]

    def _read_fd(self, seg: Segment) -> int:
        if seg.fd < 0:
            seg.fd = os.open(seg.dat, os.O_RDONLY)
        return seg.fd

    def get(self, seq: int) -> MsgRecord:
        r = self._ring[seq & self._mask]
        if r is not None and r.seq == seq:
            return r
        return self.get_range(seq, 1)[0]

    def get_range(self, start: int, count: int) -> list[MsgRecord]:
        if start + count - 1 > self.flushed_last:
            self._flush_buffers()
        out: list[MsgRecord] = []
        ix = self.ix
        subject = self.subject
        while count > 0:
            seg = self._segment_for(start)
            n = min(count, seg.last_seq - start + 1)
            p = ix.pos(start)
            off = ix.offs[p]
            end = ix.offs[p + n] if start + n <= seg.last_seq else seg.end
            buf = os.pread(self._read_fd(seg), end - off, off)
            if len(buf) != end - off:
                raise CorruptStoreError(f"{seg.dat}: short read at offset {off}")
            pos = 0
            for _ in range(n):
                size, crc = PREFIX.unpack_from(buf, pos)
                body_end = pos + 8 + size
                if crc32(buf[pos + 8 : body_end]) != crc:
                    raise CorruptStoreError(f"{seg.dat}: bad CRC at offset {off + pos}")
                seq, ts, rlen = BODY.unpack_from(buf, pos + 8)
                rstart = pos + 8 + BODY.size
                reply = buf[rstart : rstart + rlen].decode() if rlen else ""
                data = buf[rstart + rlen : body_end]
                out.append(_new_record(MsgRecord, (seq, ts, subject, reply, data, False)))
                pos = body_end
            start += n
            count -= n
        return out

    # --- dropping -------------------------------------------------------------------

    def drop_first(self, n: int) -> None:
        self._drop_to(self.first_seq + min(n, self.count))

    def _drop_to(self, first: int) -> None:
        self.ix.drop_first(first - self.ix.first)
        self.first_seq = first
        self.first_dirty = True
        self._dirty.add(self)
        segs = self.segs
        while len(segs) > 1 and segs[1].first_seq <= first:
            self._remove_segment(segs.pop(0))

    def _remove_segment(self, seg: Segment) -> None:
        for fd in (seg.fd, seg.ifd):
            if fd >= 0:
                self.dirty_fds.discard(fd)
                self._retire(fd)
        seg.fd = seg.ifd = -1
        seg.dat.unlink(missing_ok=True)
        seg.idx.unlink(missing_ok=True)

    # --- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._release_fds()

    def _release_fds(self) -> None:
        for seg in self.segs:
            for fd in (seg.fd, seg.ifd):
                if fd >= 0:
                    self._retire(fd)
            seg.fd = seg.ifd = -1
        if self.first_fd >= 0:
            self._retire(self.first_fd)
            self.first_fd = -1
        self.dirty_fds.clear()

    def destroy(self) -> None:
        self.wbuf.clear()  # the files go: nothing left to write
        self.ibuf.clear()
        self.first_dirty = False
        self.close()
        for seg in self.segs:
            seg.dat.unlink(missing_ok=True)
            seg.idx.unlink(missing_ok=True)
        self.segs.clear()
