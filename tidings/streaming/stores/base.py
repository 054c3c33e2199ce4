"""The Store interface of the streaming server and the records it stores.

Every backend (memory, file, SQL) implements :class:`Store`. The API is synchronous and
thread-safe: the asyncio server calls it from the loop thread and may run :meth:`Store.sync`
in a worker thread while it keeps storing (group commit).

Sequence invariant per channel: ``msgs == last_seq - first_seq + 1``. A channel that never
had a message has ``first_seq == 1`` and ``last_seq == 0``; once messages are dropped by
limits, ``first_seq`` moves forward and sequences are never reused.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ...protocol.subjects import subject_matches
from .. import defaults

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
]

NANOS = 1_000_000_000


class StoreError(Exception):
    """Base class of store errors."""


class TooManyChannelsError(StoreError):
    def __init__(self) -> None:
        super().__init__("too many channels")


class TooManySubsError(StoreError):
    def __init__(self) -> None:
        super().__init__("too many subscriptions per channel")


class UnknownChannelError(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown channel: {name!r}")
        self.channel = name


class UnknownSubscriptionError(StoreError):
    def __init__(self, channel: str, sub_id: int) -> None:
        super().__init__(f"unknown subscription {sub_id} on channel {channel!r}")


class StoreLockedError(StoreError):
    """The store's directory is in use by another server."""


class StoreUnavailableError(StoreError):
    """The store's database is away (its connection was lost and is being reopened) or
    refuses this server for good; nothing was read or written."""


class StoreWriteError(StoreError):
    """A write failed (disk full, database refusing writes...).

    The store has rolled back every message stored since its last successful :meth:`sync`
    (none of them will be read or recovered) and stays usable: the next write may succeed.
    """


class CorruptStoreError(StoreError):
    """Stored data failed a consistency check that recovery must not silently repair."""


class MsgRecord(NamedTuple):
    """One stored message. ``timestamp`` is Unix nanoseconds; ``subject`` is the channel."""

    seq: int
    timestamp: int
    subject: str
    reply: str
    data: bytes
    redelivered: bool = False

    @property
    def size(self) -> int:
        """Bytes counted against the channel's max_bytes limit (the payload)."""
        return len(self.data)


@dataclass(slots=True)
class ClientRecord:
    """A connected streaming client, as registered by a ConnectRequest."""

    client_id: str
    hb_inbox: str = ""
    conn_id: bytes = b""
    protocol: int = 0
    ping_interval: int = 0
    ping_max_out: int = 0


@dataclass(slots=True)
class SubRecord:
    """A subscription's durable state.

    ``last_sent`` is the highest sequence delivered; ``pending`` the delivered sequences not
    yet acknowledged. Both are maintained by :meth:`Store.add_pending` and :meth:`Store.ack`.
    ``ack_wait`` is in seconds. ``id`` is assigned by :meth:`Store.create_sub`.
    """

    client_id: str = ""
    inbox: str = ""
    ack_inbox: str = ""
    queue_group: str = ""
    durable_name: str = ""
    max_in_flight: int = 0
    ack_wait: int = 0
    is_durable: bool = False
    is_closed: bool = False
    last_sent: int = 0
    pending: set[int] = field(default_factory=set)
    id: int = 0

    @property
    def acked_through(self) -> int:
        """Highest sequence such that every delivered message up to it is acknowledged."""
        return min(self.pending) - 1 if self.pending else self.last_sent

    def copy(self) -> SubRecord:
        return replace(self, pending=set(self.pending))


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    name: str
    msgs: int
    bytes: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """Per-channel overrides; ``None`` inherits the store-wide value, 0 means unlimited."""

    max_msgs: int | None = None
    max_bytes: int | None = None
    max_age: float | None = None
    max_subs: int | None = None


