"""The memory store: everything in process memory, nothing survives a restart."""

from __future__ import annotations

from operator import itemgetter

from .base import MsgRecord, StoreLimits
from .common import Channel, CoreStore, MsgLog

# Records are kept as plain tuples, sealed in tuples of CHUNK: the garbage collector stops
# tracking a tuple of plain values (never a MsgRecord, a tuple subclass), so a full
# collection walks a few thousand chunks, not every stored message (at 450,000 tracked
# records it stopped the event loop for a tenth of a second, and it grows with the store).
CHUNK = 4096
_timestamp = itemgetter(1)
_data = itemgetter(4)
_record = MsgRecord._make
_Row = tuple[int, int, str, str, bytes, bool]  # a MsgRecord's fields


class MemoryMsgLog(MsgLog):
    """Records in sealed chunks and an open tail; dropped ones leave a whole chunk at a time."""

    __slots__ = ("first_seq", "last_seq", "last_ts", "nbytes", "_chunks", "_tail", "_base")

    def __init__(self) -> None:
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.nbytes = 0
        self._chunks: list[tuple[_Row, ...]] = []
        self._tail: list[_Row] = []
        self._base = 1  # the sequence of the first record held (dropped ones included)

    def append(self, recs: list[MsgRecord]) -> None:
        self._tail.extend(map(tuple, recs))  # type: ignore[arg-type]
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        if len(recs) == 1:
            self.nbytes += len(last.data)
        else:
            self.nbytes += sum(len(r.data) for r in recs)
        self._seal()

    def append_one(self, rec: MsgRecord) -> None:
        self._tail.append(tuple(rec))  # type: ignore[arg-type]
        self.last_seq = rec.seq
        self.last_ts = rec.timestamp
        self.nbytes += len(rec.data)
        self._seal()

    def _seal(self) -> None:
        tail = self._tail
        while len(tail) >= CHUNK:
            self._chunks.append(tuple(tail[:CHUNK]))
            del tail[:CHUNK]

    def reset_first(self, first_seq: int) -> None:
        self._chunks = []
        self._tail = []
        self._base = first_seq
        self.first_seq = first_seq
        self.last_seq = first_seq - 1

    def _rows(self, start: int, count: int) -> list[_Row]:
        """Up to `count` records from sequence `start` on, as tuples."""
        rows: list[_Row] = []
        chunks = self._chunks
        sealed = len(chunks) * CHUNK
        i = start - self._base
        while len(rows) < count:
            need = count - len(rows)
            if i < sealed:
                c, o = divmod(i, CHUNK)
                part = chunks[c][o : o + need]
            else:
                part = self._tail[i - sealed : i - sealed + need]  # type: ignore[assignment]
            if not part:
                break
            rows.extend(part)
            i += len(part)
        return rows

    def _row(self, seq: int) -> _Row:
        i = seq - self._base
        sealed = len(self._chunks) * CHUNK
        if i < sealed:
            return self._chunks[i // CHUNK][i % CHUNK]
        return self._tail[i - sealed]

    def get(self, seq: int) -> MsgRecord:
        return _record(self._row(seq))

    def get_range(self, start: int, count: int) -> list[MsgRecord]:
        return list(map(_record, self._rows(start, count)))

    def get_rows(self, start: int, count: int) -> list[_Row]:
        return self._rows(start, count)

    def first_timestamp(self) -> int:
        return _timestamp(self._row(self.first_seq))

    def find_timestamp(self, ts: int) -> int:
        lo, hi = self.first_seq, self.last_seq + 1  # the first at or after ts, by bisection
        while lo < hi:
            mid = (lo + hi) // 2
            if _timestamp(self._row(mid)) < ts:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def drop_first(self, n: int) -> None:
        n = min(n, self.count)
        if n <= 0:
            return
        self.nbytes -= sum(map(len, map(_data, self._rows(self.first_seq, n))))
        self.first_seq += n
        whole = min((self.first_seq - self._base) // CHUNK, len(self._chunks))
        if whole:
            del self._chunks[:whole]
            self._base += whole * CHUNK

    def close(self) -> None:
        self._chunks = []
        self._tail = []


class MemoryStore(CoreStore):
    """A store that keeps its state in memory only."""

    kind = "memory"

    def __init__(self, limits: StoreLimits | None = None) -> None:
        super().__init__(limits)

    def _new_log(self, ch: Channel) -> MsgLog:
        return MemoryMsgLog()
