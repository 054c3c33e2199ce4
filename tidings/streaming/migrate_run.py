"""The steps of `tidings streaming migrate`: plan against the target, copy, make consumers.

Each chosen channel becomes a stream (:mod:`.migrate_plan` decides the names, the
configurations and the headers), its messages copied in order, each publish acknowledged (a
window of them outstanding), the stream's sequences the channel's; then each durable
subscription becomes a durable consumer at its first unacknowledged message.

Resumable: before copying, each stream says where it stands (its last sequence, whose message
must be the channel's) and the copy goes on from there; ``Nats-Msg-Id`` (channel:sequence)
keeps a message that was published twice within the duplicate window from being stored twice.
Consumers are made once every chosen channel is copied. Nothing is created before every
stream and consumer that exists already was found to match (a different one stops the
migration, untouched).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from .migrate_plan import (
    HDR_GAP,
    MigrateError,
    Settings,
    Stamper,
    StreamPlan,
    build_plan,
    consumer_differences,
    first_seq,
    gap_block,
    ours,
    stream_differences,
)
from .migrate_sources import Source
from .migrate_target import JetStreamTarget, Publisher
from .stores.base import MsgRecord

Advance = Callable[[int], None]


class Meter(Protocol):
    """Progress: ``channel(plan)`` gives the function told of each stretch copied."""

    def channel(self, plan: StreamPlan) -> Advance: ...


@dataclass
class Report:
    plans: list[StreamPlan]
    copied: dict[str, int] = field(default_factory=dict)
    consumers: int = 0
    seconds: float = 0.0
    complete: bool = False

    @property
    def total(self) -> int:
        return sum(self.copied.values())


# --- checking the target ------------------------------------------------------------------


async def plan_migration(source: Source, target: JetStreamTarget | None,
                         settings: Settings) -> list[StreamPlan]:
    """The plan, checked against what the target has (nothing is changed)."""
    channels = await source.channels()
    opts = settings.opts
    known = {c.name for c in channels}
    wanted = [c for c in dict.fromkeys(opts.channels or sorted(known)) if c in known]
    subs = await source.subscriptions(wanted)
    inbox = target.nc.new_inbox if target is not None else None
    plans = build_plan(channels, subs, opts, inbox)
    for plan in plans:
        plan.resume_from = first_seq(plan.channel)
        if target is not None:
            await _check_stream(target, plan)
            await _check_consumers(target, plan)
    return plans


async def _check_stream(target: JetStreamTarget, plan: StreamPlan) -> None:
    info = await target.stream_info(plan.stream)
    if info is None:
        return
    plan.exists = True
    cfg, state = _obj(info.get("config")), _obj(info.get("state"))
    last = state.get("last_seq") if isinstance(state.get("last_seq"), int) else 0
    first = cfg.get("first_seq") if isinstance(cfg.get("first_seq"), int) else 1
    first = max(first, 1)
    diffs = stream_differences(cfg, plan.config, empty=last < first)
    if diffs:
        raise MigrateError(f"stream {plan.stream!r} exists with another configuration "
                           f"({'; '.join(diffs)}): left as it is; remove it or --map channel "
                           f"{plan.channel.name!r} to another stream")
    if first <= last < plan.channel.last_seq:  # more to copy: after the channel's own only
        headers = await target.get_headers(plan.stream, last)
        if headers is not None and not ours(headers, plan.channel.name, last):
            raise MigrateError(f"stream {plan.stream!r} holds messages that are not channel "
                               f"{plan.channel.name!r}'s (its last, {last}, is not its "
                               f"message {last}): left as it is")
    plan.resume_from = max(last + 1, first)


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object of the target's answer ({} where it is something else)."""
    return value if isinstance(value, dict) else {}


