"""The backend-independent half of every store.

:class:`CoreStore` keeps channels, clients and subscriptions in memory, assigns sequences
and timestamps, enforces limits, and tells its backend about each change through the
``_on_*`` hooks. A backend supplies one :class:`MsgLog` per channel (where messages live) and
the hooks that make the changes durable.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .base import (
    ChannelInfo,
    ClientRecord,
    MsgRecord,
    ResolvedLimits,
    Store,
    StoreError,
    StoreLimits,
    StoreWriteError,
    SubRecord,
    TooManyChannelsError,
    TooManySubsError,
    UnknownChannelError,
    UnknownSubscriptionError,
)
from .seqindex import SeqIndex

_RESTORE_BATCH = 1024
_new_record = tuple.__new__  # builds a MsgRecord without the NamedTuple __new__ overhead


class MsgLog(ABC):
    """Messages of one channel: the consecutive sequences ``first_seq .. last_seq``."""

    first_seq: int
    last_seq: int
    last_ts: int
    nbytes: int

    @property
    def count(self) -> int:
        return self.last_seq - self.first_seq + 1

    @abstractmethod
    def append(self, recs: list[MsgRecord]) -> None:
        """Append records whose sequences continue from ``last_seq``."""

    def append_one(self, rec: MsgRecord) -> None:
        self.append([rec])

    @abstractmethod
    def reset_first(self, first_seq: int) -> None:
        """On an empty log, make the next appended sequence ``first_seq``."""

    @abstractmethod
    def get(self, seq: int) -> MsgRecord:
        """The record ``seq``, which the caller checked is in range."""

    @abstractmethod
    def get_range(self, start: int, count: int) -> list[MsgRecord]: ...

    def get_rows(self, start: int, count: int) -> Sequence[tuple]:
        """:meth:`get_range` as tuples in MsgRecord's field order (records are such tuples)."""
        return self.get_range(start, count)

    @abstractmethod
    def first_timestamp(self) -> int: ...

    @abstractmethod
    def find_timestamp(self, ts: int) -> int:
        """First sequence with timestamp >= ts, or ``last_seq + 1``."""

    @abstractmethod
    def drop_first(self, n: int) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, caches)."""

    def destroy(self) -> None:
        """Remove the stored messages for good (channel deletion)."""
        self.close()


class IndexedMsgLog(MsgLog):
    """A log whose metadata lives in a :class:`SeqIndex`, with a ring cache of recent records.

    ``durable_last`` is the last sequence known to be durable: :meth:`rollback` forgets
    every record after it.
    """

    def __init__(self, cache_msgs: int) -> None:
        self.ix = SeqIndex(1)
        self.first_seq = 1
        self.last_seq = 0
        self.last_ts = 0
        self.durable_last = 0
        size = 1
        while size < max(cache_msgs, 1):
            size <<= 1
        self._mask = size - 1
        self._ring: list[MsgRecord | None] = [None] * size

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        return self.ix.nbytes

    def first_timestamp(self) -> int:
        return self.ix.ts[self.ix.head]

    def find_timestamp(self, ts: int) -> int:
        return self.ix.find_ts(ts)

    @abstractmethod
    def rollback(self) -> None:
        """Forget the records after ``durable_last`` (their write failed)."""

    def _forget_after(self, last: int) -> None:
        """Drop the in-memory records after ``last``; records dropped by limits stay dropped.

        ``last_ts`` is kept: timestamps must not go backwards.
        """
        ring, mask = self._ring, self._mask
        top = max(self.last_seq, self.ix.last)
        for seq in range(max(last + 1, top - mask), top + 1):
            r = ring[seq & mask]
            if r is not None and r.seq == seq:
                ring[seq & mask] = None
        self.ix.truncate(last)
        self.first_seq = self.ix.first
        self.last_seq = last


class Channel:
    """A channel's in-memory state; ``backend`` is whatever the backend attaches to it."""

    __slots__ = ("name", "limits", "log", "subs", "backend")

    def __init__(self, name: str, limits: ResolvedLimits) -> None:
        self.name = name
        self.limits = limits
        self.log: MsgLog
        self.subs: dict[int, SubRecord] = {}
        self.backend: object = None


