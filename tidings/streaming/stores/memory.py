"""The memory store: everything in process memory, nothing survives a restart."""

from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter

from .base import MsgRecord, StoreLimits
from .core import Channel, CoreStore, MsgLog

_COMPACT_AT = 4096
_timestamp = attrgetter("timestamp")


class MemoryMsgLog(MsgLog):
    """Records in a list; dropped ones are cut off the front lazily (amortised O(1))."""

    __slots__ = ("first_seq", "last_seq", "last_ts", "nbytes", "_msgs", "_head")

    def __init__(self) -> None:
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.nbytes = 0
        self._msgs: list[MsgRecord] = []
        self._head = 0

    def append(self, recs: list[MsgRecord]) -> None:
        self._msgs.extend(recs)
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        if len(recs) == 1:
            self.nbytes += len(last.data)
        else:
            self.nbytes += sum(len(r.data) for r in recs)

    def append_one(self, rec: MsgRecord) -> None:
        self._msgs.append(rec)
        self.last_seq = rec.seq
        self.last_ts = rec.timestamp
        self.nbytes += len(rec.data)

    def reset_first(self, first_seq: int) -> None:
        self._msgs = []
        self._head = 0
        self.first_seq = first_seq
        self.last_seq = first_seq - 1

    def get(self, seq: int) -> MsgRecord:
        return self._msgs[self._head + seq - self.first_seq]

    def get_range(self, start: int, count: int) -> list[MsgRecord]:
        i = self._head + start - self.first_seq
        return self._msgs[i : i + count]

    def first_timestamp(self) -> int:
        return self._msgs[self._head].timestamp

    def find_timestamp(self, ts: int) -> int:
        i = bisect_left(self._msgs, ts, lo=self._head, key=_timestamp)
        return self.first_seq + i - self._head

    def drop_first(self, n: int) -> None:
        n = min(n, self.count)
        if n <= 0:
            return
        h = self._head
        msgs = self._msgs
        self.nbytes -= sum(len(msgs[i].data) for i in range(h, h + n))
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