async def _check_consumers(target: JetStreamTarget, plan: StreamPlan) -> None:
    if not plan.exists:
        return
    for c in plan.consumers:
        info = await target.consumer_info(plan.stream, c.durable.name)
        if info is None:
            continue
        diffs = consumer_differences(_obj(info.get("config")), c.config)
        if diffs:
            raise MigrateError(f"consumer {c.durable.name!r} of stream {plan.stream!r} exists "
                               f"with another configuration ({'; '.join(diffs)}): left as "
                               "it is")
        c.exists = True


# --- copying ------------------------------------------------------------------------------


async def copy_channel(source: Source, target: JetStreamTarget, plan: StreamPlan,
                       settings: Settings, budget: int | None, advance: Advance) -> int:
    """Copy what the stream lacks (at most ``budget`` messages); how many sequences the
    stream moved on (stand-ins for expired messages included)."""
    ch = plan.channel
    end = ch.last_seq if budget is None else min(ch.last_seq, plan.resume_from + budget - 1)
    if end < plan.resume_from:
        return 0
    pub = Publisher(target.nc, plan.stream, ch.name, settings.window)
    await pub.start()
    stamp, expected = Stamper(ch.name), plan.resume_from
    try:
        async with aclosing(source.read(ch, plan.resume_from)) as batches:
            async for batch in batches:
                before = expected
                expected = await _copy_batch(target, pub, plan, stamp, batch, expected, end)
                advance(expected - before)
                if expected > end:
                    break
        await pub.drain()
    finally:
        await pub.close()
    return expected - plan.resume_from


async def _copy_batch(target: JetStreamTarget, pub: Publisher, plan: StreamPlan,
                      stamp: Stamper, batch: Sequence[MsgRecord], expected: int,
                      end: int) -> int:
    """Publish a batch's messages from ``expected`` up to ``end``; the next to expect."""
    name = plan.channel.name
    for m in batch:
        if m.seq < expected:
            continue  # a redelivery
        if m.seq > expected:
            await _fill_gap(target, pub, plan, expected, min(m.seq, end + 1))
            expected = min(m.seq, end + 1)
        if m.seq > end:
            break
        await pub.publish(name, m.data, stamp.block(m.seq, m.timestamp), m.seq)
        expected = m.seq + 1
    return expected


async def _fill_gap(target: JetStreamTarget, pub: Publisher, plan: StreamPlan, start: int,
                    end: int) -> None:
    """Messages start..end-1 expired before they were read: stand-ins keep the sequences,
    deleted as soon as they are stored."""
    await pub.drain()
    for seq in range(start, end):
        await pub.publish(plan.channel.name, b"", gap_block(plan.channel.name, seq), seq)
    await pub.drain()
    for seq in range(start, end):
        await target.delete_msg(plan.stream, seq)


async def clear_stand_ins(target: JetStreamTarget, plan: StreamPlan) -> None:
    """Stand-ins an interrupted run left at the stream's end: deleted."""
    seq = plan.resume_from - 1
    while seq >= 1:
        headers = await target.get_headers(plan.stream, seq)
        if headers is None or headers.get(HDR_GAP) is None:
            return
        await target.delete_msg(plan.stream, seq)
        seq -= 1


async def run_migration(source: Source, target: JetStreamTarget, plans: Sequence[StreamPlan],
                        settings: Settings, meter: Meter) -> Report:
    """Create the streams, copy, and (all copied) create the consumers."""
    report = Report(list(plans))
    started = time.perf_counter()
    budget = settings.limit
    for plan in plans:
        if not plan.exists:
            await target.create_stream(plan.config)
        else:
            await clear_stand_ins(target, plan)
        report.copied[plan.stream] = n = await copy_channel(
            source, target, plan, settings, budget, meter.channel(plan))
        if budget is not None:
            budget -= n
            if plan.resume_from + n <= plan.channel.last_seq:
                break
    report.seconds = time.perf_counter() - started
    report.complete = len(report.copied) == len(plans) and all(
        p.resume_from + report.copied[p.stream] > p.channel.last_seq for p in plans)
    if report.complete:
        for plan in plans:
            for c in plan.consumers:
                if not c.exists:
                    await target.create_consumer(plan.stream, c.config)
                    report.consumers += 1
    return report


