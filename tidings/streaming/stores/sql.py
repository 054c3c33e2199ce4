"""The SQL store: SQLite (standard library) or PostgreSQL (psycopg 3), one schema.

Changes are buffered in memory and written in one transaction per :meth:`SqlStore.sync`
(group commit); the in-memory state answers reads, so only old messages are read back from
the database. The two dialects differ only in parameter style, the blob type and how the
sync policy is applied (``PRAGMA synchronous`` / ``synchronous_commit``).

A transaction the database refuses is rolled back: its messages, and those stored since, are
forgotten (``epoch`` counts these rollbacks); the other changes are queued for the next sync.
One server per store: SQLite holds ``<database>.lock``, PostgreSQL a session advisory lock
keyed on the database and schema.

A PostgreSQL connection lost (a database restart, a failover) is reopened by a thread, with
back-off, each try logged; meanwhile every sync and read fails at once with
:class:`StoreUnavailableError` (a sync rolls back as any refused transaction does). The new
session takes the lock again and verifies no other server opened the store meanwhile (see
:mod:`.pglink`), removes what a commit cut off by the loss may have left (messages after each
channel's last known commit: their publishers were refused), and :attr:`Store.on_available`
is called.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .base import (
    ClientRecord,
    CorruptStoreError,
    MsgRecord,
    StoreError,
    StoreLimits,
    StoreLockedError,
    StoreUnavailableError,
    StoreWriteError,
    SubRecord,
)
from .common import Channel, CoreStore, IndexedMsgLog, MsgLog
from .lockfile import lock_store, unlock_store
from .pglink import PgLink, PgLockedError, one_line

log = logging.getLogger("tidings.streaming")

SYNC_POLICIES = ("batch", "interval", "never")
# seconds between reconnection tries: doubling from the first to the last
RECONNECT_FIRST = 0.1
RECONNECT_MAX = 2.0
_new_record = tuple.__new__

SCHEMA = """
CREATE TABLE IF NOT EXISTS tidings_server (
    key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tidings_channels (
    id BIGINT PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS tidings_messages (
    channel_id BIGINT NOT NULL, seq BIGINT NOT NULL, ts BIGINT NOT NULL,
    reply TEXT NOT NULL, data {blob} NOT NULL, PRIMARY KEY (channel_id, seq));
CREATE TABLE IF NOT EXISTS tidings_clients (
    id TEXT PRIMARY KEY, hb_inbox TEXT NOT NULL, conn_id {blob} NOT NULL,
    protocol INTEGER NOT NULL, ping_interval INTEGER NOT NULL, ping_max_out INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tidings_subs (
    id BIGINT PRIMARY KEY, channel_id BIGINT NOT NULL, client_id TEXT NOT NULL,
    inbox TEXT NOT NULL, ack_inbox TEXT NOT NULL, queue_group TEXT NOT NULL,
    durable_name TEXT NOT NULL, max_in_flight INTEGER NOT NULL, ack_wait INTEGER NOT NULL,
    is_durable INTEGER NOT NULL, is_closed INTEGER NOT NULL, last_sent BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS tidings_pending (
    sub_id BIGINT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (sub_id, seq));
"""

_UPSERT_CHANNEL = (
    "INSERT INTO tidings_channels (id, name, first_seq, last_seq) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET first_seq = excluded.first_seq, "
    "last_seq = excluded.last_seq"
)
_UPSERT_CLIENT = (
    "INSERT INTO tidings_clients (id, hb_inbox, conn_id, protocol, ping_interval, ping_max_out) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET hb_inbox = excluded.hb_inbox, "
    "conn_id = excluded.conn_id, protocol = excluded.protocol, "
    "ping_interval = excluded.ping_interval, ping_max_out = excluded.ping_max_out"
)
_SUB_COLS = (
    "client_id, inbox, ack_inbox, queue_group, durable_name, max_in_flight, ack_wait, "
    "is_durable, is_closed, last_sent"
)
_UPSERT_SUB = (
    f"INSERT INTO tidings_subs (id, channel_id, {_SUB_COLS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _SUB_COLS.split(", "))
)


class Dialect:
    """What differs between the SQL databases."""

    def __init__(self, name: str, param: str, blob: str) -> None:
        self.name = name
        self.param = param
        self.blob = blob

    def sql(self, text: str) -> str:
        return text if self.param == "?" else text.replace("?", self.param)


SQLITE = Dialect("sqlite", "?", "BLOB")
POSTGRES = Dialect("postgres", "%s", "BYTEA")


class SqlMsgLog(IndexedMsgLog):
    """A channel's messages: unwritten ones in memory, the rest in the database.

    ``pending`` are not yet handed to a transaction, ``inflight`` are in the one running;
    ``durable_last`` is the last sequence committed.
    """

    def __init__(self, store: SqlStore, ch: Channel, channel_id: int, cache_msgs: int) -> None:
        super().__init__(cache_msgs)
        self.store = store
        self.ch = ch
        self.channel_id = channel_id
        self.pending: list[MsgRecord] = []
        self.inflight: list[MsgRecord] = []
        self.db_first = 1

    def append(self, recs: list[MsgRecord]) -> None:
        ix = self.ix
        ring = self._ring
        mask = self._mask
        for r in recs:
            ix.append(r.timestamp, len(r.data))
            ring[r.seq & mask] = r
        self.pending.extend(recs)
        last = recs[-1]
        self.last_seq = last.seq
        self.last_ts = last.timestamp
        self.store._dirty_chans.add(self.ch)

    def reset_first(self, first_seq: int) -> None:
        self.pending.clear()
        self.ix.reset(first_seq)
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.durable_last = self.last_seq
        self.store._dirty_chans.add(self.ch)

    def rollback(self) -> None:
        self.pending = []
        self.inflight = []
        self._forget_after(self.durable_last)
        self.store._dirty_chans.add(self.ch)

    def _in_memory(self, seq: int) -> MsgRecord | None:
        r = self._ring[seq & self._mask]
        if r is not None and r.seq == seq:
            return r
        for buf in (self.pending, self.inflight):
            if buf and buf[0].seq <= seq <= buf[-1].seq:
                return buf[seq - buf[0].seq]
        return None

    def get(self, seq: int) -> MsgRecord:
        r = self._in_memory(seq)
        return r if r is not None else self.get_range(seq, 1)[0]

    def get_range(self, start: int, count: int) -> list[MsgRecord]:
        end = start + count - 1
        out: list[MsgRecord] = []
        seq = start
        while seq <= end:
            r = self._in_memory(seq)
            if r is None:
                break
            out.append(r)
            seq += 1
        if seq > end:
            return out
        # Messages not in memory are older than those that are: read them in one query.
        mem_start = end + 1
        for buf in (self.inflight, self.pending):
            if buf and seq < buf[0].seq <= end:
                mem_start = min(mem_start, buf[0].seq)
        rows = self.store._read_msgs(self.channel_id, seq, mem_start - 1)
        name = self.ch.name
        for rseq, ts, reply, data in rows:
            out.append(_new_record(MsgRecord, (rseq, ts, name, reply, bytes(data), False)))
        if len(out) != mem_start - start:
            raise CorruptStoreError(
                f"channel {name!r}: messages {seq}..{mem_start - 1} missing from the database"
            )
        for s in range(mem_start, end + 1):
            r = self._in_memory(s)
            if r is None:
                raise CorruptStoreError(f"channel {name!r}: message {s} missing")
            out.append(r)
        return out

    def drop_first(self, n: int) -> None:
        n = min(n, self.count)
        if n <= 0:
            return
        self.ix.drop_first(n)
        self.first_seq += n
        if self.pending and self.pending[0].seq < self.first_seq:
            keep = self.first_seq - self.pending[0].seq
            del self.pending[:keep]
        self.store._dirty_chans.add(self.ch)


class _Taken:
    """The buffered changes one transaction carries (see :meth:`SqlStore._take_batch`)."""

    def __init__(self) -> None:
        self.logs: list[tuple[Channel, int, int]] = []  # (channel, last seq, old db_first)
        self.deleted: list[int] = []
        self.client_ops: dict[str, ClientRecord | None] = {}
        self.sub_ops: dict[int, tuple[Channel, SubRecord] | None] = {}
        self.pend_add: set[tuple[int, int]] = set()
        self.pend_del: set[tuple[int, int]] = set()
        self.info = False


class SqlStore(CoreStore):
    kind = "sql"

    def __init__(
        self,
        conn: Any,
        dialect: Dialect,
        limits: StoreLimits | None = None,
        *,
        cache_msgs: int = 1024,
        on_close: Callable[[], None] | None = None,
        link: PgLink | None = None,
    ) -> None:
        super().__init__(limits)
        self.kind = dialect.name
        self.dialect = dialect
        self._conn = conn
        self._link = link  # how to open the connection again (PostgreSQL)
        self._db_error = _db_error(dialect)
        self._down: str | None = None  # why the connection is gone, while it is
        self._gone: str | None = None  # why this server may write no more
        self._lapsed = False  # a session holding the lock was lost (FT must step down)
        self._stopping = threading.Event()
        self._cache_msgs = cache_msgs
        self._on_close = on_close
        self._db_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._next_channel_id = 1
        self._dirty_chans: set[Channel] = set()
        self._deleted_chans: list[int] = []
        self._client_ops: dict[str, ClientRecord | None] = {}
        self._sub_ops: dict[int, tuple[Channel, SubRecord] | None] = {}
        self._pend_add: set[tuple[int, int]] = set()
        self._pend_del: set[tuple[int, int]] = set()
        self._info_dirty = False
        self._sql = dialect.sql
        self._create_schema()
        self._recover()

    # --- constructors ---------------------------------------------------------------

    @classmethod
    def sqlite(
        cls,
        path: str,
        limits: StoreLimits | None = None,
        *,
        sync: str = "batch",
        cache_msgs: int = 1024,
    ) -> SqlStore:
        import sqlite3

        _check_policy(sync)
        lock_fd = -1
        if str(path) != ":memory:":
            lock_fd = lock_store(Path(f"{path}.lock"), f"sqlite store {path}")
        try:
            conn = sqlite3.connect(str(path), check_same_thread=False)
        except BaseException:
            if lock_fd >= 0:
                unlock_store(lock_fd)
            raise

        def close() -> None:
            conn.close()
            if lock_fd >= 0:
                unlock_store(lock_fd)

        try:
            conn.execute("PRAGMA journal_mode=WAL")
            level = {"batch": "FULL", "interval": "NORMAL", "never": "OFF"}[sync]
            conn.execute(f"PRAGMA synchronous={level}")
            return cls(conn, SQLITE, limits, cache_msgs=cache_msgs, on_close=close)
        except BaseException:
            close()
            raise

    @classmethod
    def postgres(
        cls,
        dsn: str,
        limits: StoreLimits | None = None,
        *,
        sync: str = "batch",
        schema: str | None = None,
        cache_msgs: int = 1024,
    ) -> SqlStore:
        _check_policy(sync)
        link = PgLink(dsn, schema=schema, sync=sync)
        conn = link.open()
        try:
            return cls(conn, POSTGRES, limits, cache_msgs=cache_msgs, link=link)
        except BaseException:
            conn.close()
            raise

    # --- opening --------------------------------------------------------------------

    def _create_schema(self) -> None:
        cur = self._conn.cursor()
        for stmt in SCHEMA.format(blob=self.dialect.blob).split(";"):
            if stmt.strip():
                cur.execute(stmt)
        self._conn.commit()

    def _query(self, text: str, params: tuple[Any, ...] = (), conn: Any = None) -> list[Any]:
        cur = (conn or self._conn).cursor()
        cur.execute(self._sql(text), params)
        return cur.fetchall()

    def _recover(self) -> None:
        q = self._query
        self._info = {k: v for k, v in q("SELECT key, value FROM tidings_server")}
        by_id: dict[int, Channel] = {}
        for cid, name, first, last in q(
            "SELECT id, name, first_seq, last_seq FROM tidings_channels ORDER BY id"
        ):
            ch = self._attach_channel(name)
            log = SqlMsgLog(self, ch, cid, self._cache_msgs)
            ch.log = log
            ch.backend = cid
            by_id[cid] = ch
            self._next_channel_id = max(self._next_channel_id, cid + 1)
            rows = q(
                "SELECT seq, ts, length(data) FROM tidings_messages "
                "WHERE channel_id = ? AND seq >= ? ORDER BY seq",
                (cid, first),
            )
            ix = log.ix
            if rows:
                ix.reset(rows[0][0])
                for i, (seq, ts, size) in enumerate(rows):
                    if seq != rows[0][0] + i:
                        raise CorruptStoreError(f"channel {name!r}: message {seq - 1} missing")
                    ix.append(ts, size)
                log.first_seq = ix.first
                log.last_seq = ix.last
                log.last_ts = rows[-1][1]
            else:
                log.last_seq = max(last, first - 1)
                log.first_seq = log.last_seq + 1
                ix.reset(log.first_seq)
            log.db_first = log.first_seq
            log.durable_last = log.last_seq
        for row in q(
            "SELECT id, hb_inbox, conn_id, protocol, ping_interval, ping_max_out "
            "FROM tidings_clients"
        ):
            self._clients[row[0]] = ClientRecord(
                row[0], row[1], bytes(row[2]), row[3], row[4], row[5]
            )
        subs: dict[int, SubRecord] = {}
        for row in q(f"SELECT id, channel_id, {_SUB_COLS} FROM tidings_subs ORDER BY id"):
            ch = by_id.get(row[1])
            if ch is None:
                continue
            sub = SubRecord(
                client_id=row[2],
                inbox=row[3],
                ack_inbox=row[4],
                queue_group=row[5],
                durable_name=row[6],
                max_in_flight=row[7],
                ack_wait=row[8],
                is_durable=bool(row[9]),
                is_closed=bool(row[10]),
                last_sent=row[11],
                id=row[0],
            )
            subs[sub.id] = sub
            self._attach_sub(ch, sub)
        for sub_id, seq in q("SELECT sub_id, seq FROM tidings_pending"):
            sub = subs.get(sub_id)
            if sub is not None:
                sub.pending.add(seq)
        self._conn.commit()
        self._enforce_all()

    # --- hooks ----------------------------------------------------------------------

    def _new_log(self, ch: Channel) -> MsgLog:
        cid = self._next_channel_id
        self._next_channel_id += 1
        ch.backend = cid
        self._dirty_chans.add(ch)
        return SqlMsgLog(self, ch, cid, self._cache_msgs)

    def _on_channel_deleted(self, ch: Channel) -> None:
        self._dirty_chans.discard(ch)
        self._deleted_chans.append(ch.backend)  # type: ignore[arg-type]
        for sub_id in ch.subs:
            self._sub_ops[sub_id] = None

    def _on_server_info(self, info: dict[str, str]) -> None:
        self._info_dirty = True

    def _on_client_put(self, client: ClientRecord) -> None:
        self._client_ops[client.client_id] = client

    def _on_client_deleted(self, client_id: str) -> None:
        self._client_ops[client_id] = None

    def _on_sub_put(self, ch: Channel, sub: SubRecord, new: bool) -> None:
        self._sub_ops[sub.id] = (ch, sub)
        if new:
            self._pend_add.update((sub.id, seq) for seq in sub.pending)

    def _on_sub_deleted(self, ch: Channel, sub_id: int) -> None:
        self._sub_ops[sub_id] = None

    def _on_sent(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        self._sub_ops[sub.id] = (ch, sub)
        self._note_pending_added((sub.id, seq))

    def _on_acked(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        self._note_pending_removed((sub.id, seq))

    # A pending (sub id, seq) added and removed before a sync cancel out.
    def _note_pending_added(self, key: tuple[int, int]) -> None:
        if key in self._pend_del:
            self._pend_del.discard(key)
        else:
            self._pend_add.add(key)

    def _note_pending_removed(self, key: tuple[int, int]) -> None:
        if key in self._pend_add:
            self._pend_add.discard(key)
        else:
            self._pend_del.add(key)

    # --- writing --------------------------------------------------------------------

    def lock_held(self) -> bool:
        """PostgreSQL's advisory lock lives as long as the connection that took it: a round
        trip on that connection says whether it still does. A lock lost once is not held,
        even after a reconnection took it again: in the gap a standby could have had it, so
        an FT active server steps down. (SQLite's lock is a file's.)"""
        if self._link is None:
            return True
        with self._db_lock:
            if self._lapsed or self._gone is not None:
                return False
            conn = self._conn
            try:
                conn.execute("SELECT 1")
                conn.commit()
            except self._db_error as exc:
                with contextlib.suppress(self._db_error):  # an answer, never an exception
                    self._abandon_tx(conn, exc)
                return False
        return True

    def _live(self) -> Any:
        """The connection, or :class:`StoreUnavailableError` (called with ``_db_lock``)."""
        if self._gone is not None:
            raise StoreUnavailableError(self._gone)
        if self._down is not None:
            raise StoreUnavailableError(
                f"the database is unavailable (reconnecting): {self._down}")
        return self._conn

    def _abandon_tx(self, conn: Any, exc: BaseException) -> None:
        """Roll back after a failed statement (called with ``_db_lock``); a connection found
        gone is given up and a new one sought (PostgreSQL)."""
        link = self._link
        if link is None or not link.broken(conn):
            try:
                conn.rollback()
                return
            except self._db_error:
                if link is None or not link.broken(conn):
                    raise
        self._connection_lost(exc)

    def _read_msgs(self, channel_id: int, first: int, last: int) -> list[Any]:
        with self._db_lock:
            conn = self._live()
            try:
                rows = self._query(
                    "SELECT seq, ts, reply, data FROM tidings_messages "
                    "WHERE channel_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
                    (channel_id, first, last),
                    conn,
                )
                conn.commit()
            except self._db_error as exc:
                with contextlib.suppress(self._db_error):
                    self._abandon_tx(conn, exc)
                raise StoreUnavailableError(f"database read failed: {one_line(exc)}") from exc
            return rows

    def _take_batch(self, taken: _Taken) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """Move every buffered change into SQL statements (called with the lock held).

        ``taken`` records what was moved, to put it back if the transaction fails.
        """
        batch: list[tuple[str, list[tuple[Any, ...]]]] = []
        taken.deleted = list(self._deleted_chans)
        taken.client_ops = dict(self._client_ops)
        taken.sub_ops = dict(self._sub_ops)
        taken.pend_add = set(self._pend_add)
        taken.pend_del = set(self._pend_del)
        taken.info = self._info_dirty
        if self._deleted_chans:
            ids = [(cid,) for cid in self._deleted_chans]
            batch.append(("DELETE FROM tidings_messages WHERE channel_id = ?", ids))
            batch.append(
                (
                    "DELETE FROM tidings_pending WHERE sub_id IN "
                    "(SELECT id FROM tidings_subs WHERE channel_id = ?)",
                    ids,
                )
            )
            batch.append(("DELETE FROM tidings_subs WHERE channel_id = ?", ids))
            batch.append(("DELETE FROM tidings_channels WHERE id = ?", ids))
            self._deleted_chans = []
        chans, msgs, trims = [], [], []
        for ch in self._dirty_chans:
            log: SqlMsgLog = ch.log  # type: ignore[assignment]
            taken.logs.append((ch, log.last_seq, log.db_first))
            cid = log.channel_id
            chans.append((cid, ch.name, log.first_seq, log.last_seq))
            if log.pending:
                log.inflight = log.pending
                log.pending = []
                msgs.extend((cid, r.seq, r.timestamp, r.reply, r.data) for r in log.inflight)
            if log.first_seq != log.db_first:
                trims.append((cid, log.first_seq))
                log.db_first = log.first_seq
        self._dirty_chans.clear()
        if chans:
            batch.append((_UPSERT_CHANNEL, chans))
        if trims:
            batch.append(("DELETE FROM tidings_messages WHERE channel_id = ? AND seq < ?", trims))
        if msgs:
            batch.append(
                (
                    "INSERT INTO tidings_messages (channel_id, seq, ts, reply, data) "
                    "VALUES (?, ?, ?, ?, ?)",
                    msgs,
                )
            )
        if self._client_ops:
            puts = [
                (c.client_id, c.hb_inbox, c.conn_id, c.protocol, c.ping_interval, c.ping_max_out)
                for c in self._client_ops.values()
                if c is not None
            ]
            dels = [(cid,) for cid, c in self._client_ops.items() if c is None]
            self._client_ops = {}
            if dels:
                batch.append(("DELETE FROM tidings_clients WHERE id = ?", dels))
            if puts:
                batch.append((_UPSERT_CLIENT, puts))
        if self._sub_ops:
            sub_puts, sub_dels = [], []
            for sub_id, op in self._sub_ops.items():
                if op is None:
                    sub_dels.append((sub_id,))
                    continue
                ch, s = op
                sub_puts.append(
                    (
                        s.id,
                        ch.backend,
                        s.client_id,
                        s.inbox,
                        s.ack_inbox,
                        s.queue_group,
                        s.durable_name,
                        s.max_in_flight,
                        s.ack_wait,
                        int(s.is_durable),
                        int(s.is_closed),
                        s.last_sent,
                    )
                )
            self._sub_ops = {}
            if sub_dels:
                gone = {d[0] for d in sub_dels}
                self._pend_add = {k for k in self._pend_add if k[0] not in gone}
                self._pend_del = {k for k in self._pend_del if k[0] not in gone}
                batch.append(("DELETE FROM tidings_pending WHERE sub_id = ?", sub_dels))
                batch.append(("DELETE FROM tidings_subs WHERE id = ?", sub_dels))
            if sub_puts:
                batch.append((_UPSERT_SUB, sub_puts))
        if self._pend_add:
            batch.append(
                (
                    "INSERT INTO tidings_pending (sub_id, seq) VALUES (?, ?) "
                    "ON CONFLICT (sub_id, seq) DO NOTHING",
                    list(self._pend_add),
                )
            )
            self._pend_add = set()
        if self._pend_del:
            batch.append(
                ("DELETE FROM tidings_pending WHERE sub_id = ? AND seq = ?", list(self._pend_del))
            )
            self._pend_del = set()
        if self._info_dirty:
            batch.append(("DELETE FROM tidings_server", [()]))
            batch.append(
                (
                    "INSERT INTO tidings_server (key, value) VALUES (?, ?)",
                    list(self._info.items()),
                )
            )
            self._info_dirty = False
        return batch

    def _write(self, batch: Iterable[tuple[str, list[tuple[Any, ...]]]]) -> None:
        with self._db_lock:
            conn = self._live()
            cur = conn.cursor()
            try:
                for text, rows in batch:
                    if rows == [()]:
                        cur.execute(self._sql(text))
                    elif rows:
                        cur.executemany(self._sql(text), rows)
                conn.commit()
            except BaseException as exc:
                self._abandon_tx(conn, exc)
                raise

    def flush(self) -> None:
        self.sync()

    def sync(self) -> int:
        """Write all buffered changes in one transaction and commit.

        Safe to call from a worker thread; storing continues meanwhile. If the database
        refuses the transaction, the messages not yet committed are rolled back, the other
        changes are kept for the next sync, and :class:`StoreWriteError` is raised. Returns
        the epoch the batch was taken in (only a failed sync rolls back, and syncs take turns).
        """
        with self._sync_lock:
            taken = _Taken()
            with self._lock:
                epoch = self.epoch
                if self._closed:
                    return epoch
                batch = self._take_batch(taken)
            if not batch:
                return epoch
            try:
                self._write(batch)
            except Exception as exc:
                with self._lock:
                    self._rollback_locked(taken)
                raise StoreWriteError(f"database write failed: {one_line(exc)}") from exc
            with self._lock:
                for ch, last, _ in taken.logs:
                    log: SqlMsgLog = ch.log  # type: ignore[assignment]
                    log.inflight = []
                    log.durable_last = max(log.durable_last, last)
            return epoch

    def _rollback_locked(self, taken: _Taken) -> None:
        """Forget the uncommitted messages; queue the other changes of ``taken`` again."""
        self.epoch += 1
        for ch, _, db_first in taken.logs:
            if self._channels.get(ch.name) is ch:
                ch.log.db_first = db_first  # type: ignore[attr-defined]
                self._dirty_chans.add(ch)
        for ch in self._channels.values():
            log: SqlMsgLog = ch.log  # type: ignore[assignment]
            if log.pending or log.inflight or log.last_seq != log.durable_last:
                log.rollback()
        self._deleted_chans[:0] = taken.deleted
        self._client_ops = {**taken.client_ops, **self._client_ops}
        self._sub_ops = {**taken.sub_ops, **self._sub_ops}
        for key in taken.pend_add:
            self._note_pending_added(key)
        for key in taken.pend_del:
            self._note_pending_removed(key)
        self._info_dirty |= taken.info

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.sync()
        finally:
            self._close_connection()

    def _close_connection(self) -> None:
        self._stopping.set()
        with self._sync_lock, self._lock:
            self._closed = True
            for ch in self._channels.values():
                ch.log.close()
            if self._on_close is not None:
                self._on_close()
            if self._link is not None:
                with self._db_lock:
                    self._link.close(self._conn)

    # --- a lost PostgreSQL connection -----------------------------------------------

    def _connection_lost(self, exc: BaseException) -> None:
        """Give the connection up and start seeking a new one (called with ``_db_lock``)."""
        if self._down is not None or self._gone is not None:
            return
        self._down = one_line(exc)
        self._lapsed = True
        with contextlib.suppress(Exception):
            self._conn.close()
        if self._stopping.is_set():
            return
        log.error("postgres store: the connection is lost (%s): reconnecting", self._down)
        threading.Thread(target=self._reconnect, name="stan-sql-reconnect", daemon=True).start()

    def _reconnect(self) -> None:
        """Open a new session with back-off until one serves, the store is taken over
        (then it writes no more) or closed."""
        assert self._link is not None
        delay, attempt = RECONNECT_FIRST, 0
        while not self._stopping.is_set():
            attempt += 1
            try:
                self._resume(self._link.open(again=True))
            except PgLockedError as exc:  # not claimed by another server: wait for it
                reason = f"the store's lock is still held, by pid {exc.holder}"
            except StoreLockedError as exc:  # another server opened the store meanwhile
                self._give_up(exc)
                return
            except Exception as exc:  # the database is not back yet (or failed again)
                reason = one_line(exc)
            else:
                log.warning("postgres store: reconnected (attempt %d): serving again", attempt)
                self._announce_available()
                return
            if self._stopping.is_set():
                return
            with self._db_lock:
                if self._down is not None:
                    self._down = reason
            log.warning("postgres store: reconnection attempt %d failed (%s): next in %.1f s",
                        attempt, reason, delay)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, RECONNECT_MAX)

    def _resume(self, conn: Any) -> None:
        """Put a new session in service. A commit cut off by the loss may have been written
        though the store rolled it back: delete every message after each channel's last
        known commit (their publishers were refused); the rest of such a commit is written
        again, idempotently, by the next sync."""
        with self._sync_lock:
            try:
                if self._closed:
                    raise StoreError("the store is closed")
                with self._lock:
                    marks = [(ch.log.channel_id, ch.log.durable_last)  # type: ignore[attr-defined]
                             for ch in self._channels.values()]
                if marks:
                    conn.cursor().executemany(
                        self._sql("DELETE FROM tidings_messages WHERE channel_id = ? AND seq > ?"),
                        marks,
                    )
                conn.commit()
            except BaseException:
                conn.close()
                raise
            with self._db_lock:
                self._conn = conn
                self._down = None

    def _give_up(self, exc: BaseException) -> None:
        with self._db_lock:
            self._gone = one_line(exc)
        log.critical("postgres store: %s", self._gone)

    def _announce_available(self) -> None:
        callback = self.on_available
        if callback is not None:
            try:
                callback()
            except Exception:  # pragma: no cover - the callback's own failure, logged
                log.exception("postgres store: the on_available callback failed")


def _db_error(dialect: Dialect) -> type[Exception]:
    """The base class of the errors the dialect's driver raises."""
    if dialect is POSTGRES:
        import psycopg

        return psycopg.Error
    import sqlite3

    return sqlite3.Error


def _check_policy(sync: str) -> None:
    if sync not in SYNC_POLICIES:
        raise ValueError(f"sync must be one of {SYNC_POLICIES}, not {sync!r}")
