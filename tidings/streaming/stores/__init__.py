"""Durable storage of the streaming server behind one :class:`Store` interface.

``open_store(kind, **opts)`` opens one of:

- ``"memory"``: ``MemoryStore(limits=None)``
- ``"file"``: ``FileStore(path, limits=None, sync="batch", sync_interval=1.0,
  segment_bytes=64 MiB, cache_msgs=1024, truncate_corrupt=False)``
- ``"sqlite"``: ``SqlStore.sqlite(path, limits=None, sync="batch")``
- ``"postgres"``: ``SqlStore.postgres(dsn, limits=None, sync="batch", schema=None)``
"""

from __future__ import annotations

from typing import Any

from .base import (
    ChannelInfo,
    ChannelLimits,
    ClientRecord,
    CorruptStoreError,
    MsgRecord,
    ResolvedLimits,
    Store,
    StoreError,
    StoreLimits,
    StoreLockedError,
    StoreUnavailableError,
    StoreWriteError,
    SubRecord,
    TooManyChannelsError,
    TooManySubsError,
    UnknownChannelError,
    UnknownSubscriptionError,
)

__all__ = [
    "ChannelInfo",
    "ChannelLimits",
    "ClientRecord",
    "CorruptStoreError",
    "MsgRecord",
    "ResolvedLimits",
    "Store",
    "StoreError",
    "StoreLimits",
    "StoreLockedError",
    "StoreUnavailableError",
    "StoreWriteError",
    "SubRecord",
    "TooManyChannelsError",
    "TooManySubsError",
    "UnknownChannelError",
    "UnknownSubscriptionError",
    "open_store",
]

STORE_KINDS = ("memory", "file", "sqlite", "postgres")


def open_store(kind: str, **opts: Any) -> Store:
    """Open a store of the given kind; backends are imported only when used."""
    kind = kind.lower()
    if kind == "memory":
        from .memory import MemoryStore

        return MemoryStore(**opts)
    if kind == "file":
        from .file import FileStore

        return FileStore(**opts)
    if kind == "sqlite":
        from .sql import SqlStore

        return SqlStore.sqlite(**opts)
    if kind in ("postgres", "postgresql"):
        from .sql import SqlStore

        return SqlStore.postgres(**opts)
    raise ValueError(f"unknown store kind {kind!r} (expected one of {', '.join(STORE_KINDS)})")