class ResolvedLimits(NamedTuple):
    max_msgs: int
    max_bytes: int
    max_age_ns: int
    max_subs: int


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Store-wide limits (0 = unlimited); ``max_age`` in seconds.

    ``channels`` maps a channel name, or a pattern with ``*`` / ``>`` wildcards, to its
    overrides. An exact name wins over patterns; among patterns the first match wins.
    """

    max_channels: int = defaults.MAX_CHANNELS
    max_msgs: int = defaults.MAX_MSGS
    max_bytes: int = defaults.MAX_BYTES
    max_age: float = 0.0
    max_subs: int = defaults.MAX_SUBS
    channels: Mapping[str, ChannelLimits] = field(default_factory=dict)

    def for_channel(self, name: str) -> ResolvedLimits:
        over = self.channels.get(name)
        if over is None:
            for pattern, candidate in self.channels.items():
                if subject_matches(pattern, name):
                    over = candidate
                    break
        if over is None:
            over = ChannelLimits()

        def pick(value: float | None, default: float) -> float:
            return default if value is None else value

        return ResolvedLimits(
            max_msgs=int(pick(over.max_msgs, self.max_msgs)),
            max_bytes=int(pick(over.max_bytes, self.max_bytes)),
            max_age_ns=int(pick(over.max_age, self.max_age) * NANOS),
            max_subs=int(pick(over.max_subs, self.max_subs)),
        )


def now_ns() -> int:
    return time.time_ns()


class Store(ABC):
    """The streaming server's storage: channels of messages, clients, subscriptions.

    Durability contract: every mutation made before a call to :meth:`sync` is durable when
    it returns, according to the store's sync policy. :meth:`flush` hands buffered writes
    to the OS (or database) without forcing them to disk.
    """

    kind: str
    limits: StoreLimits
    # Rollbacks so far: each one dropped every message not yet synced (see StoreWriteError).
    epoch: int = 0
    # The epoch in which the last store_msgs / store_msg call stored its messages: they are
    # gone if ``epoch`` has moved on before a sync covered them.
    last_store_epoch: int = 0

    # --- server identity -------------------------------------------------------------

    @abstractmethod
    def server_info(self) -> dict[str, str]:
        """What :meth:`set_server_info` stored last (e.g. the cluster id), or ``{}``."""

    @abstractmethod
    def set_server_info(self, info: Mapping[str, str]) -> None: ...

    # --- channels ----------------------------------------------------------------------

    @abstractmethod
    def channels(self) -> list[str]: ...

    @abstractmethod
    def has_channel(self, name: str) -> bool: ...

    @abstractmethod
    def create_channel(self, name: str) -> bool:
        """Create the channel if needed; True if it was created. Raises TooManyChannelsError."""

    @abstractmethod
    def delete_channel(self, name: str) -> None:
        """Remove a channel with its messages and subscriptions."""

    @abstractmethod
    def channel_info(self, name: str) -> ChannelInfo: ...

    @abstractmethod
    def channel_limits(self, name: str) -> ResolvedLimits: ...

    # --- messages ----------------------------------------------------------------------

    @abstractmethod
    def store_msgs(
        self, channel: str, msgs: Iterable[tuple[str, bytes]], timestamp: int | None = None
    ) -> range:
        """Append ``(reply, data)`` messages, creating the channel if needed.

        Returns the assigned sequences. Timestamps are ``timestamp`` (Unix ns) or now, and
        never go backwards within a channel. Limits are enforced afterwards (oldest first,
        the newest message is always kept).
        """

    def store_msg(self, channel: str, reply: str, data: bytes, timestamp: int | None = None) -> int:
        return self.store_msgs(channel, ((reply, data),), timestamp)[0]

    @abstractmethod
    def restore_msgs(self, channel: str, records: Iterable[MsgRecord]) -> int:
        """Append records keeping their sequence and timestamp (imports).

        The first record of an empty channel sets its first sequence; after that the
        sequences must follow on without gaps. Returns how many were stored.
        """

    @abstractmethod
    def lookup(self, channel: str, seq: int) -> MsgRecord | None:
        """The message with that sequence, or None if it is not (or no longer) stored."""

    @abstractmethod
    def get_msgs(self, channel: str, start_seq: int, max_count: int) -> list[MsgRecord]:
        """Up to ``max_count`` consecutive messages from ``max(start_seq, first_seq)``."""

    def get_rows(self, channel: str, start_seq: int, max_count: int) -> Sequence[tuple]:
        """:meth:`get_msgs` as plain tuples in :class:`MsgRecord`'s field order (a record is
        one); a store may skip making records (the bulk fetch reads only a few fields)."""
        return self.get_msgs(channel, start_seq, max_count)

    @abstractmethod
    def first_last(self, channel: str) -> tuple[int, int]: ...

    @abstractmethod
    def seq_for_timestamp(self, channel: str, timestamp: int) -> int:
        """First sequence whose timestamp is >= ``timestamp``, or ``last_seq + 1``."""

    @abstractmethod
    def expire_msgs(self, now: int | None = None) -> int | None:
        """Drop messages older than their channel's max age.

        Returns the Unix-ns time of the next expiry, or None if nothing is due to expire.
        """

    # --- clients -----------------------------------------------------------------------

    @abstractmethod
    def add_client(self, client: ClientRecord) -> None:
        """Register (or replace) a client."""

    @abstractmethod
    def delete_client(self, client_id: str) -> bool: ...

    @abstractmethod
    def client(self, client_id: str) -> ClientRecord | None: ...

    @abstractmethod
    def clients(self) -> list[ClientRecord]: ...

    # --- subscriptions -----------------------------------------------------------------

    @abstractmethod
    def create_sub(self, channel: str, sub: SubRecord) -> int:
        """Store a new subscription (with its last_sent and pending); returns its new id.

        The channel is created if needed. Raises TooManySubsError.
        """

    @abstractmethod
    def update_sub(self, channel: str, sub: SubRecord) -> None:
        """Replace the state of subscription ``sub.id``; its pending set is kept as stored."""

    @abstractmethod
    def delete_sub(self, channel: str, sub_id: int) -> None: ...

    @abstractmethod
    def add_pending(self, channel: str, sub_id: int, seq: int) -> None:
        """Record that ``seq`` was sent to the subscription (raises last_sent if higher)."""

    @abstractmethod
    def ack(self, channel: str, sub_id: int, seq: int) -> bool:
        """Record an acknowledgement; False if ``seq`` was not pending."""

    def add_pending_many(self, channel: str, sub_id: int, seqs: Iterable[int]) -> None:
        """:meth:`add_pending` for several sequences, in order."""
        for seq in seqs:
            self.add_pending(channel, sub_id, seq)

    def ack_many(self, channel: str, sub_id: int, seqs: Iterable[int]) -> int:
        """:meth:`ack` for several sequences; how many were pending."""
        return sum(1 for seq in seqs if self.ack(channel, sub_id, seq))

    @abstractmethod
    def sub(self, channel: str, sub_id: int) -> SubRecord | None:
        """A copy of one subscription's state."""

    @abstractmethod
    def subs(self, channel: str) -> list[SubRecord]:
        """Copies of the channel's subscriptions, by id."""

    # --- durability --------------------------------------------------------------------

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def sync(self) -> int:
        """Make every change so far durable (per the sync policy); the epoch it covered.

        Every message stored in the returned epoch before the call is durable; one stored in
        an earlier epoch had been rolled back before the sync began. A rollback after the
        sync returned (a write failing in another thread meanwhile) does not touch what it
        covered, so callers compare with this value, not with :attr:`epoch` read later.
        Raises :class:`StoreWriteError` if that failed; then every message stored since the
        last successful sync is rolled back (other state is kept and written next time).
        """

    @abstractmethod
    def close(self) -> None: ...

    # Called, from another thread, when a store whose database was away serves again (the
    # server then writes what waited and resumes deliveries that needed a read).
    on_available: Callable[[], None] | None = None

    def lock_held(self) -> bool:
        """Whether this store still holds its exclusive lock (FT mode asks the active server's
        store every heartbeat). A file's flock cannot be lost while the process lives; a
        database's lock can, with its connection. Blocking: call it off the event loop."""
        return True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
