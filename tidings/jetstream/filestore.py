"""A stream's messages on disk: the file store, a drop-in for :class:`MemoryStore` that keeps a
stream's messages (``storage: file``) across a restart of the server.

Layout, under the stream's directory (``<store_dir>/jetstream/<account>/streams/<stream>/``)::

    msgs/<n>.blk    append-only blocks of records, n = 1, 2, ... (never reused)

Records (little-endian), as long as the reference's file store counts a message's bytes
(its ``fileStoreMsgSize``), so that ``bytes`` is what STREAM.INFO reports for a file stream::

    u32 rl | HBIT     the record's length, all of it; HBIT when it has headers
    u64 seq | flags   TBIT: a tombstone (message seq, in this block, is removed);
                      PBIT: a purge mark (nothing at or below seq remains; ts = the last ts)
    i64 ts            nanoseconds since the epoch
    u16 subject length, subject (UTF-8)
    [u32 headers length, headers]   when HBIT
    data
    u32 crc32 of all the above, u32 rl again

A block is written until the next record would take it past ``block_size`` (the reference's
default: 8 MB for a limits stream, its ``dynBlkSize`` rule from max_bytes), then a new one
starts. A removal appends a tombstone to the block holding the message, so it survives a
restart; a block whose messages are all gone is deleted (the last block is kept: it holds the
last sequence), one with more dead bytes than live is rewritten (compacted). A purge writes a
new block holding a purge mark, then deletes every older one: the sequence goes on.

Opening reads the blocks: a torn record at a block's end (a crash mid-write) is truncated,
a record that fails its checksum with valid ones after it is skipped, both with a log line;
the per-subject counts and bytes are rebuilt. Memory per message: an index entry (offset,
length, subject id, timestamp: 24 bytes); messages are read back from disk on :meth:`get`
(with one read-ahead buffer). A failed write (a full disk) truncates what it wrote and raises
:class:`OSError`: nothing is stored, the store stays usable.

With ``compression: s2`` a block, once sealed (the next one started), is rewritten as a
compressed file (:mod:`.compressed`: chunks of its records that decode to the same bytes), a
chunk at a time from the caller's timer (:meth:`FileStore.maintain`), then swapped for the
plain one; offsets stay those of the decoded block, a tombstone for it is appended as a chunk.

Writes reach the OS at once; :meth:`FileStore.sync` fsyncs them (the caller calls it every
``sync_interval``; a failure is logged: what it syncs was acknowledged already), or every
write is fsynced with ``sync_always=True`` (and a new block's directory entry before its
first record counts as written). Pure code and file I/O, no asyncio.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from array import array
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from zlib import crc32

from ..fileio import fsync_dir, write_all
from . import compressed
from .memstore import Run, StoredMsg, StoreLimits

log = logging.getLogger("tidings.jetstream")

HBIT = 1 << 31
TBIT = 1 << 63
PBIT = 1 << 62
SEQ_MASK = PBIT - 1
HEAD = struct.Struct("<IQqH")  # rl, seq and flags, ts, subject length
HLEN = struct.Struct("<I")
TRAIL = struct.Struct("<II")  # crc32, rl
EMPTY_RECORD = HEAD.size + TRAIL.size  # 30, as the reference's emptyRecordLen
MAX_RECORD = HBIT - 1

LARGE_BLOCK = 8 * 1024 * 1024  # the reference's defaultLargeBlockSize
MEDIUM_BLOCK = 4 * 1024 * 1024  # defaultMediumBlockSize
MIN_BLOCK = 32 * 1000  # FileStoreMinBlkSize
READ_AHEAD = 64 * 1024
MAX_OPEN_FILES = 16
COMPACT_MIN = 64 * 1024  # dead bytes a block must have before it is rewritten
GAP_ENTRIES = 65536  # skipped sequences kept as index entries; a wider gap starts a block
CHUNK_CACHE = 8  # decoded chunks of compressed blocks kept for reads


def block_size_for(retention: str = "limits", max_bytes: int = -1) -> int:
    """The block size the reference picks for a stream (its ``dynBlkSize``, unencrypted)."""
    if max_bytes > 0:
        size = max_bytes // 4 + 1
        size += -size % 100
        if size <= MIN_BLOCK:
            return MIN_BLOCK
        return LARGE_BLOCK if size >= LARGE_BLOCK else MEDIUM_BLOCK
    return LARGE_BLOCK if retention == "limits" else MEDIUM_BLOCK


def msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """A message's bytes as the reference's file store counts them (its record length)."""
    size = EMPTY_RECORD + len(subject.encode()) + len(data)
    return size + HLEN.size + len(headers) if headers else size


def encode(seq_field: int, ts: int, subject: bytes, headers: bytes | None, data: bytes) -> bytes:
    """One record (see the module's docstring)."""
    rl = EMPTY_RECORD + len(subject) + len(data)
    if headers:
        rl += HLEN.size + len(headers)
    if rl > MAX_RECORD or len(subject) > 0xFFFF:
        raise ValueError("message too large for the file store")
    flags = HBIT if headers else 0
    body = HEAD.pack(rl | flags, seq_field, ts, len(subject)) + subject
    if headers:
        body += HLEN.pack(len(headers)) + headers
    body += data
    return body + TRAIL.pack(crc32(body), rl)


_new_msg = partial(tuple.__new__, StoredMsg)  # (a StoredMsg from a tuple, without its __new__)


def decode(buf: bytes, pos: int = 0, *, _head=HEAD.unpack_from,  # noqa: ANN001
           _u32=HLEN.unpack_from, _crc=crc32,
           _msg=_new_msg) -> StoredMsg | None:
    """The message record at ``pos`` (None when its checksum fails). (On every read of a
    file stream: the struct methods are bound once.)"""
    word, seq_field, ts, slen = _head(buf, pos)
    end = pos + (word & ~HBIT) - TRAIL.size
    if end > len(buf) or _crc(buf[pos:end]) != _u32(buf, end)[0]:
        return None
    p = pos + HEAD.size
    q = p + slen
    subject = str(buf[p:q], "utf-8", "replace")
    if word & HBIT:
        h = q + HLEN.size
        q = h + _u32(buf, q)[0]
        return _msg((subject, seq_field & SEQ_MASK, buf[h:q], buf[q:end], ts))
    return _msg((subject, seq_field & SEQ_MASK, None, buf[q:end], ts))


class _Block:
    """One block file and the index of its messages: entry i is sequence first + i."""

    __slots__ = ("index", "path", "first", "offs", "lens", "sids", "tss", "live", "live_bytes",
                 "end", "chunks", "checked")

    def __init__(self, index: int, path: Path, first: int) -> None:
        self.index, self.path, self.first = index, path, first
        self.offs = array("q")  # record offset, -1 once removed
        self.lens = array("I")  # record length (the message's bytes)
        self.sids = array("I")  # subject id
        self.tss = array("q")  # timestamp
        self.live = 0
        self.live_bytes = 0
        self.end = 0  # the file's length (compressed: its decoded length)
        self.chunks: compressed.Chunks | None = None  # where a compressed block's chunks are
        self.checked: bytearray | None = None  # 1: entry i's checksum was checked by a scan

    def add(self, off: int, size: int, sid: int, ts: int) -> None:
        self.offs.append(off)
        self.lens.append(size)
        self.sids.append(sid)
        self.tss.append(ts)
        self.live += 1
        self.live_bytes += size

    def kill(self, i: int) -> None:
        self.offs[i] = -1
        self.live -= 1
        self.live_bytes -= self.lens[i]

    @property
    def next_seq(self) -> int:
        return self.first + len(self.offs)


class _Recovered:
    """What opening a store read from one block."""

    def __init__(self) -> None:
        self.names: list[str] = []  # subject of each message entry (sids come later)
        self.tombstones: set[int] = set()
        self.purged = 0  # the highest purge mark
        self.last_seq = 0
        self.last_ts = 0


class _Compression:
    """A sealed block being written compressed to a file beside it, a chunk at a time."""

    __slots__ = ("blk", "fd", "tmp", "pos", "chunks")

    def __init__(self, blk: _Block, fd: int, tmp: Path) -> None:
        self.blk, self.fd, self.tmp = blk, fd, tmp
        self.pos = 0  # the block's bytes compressed so far
        self.chunks = compressed.Chunks()


class CommitFailed(OSError):
    """A batch's write failed: `lost` are the sequences it had stored (taken back)."""

    def __init__(self, error: OSError, lost: list[int]) -> None:
        super().__init__(error.errno, error.strerror)
        self.lost = lost


class FileStore(StoreLimits):
    """Messages by sequence in block files; the state STREAM.INFO reports.

    Between begin() and commit() what is written to the last block waits in memory and
    goes with one write (and, with sync_always, one fsync): a group commit. Reads of it
    are served from memory meanwhile; a failed write takes back what the batch stored.
    """

    def __init__(self, directory: str | os.PathLike[str], first_seq: int = 1, *,
                 block_size: int = LARGE_BLOCK, sync_always: bool = False,
                 compress: bool = False) -> None:
        self.dir = Path(directory) / "msgs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.block_size = block_size
        self.sync_always = sync_always
        self.compress = compress
        self._sealed: deque[_Block] = deque()  # blocks waiting to be compressed
        self._compression: _Compression | None = None
        self._chunk_cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._last_chunk: tuple[_Block, int, bytes] | None = None  # block, its start, bytes
        self.compact_min = COMPACT_MIN
        self.subjects: dict[str, int] = {}  # subject -> messages on it
        self.bytes = 0
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.last_ts = 0
        self._count = 0
        self._blocks: list[_Block] = []
        self._firsts: list[int] = []
        self._next_index = 1
        self._sid: dict[str, int] = {}
        self._names: list[str | None] = []
        self._free: list[int] = []
        self._first_hint: dict[int, int] = {}  # sid -> a sequence at or before its first
        self._last_hint: dict[int, int] = {}  # sid -> a sequence at or after its last
        self._fds: OrderedDict[int, int] = OrderedDict()  # block index -> fd
        self._dirty: set[int] = set()
        self._dir_dirty = False
        self._rcache: tuple[int, int, bytes] | None = None  # block index, offset, bytes
        self._batching = False
        self._buf = bytearray()  # records of the open batch, for _buf_blk from _buf_start
        self._buf_blk: _Block | None = None
        self._buf_start = 0
        self._buf_mark = 0  # entries _buf_blk had when its buffer began
        self._buf_last = (0, 0)  # last_seq, last_ts when it began
        self._failed: tuple[OSError, list[int]] | None = None
        self._gap_block = False  # skip_to: the next message starts a block of its own
        self._recover()
        self.set_compress(compress)
        if not self._blocks and first_seq > 1:
            self._start_block(first_seq, encode(PBIT | (first_seq - 1), 0, b"", None, b""))

    # -- writing -------------------------------------------------------------------------
    def store(self, subject: str, headers: bytes | None, data: bytes,
              ts: int | None = None) -> StoredMsg:
        if self._failed is not None:  # this batch could not be written: nor can the rest
            raise OSError(self._failed[0].errno, self._failed[0].strerror)
        seq = self.last_seq + 1
        headers = headers or None
        msg = StoredMsg(subject, seq, headers, data, ts if ts is not None else time.time_ns())
        rec = encode(seq, msg.ts, subject.encode(), headers, data)
        blk = self._blocks[-1] if self._blocks else None
        if blk is None or self._gap_block or blk.chunks is not None or (
                blk.end and blk.end + len(rec) > self.block_size):
            self._gap_block = False
            self._flush()
            blk, off = self._start_block(seq, rec), 0
            if self.compress and len(self._blocks) > 1:
                self._sealed.append(self._blocks[-2])
            if len(self._blocks) > 1 and not self._blocks[-2].live:
                with contextlib.suppress(OSError):  # else it goes on the next open
                    self._make_durable(blk)  # before the block holding the last sequence goes
                    self._drop_block(self._blocks[-2])
        else:
            off = self._append(blk, rec)
        sid = self._intern(subject)
        blk.add(off, len(rec), sid, msg.ts)
        self.last_seq, self.last_ts = seq, msg.ts
        self.subjects[subject] = count = self.subjects.get(subject, 0) + 1
        if count == 1:
            self._first_hint[sid] = seq
        self._last_hint[sid] = seq
        self.bytes += len(rec)
        self._count += 1
        if self._count == 1:
            self.first_seq = seq
        return msg

    def skip_to(self, seq: int) -> None:
        """The next message stored gets sequence `seq`; those between are never stored (a
        mirror keeps its origin's sequences, gaps included). An empty store marks where it
        starts as a purge does; else the gap is index entries of the last block (a record's
        sequence past the next one is read back as such a gap), or a new block if it is wide."""
        if seq <= self.last_seq + 1:
            return
        if not self._count:
            self.last_seq = seq - 1
            self.purge()
            return
        blk = self._blocks[-1]
        if seq - blk.next_seq > GAP_ENTRIES:
            self._gap_block = True
        else:
            while blk.next_seq < seq:
                blk.offs.append(-1)
                blk.lens.append(0)
                blk.sids.append(0)
                blk.tss.append(0)
        self.last_seq = seq - 1

    def remove(self, seq: int) -> bool:
        found = self._locate(seq)
        if found is None:
            return False
        blk, i = found
        self._append(blk, encode(TBIT | seq, 0, b"", None, b""))
        subject = self._names[blk.sids[i]]
        self._forget(blk, i)
        if seq == self.first_seq:
            self._advance_first()
        if self.on_remove is not None and subject is not None:
            self.on_remove(seq, subject)
        if blk is not self._blocks[-1]:
            if blk.live == 0:
                self._drop_block(blk)
            elif blk.end - blk.live_bytes >= max(blk.end // 2, self.compact_min):
                self._compact(blk)
        return True

    def _forget(self, blk: _Block, i: int) -> None:
        """Take entry i of blk out of the counts (its tombstone is written)."""
        sid, size = blk.sids[i], blk.lens[i]
        blk.kill(i)
        self.bytes -= size
        self._count -= 1
        name = self._names[sid]
        assert name is not None
        left = self.subjects[name] - 1
        if left:
            self.subjects[name] = left
            if left == 1:
                self._single_left(sid)
        else:
            del self.subjects[name]
            self._release(sid)

    def _single_left(self, sid: int) -> None:
        """One message left on a subject: when its last hint is that message, so is first."""
        last = self._last_hint.get(sid)
        found = self._locate(last) if last is not None else None
        if found is not None and found[0].sids[found[1]] == sid:
            self._first_hint[sid] = last  # type: ignore[assignment]

    def _advance_first(self) -> None:
        if not self._count:
            self.first_seq = self.last_seq + 1
            return
        for blk in self._blocks:
            if not blk.live:
                continue
            start = max(self.first_seq - blk.first, 0)
            for i in range(start, len(blk.offs)):
                if blk.offs[i] >= 0:
                    self.first_seq = blk.first + i
                    return

    def purge(self) -> int:
        """Remove every message (the sequence goes on); how many there were."""
        self._flush()
        count, old = self._count, self._blocks
        self._blocks, self._firsts = [], []
        try:
            mark = self._start_block(self.last_seq + 1,
                                     encode(PBIT | self.last_seq, self.last_ts, b"", None, b""))
        except OSError:
            self._blocks, self._firsts = old, [b.first for b in old]
            raise
        try:
            self._make_durable(mark)  # the purge mark, before the blocks go
        except OSError:
            self._remove_file(mark)
            self._blocks, self._firsts = old, [b.first for b in old]
            raise
        for blk in old:
            self._remove_file(blk)
        self.subjects.clear()
        self._sid.clear()
        self._names.clear()
        self._free.clear()
        self._first_hint.clear()
        self._last_hint.clear()
        self.bytes = self._count = 0
        self.first_seq = self.last_seq + 1
        return count

    # -- limits (StoreLimits) ---------------------------------------------------------------
    def oldest_on(self, subject: str, n: int) -> list[int]:
        """The `n` oldest sequences on `subject`."""
        sid = self._sid.get(subject)
        return self._seqs_on(sid, n) if sid is not None else []

    def first_ts(self) -> int:
        return self._ts(self.first_seq)

    def count_from(self, seq: int) -> int:
        """Messages at or after `seq`, from the index (each block's live count)."""
        if seq <= self.first_seq:
            return self._count
        if seq > self.last_seq:
            return 0
        k = bisect_right(self._firsts, seq) - 1
        blk = self._blocks[k]
        i = min(seq - blk.first, len(blk.offs))
        here = len(blk.offs) - i - blk.offs[i:].count(-1)
        return here + sum(b.live for b in self._blocks[k + 1:])

    def first_at(self, ns: int) -> int:
        """The first sequence stored at or after `ns` (past the last if none): a binary
        search of the index's times (stored times do not go back)."""
        blocks = [b for b in self._blocks if b.live]
        lo, hi = 0, len(blocks)
        while lo < hi:  # the first block whose last live time is at or after ns
            mid = (lo + hi) // 2
            blk = blocks[mid]
            last = next(blk.tss[i] for i in range(len(blk.offs) - 1, -1, -1)
                        if blk.offs[i] >= 0)
            if last < ns:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(blocks):
            return self.last_seq + 1
        blk = blocks[lo]
        for i in range(max(self.first_seq - blk.first, 0), len(blk.offs)):
            if blk.offs[i] >= 0 and blk.tss[i] >= ns:
                return blk.first + i
        return self.last_seq + 1

    def _ts(self, seq: int) -> int:
        found = self._locate(seq)
        assert found is not None
        return found[0].tss[found[1]]

    def _seqs_on(self, sid: int, limit: int) -> list[int]:
        """The first `limit` sequences on a subject, oldest first."""
        out: list[int] = []
        start = max(self._first_hint.get(sid, self.first_seq), self.first_seq)
        k = max(bisect_right(self._firsts, start) - 1, 0)
        for blk in self._blocks[k:]:
            offs, sids = blk.offs, blk.sids
            for i in range(max(start - blk.first, 0), len(offs)):
                if sids[i] == sid and offs[i] >= 0:
                    out.append(blk.first + i)
                    if len(out) == limit:
                        self._first_hint[sid] = out[-1]
                        return out
        return out

    # -- reading -------------------------------------------------------------------------
    def get(self, seq: int) -> StoredMsg | None:
        if seq < self.first_seq or seq > self.last_seq:  # (_locate's, inline: every read)
            return None
        blk = self._blocks[bisect_right(self._firsts, seq) - 1]
        i = seq - blk.first
        if i >= len(blk.offs) or (off := blk.offs[i]) < 0:
            return None
        try:
            buf, pos = self._read(blk, off, blk.lens[i])
        except compressed.CorruptChunk:
            buf, pos = b"", 0
        msg = decode(buf, pos) if len(buf) - pos >= EMPTY_RECORD else None
        if msg is None or msg.seq != seq:
            log.error("jetstream file store %s: message %d fails its checksum", self.dir, seq)
            return None
        return msg

    def scan(self, start: int, end: int, max_bytes: int,
             matches: Callable[[str], bool] | None = None, overhead: int = 0) -> Run:
        """StoreLimits.scan from the index and one read of each plain block's span: the
        sequence, time and subject come from the index, only headers and data from the
        records. A record's checksum is checked by the first scan that reads it (opening
        the store checked it too; a compaction, which moves records, has them checked
        again): the reference checks a record once each time it loads the block into its
        cache."""
        run = Run([], [], [], [], [], start)
        seq, last = max(start, self.first_seq), min(end, self.last_seq)
        encoded: dict[int, bytes | None] = {}  # subject id -> its bytes, None: not wanted
        size = 0
        k = bisect_right(self._firsts, seq) - 1
        while seq <= last and 0 <= k < len(self._blocks):
            blk = self._blocks[k]
            if blk.chunks is not None or blk is self._buf_blk:  # (compressed, or mid-batch)
                if size >= max_bytes:
                    break
                part = super().scan(seq, min(last, blk.next_seq - 1),
                                    max_bytes - size if size else max_bytes, matches, overhead)
                if size and not part.seqs:
                    break
                size += sum(map(len, part.subjects)) + sum(map(len, part.headers)) \
                    + sum(map(len, part.data)) + overhead * len(part.seqs)
                for mine, theirs in zip(run[:5], part[:5], strict=True):
                    mine.extend(theirs)
                seq = part.next
            else:
                seq, size = self._scan_block(blk, seq, last, max_bytes, size, matches,
                                             encoded, run, overhead)
            if seq < blk.next_seq:
                break  # (full)
            k += 1
        return run._replace(next=seq, size=size - overhead * len(run.seqs))

    def _scan_block(self, blk: _Block, seq: int, last: int, max_bytes: int, size: int,
                    matches: Callable[[str], bool] | None, encoded: dict[int, bytes | None],
                    run: Run, overhead: int) -> tuple[int, int]:
        """One plain block's part of a scan: (the sequence to go on from, bytes so far).
        (The loop of a bulk read: names bound once, the subject looked up when it
        changes.)"""
        offs, lens, sids, tss, names = blk.offs, blk.lens, blk.sids, blk.tss, self._names
        head, u32, check = HEAD.unpack_from, HLEN.unpack_from, crc32
        add_seq, add_stamp, add_subject = run.seqs.append, run.stamps.append, \
            run.subjects.append
        add_headers, add_data = run.headers.append, run.data.append
        fd = self._fd(blk)
        buf, at, end = b"", 0, 0  # a span of the block's file read at once, from `at`
        first, trail, hsize = blk.first, TRAIL.size, HEAD.size
        checked = blk.checked
        if checked is None or len(checked) < len(offs):
            checked = blk.checked = (checked or bytearray()) + bytearray(
                len(offs) - len(checked or b""))
        sid_was, subject = -1, None
        i, stop = seq - first, min(last - first + 1, len(offs))
        while i < stop:
            off = offs[i]
            if off < 0:
                i += 1
                continue
            sid = sids[i]
            if sid != sid_was:
                sid_was = sid
                if sid in encoded:
                    subject = encoded[sid]
                else:
                    name = names[sid] or ""
                    subject = encoded[sid] = name.encode() \
                        if matches is None or matches(name) else None
            if subject is None:
                i += 1
                continue
            rl = lens[i]
            p = off - at
            if p < 0 or off + rl > end:
                buf = os.pread(fd, max(rl, READ_AHEAD * 4), off)
                at, p, end = off, 0, off + len(buf)
            word, _, _, slen = head(buf, p)
            crc_at = p + rl - trail
            if not checked[i]:
                if check(buf[p:crc_at]) != u32(buf, crc_at)[0]:
                    log.error("jetstream file store %s: message %d fails its checksum",
                              self.dir, first + i)
                    i += 1
                    continue
                checked[i] = 1
            q = p + hsize + slen
            if word & HBIT:
                h = q + 4
                q = h + u32(buf, q)[0]
                headers = buf[h:q]
            else:
                headers = b""
            data = buf[q:crc_at]
            this = len(subject) + len(headers) + len(data) + overhead
            if size and size + this > max_bytes:
                break
            add_seq(first + i)
            add_stamp(tss[i])
            add_subject(subject)
            add_headers(headers)
            add_data(data)
            size += this
            i += 1
        return first + i, size

    def last_for(self, subject: str) -> StoredMsg | None:
        """The last message on `subject`."""
        seq = self.last_seq_for(subject)
        return self.get(seq) if seq else None

    def last_seq_for(self, subject: str) -> int:
        """The sequence of the last message on `subject` (0: none), from the index."""
        sid = self._sid.get(subject)
        if sid is None:
            return 0
        hint = self._last_hint.get(sid)  # (never before the subject's last message)
        if hint is not None and self.first_seq <= hint <= self.last_seq:  # (_locate, inline)
            blk = self._blocks[bisect_right(self._firsts, hint) - 1]
            i = hint - blk.first
            if i < len(blk.offs) and blk.offs[i] >= 0 and blk.sids[i] == sid:
                return hint
        start = min(self._last_hint.get(sid, self.last_seq), self.last_seq)
        k = bisect_right(self._firsts, start) - 1
        for blk in reversed(self._blocks[:k + 1]):
            offs, sids = blk.offs, blk.sids
            for i in range(min(start - blk.first, len(offs) - 1), -1, -1):
                if sids[i] == sid and offs[i] >= 0:
                    self._last_hint[sid] = blk.first + i
                    return blk.first + i
        return 0

    @property
    def count(self) -> int:
        return self._count

    # -- durability ----------------------------------------------------------------------
    def sync(self) -> None:
        """fsync what was written since the last sync (the caller's ``sync_interval``). What
        it syncs was acknowledged already: a failure is logged (and tried again next time),
        not raised into the caller's timer."""
        self._flush()
        for index in list(self._dirty):
            fd = self._fds.get(index)
            try:
                if fd is not None:
                    os.fsync(fd)
            except OSError as exc:
                log.error("jetstream file store %s: fsync of block %d failed: %s",
                          self.dir, index, exc)
                continue
            self._dirty.discard(index)
        if self._dir_dirty:
            try:
                fsync_dir(self.dir)
            except OSError as exc:
                log.error("jetstream file store %s: fsync of the directory failed: %s",
                          self.dir, exc)
                return
            self._dir_dirty = False

    def close(self) -> None:
        """Sync, then close every file."""
        with contextlib.suppress(OSError):
            self.sync()
        self._stop_compression()
        while self._fds:
            os.close(self._fds.popitem()[1])
        self._rcache = None

    # -- compression ---------------------------------------------------------------------
    def set_compress(self, on: bool) -> None:
        """Compress sealed blocks from now on (those sealed before too), or no more blocks."""
        self.compress = on
        if not on:
            self._sealed.clear()
            self._stop_compression()
            return
        self._sealed = deque(b for b in self._blocks[:-1] if b.chunks is None)

    def maintain(self, deadline: float) -> None:
        """Compress sealed blocks a chunk at a time until `deadline` (time.perf_counter)."""
        while time.perf_counter() < deadline and self.compress_step():
            pass

    def compress_step(self) -> bool:
        """Compress one chunk of the block being compressed (or swap the block for its
        compressed file once that is whole and synced); False when nothing is left to do."""
        job = self._compression
        while job is None:
            if not self._sealed:
                return False
            job = self._start_compression(self._sealed.popleft())
        blk = job.blk
        try:
            if job.pos < blk.end:
                data = os.pread(self._fd(blk), min(compressed.CHUNK, blk.end - job.pos),
                                job.pos)
                if not data:
                    raise OSError(f"block {blk.index} ends before {blk.end} bytes")
                piece = compressed.chunk(data)
                write_all(job.fd, piece)
                job.chunks.add(len(data), len(piece))
                job.pos += len(data)
            else:
                self._finish_compression(job)
        except OSError as exc:
            log.warning("jetstream file store %s: block %d not compressed: %s",
                        self.dir, blk.index, exc)
            self._stop_compression()
        return True

    def _start_compression(self, blk: _Block) -> _Compression | None:
        if blk.chunks is not None or blk not in self._blocks or blk is self._blocks[-1]:
            return None
        tmp = blk.path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            log.warning("jetstream file store %s: block %d not compressed: %s",
                        self.dir, blk.index, exc)
            return None
        job = self._compression = _Compression(blk, fd, tmp)
        try:
            write_all(fd, compressed.IDENTIFIER)
        except OSError as exc:
            log.warning("jetstream file store %s: block %d not compressed: %s",
                        self.dir, blk.index, exc)
            self._stop_compression()
            return None
        return job

    def _finish_compression(self, job: _Compression) -> None:
        """The compressed file in the block's place (synced first: the rename may reach the
        disk before its data would otherwise)."""
        os.fsync(job.fd)
        os.close(job.fd)
        self._compression = None
        blk = job.blk
        try:
            os.replace(job.tmp, blk.path)
        except OSError:
            job.tmp.unlink(missing_ok=True)
            raise
        self._close_fd(blk.index)
        self._dirty.discard(blk.index)  # (what it had written is in the synced file)
        blk.chunks = job.chunks
        with contextlib.suppress(OSError):  # (the old file or the new: both hold the same)
            self._dir_changed()

    def _stop_compression(self, blk: _Block | None = None) -> None:
        """Give up the block being compressed (if it is `blk`, when given)."""
        job = self._compression
        if job is None or (blk is not None and job.blk is not blk):
            return
        self._compression = None
        os.close(job.fd)
        job.tmp.unlink(missing_ok=True)

    def _read_chunks(self, blk: _Block, off: int, size: int) -> tuple[bytes, int]:
        """The record at decoded offset `off` of a compressed block (CorruptChunk if a
        chunk it is in does not decode)."""
        last = self._last_chunk  # (reads in order stay in one chunk for a while)
        if last is not None and last[0] is blk:
            start = off - last[1]
            if 0 <= start and start + size <= len(last[2]):
                return last[2], start
        chunks = blk.chunks
        assert chunks is not None
        k = chunks.find(off)
        data = self._chunk(blk, k)
        start = off - chunks.starts[k]
        if start + size <= len(data):
            self._last_chunk = (blk, chunks.starts[k], data)
            return data, start
        parts, got = [data[start:]], len(data) - start
        while got < size:  # (a record that spans chunks)
            k += 1
            data = self._chunk(blk, k)
            parts.append(data)
            got += len(data)
        return b"".join(parts), 0

    def _chunk(self, blk: _Block, k: int) -> bytes:
        key = (blk.index, k)
        cache = self._chunk_cache
        data = cache.get(key)
        if data is not None:
            cache.move_to_end(key)
            return data
        chunks = blk.chunks
        assert chunks is not None
        data = compressed.decode(os.pread(self._fd(blk), chunks.lens[k], chunks.offs[k]))
        cache[key] = data
        if len(cache) > CHUNK_CACHE:
            cache.popitem(last=False)
        return data

    # -- blocks and files ----------------------------------------------------------------
    def subject_of(self, seq: int) -> str | None:
        """The subject of message `seq` (None: no such message), without reading it."""
        found = self._locate(seq)
        if found is None:
            return None
        blk, i = found
        return self._names[blk.sids[i]]

    def _locate(self, seq: int) -> tuple[_Block, int] | None:
        if seq < self.first_seq or seq > self.last_seq:
            return None
        k = bisect_right(self._firsts, seq) - 1
        if k < 0:
            return None
        blk = self._blocks[k]
        i = seq - blk.first
        if i >= len(blk.offs) or blk.offs[i] < 0:
            return None
        return blk, i

    def _block_path(self, index: int) -> Path:
        return self.dir / f"{index}.blk"

    def _start_block(self, first: int, rec: bytes) -> _Block:
        """A new last block whose first record is `rec` (removed again if it fails: its
        record, or with sync_always its directory entry, not on disk)."""
        index = self._next_index
        blk = _Block(index, self._block_path(index), first)
        try:
            self._append(blk, rec)
            self._dir_changed()
        except OSError:
            self._close_fd(index)
            self._dirty.discard(index)
            with contextlib.suppress(OSError):
                blk.path.unlink()
            raise
        self._next_index = index + 1
        self._blocks.append(blk)
        self._firsts.append(first)
        return blk

    def _drop_block(self, blk: _Block) -> None:
        k = self._blocks.index(blk)
        del self._blocks[k], self._firsts[k]
        self._remove_file(blk)

    def _remove_file(self, blk: _Block) -> None:
        self._stop_compression(blk)
        with contextlib.suppress(ValueError):
            self._sealed.remove(blk)
        self._close_fd(blk.index)
        self._dirty.discard(blk.index)
        with contextlib.suppress(FileNotFoundError):
            blk.path.unlink()
        try:
            self._dir_changed()
        except OSError:  # synced later: a block that comes back holds only what is removed
            self._dir_dirty = True

    def _make_durable(self, blk: _Block) -> None:
        """fsync a block and the directory (a file it replaces may then go)."""
        if not self.sync_always:
            os.fsync(self._fd(blk))
            self._dirty.discard(blk.index)
            fsync_dir(self.dir)
            self._dir_dirty = False

    def _dir_changed(self) -> None:
        if self.sync_always:
            fsync_dir(self.dir)
        else:
            self._dir_dirty = True

    def _fd(self, blk: _Block) -> int:
        fd = self._fds.get(blk.index)
        if fd is not None:
            self._fds.move_to_end(blk.index)
            return fd
        if len(self._fds) >= MAX_OPEN_FILES:
            old, old_fd = self._fds.popitem(last=False)
            if old in self._dirty:
                os.fsync(old_fd)
                self._dirty.discard(old)
            os.close(old_fd)
        fd = os.open(blk.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._fds[blk.index] = fd
        return fd

    def _close_fd(self, index: int) -> None:
        fd = self._fds.pop(index, None)
        if fd is not None:
            os.close(fd)
        if self._rcache is not None and self._rcache[0] == index:
            self._rcache = None
        for key in [key for key in self._chunk_cache if key[0] == index]:
            del self._chunk_cache[key]
        if self._last_chunk is not None and self._last_chunk[0].index == index:
            self._last_chunk = None

    # -- group commit ----------------------------------------------------------------------
    def begin(self) -> None:
        """Hold what is written to the last block until commit()."""
        self._batching = True

    def commit(self) -> None:
        """Write what the batch holds (fsync with sync_always). CommitFailed when a write
        of it failed: what it had stored is taken back, its sequences named."""
        self._batching = False
        self._flush()
        failed, self._failed = self._failed, None
        if failed is not None:
            raise CommitFailed(*failed)

    def _flush(self) -> None:
        """Write the batch's buffer; on failure, cut the block back, take back what the
        buffer held and remember it for commit()."""
        blk = self._buf_blk
        if blk is None:
            return
        data = bytes(self._buf)
        self._buf.clear()
        self._buf_blk = None
        fd = self._fd(blk)
        try:
            write_all(fd, data)
            if self.sync_always:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._buf_start)
            self._rcache = None
            lost = self._take_back(blk)
            earlier = self._failed[1] if self._failed is not None else []
            self._failed = (exc, earlier + lost)
            return
        if not self.sync_always:
            self._dirty.add(blk.index)

    def _take_back(self, blk: _Block) -> list[int]:
        """The messages stored in blk's unwritten buffer, forgotten, and the sequence back
        where the buffer began (as if they had been refused one by one)."""
        lost = []
        mark = self._buf_mark
        for i in range(mark, len(blk.offs)):
            lost.append(blk.first + i)
            if blk.offs[i] >= 0:
                self._forget(blk, i)
        for column in (blk.offs, blk.lens, blk.sids, blk.tss):
            del column[mark:]
        blk.end = self._buf_start
        self.last_seq, self.last_ts = self._buf_last
        if self.first_seq > self.last_seq or self.first_seq in lost:
            self._advance_first()
        return lost

    def _append(self, blk: _Block, rec: bytes) -> int:
        """Write a record at the end of blk; its offset. On failure, cut back and raise.
        In a batch, a record of the last block waits in the buffer."""
        if self._batching and self._blocks and blk is self._blocks[-1]:
            if self._buf_blk is not blk:
                self._flush()
                self._buf_blk, self._buf_start, self._buf_mark = blk, blk.end, len(blk.offs)
                self._buf_last = (self.last_seq, self.last_ts)
            off = blk.end
            self._buf += rec
            blk.end = off + len(rec)
            return off
        fd, off, chunks = self._fd(blk), blk.end, blk.chunks
        data, at = (rec, off) if chunks is None else (compressed.chunk(rec), chunks.file_end)
        try:
            write_all(fd, data)
            if self.sync_always:
                os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, at)
            self._rcache = None
            raise
        if chunks is not None:
            chunks.add(len(rec), len(data))
        blk.end = off + len(rec)
        if not self.sync_always:
            self._dirty.add(blk.index)
        return off

    def _read(self, blk: _Block, off: int, size: int) -> tuple[bytes, int]:
        """A buffer holding the record at off, and its position in it."""
        if blk.chunks is not None:
            return self._read_chunks(blk, off, size)
        if blk is self._buf_blk and off >= self._buf_start:
            start = off - self._buf_start
            return bytes(self._buf[start:start + size]), 0
        cache = self._rcache
        if cache is not None and cache[0] == blk.index:
            start = off - cache[1]
            if start >= 0 and start + size <= len(cache[2]):
                return cache[2], start
        buf = os.pread(self._fd(blk), max(size, READ_AHEAD), off)
        self._rcache = (blk.index, off, buf)
        return buf, 0

    def _compact(self, blk: _Block) -> None:
        """Rewrite a block with its live messages only (a crash leaves the old or the new);
        a compressed one is written plain, and compressed again later."""
        self._stop_compression(blk)
        with open(blk.path, "rb") as f:
            old: bytes | bytearray = f.read()
        if blk.chunks is not None:
            old, _, _, why = compressed.read(old)  # type: ignore[arg-type]
            if why:
                return  # (a block whose chunks do not all read is left as it is)
        tmp = blk.path.with_suffix(".tmp")
        offs, out, pos = array("q"), bytearray(), 0
        for off, size in zip(blk.offs, blk.lens, strict=True):
            if off < 0:
                offs.append(-1)
                continue
            out += old[off:off + size]
            offs.append(pos)
            pos += size
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        try:
            write_all(fd, out)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            return  # compaction only saves space: leave the block as it is
        os.close(fd)
        self._close_fd(blk.index)
        self._dirty.discard(blk.index)
        os.replace(tmp, blk.path)
        blk.offs, blk.end, blk.checked = offs, len(out), None
        if blk.chunks is not None:
            blk.chunks = None
            if self.compress and blk not in self._sealed:
                self._sealed.append(blk)
        with contextlib.suppress(OSError):  # (the old block or the new: both hold the same)
            self._dir_changed()

    # -- subjects ------------------------------------------------------------------------
    def _intern(self, subject: str) -> int:
        sid = self._sid.get(subject)
        if sid is None:
            if self._free:
                sid = self._free.pop()
                self._names[sid] = subject
            else:
                sid = len(self._names)
                self._names.append(subject)
            self._sid[subject] = sid
        return sid

    def _release(self, sid: int) -> None:
        name = self._names[sid]
        assert name is not None
        del self._sid[name]
        self._names[sid] = None
        self._free.append(sid)
        self._first_hint.pop(sid, None)
        self._last_hint.pop(sid, None)

    # -- opening -------------------------------------------------------------------------
    def _recover(self) -> None:
        for p in self.dir.glob("*.tmp"):
            p.unlink()  # a compaction or compression cut short: its block is still whole
        found: list[tuple[_Block, _Recovered]] = []
        for index, path in sorted(
                (int(p.stem), p) for p in self.dir.glob("*.blk") if p.stem.isdigit()):
            self._next_index = index + 1
            blk, rec = self._read_block(index, path)
            if blk.end:
                found.append((blk, rec))
            else:
                path.unlink()
        if not found:
            return
        purged = max(r.purged for _, r in found)
        last = max(found, key=lambda f: f[1].last_seq)[1]
        self.last_seq, self.last_ts = last.last_seq, last.last_ts
        for blk, rec in found:
            self._settle(blk, rec, purged)
        *older, newest = (blk for blk, _ in found)
        for blk in older:
            if not blk.live:
                blk.path.unlink()
        self._blocks = [blk for blk in older if blk.live] + [newest]
        self._firsts = [b.first for b in self._blocks]
        self.first_seq = self._firsts[0]
        self._advance_first()

    def _settle(self, blk: _Block, rec: _Recovered, purged: int) -> None:
        """Apply tombstones and purge marks to a block read from disk; count what is left."""
        for i, name in enumerate(rec.names):
            seq = blk.first + i
            if blk.offs[i] < 0:
                continue
            if seq <= purged or seq in rec.tombstones:
                blk.offs[i] = -1
                continue
            sid = self._intern(name)
            blk.sids[i] = sid
            blk.live += 1
            blk.live_bytes += blk.lens[i]
            self.subjects[name] = count = self.subjects.get(name, 0) + 1
            if count == 1:
                self._first_hint[sid] = seq
            self._last_hint[sid] = seq
            self.bytes += blk.lens[i]
            self._count += 1

    def _read_block(self, index: int, path: Path) -> tuple[_Block, _Recovered]:
        buf: bytes | bytearray = path.read_bytes()
        blk, rec = _Block(index, path, 0), _Recovered()
        if compressed.is_compressed(buf):
            buf, blk.chunks = self._decompress_block(path, buf)  # type: ignore[arg-type]
        pos, size = 0, len(buf)
        while pos < size:
            rl = self._record_at(buf, pos, path)
            if rl is None:
                if blk.chunks is None:
                    self._truncate(path, pos, size)
                break
            if rl < 0:
                pos -= rl
                continue
            self._take(blk, rec, buf, pos, rl)
            pos += rl
        blk.end = pos if blk.chunks is None else blk.chunks.decoded
        if not blk.offs:
            blk.first = max(rec.purged, rec.last_seq) + 1
        return blk, rec

    def _decompress_block(self, path: Path, raw: bytes) -> tuple[bytearray, compressed.Chunks]:
        """A compressed block's records; a chunk cut short at its end (a crash while a
        tombstone was appended) is truncated, as a torn record is."""
        buf, chunks, good, why = compressed.read(raw)
        if why == "torn":
            self._truncate(path, good, len(raw))
        elif why:
            log.error("jetstream file store %s: chunk at offset %d does not decode: the "
                      "block's records after it are not read", path, good)
            chunks.file_end = len(raw)  # (appends go after it)
        return buf, chunks

    @staticmethod
    def _record_at(buf: bytes, pos: int, path: Path) -> int | None:
        """The length of a good record at pos; minus it for a bad one with more after it;
        None where the block's good part ends."""
        if len(buf) - pos < EMPTY_RECORD:
            return None
        rl = HEAD.unpack_from(buf, pos)[0] & ~HBIT
        if rl < EMPTY_RECORD or pos + rl > len(buf):
            return None
        crc, rl_again = TRAIL.unpack_from(buf, pos + rl - TRAIL.size)
        if rl_again == rl and crc32(memoryview(buf)[pos:pos + rl - TRAIL.size]) == crc:
            return rl
        if pos + rl == len(buf):
            return None
        log.error("jetstream file store %s: record at offset %d fails its checksum, skipped",
                  path, pos)
        return -rl

    @staticmethod
    def _truncate(path: Path, pos: int, size: int) -> None:
        log.warning("jetstream file store %s: torn record at offset %d (%d bytes), truncated",
                    path, pos, size - pos)
        with open(path, "r+b") as f:
            f.truncate(pos)

    @staticmethod
    def _take(blk: _Block, rec: _Recovered, buf: bytes, pos: int, rl: int) -> None:
        """One good record read back into the block's index."""
        _, seq_field, ts, slen = HEAD.unpack_from(buf, pos)
        seq = seq_field & SEQ_MASK
        if seq_field & TBIT:
            rec.tombstones.add(seq)
            return
        if seq >= rec.last_seq:
            rec.last_seq, rec.last_ts = seq, ts
        if seq_field & PBIT:
            rec.purged = max(rec.purged, seq)
            return
        if not blk.offs:
            blk.first = seq
        if seq < blk.next_seq:
            return
        while blk.next_seq < seq:  # a compacted or skipped record leaves a gap
            _append_entry(blk, -1, 0, 0)
            rec.names.append("")
        p = pos + HEAD.size
        rec.names.append(str(buf[p:p + slen], "utf-8", "replace"))
        _append_entry(blk, pos, rl, ts)


def _append_entry(blk: _Block, off: int, size: int, ts: int) -> None:
    """An index entry read from disk, counted once tombstones are known (_settle)."""
    blk.offs.append(off)
    blk.lens.append(size)
    blk.sids.append(0)
    blk.tss.append(ts)