class CoreStore(Store):
    """Store logic shared by all backends. Subclasses implement the hooks below."""

    kind = "core"

    def __init__(self, limits: StoreLimits | None = None) -> None:
        self.limits = limits or StoreLimits()
        self._lock = threading.Lock()
        self._channels: dict[str, Channel] = {}
        self._clients: dict[str, ClientRecord] = {}
        self._info: dict[str, str] = {}
        self._next_sub_id = 1
        self._closed = False

    # --- backend hooks (called with self._lock held) --------------------------------

    @abstractmethod
    def _new_log(self, ch: Channel) -> MsgLog: ...

    def _on_channel_created(self, ch: Channel) -> None:
        pass

    def _on_channel_deleted(self, ch: Channel) -> None:
        pass

    def _on_server_info(self, info: dict[str, str]) -> None:
        pass

    def _on_client_put(self, client: ClientRecord) -> None:
        pass

    def _on_client_deleted(self, client_id: str) -> None:
        pass

    def _on_sub_put(self, ch: Channel, sub: SubRecord, new: bool) -> None:
        """A subscription was created (``new``, maybe with pending) or its state replaced."""

    def _on_sub_deleted(self, ch: Channel, sub_id: int) -> None:
        pass

    def _on_sent(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        pass

    def _on_acked(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        pass

    def _on_sent_many(self, ch: Channel, sub: SubRecord, seqs: list[int]) -> None:
        for seq in seqs:
            self._on_sent(ch, sub, seq)

    def _on_acked_many(self, ch: Channel, sub: SubRecord, seqs: list[int]) -> None:
        for seq in seqs:
            self._on_acked(ch, sub, seq)

    def _flush_locked(self) -> None:
        pass

    def _write_failed(self, exc: OSError) -> StoreWriteError:
        """A write failed (lock held): roll back what is not durable, return the error."""
        return StoreWriteError(f"store write failed: {exc}")

    # --- recovery helpers for backends ------------------------------------------------

    def _attach_channel(self, name: str) -> Channel:
        """Create the in-memory channel during recovery (no hooks, no channel limit)."""
        ch = Channel(name, self.limits.for_channel(name))
        self._channels[name] = ch
        return ch

    def _attach_sub(self, ch: Channel, sub: SubRecord) -> None:
        ch.subs[sub.id] = sub
        if sub.id >= self._next_sub_id:
            self._next_sub_id = sub.id + 1

    def _enforce_all(self) -> None:
        now = time.time_ns()
        for ch in self._channels.values():
            self._enforce(ch, now)

    # --- internals ------------------------------------------------------------------

    def _channel(self, name: str) -> Channel:
        ch = self._channels.get(name)
        if ch is None:
            raise UnknownChannelError(name)
        return ch

    def _create(self, name: str) -> Channel:
        if self._closed:
            raise StoreError("store is closed")
        max_channels = self.limits.max_channels
        if max_channels and len(self._channels) >= max_channels:
            raise TooManyChannelsError()
        ch = Channel(name, self.limits.for_channel(name))
        try:
            ch.log = self._new_log(ch)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        self._channels[name] = ch
        self._on_channel_created(ch)
        return ch

    def _sub_of(self, channel: str, sub_id: int) -> tuple[Channel, SubRecord]:
        ch = self._channel(channel)
        sub = ch.subs.get(sub_id)
        if sub is None:
            raise UnknownSubscriptionError(channel, sub_id)
        return ch, sub

    def _enforce(self, ch: Channel, now: int) -> None:
        lim = ch.limits
        log = ch.log
        if lim.max_msgs and log.count > lim.max_msgs:
            log.drop_first(log.count - lim.max_msgs)
        if lim.max_bytes and log.nbytes > lim.max_bytes:
            while log.nbytes > lim.max_bytes and log.count > 1:
                log.drop_first(1)
        if lim.max_age_ns:
            self._expire(ch, now)

    def _expire(self, ch: Channel, now: int) -> int | None:
        """Drop expired messages; the time of the channel's next expiry, if any."""
        log = ch.log
        if log.count == 0:
            return None
        max_age = ch.limits.max_age_ns
        cutoff = now - max_age
        if log.first_timestamp() <= cutoff:
            log.drop_first(log.find_timestamp(cutoff + 1) - log.first_seq)
            if log.count == 0:
                return None
        return log.first_timestamp() + max_age

    # --- server identity ------------------------------------------------------------

    def server_info(self) -> dict[str, str]:
        with self._lock:
            return dict(self._info)

    def set_server_info(self, info: Mapping[str, str]) -> None:
        with self._lock:
            self._info = {str(k): str(v) for k, v in info.items()}
            self._on_server_info(dict(self._info))

    # --- channels -------------------------------------------------------------------

    def channels(self) -> list[str]:
        with self._lock:
            return list(self._channels)

    def has_channel(self, name: str) -> bool:
        return name in self._channels

    def create_channel(self, name: str) -> bool:
        with self._lock:
            if name in self._channels:
                return False
            self._create(name)
            return True

    def delete_channel(self, name: str) -> None:
        with self._lock:
            ch = self._channel(name)
            del self._channels[name]
            ch.log.destroy()
            self._on_channel_deleted(ch)

    def channel_info(self, name: str) -> ChannelInfo:
        with self._lock:
            log = self._channel(name).log
            return ChannelInfo(name, log.count, log.nbytes, log.first_seq, log.last_seq)

    def channel_limits(self, name: str) -> ResolvedLimits:
        ch = self._channels.get(name)
        return ch.limits if ch is not None else self.limits.for_channel(name)

    # --- messages -------------------------------------------------------------------

    def store_msgs(
        self, channel: str, msgs: Iterable[tuple[str, bytes]], timestamp: int | None = None
    ) -> range:
        with self._lock:
            ch = self._channels.get(channel)
            if ch is None:
                ch = self._create(channel)
            log = ch.log
            ts = time.time_ns() if timestamp is None else timestamp
            if ts < log.last_ts:
                ts = log.last_ts
            first = log.last_seq + 1
            recs = [
                _new_record(MsgRecord, (seq, ts, channel, reply, data, False))
                for seq, (reply, data) in enumerate(msgs, first)
            ]
            if recs:
                try:
                    log.append(recs)
                except OSError as exc:
                    raise self._write_failed(exc) from exc
                self._enforce(ch, ts)
            self.last_store_epoch = self.epoch
            return range(first, first + len(recs))

    def store_msg(self, channel: str, reply: str, data: bytes, timestamp: int | None = None) -> int:
        # The single-message path of store_msgs, kept separate because it is the hot one.
        with self._lock:
            ch = self._channels.get(channel)
            if ch is None:
                ch = self._create(channel)
            log = ch.log
            ts = time.time_ns() if timestamp is None else timestamp
            if ts < log.last_ts:
                ts = log.last_ts
            seq = log.last_seq + 1
            try:
                log.append_one(_new_record(MsgRecord, (seq, ts, channel, reply, data, False)))
            except OSError as exc:
                raise self._write_failed(exc) from exc
            lim = ch.limits
            if (
                lim.max_age_ns
                or (lim.max_msgs and seq - log.first_seq >= lim.max_msgs)
                or (lim.max_bytes and log.nbytes > lim.max_bytes)
            ):
                self._enforce(ch, ts)
            self.last_store_epoch = self.epoch
            return seq

    def restore_msgs(self, channel: str, records: Iterable[MsgRecord]) -> int:
        with self._lock:
            ch = self._channels.get(channel)
            if ch is None:
                ch = self._create(channel)
            try:
                stored = self._restore_locked(ch, records)
            except OSError as exc:
                raise self._write_failed(exc) from exc
            if stored:
                self._enforce(ch, time.time_ns())
        return stored

    def _restore_locked(self, ch: Channel, records: Iterable[MsgRecord]) -> int:
        channel, log, stored = ch.name, ch.log, 0
        batch: list[MsgRecord] = []
        expect = log.last_seq + 1
        for rec in records:
            if log.count == 0 and not batch and rec.seq >= expect:
                log.reset_first(rec.seq)
                expect = rec.seq
            if rec.seq != expect:
                raise ValueError(
                    f"restore_msgs({channel!r}): expected sequence {expect}, got {rec.seq}"
                )
            expect += 1
            batch.append(MsgRecord(rec.seq, rec.timestamp, channel, rec.reply, rec.data))
            if len(batch) >= _RESTORE_BATCH:
                log.append(batch)
                stored += len(batch)
                batch = []
        if batch:
            log.append(batch)
            stored += len(batch)
        return stored

    def lookup(self, channel: str, seq: int) -> MsgRecord | None:
        with self._lock:
            log = self._channel(channel).log
            if seq < log.first_seq or seq > log.last_seq:
                return None
            try:
                return log.get(seq)
            except OSError as exc:
                raise self._write_failed(exc) from exc

    def get_msgs(self, channel: str, start_seq: int, max_count: int) -> list[MsgRecord]:
        return self._read_range(channel, start_seq, max_count, False)  # type: ignore[return-value]

    def get_rows(self, channel: str, start_seq: int, max_count: int) -> Sequence[tuple]:
        return self._read_range(channel, start_seq, max_count, True)

    def _read_range(self, channel: str, start_seq: int, max_count: int, rows: bool
                    ) -> Sequence[Any]:
        """Up to `max_count` messages from `start_seq` (or the first still held): as records,
        or with `rows` as the log's plain rows."""
        with self._lock:
            log = self._channel(channel).log
            start = max(start_seq, log.first_seq)
            count = min(max_count, log.last_seq - start + 1)
            if count <= 0:
                return []
            try:
                return log.get_rows(start, count) if rows else log.get_range(start, count)
            except OSError as exc:
                raise self._write_failed(exc) from exc

    def first_last(self, channel: str) -> tuple[int, int]:
        log = self._channel(channel).log
        return log.first_seq, log.last_seq

    def seq_for_timestamp(self, channel: str, timestamp: int) -> int:
        with self._lock:
            log = self._channel(channel).log
            if log.count == 0:
                return log.last_seq + 1
            return log.find_timestamp(timestamp)

    def expire_msgs(self, now: int | None = None) -> int | None:
        now = time.time_ns() if now is None else now
        nxt: int | None = None
        with self._lock:
            for ch in self._channels.values():
                if ch.limits.max_age_ns:
                    when = self._expire(ch, now)
                    if when is not None and (nxt is None or when < nxt):
                        nxt = when
        return nxt

    # --- clients --------------------------------------------------------------------

    def add_client(self, client: ClientRecord) -> None:
        rec = ClientRecord(
            client.client_id,
            client.hb_inbox,
            bytes(client.conn_id),
            client.protocol,
            client.ping_interval,
            client.ping_max_out,
        )
        with self._lock:
            self._clients[rec.client_id] = rec
            self._on_client_put(rec)

    def delete_client(self, client_id: str) -> bool:
        with self._lock:
            if self._clients.pop(client_id, None) is None:
                return False
            self._on_client_deleted(client_id)
            return True

    def client(self, client_id: str) -> ClientRecord | None:
        with self._lock:
            rec = self._clients.get(client_id)
            return None if rec is None else _copy_client(rec)

    def clients(self) -> list[ClientRecord]:
        with self._lock:
            return [_copy_client(c) for c in self._clients.values()]

    # --- subscriptions --------------------------------------------------------------

    def create_sub(self, channel: str, sub: SubRecord) -> int:
        with self._lock:
            ch = self._channels.get(channel)
            if ch is None:
                ch = self._create(channel)
            max_subs = ch.limits.max_subs
            if max_subs and len(ch.subs) >= max_subs:
                raise TooManySubsError()
            rec = sub.copy()
            rec.id = self._next_sub_id
            self._next_sub_id += 1
            if rec.pending:
                rec.last_sent = max(rec.last_sent, max(rec.pending))
            ch.subs[rec.id] = rec
            self._on_sub_put(ch, rec, True)
            return rec.id

    def update_sub(self, channel: str, sub: SubRecord) -> None:
        with self._lock:
            ch, old = self._sub_of(channel, sub.id)
            rec = sub.copy()
            rec.pending = old.pending
            ch.subs[rec.id] = rec
            self._on_sub_put(ch, rec, False)

    def delete_sub(self, channel: str, sub_id: int) -> None:
        with self._lock:
            ch, _ = self._sub_of(channel, sub_id)
            del ch.subs[sub_id]
            self._on_sub_deleted(ch, sub_id)

    def add_pending(self, channel: str, sub_id: int, seq: int) -> None:
        with self._lock:
            ch, sub = self._sub_of(channel, sub_id)
            sub.pending.add(seq)
            if seq > sub.last_sent:
                sub.last_sent = seq
            self._on_sent(ch, sub, seq)

    def ack(self, channel: str, sub_id: int, seq: int) -> bool:
        with self._lock:
            ch, sub = self._sub_of(channel, sub_id)
            if seq not in sub.pending:
                return False
            sub.pending.discard(seq)
            self._on_acked(ch, sub, seq)
            return True

    def add_pending_many(self, channel: str, sub_id: int, seqs: Iterable[int]) -> None:
        with self._lock:
            ch, sub = self._sub_of(channel, sub_id)
            seqs = list(seqs)
            if not seqs:
                return
            sub.pending.update(seqs)
            top = max(seqs)
            if top > sub.last_sent:
                sub.last_sent = top
            self._on_sent_many(ch, sub, seqs)

    def ack_many(self, channel: str, sub_id: int, seqs: Iterable[int]) -> int:
        n = 0
        with self._lock:
            ch, sub = self._sub_of(channel, sub_id)
            pending = sub.pending
            done = [seq for seq in seqs if seq in pending]
            if done:
                pending.difference_update(done)
                self._on_acked_many(ch, sub, done)
                n = len(done)
        return n

    def sub(self, channel: str, sub_id: int) -> SubRecord | None:
        with self._lock:
            rec = self._channel(channel).subs.get(sub_id)
            return None if rec is None else rec.copy()

    def subs(self, channel: str) -> list[SubRecord]:
        with self._lock:
            ch = self._channel(channel)
            return [ch.subs[i].copy() for i in sorted(ch.subs)]

    # --- durability -----------------------------------------------------------------

    def flush(self) -> None:
        with self._lock:
            self._flush_if_open()

    def sync(self) -> int:
        with self._lock:
            self._flush_if_open()
            return self.epoch

    def _flush_if_open(self) -> None:
        """:meth:`_flush_locked` unless closed; a failure is rolled back (lock held)."""
        if not self._closed:
            try:
                self._flush_locked()
            except OSError as exc:
                raise self._write_failed(exc) from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._closed = True
            for ch in self._channels.values():
                ch.log.close()


def _copy_client(c: ClientRecord) -> ClientRecord:
    return ClientRecord(
        c.client_id, c.hb_inbox, c.conn_id, c.protocol, c.ping_interval, c.ping_max_out
    )
