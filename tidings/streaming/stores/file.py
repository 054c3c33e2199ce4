"""The file store: segment files per channel, record logs for clients and subscriptions.

Directory layout::

    .lock                   flock'ed while a server uses the directory (holds its pid)
    server.json             server identity (set_server_info), replaced atomically
    clients.log             record log: 1 = client (JSON), 2 = client deleted (id)
    channels/<name>/        one per channel (name percent-encoded), created atomically
        name                the channel's real name
        first               first available / last stored sequence (see segments.py)
        msgs.<seq>.dat/.idx message segments (see segments.py)
        subs.log            record log: 1 = subscription state (JSON), 2 = deleted (u64 id),
                            3 = message sent (u64 id, u64 seq), 4 = ack (u64 id, u64 seq)

Sync policy (``sync=``): ``"batch"`` (default) fsyncs in every :meth:`FileStore.sync`, so
the server calls it once per batch of PubAcks (group commit); ``"interval"`` fsyncs at
most every ``sync_interval`` seconds; ``"never"`` leaves it to the OS (and to close).

A failed write or fsync (a full disk) rolls every file back to what the last successful
:meth:`FileStore.sync` covered: segments are truncated at their durable mark and the messages
after it forgotten (``epoch`` counts these rollbacks), record logs are truncated too but keep
their records buffered for the next sync. Nothing is ever appended after a torn record.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...fileio import fsync_dir, write_all
from .base import (
    ClientRecord,
    CorruptStoreError,
    StoreError,
    StoreLimits,
    StoreWriteError,
    SubRecord,
)
from .common import Channel, CoreStore, MsgLog
from .lockfile import lock_store, unlock_store
from .recordlog import RecordLog
from .segments import FileMsgLog

CLIENTS_MAGIC = b"TDCLIS01"
SUBS_MAGIC = b"TDSUBS01"
REC_PUT, REC_DEL, REC_SENT, REC_ACK = 1, 2, 3, 4
SEQ_REC = struct.Struct("<QQ")
ID_REC = struct.Struct("<Q")
SYNC_POLICIES = ("batch", "interval", "never")
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_COMPACT_MIN = 16384


def _fsync(fd: int) -> None:
    os.fdatasync(fd)


def encode_dir_name(name: str) -> str:
    """A file-system-safe, reversible directory name for a channel."""
    out = []
    for i, c in enumerate(name):
        if c in _SAFE and not (i == 0 and c == "."):
            out.append(c)
        else:
            out.extend(f"%{b:02X}" for b in c.encode())
    enc = "".join(out)
    if len(enc) > 200:
        import hashlib

        enc = enc[:150] + "~" + hashlib.sha256(name.encode()).hexdigest()[:32]
    return enc


def sub_to_json(sub: SubRecord) -> bytes:
    return json.dumps(
        {
            "id": sub.id,
            "client_id": sub.client_id,
            "inbox": sub.inbox,
            "ack_inbox": sub.ack_inbox,
            "queue_group": sub.queue_group,
            "durable_name": sub.durable_name,
            "max_in_flight": sub.max_in_flight,
            "ack_wait": sub.ack_wait,
            "is_durable": sub.is_durable,
            "is_closed": sub.is_closed,
            "last_sent": sub.last_sent,
        },
        separators=(",", ":"),
    ).encode()


def sub_from_json(raw: bytes) -> SubRecord:
    return SubRecord(**json.loads(raw))


def client_to_json(c: ClientRecord) -> bytes:
    return json.dumps(
        {
            "client_id": c.client_id,
            "hb_inbox": c.hb_inbox,
            "conn_id": c.conn_id.hex(),
            "protocol": c.protocol,
            "ping_interval": c.ping_interval,
            "ping_max_out": c.ping_max_out,
        },
        separators=(",", ":"),
    ).encode()


def client_from_json(raw: bytes) -> ClientRecord:
    d = json.loads(raw)
    d["conn_id"] = bytes.fromhex(d["conn_id"])
    return ClientRecord(**d)


class _LogState:
    """A record log and when to consider compacting it."""

    __slots__ = ("log", "compact_at")

    def __init__(self, log: RecordLog) -> None:
        self.log = log
        self.compact_at = max(_COMPACT_MIN, 2 * log.records)


class FileStore(CoreStore):
    kind = "file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        limits: StoreLimits | None = None,
        *,
        sync: str = "batch",
        sync_interval: float = 1.0,
        segment_bytes: int = 64 * 1024 * 1024,
        cache_msgs: int = 1024,
        truncate_corrupt: bool = False,
    ) -> None:
        if sync not in SYNC_POLICIES:
            raise ValueError(f"sync must be one of {SYNC_POLICIES}, not {sync!r}")
        super().__init__(limits)
        self.root = Path(path)
        self.sync_policy = sync
        self.sync_interval = sync_interval
        self.segment_bytes = segment_bytes
        self.cache_msgs = cache_msgs
        self.truncate_corrupt = truncate_corrupt
        self._sync_lock = threading.Lock()
        self._to_close: list[int] = []  # retired descriptors, closed when no fsync runs
        self._fsyncing = False  # a sync is fsyncing (outside the lock)
        self._fsync_fds: set[int] = set()
        self._dirty_logs: set[FileMsgLog] = set()
        self._dirty_subs: set[Channel] = set()
        self._clients_dirty = False
        self._written: set[RecordLog] = set()  # record logs written since the last sync
        self._last_sync = float("-inf")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_store(self.root / ".lock", f"store directory {self.root}")
        try:
            self._open()
        except BaseException:
            self._abandon()
            raise

    # --- opening --------------------------------------------------------------------

    def _open(self) -> None:
        self._chan_root = self.root / "channels"
        self._chan_root.mkdir(exist_ok=True)
        info = self.root / "server.json"
        if info.exists():
            self._info = json.loads(info.read_text())
        clients = RecordLog(self.root / "clients.log", CLIENTS_MAGIC, self._retire)
        for rtype, payload in clients.open(self.truncate_corrupt):
            if rtype == REC_PUT:
                rec = client_from_json(payload)
                self._clients[rec.client_id] = rec
            elif rtype == REC_DEL:
                self._clients.pop(payload.decode(), None)
        self._clients_log = _LogState(clients)
        fsync_dir(self.root)  # clients.log may have just been created
        for d in sorted(self._chan_root.iterdir()):
            if d.name.startswith(".tmp-"):
                shutil.rmtree(d, ignore_errors=True)
            elif d.is_dir():
                self._recover_channel(d)
        self._enforce_all()

    def _recover_channel(self, d: Path) -> None:
        try:
            name = (d / "name").read_text()
        except FileNotFoundError as exc:
            raise CorruptStoreError(f"{d}: channel directory without a name file") from exc
        ch = self._attach_channel(name)
        log = self._make_log(ch, d)
        log.recover(self.truncate_corrupt)
        ch.log = log
        subs = RecordLog(d / "subs.log", SUBS_MAGIC, self._retire)
        for rtype, payload in subs.open(self.truncate_corrupt):
            if rtype == REC_PUT:
                sub = sub_from_json(payload)
                old = ch.subs.get(sub.id)
                if old is not None:
                    sub.pending = old.pending  # a state update keeps the pending set
                self._attach_sub(ch, sub)
            elif rtype == REC_DEL:
                ch.subs.pop(ID_REC.unpack(payload)[0], None)
            elif rtype == REC_SENT:
                sub_id, seq = SEQ_REC.unpack(payload)
                rec = ch.subs.get(sub_id)
                if rec is not None:
                    rec.pending.add(seq)
                    rec.last_sent = max(rec.last_sent, seq)
            elif rtype == REC_ACK:
                sub_id, seq = SEQ_REC.unpack(payload)
                rec = ch.subs.get(sub_id)
                if rec is not None:
                    rec.pending.discard(seq)
        ch.backend = _LogState(subs)

    def _make_log(self, ch: Channel, d: Path) -> FileMsgLog:
        lim = ch.limits
        seg_bytes = self.segment_bytes
        if lim.max_bytes:
            seg_bytes = min(seg_bytes, max(lim.max_bytes // 4, 4096))
        return FileMsgLog(
            d,
            self._retire,
            segment_bytes=seg_bytes,
            segment_msgs=max(lim.max_msgs // 4, 1) if lim.max_msgs else 0,
            segment_age_ns=max(lim.max_age_ns // 4, 1_000_000_000) if lim.max_age_ns else 0,
            cache_msgs=self.cache_msgs,
            subject=ch.name,
            dirty=self._dirty_logs,
            sync_on_rotate=self.sync_policy != "never",
        )

    # --- hooks ----------------------------------------------------------------------

    def _new_log(self, ch: Channel) -> MsgLog:
        enc = encode_dir_name(ch.name)
        final = self._chan_root / enc
        if final.exists():
            raise StoreError(f"{final} already exists")
        tmp = self._chan_root / f".tmp-{enc}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        # Build the directory aside and rename it into place, so a crash never leaves a
        # channel directory without its name file.
        durable = self.sync_policy != "never"
        for fname, content in (("name", ch.name.encode()), ("subs.log", SUBS_MAGIC)):
            fd = os.open(tmp / fname, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, content)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
        if durable:
            fsync_dir(tmp)
        os.rename(tmp, final)
        if durable:
            fsync_dir(self._chan_root)
        subs = RecordLog(final / "subs.log", SUBS_MAGIC, self._retire)
        subs.open()
        ch.backend = _LogState(subs)
        return self._make_log(ch, final)

    def _on_channel_deleted(self, ch: Channel) -> None:
        state: _LogState = ch.backend  # type: ignore[assignment]
        state.log.buf.clear()  # the file goes: nothing left to write
        state.log.close()
        self._written.discard(state.log)
        self._dirty_subs.discard(ch)
        self._dirty_logs.discard(ch.log)  # type: ignore[arg-type]
        shutil.rmtree(self._chan_root / encode_dir_name(ch.name), ignore_errors=True)
        if self.sync_policy != "never":
            fsync_dir(self._chan_root)

    def _on_server_info(self, info: dict[str, str]) -> None:
        path = self.root / "server.json"
        tmp = path.with_name("server.json.tmp")
        with open(tmp, "w") as f:
            json.dump(info, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)

    def _on_client_put(self, client: ClientRecord) -> None:
        self._clients_log.log.append(REC_PUT, client_to_json(client))
        self._clients_dirty = True

    def _on_client_deleted(self, client_id: str) -> None:
        self._clients_log.log.append(REC_DEL, client_id.encode())
        self._clients_dirty = True

    def _on_sub_put(self, ch: Channel, sub: SubRecord, new: bool) -> None:
        log: RecordLog = ch.backend.log  # type: ignore[attr-defined]
        log.append(REC_PUT, sub_to_json(sub))
        if new:
            for seq in sorted(sub.pending):
                log.append(REC_SENT, SEQ_REC.pack(sub.id, seq))
        self._dirty_subs.add(ch)

    def _on_sub_deleted(self, ch: Channel, sub_id: int) -> None:
        ch.backend.log.append(REC_DEL, ID_REC.pack(sub_id))  # type: ignore[attr-defined]
        self._dirty_subs.add(ch)

    def _on_sent(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        ch.backend.log.append(REC_SENT, SEQ_REC.pack(sub.id, seq))  # type: ignore[attr-defined]
        self._dirty_subs.add(ch)

    def _on_acked(self, ch: Channel, sub: SubRecord, seq: int) -> None:
        ch.backend.log.append(REC_ACK, SEQ_REC.pack(sub.id, seq))  # type: ignore[attr-defined]
        self._dirty_subs.add(ch)

    def _on_sent_many(self, ch: Channel, sub: SubRecord, seqs: list[int]) -> None:
        pack, sid = SEQ_REC.pack, sub.id
        ch.backend.log.append_many(REC_SENT, [pack(sid, s) for s in seqs])  # type: ignore[attr-defined]
        self._dirty_subs.add(ch)

    def _on_acked_many(self, ch: Channel, sub: SubRecord, seqs: list[int]) -> None:
        pack, sid = SEQ_REC.pack, sub.id
        ch.backend.log.append_many(REC_ACK, [pack(sid, s) for s in seqs])  # type: ignore[attr-defined]
        self._dirty_subs.add(ch)

    # --- durability -----------------------------------------------------------------

    def _retire(self, fd: int) -> None:
        self._fsync_fds.discard(fd)
        self._to_close.append(fd)

    def _flush_locked(self) -> None:
        fds = self._fsync_fds
        for log in self._dirty_logs:
            log.flush()
            fds.update(log.dirty_fds)
            log.dirty_fds.clear()
        self._dirty_logs.clear()
        for ch in self._dirty_subs:
            state: _LogState = ch.backend  # type: ignore[assignment]
            self._maybe_compact(state, ch, _sub_records)
            if state.log.flush():
                fds.add(state.log.fd)
                self._written.add(state.log)
        self._dirty_subs.clear()
        if self._clients_dirty:
            state = self._clients_log
            self._maybe_compact(state, None, lambda _: self._client_records())
            if state.log.flush():
                fds.add(state.log.fd)
                self._written.add(state.log)
            self._clients_dirty = False

    def _write_failed(self, exc: OSError) -> StoreWriteError:
        self._rollback_locked()
        return StoreWriteError(f"store write failed: {exc}")

    def _rollback_locked(self) -> None:
        """Undo every write since the last successful sync.

        Messages after each channel's durable mark are forgotten; subscription and client
        records are cut from their files but stay buffered, to be written by the next sync.
        """
        self.epoch += 1
        for ch in self._channels.values():
            log: FileMsgLog = ch.log  # type: ignore[assignment]
            if log.wbuf or max(log.last_seq, log.ix.last) != log.durable_last:
                log.rollback()
        self._written.clear()
        for ch in self._channels.values():
            subs: RecordLog = ch.backend.log  # type: ignore[attr-defined]
            if subs.unsynced or subs.size != subs.synced_size:
                subs.rollback()
            if subs.buf:
                self._dirty_subs.add(ch)
        clients = self._clients_log.log
        if clients.unsynced or clients.size != clients.synced_size:
            clients.rollback()
        self._clients_dirty = bool(clients.buf)
        if not self._fsyncing:
            # Each rollback retires descriptors: close them now, or a disk that stays full
            # (publishes refused, no sync succeeding) would use up the process's descriptors.
            self._close_retired_locked()

    def _close_retired_locked(self) -> None:
        """Close the retired descriptors (no fsync may be running on them)."""
        retired, self._to_close = self._to_close, []
        for fd in retired:
            os.close(fd)

    def _maybe_compact(
        self,
        state: _LogState,
        ch: Channel | None,
        snapshot: Callable[[Channel | None], tuple[list[tuple[int, bytes]], int]],
    ) -> None:
        """Rewrite a record log from the live state once it is mostly dead records.

        Amortised O(1) per record: a rewrite costs O(live) and happens only after the log
        has grown to twice the live weight (subscriptions plus their pending sequences).
        """
        log = state.log
        if log.records < state.compact_at:
            return
        recs, weight = snapshot(ch)
        if log.records > 2 * weight:
            log.rewrite(recs)
        state.compact_at = max(_COMPACT_MIN, 2 * weight, log.records + _COMPACT_MIN // 2)

    def _client_records(self) -> tuple[list[tuple[int, bytes]], int]:
        return [(REC_PUT, client_to_json(c)) for c in self._clients.values()], len(self._clients)

    def flush(self) -> None:
        with self._sync_lock:  # a flush between a sync's write and its commit would be lost
            super().flush()

    def sync(self) -> int:
        """Write everything stored so far and fsync it (per the sync policy).

        Safe to call from a worker thread: the store stays usable while fsync runs. If a
        write or fsync fails, or a write failed in another thread meanwhile, everything
        since the last successful sync is rolled back and :class:`StoreWriteError` raised.
        Returns the epoch the sync began in (no rollback came between that and the commit).
        """
        with self._sync_lock:
            try:
                return self._sync_turn()
            finally:
                # No fsync runs now (syncs take turns): what was retired meanwhile can go.
                with self._lock:
                    self._close_retired_locked()

    def _sync_turn(self) -> int:
        """:meth:`sync` with ``_sync_lock`` held."""
        with self._lock:
            if self._closed:
                return self.epoch  # close() wrote everything, or rolled it back
            epoch = self.epoch
            logs = list(self._dirty_logs)
            try:
                self._flush_locked()
            except OSError as exc:
                raise self._write_failed(exc) from exc
            marks = [(log, log.mark()) for log in logs]
            written, self._written = self._written, set()
            now = time.monotonic()
            due = self.sync_policy == "batch" or (
                self.sync_policy == "interval" and now - self._last_sync >= self.sync_interval
            )
            fds: list[int] = []
            if due:
                fds = list(self._fsync_fds)
                self._fsync_fds.clear()
                self._last_sync = now
            self._fsyncing = True
        failed: OSError | None = None
        try:
            for fd in fds:
                _fsync(fd)
        except OSError as exc:
            failed = exc
        with self._lock:
            self._fsyncing = False
            if failed is not None:
                raise self._write_failed(failed) from failed
            if self.epoch != epoch:
                # A write failed meanwhile: what this sync wrote may be gone. Roll back
                # again so that a failed sync always means "nothing since the last one".
                self._rollback_locked()
                raise StoreWriteError("store write failed while syncing: rolled back")
            for log, mark in marks:
                log.commit(mark)
            for rlog in written:
                rlog.commit()
        return epoch

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
                for fd in self._fsync_fds:
                    _fsync(fd)
                self._fsync_fds.clear()
                for ch in self._channels.values():
                    ch.log.close()
                    ch.backend.log.close()  # type: ignore[attr-defined]
                self._clients_log.log.close()
                for fd in self._to_close:
                    _fsync(fd)
                    os.close(fd)
                self._to_close = []
            except OSError as exc:
                error = self._write_failed(exc)
                self._abandon()  # what could not be written stays unwritten
                raise error from exc
            finally:
                self._closed = True
                self._release()

    def _abandon(self) -> None:
        """Close whatever a failed open had opened, and unlock the directory."""
        for ch in self._channels.values():
            with contextlib.suppress(Exception):
                ch.log.close()
            state = ch.backend
            if isinstance(state, _LogState):
                with contextlib.suppress(Exception):
                    state.log.close()
        clients = getattr(self, "_clients_log", None)
        if clients is not None:
            with contextlib.suppress(Exception):
                clients.log.close()
        for fd in self._to_close:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._to_close = []
        self._closed = True
        self._release()

    def _release(self) -> None:
        if self._lock_fd >= 0:
            unlock_store(self._lock_fd)
            self._lock_fd = -1


def _sub_records(ch: Channel | None) -> tuple[list[tuple[int, bytes]], int]:
    assert ch is not None
    recs = []
    for s in ch.subs.values():
        recs.append((REC_PUT, sub_to_json(s)))
        recs.extend((REC_SENT, SEQ_REC.pack(s.id, seq)) for seq in sorted(s.pending))
    return recs, len(recs)

