"""What `tidings streaming migrate` does, decided without I/O: the plan.

A NATS Streaming channel becomes a JetStream stream as the reference tool stan2js makes it:
the stream is named after the channel (or as ``--map CHANNEL=STREAM`` says), captures the
channel's name as its one subject, file storage, one replica; each message carries the
headers stan2js adds (``Nats-Streaming-Channel``, ``-Sequence``, ``-Timestamp`` in RFC 3339
with nanoseconds) and a ``Nats-Msg-Id`` of channel and sequence. Unlike stan2js the stream
starts at the channel's first sequence (``first_seq``), so that a message keeps its number.

A durable subscription becomes a durable consumer named after it, with explicit acks and the
description stan2js gives ("Migrated from NATS Streaming"): a push consumer on a new inbox (a
durable queue group's queue name its deliver group), or a pull consumer with ``--pull``. It
starts at the subscription's first unacknowledged message (``by_start_sequence``): everything
below it was acknowledged and is never delivered again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..server.gojson import go_time

DESCRIPTION = "Migrated from NATS Streaming"
HDR_MSG_ID = "Nats-Msg-Id"
HDR_CHANNEL = "Nats-Streaming-Channel"
HDR_SEQUENCE = "Nats-Streaming-Sequence"
HDR_TIMESTAMP = "Nats-Streaming-Timestamp"
# A stand-in for a message that expired from the channel before it was read: published so
# that the next message keeps its sequence, deleted at once.
HDR_GAP = "Nats-Streaming-Gap"
STORAGES = ("file", "memory")
_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>/\\")
NANOS = 1_000_000_000


class MigrateError(ValueError):
    """A migration that cannot go on: bad input, a refusing target. One sentence."""


@dataclass(frozen=True)
class Channel:
    """A channel as the source holds it (``first_seq > last_seq`` when it has no message)."""

    name: str
    first_seq: int
    last_seq: int
    msgs: int


@dataclass(frozen=True)
class SubState:
    """A durable subscription, or one member of a durable queue group, as the source holds it.

    ``queue_group`` is the protocol's ``durable:queue`` for a durable queue group (then
    ``durable_name`` is empty); ``first_pending`` the lowest sequence delivered and not
    acknowledged (None when everything delivered was acknowledged)."""

    channel: str
    client_id: str
    durable_name: str
    queue_group: str
    last_sent: int
    first_pending: int | None


@dataclass(frozen=True)
class Durable:
    """One consumer to make: a plain durable, or a durable queue group (members merged)."""

    channel: str
    name: str
    queue: str
    clients: tuple[str, ...]
    next_seq: int  # the first message not acknowledged


@dataclass
class ConsumerPlan:
    durable: Durable
    config: dict[str, Any]
    exists: bool = False


@dataclass
class StreamPlan:
    """One channel into one stream; ``resume_from`` is the first sequence still to copy."""

    channel: Channel
    stream: str
    config: dict[str, Any]
    consumers: list[ConsumerPlan] = field(default_factory=list)
    exists: bool = False
    resume_from: int = 0

    @property
    def to_copy(self) -> int:
        return max(0, self.channel.last_seq - self.resume_from + 1)


@dataclass(frozen=True)
class Options:
    channels: tuple[str, ...] = ()  # empty: every channel
    maps: Mapping[str, str] = field(default_factory=dict)
    pull: bool = False
    storage: str = "file"
    replicas: int = 1


@dataclass(frozen=True)
class Settings:
    opts: Options = field(default_factory=Options)
    dry_run: bool = False
    limit: int | None = None  # messages this run copies at most
    window: int = 4096  # PubAcks outstanding at most


# --- names ------------------------------------------------------------------------------


def parse_maps(items: Iterable[str]) -> dict[str, str]:
    """``CHANNEL=STREAM`` items (``--map``) as a dict; the last ``=`` splits."""
    out: dict[str, str] = {}
    for item in items:
        channel, eq, stream = item.rpartition("=")
        if not eq or not channel or not stream:
            raise MigrateError(f"--map {item!r}: expected CHANNEL=STREAM")
        if channel in out and out[channel] != stream:
            raise MigrateError(f"--map: channel {channel!r} mapped twice "
                               f"({out[channel]!r} and {stream!r})")
        out[channel] = stream
    return out


def name_problem(name: str) -> str | None:
    """Why JetStream refuses ``name`` as a stream or consumer name, or None."""
    if not name:
        return "it is empty"
    bad = sorted(set(name) & _BAD_NAME_CHARS)
    if bad:
        return "it holds " + " ".join(repr(c) for c in bad)
    if not name.isprintable():
        return "it holds a non-printable character"
    return None


def stream_name(channel: str, maps: Mapping[str, str]) -> str:
    name = maps.get(channel, channel)
    problem = name_problem(name)
    if problem is not None:
        how = "--map" if channel in maps else f"--map {channel}=NAME to name it"
        raise MigrateError(f"channel {channel!r}: {name!r} cannot be a stream name ({problem}); "
                           f"use {how}")
    return name


# --- what the source says, merged ---------------------------------------------------------


def durables(subs: Iterable[SubState]) -> list[Durable]:
    """The consumers the durable subscriptions become: one per plain durable, one per
    durable queue group (its first unacknowledged message the lowest among its members', or
    the one after the group's last sent)."""
    groups: dict[tuple[str, str, str, str], list[SubState]] = {}
    for s in subs:  # a plain durable is its client's; a queue group its members'
        owner = "" if s.queue_group else s.client_id
        groups.setdefault((s.channel, s.durable_name, s.queue_group, owner), []).append(s)
    out = []
    for (channel, durable, qgroup, _), members in groups.items():
        name, _, queue = (durable, "", "") if not qgroup else qgroup.partition(":")
        pending = [m.first_pending for m in members if m.first_pending is not None]
        next_seq = min(pending) if pending else max(m.last_sent for m in members) + 1
        out.append(Durable(channel, name, queue, tuple(sorted({m.client_id for m in members})),
                           next_seq))
    return sorted(out, key=lambda d: (d.channel, d.name, d.queue, d.clients))


# --- configurations -----------------------------------------------------------------------


def first_seq(channel: Channel) -> int:
    """The sequence the channel's stream starts at: its first message's, or the next one's
    when it holds none."""
    return channel.first_seq if channel.msgs else channel.last_seq + 1


def stream_config(channel: Channel, stream: str, opts: Options) -> dict[str, Any]:
    """The stream stan2js makes for a channel, starting at the channel's first sequence."""
    cfg: dict[str, Any] = {"name": stream, "subjects": [channel.name], "storage": opts.storage,
                           "num_replicas": opts.replicas}
    first = first_seq(channel)
    if first > 1:
        cfg["first_seq"] = first
    return cfg


def consumer_config(d: Durable, pull: bool, deliver_subject: str) -> dict[str, Any]:
    """The durable consumer of a durable subscription, at its first unacknowledged message
    (ack wait and max ack pending JetStream's defaults, as stan2js leaves them: in NATS
    Streaming they are the subscriber's options, given anew at every subscribe)."""
    cfg: dict[str, Any] = {
        "durable_name": d.name, "name": d.name, "description": DESCRIPTION,
        "deliver_policy": "by_start_sequence", "opt_start_seq": max(d.next_seq, 1),
        "ack_policy": "explicit",
    }
    if not pull:
        cfg["deliver_subject"] = deliver_subject
        if d.queue:
            cfg["deliver_group"] = d.queue
    return cfg


STREAM_FIELDS = ("subjects", "storage", "num_replicas")
CONSUMER_FIELDS = ("durable_name", "description", "deliver_policy", "opt_start_seq",
                   "ack_policy", "deliver_group")


def stream_differences(have: Mapping[str, Any], want: Mapping[str, Any],
                       empty: bool) -> list[str]:
    """How an existing stream's configuration differs from the one we would make (its first
    sequence only while it holds nothing: after that the messages say where it stands)."""
    diffs = [f"{k} {have.get(k)!r}, not {want.get(k)!r}" for k in STREAM_FIELDS
             if have.get(k) != want.get(k)]
    if empty and (have.get("first_seq") or 1) != (want.get("first_seq") or 1):
        diffs.append(f"first_seq {have.get('first_seq') or 1}, not {want.get('first_seq') or 1}")
    return diffs


def consumer_differences(have: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """How an existing consumer differs from ours (its inbox aside: any push consumer's is)."""
    diffs = [f"{k} {have.get(k)!r}, not {want.get(k)!r}" for k in CONSUMER_FIELDS
             if have.get(k) != want.get(k)]
    if bool(have.get("deliver_subject")) != bool(want.get("deliver_subject")):
        kind = {True: "push", False: "pull"}
        diffs.append(f"a {kind[bool(have.get('deliver_subject'))]} consumer, "
                     f"not {kind[bool(want.get('deliver_subject'))]}")
    return diffs


# --- the plan ---------------------------------------------------------------------------


def build_plan(channels: Sequence[Channel], subs: Iterable[SubState], opts: Options,
               inbox: Any = None) -> list[StreamPlan]:
    """A stream plan per chosen channel, with its consumers; MigrateError for a channel
    that does not exist, a name JetStream refuses, two channels onto one stream, two
    durables onto one consumer. ``inbox()``: a deliver subject for each push consumer."""
    by_name = {c.name: c for c in channels}
    chosen = list(opts.channels) or sorted(by_name)
    for name in [*chosen, *opts.maps]:
        if name not in by_name:
            known = ", ".join(sorted(by_name)[:20]) or "none"
            raise MigrateError(f"channel {name!r} does not exist in the source "
                               f"(its channels: {known})")
    if opts.storage not in STORAGES:
        raise MigrateError(f"storage {opts.storage!r}: expected file or memory")
    plans: dict[str, StreamPlan] = {}
    owner: dict[str, str] = {}
    for name in dict.fromkeys(chosen):
        stream = stream_name(name, opts.maps)
        if stream in owner:
            raise MigrateError(f"channels {owner[stream]!r} and {name!r} would both become "
                               f"stream {stream!r}; use --map")
        owner[stream] = name
        plans[name] = StreamPlan(by_name[name], stream,
                                 stream_config(by_name[name], stream, opts))
    _add_consumers(plans, durables(s for s in subs if s.channel in plans), opts, inbox)
    return list(plans.values())


def _add_consumers(plans: Mapping[str, StreamPlan], found: Iterable[Durable], opts: Options,
                   inbox: Any) -> None:
    for d in found:
        plan = plans[d.channel]
        problem = name_problem(d.name)
        if problem is not None:
            raise MigrateError(f"channel {d.channel!r}: durable {d.name!r} cannot be a "
                               f"consumer name ({problem})")
        clash = next((c.durable for c in plan.consumers if c.durable.name == d.name), None)
        if clash is not None:
            raise MigrateError(
                f"channel {d.channel!r}: durable {d.name!r} of {_holders(clash)} and of "
                f"{_holders(d)} would both become consumer {d.name!r} of stream {plan.stream!r}")
        # what expired from the channel is not in the stream either: start at its first
        d = replace(d, next_seq=max(d.next_seq, plan.config.get("first_seq", 1)))
        deliver = "" if opts.pull else (inbox() if inbox is not None else "_INBOX.<new>")
        plan.consumers.append(ConsumerPlan(d, consumer_config(d, opts.pull, deliver)))


def _holders(d: Durable) -> str:
    if d.queue:
        return f"queue group {d.queue!r}"
    return "client " + ", ".join(repr(c) for c in d.clients)


def describe(plans: Sequence[StreamPlan]) -> str:
    """The dry run's report: each stream's configuration, what it would copy, its consumers."""
    lines = []
    for p in plans:
        ch = p.channel
        state = "exists" if p.exists else "to create"
        lines.append(f"stream {p.stream} ({state}) from channel {ch.name!r}: "
                     f"{json.dumps(p.config, sort_keys=True)}")
        span = f"{p.resume_from}..{ch.last_seq}" if p.to_copy else "nothing"
        lines.append(f"  messages: {ch.msgs} in the channel ({ch.first_seq}..{ch.last_seq}), "
                     f"{p.to_copy} to copy ({span})")
        for c in p.consumers:
            d = c.durable
            kind = "pull" if "deliver_subject" not in c.config else "push"
            state = "exists" if c.exists else "to create"
            lines.append(f"  consumer {d.name} ({kind}, {state}; {_holders(d)}), first "
                         f"delivery at {d.next_seq}: {json.dumps(c.config, sort_keys=True)}")
    return "\n".join(lines)


# --- messages ---------------------------------------------------------------------------


class Stamper:
    """A channel's messages' migration headers as NATS/1.0 header blocks, encoded without a
    header object (they are the copy's hot path); the time text of a second made once."""

    def __init__(self, channel: str) -> None:
        name = channel.encode()
        self._head = b"NATS/1.0\r\n%s: %s:" % (HDR_MSG_ID.encode(), name)
        self._mid = b"\r\n%s: %s\r\n%s: " % (HDR_CHANNEL.encode(), name, HDR_SEQUENCE.encode())
        self._time = b"\r\n%s: " % HDR_TIMESTAMP.encode()
        self._second = -1
        self._text = ""

    def timestamp(self, ns: int) -> str:
        """RFC 3339 in UTC with nanoseconds (trailing zeros dropped), as Go's RFC3339Nano."""
        secs, frac = divmod(ns, NANOS)
        if secs != self._second:
            self._second, self._text = secs, go_time(secs * NANOS, utc=True)[:-1]
        return self._text + (f".{frac:09d}".rstrip("0") if frac else "") + "Z"

    def block(self, seq: int, ts: int) -> bytes:
        """Nats-Msg-Id, Nats-Streaming-Channel, -Sequence, -Timestamp."""
        num = b"%d" % seq
        return b"".join((self._head, num, self._mid, num, self._time,
                         self.timestamp(ts).encode(), b"\r\n\r\n"))


def gap_block(channel: str, seq: int) -> bytes:
    """The headers of a stand-in for a message that expired before it was read."""
    return (f"NATS/1.0\r\n{HDR_MSG_ID}: {channel}:{seq}\r\n{HDR_CHANNEL}: {channel}\r\n"
            f"{HDR_SEQUENCE}: {seq}\r\n{HDR_GAP}: expired before it was read\r\n\r\n"
            ).encode()


def ours(headers: Mapping[str, str], channel: str, seq: int) -> bool:
    """Whether a stored message is the migration's copy of ``channel``'s message ``seq``."""
    return headers.get(HDR_CHANNEL) == channel and headers.get(HDR_SEQUENCE) == str(seq)
