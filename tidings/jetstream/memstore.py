"""A stream's messages in memory: sequence numbers, per-subject counts, and the limits a
stream sets on them (max messages, bytes, age, messages per subject; the oldest go first).

A message's size counts as the reference's memory store counts it: subject, headers and
payload, and 16 bytes more. Pure data structure: no asyncio, no I/O.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import NamedTuple

log = logging.getLogger("tidings.jetstream")

OVERHEAD = 16  # per message, as the reference's memory store adds


class StoredMsg(NamedTuple):
    """One stored message (a named tuple: one is made for every read of the store)."""

    subject: str
    seq: int
    headers: bytes | None
    data: bytes
    ts: int  # nanoseconds since the epoch

    @property
    def size(self) -> int:
        return len(self.subject) + len(self.headers or b"") + len(self.data) + OVERHEAD


class Run(NamedTuple):
    """Stored messages in sequence order, column by column (what a bulk read takes);
    `next`: the sequence to go on from; `size`: the bytes of their subjects, headers and
    data."""

    seqs: list[int]
    stamps: list[int]
    subjects: list[bytes]  # UTF-8
    headers: list[bytes]  # b"" for a message without headers
    data: list[bytes]
    next: int
    size: int = 0


class StoreLimits:
    """The limits a stream sets, on what every store has (`subjects`, `count`, `bytes`,
    `first_seq`, `remove`, `oldest_on`, `first_ts`): the oldest go first."""

    subjects: dict[str, int]
    bytes: int
    first_seq: int
    last_seq: int
    on_remove: Callable[[int, str], None] | None = None  # told of each message removed

    @property
    def count(self) -> int:
        raise NotImplementedError

    def remove(self, seq: int) -> bool:
        raise NotImplementedError

    def oldest_on(self, subject: str, n: int) -> list[int]:
        raise NotImplementedError

    def first_ts(self) -> int:
        raise NotImplementedError

    def subject_of(self, seq: int) -> str | None:
        raise NotImplementedError

    def matching(self, start: int, matches: Callable[[str], bool]) -> Iterator[int]:
        """The sequences from `start` on whose subject `matches` (the store says a
        message's subject without reading it)."""
        for seq in range(max(start, self.first_seq), self.last_seq + 1):
            subject = self.subject_of(seq)
            if subject is not None and matches(subject):
                yield seq

    def count_from(self, seq: int) -> int:
        """Messages at or after `seq`."""
        if seq <= self.first_seq:
            return int(self.count)
        if self.count == self.last_seq - self.first_seq + 1:  # (no gap)
            return max(0, self.last_seq - seq + 1)
        return sum(1 for n in range(seq, self.last_seq + 1) if self.subject_of(n) is not None)

    def first_at(self, ns: int) -> int:
        """The first sequence stored at or after `ns` (past the last if none)."""
        for seq in range(self.first_seq, self.last_seq + 1):
            msg = self.get(seq)
            if msg is not None and msg.ts >= ns:
                return seq
        return self.last_seq + 1

    def get(self, seq: int) -> StoredMsg | None:
        raise NotImplementedError

    def scan(self, start: int, end: int, max_bytes: int,
             matches: Callable[[str], bool] | None = None, overhead: int = 0) -> Run:
        """The messages from `start` to `end` (inclusive) whose subject `matches`, as long
        as their subjects, headers and data, and `overhead` bytes a message, stay within
        `max_bytes` (one message at least)."""
        run = Run([], [], [], [], [], start)
        size, seq = 0, max(start, self.first_seq)
        last = min(end, self.last_seq)
        while seq <= last:
            msg = self.get(seq)
            if msg is not None and (matches is None or matches(msg.subject)):
                subject = msg.subject.encode()
                this = len(subject) + len(msg.headers or b"") + len(msg.data) + overhead
                if size and size + this > max_bytes:
                    break
                run.seqs.append(msg.seq)
                run.stamps.append(msg.ts)
                run.subjects.append(subject)
                run.headers.append(msg.headers or b"")
                run.data.append(msg.data)
                size += this
            seq += 1
        return run._replace(next=seq, size=size - overhead * len(run.seqs))

    def enforce(self, max_msgs: int, max_bytes: int, max_age: float,
                per_subject: int, subject: str | None = None) -> None:
        """Remove the oldest messages past the limits (-1 / 0: none). A removal the store
        cannot write (a full disk) leaves the rest for the next call: what is stored stays
        stored, and no caller fails for a limit."""
        try:
            self._enforce(max_msgs, max_bytes, max_age, per_subject, subject)
        except OSError as exc:
            log.warning("jetstream store: limits not applied for now: %s", exc)

    def _enforce(self, max_msgs: int, max_bytes: int, max_age: float,
                 per_subject: int, subject: str | None) -> None:
        if per_subject > 0 and subject is not None and self.subjects.get(subject, 0) > per_subject:
            for seq in self.oldest_on(subject, self.subjects[subject] - per_subject):
                self.remove(seq)
        while max_msgs > 0 and self.count > max_msgs:
            self.remove(self.first_seq)
        while max_bytes > 0 and self.bytes > max_bytes and self.count:
            self.remove(self.first_seq)
        if max_age > 0 and self.count:
            cutoff = time.time_ns() - int(max_age * 1e9)
            while self.count and self.first_ts() < cutoff:
                self.remove(self.first_seq)


class MemoryStore(StoreLimits):
    """Messages by sequence, in order; the state STREAM.INFO reports."""

    def __init__(self, first_seq: int = 1) -> None:
        self.msgs: dict[int, StoredMsg] = {}
        self.subjects: dict[str, int] = {}  # subject -> messages on it
        self._seqs: dict[str, deque[int]] = {}  # subject -> its sequences, in order
        self.bytes = 0
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.last_ts = 0

    # -- writing -------------------------------------------------------------------------
    def store(self, subject: str, headers: bytes | None, data: bytes,
              ts: int | None = None) -> StoredMsg:
        seq = self.last_seq + 1
        msg = StoredMsg(subject, seq, headers, data, ts if ts is not None else time.time_ns())
        self.msgs[seq] = msg
        self.last_seq, self.last_ts = seq, msg.ts
        self.subjects[subject] = self.subjects.get(subject, 0) + 1
        seqs = self._seqs.get(subject)
        if seqs is None:
            seqs = self._seqs[subject] = deque()
        seqs.append(seq)
        self.bytes += msg.size
        if len(self.msgs) == 1:
            self.first_seq = seq
        return msg

    def skip_to(self, seq: int) -> None:
        """The next message stored gets sequence `seq`; those between are never stored (a
        mirror keeps its origin's sequences, gaps included)."""
        if seq > self.last_seq + 1:
            self.last_seq = seq - 1
            if not self.msgs:
                self.first_seq = seq

    def remove(self, seq: int) -> bool:
        msg = self.msgs.pop(seq, None)
        if msg is None:
            return False
        self.bytes -= msg.size
        left = self.subjects[msg.subject] - 1
        if left:
            self.subjects[msg.subject] = left
            seqs = self._seqs[msg.subject]
            if seqs[0] == seq:
                seqs.popleft()
            elif seqs[-1] == seq:
                seqs.pop()
            else:
                seqs.remove(seq)
        else:
            del self.subjects[msg.subject]
            del self._seqs[msg.subject]
        if seq == self.first_seq:
            self._advance_first()
        if self.on_remove is not None:
            self.on_remove(seq, msg.subject)
        return True

    def _advance_first(self) -> None:
        if not self.msgs:
            self.first_seq = self.last_seq + 1
            return
        seq = self.first_seq
        while seq not in self.msgs:
            seq += 1
        self.first_seq = seq

    def purge(self) -> int:
        """Remove every message (the sequence goes on); how many there were."""
        count = len(self.msgs)
        self.msgs.clear()
        self.subjects.clear()
        self._seqs.clear()
        self.bytes = 0
        self.first_seq = self.last_seq + 1
        return count

    # -- limits (StoreLimits) ---------------------------------------------------------------
    def oldest_on(self, subject: str, n: int) -> list[int]:
        """The `n` oldest sequences on `subject`."""
        return list(itertools.islice(self._seqs.get(subject, ()), n))

    def first_ts(self) -> int:
        return self.msgs[self.first_seq].ts

    # -- reading -------------------------------------------------------------------------
    def get(self, seq: int) -> StoredMsg | None:
        return self.msgs.get(seq)

    def subject_of(self, seq: int) -> str | None:
        """The subject of message `seq` (None: no such message)."""
        msg = self.msgs.get(seq)
        return msg.subject if msg is not None else None

    def last_for(self, subject: str) -> StoredMsg | None:
        """The last message on `subject`."""
        seqs = self._seqs.get(subject)
        return self.msgs[seqs[-1]] if seqs else None

    def last_seq_for(self, subject: str) -> int:
        """The sequence of the last message on `subject` (0: none)."""
        seqs = self._seqs.get(subject)
        return seqs[-1] if seqs else 0

    @property
    def count(self) -> int:
        return len(self.msgs)
