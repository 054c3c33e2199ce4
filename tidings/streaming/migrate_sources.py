"""Where `tidings streaming migrate` reads from when no server runs: a store directory.

A tidings store (file, SQLite, PostgreSQL: opened with ``open_store``, without limits, so
that opening it drops nothing) or the reference nats-streaming-server's file store (read
with :mod:`.importref`'s reader, never written). Each gives the channels, the durable
subscriptions with their positions, and a channel's messages in batches (read in a worker
thread, the event loop stays free for the PubAcks).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator
from itertools import islice
from pathlib import Path
from typing import Protocol

from . import importref
from .migrate_plan import Channel, MigrateError, SubState
from .pb import protocol_pb2 as pb
from .stores import MsgRecord, Store, StoreLimits, open_store

BATCH = 2000
UNLIMITED = StoreLimits(max_channels=0, max_msgs=0, max_bytes=0, max_age=0, max_subs=0)


class Source(Protocol):
    """What a migration reads: channels, durable subscriptions, messages."""

    description: str

    async def channels(self) -> list[Channel]: ...

    async def subscriptions(self, channels: Collection[str]) -> list[SubState]: ...

    def read(self, channel: Channel, start: int) -> AsyncIterator[list[MsgRecord]]:
        """The channel's messages from ``start`` on (ordered, maybe with gaps where messages
        expired), up to its last sequence when listed."""
        ...

    async def close(self) -> None: ...


class StoreSource:
    """A tidings streaming store."""

    def __init__(self, store: Store, description: str) -> None:
        self.store = store
        self.description = description

    async def channels(self) -> list[Channel]:
        out = []
        for name in self.store.channels():
            info = self.store.channel_info(name)
            out.append(Channel(name, info.first_seq, info.last_seq, info.msgs))
        return out

    async def subscriptions(self, channels: Collection[str]) -> list[SubState]:
        return [SubState(ch, s.client_id, s.durable_name, s.queue_group, s.last_sent,
                         min(s.pending, default=None))
                for ch in channels for s in self.store.subs(ch) if s.is_durable]

    async def read(self, channel: Channel, start: int) -> AsyncIterator[list[MsgRecord]]:
        seq = start
        while seq <= channel.last_seq:
            count = min(BATCH, channel.last_seq - seq + 1)
            batch = await asyncio.to_thread(self.store.get_msgs, channel.name, seq, count)
            if not batch:
                return
            yield list(batch)
            seq = batch[-1].seq + 1

    async def close(self) -> None:
        self.store.close()


class ReferenceSource:
    """The reference server's file store directory (not locked by a running server)."""

    def __init__(self, root: Path) -> None:
        self.root = importref.check_source(root)
        self.description = f"reference file store {root}"
        self.report = importref.ImportReport()

    @property
    def warnings(self) -> list[str]:
        return self.report.warnings

    def _dirs(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    async def channels(self) -> list[Channel]:
        return await asyncio.to_thread(lambda: [self._channel(d) for d in self._dirs()])

    def _channel(self, chan_dir: Path) -> Channel:
        """First and last from the first and last slices holding a record; the reader fills
        gaps between them, so the count follows."""
        slices = importref.slices(chan_dir)
        first = next((s for p in slices for s in self._seqs(p)), 0)
        last = next((max(seqs) for p in reversed(slices) if (seqs := list(self._seqs(p)))), 0)
        if not first:
            return Channel(chan_dir.name, 1, 0, 0)
        return Channel(chan_dir.name, first, last, last - first + 1)

    def _seqs(self, path: Path) -> Iterator[int]:
        for _, payload in importref.read_records(path, False, []):
            yield importref.parse(pb.MsgProto, payload, path).sequence

    async def subscriptions(self, channels: Collection[str]) -> list[SubState]:
        def read() -> list[SubState]:
            out = []
            for ch in channels:
                subs = importref.read_subs(self.root / ch / "subs.dat", self.report)
                out += [SubState(ch, s.clientID, s.durableName, s.qGroup, s.lastSent,
                                 min(pending, default=None))
                        for s, pending in subs.values() if s.isDurable]
            return out
        return await asyncio.to_thread(read)

    async def read(self, channel: Channel, start: int) -> AsyncIterator[list[MsgRecord]]:
        msgs = importref.read_msgs(self.root / channel.name, channel.name, start - 1,
                                    self.report)
        while True:
            batch = await asyncio.to_thread(lambda: list(islice(msgs, BATCH)))
            if not batch:
                return
            yield batch

    async def close(self) -> None:
        pass


def open_directory(path: str) -> Source:
    """The store in ``path``: the reference's file store (server.dat) or a tidings file
    store (or a SQLite store's streaming.db there)."""
    root = Path(path)
    if not root.is_dir():
        raise MigrateError(f"{path}: not a directory")
    if (root / "server.dat").exists():
        return ReferenceSource(root)
    if (root / "channels").is_dir() or (root / "server.json").exists():
        return StoreSource(open_store("file", path=root, limits=UNLIMITED),
                           f"file store {path}")
    if (root / "streaming.db").is_file():
        return open_sql("sqlite", str(root / "streaming.db"))
    raise MigrateError(f"{path}: no streaming store there (neither a tidings file store nor "
                       "a nats-streaming-server file store)")


def open_sql(driver: str, source: str) -> Source:
    """A tidings SQL store: ``sqlite`` (a file) or ``postgres`` (a DSN)."""
    if driver == "sqlite":
        if not Path(source).is_file():
            raise MigrateError(f"{source}: no such SQLite database")
        return StoreSource(open_store("sqlite", path=source, limits=UNLIMITED),
                           f"SQLite store {source}")
    return StoreSource(open_store("postgres", dsn=source, limits=UNLIMITED), "PostgreSQL store")
