"""The in-memory state of the streaming server: clients, channels, subscriptions, queue groups.

The store holds the durable copy (:class:`~tidings.streaming.stores.SubRecord` and friends);
these objects add what only a running server needs: timers, stalled flags, expiry times of
unacknowledged messages, the redelivery counts.
"""

from __future__ import annotations

import asyncio
import re

from ..stores import SubRecord

CLIENT_ID_RE = re.compile(r"^[a-zA-Z0-9_-]+$")


def is_channel_name_valid(name: str) -> bool:
    """The reference's rule: non-empty tokens, no leading dot, no '/', no wildcards."""
    if not name or name[0] == "." or name[-1] == ".":
        return False
    if "/" in name or "*" in name or ">" in name or ".." in name:
        return False
    return True


class Client:
    __slots__ = (
        "id",
        "hb_inbox",
        "conn_id",
        "protocol",
        "ping_interval",
        "ping_max_out",
        "subs",
        "fhb",
        "hb_timer",
        "hb_task",
        "closed",
    )

    def __init__(
        self,
        client_id: str,
        hb_inbox: str,
        conn_id: bytes = b"",
        protocol: int = 0,
        ping_interval: int = 0,
        ping_max_out: int = 0,
    ) -> None:
        self.id = client_id
        self.hb_inbox = hb_inbox
        self.conn_id = conn_id
        self.protocol = protocol
        self.ping_interval = ping_interval
        self.ping_max_out = ping_max_out
        self.subs: list[Sub] = []
        self.fhb = 0
        self.hb_timer: asyncio.TimerHandle | None = None
        self.hb_task: asyncio.Task[None] | None = None
        self.closed = False


class Sub:
    """One subscription (plain, durable, queue member, or a durable queue group's shadow)."""

    __slots__ = (
        "id",
        "channel",
        "client_id",
        "saved_client_id",
        "inbox",
        "ack_inbox",
        "qgroup",
        "durable_name",
        "max_in_flight",
        "ack_wait",
        "is_durable",
        "is_closed",
        "last_sent",
        "pending",
        "stalled",
        "new_on_hold",
        "initialized",
        "qstate",
        "rdlv",
        "ack_timer",
        "has_failed_hb",
        "removed",
    )

    def __init__(self, channel: Channel) -> None:
        self.id = 0
        self.channel = channel
        self.client_id = ""
        self.saved_client_id = ""
        self.inbox = ""
        self.ack_inbox = ""
        self.qgroup = ""
        self.durable_name = ""
        self.max_in_flight = 1
        self.ack_wait = 30
        self.is_durable = False
        self.is_closed = False
        self.last_sent = 0
        # sequence -> expiry (loop.time()); 0.0 means "unknown" (recovered after a restart)
        self.pending: dict[int, float] = {}
        self.stalled = False
        self.new_on_hold = False
        self.initialized = False
        self.qstate: QueueState | None = None
        self.rdlv: dict[int, int] = {}
        self.ack_timer: asyncio.TimerHandle | None = None
        self.has_failed_hb = False
        self.removed = False

    @property
    def is_queue(self) -> bool:
        return bool(self.qgroup)

    @property
    def is_plain_durable(self) -> bool:
        """A durable subscriber (not a durable queue group member)."""
        return bool(self.durable_name) and not self.qgroup

    @property
    def is_shadow(self) -> bool:
        return bool(self.qgroup) and self.is_durable and not self.client_id

    @property
    def is_offline(self) -> bool:
        return not self.client_id

    @property
    def durable_key(self) -> tuple[str, str]:
        return (self.client_id or self.saved_client_id, self.durable_name)

    def record(self, client_id: str | None = None) -> SubRecord:
        return SubRecord(
            client_id=self.client_id if client_id is None else client_id,
            inbox=self.inbox,
            ack_inbox=self.ack_inbox,
            queue_group=self.qgroup,
            durable_name=self.durable_name,
            max_in_flight=self.max_in_flight,
            ack_wait=self.ack_wait,
            is_durable=self.is_durable,
            is_closed=self.is_closed,
            last_sent=self.last_sent,
            id=self.id,
        )

    @classmethod
    def from_record(cls, channel: Channel, rec: SubRecord) -> Sub:
        sub = cls(channel)
        sub.id = rec.id
        sub.client_id = rec.client_id
        sub.inbox = rec.inbox
        sub.ack_inbox = rec.ack_inbox
        sub.qgroup = rec.queue_group
        sub.durable_name = rec.durable_name
        sub.max_in_flight = rec.max_in_flight
        sub.ack_wait = rec.ack_wait
        sub.is_durable = rec.is_durable
        sub.is_closed = rec.is_closed
        sub.last_sent = rec.last_sent
        sub.pending = dict.fromkeys(sorted(rec.pending), 0.0)
        return sub


class QueueState:
    __slots__ = ("name", "subs", "last_sent", "stalled_count", "shadow", "new_on_hold", "rdlv")

    def __init__(self, name: str) -> None:
        self.name = name
        self.subs: list[Sub] = []
        self.last_sent = 0
        self.stalled_count = 0
        self.shadow: Sub | None = None
        self.new_on_hold = False
        self.rdlv: dict[int, int] = {}


class Channel:
    __slots__ = (
        "name",
        "psubs",
        "qsubs",
        "durables",
        "inboxes",
        "deliverable",
        "stored",
        "last_activity",
        "max_inactivity",
        "delete_timer",
        "deleted",
    )

    def __init__(self, name: str, max_inactivity: float = 0.0) -> None:
        self.name = name
        self.psubs: list[Sub] = []
        self.qsubs: dict[str, QueueState] = {}
        self.durables: dict[tuple[str, str], Sub] = {}
        self.inboxes: dict[str, Sub] = {}
        # highest sequence that may be delivered (stored under the sync policy)
        self.deliverable = 0
        # highest sequence stored
        self.stored = 0
        self.last_activity = 0.0
        self.max_inactivity = max_inactivity
        self.delete_timer: asyncio.TimerHandle | None = None
        self.deleted = False

    def has_active_subs(self) -> bool:
        if self.psubs:
            return True
        return any(qs.subs for qs in self.qsubs.values())

    def all_subs(self) -> list[Sub]:
        """Active subscriptions, offline durables and durable queue shadows."""
        out = list(self.psubs)
        for sub in self.durables.values():
            if not sub.client_id:
                out.append(sub)
        for qs in self.qsubs.values():
            out.extend(qs.subs)
            if qs.shadow is not None:
                out.append(qs.shadow)
        return out
