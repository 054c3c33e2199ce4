"""Flow control between producers and the consumers they fill: bounded, reference-counted stalls.

As in the reference server, a consumer whose pending output passes 3/4 of max_pending is
congested. A producer whose read delivered to congested consumers is not read again for a
short while: 2 ms per such delivery, at most 10 ms per read, or until every consumer it waits
for has drained below the mark, whichever comes first. A stall never outlives its bound, so
one stuck consumer slows its producers down but never freezes them, nor anybody else.

A consumer past max_pending is a slow consumer and is closed (Server.flush), as is one whose
socket makes no progress for the write deadline (Server._sweep_writes).

The connections involved carry three attributes, `stalled_by` (the consumers a stalled
producer waits for), `stalling` (the producers waiting for a consumer) and `stall_timer`,
and two methods: `pause_input()` and `resume_input()` (which resumes only when nothing else
holds the connection's input).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

STALL_MIN = 0.002  # seconds per delivery to a congested consumer
STALL_TOTAL = 0.010  # at most, per read of the producer


def congestion_mark(max_pending: int) -> int:
    """Pending bytes over which a consumer stalls its producers (and under which it frees them)."""
    return max_pending // 4 * 3


def stall(
    producer: Any, consumers: Iterable[Any], deliveries: int, loop: asyncio.AbstractEventLoop
) -> bool:
    """Pause reading `producer` until each of `consumers` drains, for at most the stall bound.
    True when this paused it (a new stall), False when it was paused already or not at all."""
    if producer.closed:
        return False
    waits = producer.stalled_by
    if waits is None:
        waits = producer.stalled_by = set()
    first = not waits
    for consumer in consumers:
        if consumer is producer or consumer.closed:
            continue
        waits.add(consumer)
        if consumer.stalling is None:
            consumer.stalling = set()
        consumer.stalling.add(producer)
    if first and waits:
        producer.pause_input()
        ttl = min(STALL_TOTAL, STALL_MIN * max(1, deliveries))
        producer.stall_timer = loop.call_later(ttl, resume, producer)
        return True
    return False


def drained(consumer: Any) -> None:
    """`consumer` is back under the mark (or gone): free the producers that wait only for it."""
    producers = consumer.stalling
    if not producers:
        return
    consumer.stalling = None
    for producer in producers:
        waits = producer.stalled_by
        if waits is None:
            continue
        waits.discard(consumer)
        if not waits:
            resume(producer)


def resume(producer: Any) -> None:
    """End `producer`'s stall now, whoever it was waiting for."""
    timer = producer.stall_timer
    if timer is not None:
        timer.cancel()
        producer.stall_timer = None
    waits = producer.stalled_by
    if waits:
        for consumer in waits:
            if consumer.stalling is not None:
                consumer.stalling.discard(producer)
        waits.clear()
    producer.resume_input()


def forget(conn: Any) -> None:
    """`conn` is closing: release what it holds as a consumer and as a producer."""
    drained(conn)
    if conn.stalled_by or conn.stall_timer is not None:
        resume(conn)
