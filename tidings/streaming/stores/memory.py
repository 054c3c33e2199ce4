"""The memory store: everything in process memory, nothing survives a restart."""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter

from .base import MsgRecord, StoreLimits
from .core import Channel, CoreStore, MsgLog

_COMPACT_AT = 4096
# Records are kept as plain tuples: the garbage collector stops tracking a tuple of plain
# values, never a MsgRecord (a tuple subclass), and a full collection over millions of
# tracked records would stop the event loop for a tenth of a second and more.
_timestamp = itemgetter(1)
_data = itemgetter(4)
_record = MsgRecord._make
_Row = tuple[int, int, str, str, bytes, bool]  # a MsgRecord's fields


class MemoryMsgLog(MsgLog):
    """Records in a list (as plain tuples); dropped ones are cut off the front lazily
    (amortised O(1))."""

    __slots__ = ("first_seq", "last_seq", "last_ts", "nbytes", "_msgs", "_head")

    def __init__(self) -> None:
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.nbytes = 0
        self._msgs: list[_Row] = []
        self._head = 0

    def append(self, recs: list[MsgRecord]) -> None:
        self._msgs.extend(map(tuple, recs))
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        if len(recs) == 1:
            self.nbytes += len(last.data)
        else:
            self.nbytes += sum(len(r.data) for r in recs)

    def append_one(self, rec: MsgRecord) -> None:
        self._msgs.append(tuple(rec))
        self.last_seq = rec.seq
        self.last_ts = rec.timestamp
        self.nbytes += len(rec.data)

    def reset_first(self, first_seq: int) -> None:
        self._msgs = []
        self._head = 0
        self.first_seq = first_seq
        self.last_seq = first_seq - 1

    def get(self, seq: int) -> MsgRecord:
        return _record(self._msgs[self._head + seq - self.first_seq])

    def get_range(self, start: int, count: int) -> list[MsgRecord]:
        i = self._head + start - self.first_seq
        return list(map(_record, self._msgs[i : i + count]))

    def first_timestamp(self) -> int:
        return _timestamp(self._msgs[self._head])

    def find_timestamp(self, ts: int) -> int:
        i = bisect_left(self._msgs, ts, lo=self._head, key=_timestamp)
        return self.first_seq + i - self._head

    def drop_first(self, n: int) -> None:
        n = min(n, self.count)
        if n <= 0:
            return
        h = self._head
        msgs = self._msgs
        self.nbytes -= sum(len(_data(msgs[i])) for i in range(h, h + n))
        self._head = h + n
        self.first_seq += n
        if self._head >= _COMPACT_AT and self._head * 2 >= len(msgs):
            del msgs[: self._head]
            self._head = 0

    def close(self) -> None:
        self._msgs = []
        self._head = 0


class MemoryStore(CoreStore):
    """A store that keeps its state in memory only."""

    kind = "memory"

    def __init__(self, limits: StoreLimits | None = None) -> None:
        super().__init__(limits)

    def _new_log(self, ch: Channel) -> MsgLog:
        return MemoryMsgLog()
