"""Flow control (tidings.server.flow): stalls are bounded and reference-counted."""

from __future__ import annotations

import asyncio

from tidings.server import flow


class Conn:
    """A connection as flow control sees it, recording what it is asked."""

    def __init__(self) -> None:
        self.closed = False
        self.paused = False
        self.pauses = 0
        self.stalled_by: set[Conn] | None = None
        self.stalling: set[Conn] | None = None
        self.stall_timer: asyncio.TimerHandle | None = None

    def pause_input(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_input(self) -> None:
        if not self.stalled_by:
            self.paused = False


async def test_producer_waits_for_every_congested_consumer() -> None:
    loop = asyncio.get_running_loop()
    producer, first, second = Conn(), Conn(), Conn()
    flow.stall(producer, [first, second], 2, loop)
    assert producer.paused
    flow.drained(first)
    assert producer.paused  # still waits for the second
    flow.drained(second)
    assert not producer.paused
    assert producer.stall_timer is None
    assert not first.stalling and not second.stalling


async def test_stall_ends_at_its_bound_even_if_nobody_drains() -> None:
    loop = asyncio.get_running_loop()
    producer, consumer = Conn(), Conn()
    flow.stall(producer, [consumer], 1000, loop)  # many deliveries: still at most the total
    assert producer.paused
    ended = loop.create_future()
    loop.call_later(flow.STALL_TOTAL * 1.5, ended.set_result, None)
    await ended
    assert not producer.paused
    assert not consumer.stalling  # the consumer no longer holds it
    flow.drained(consumer)  # a late drain changes nothing
    assert not producer.paused


async def test_a_closing_consumer_frees_its_producers() -> None:
    loop = asyncio.get_running_loop()
    producer, consumer = Conn(), Conn()
    flow.stall(producer, [consumer], 1, loop)
    consumer.closed = True
    flow.forget(consumer)
    assert not producer.paused


async def test_a_closing_producer_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    producer, consumer = Conn(), Conn()
    flow.stall(producer, [consumer], 1, loop)
    producer.closed = True
    flow.forget(producer)
    assert producer.stall_timer is None
    assert not consumer.stalling


async def test_one_pause_per_stall_however_many_consumers_join() -> None:
    loop = asyncio.get_running_loop()
    producer, first, second = Conn(), Conn(), Conn()
    flow.stall(producer, [first], 1, loop)
    flow.stall(producer, [second], 1, loop)
    assert producer.pauses == 1
    flow.drained(first)
    assert producer.paused
    flow.drained(second)
    assert not producer.paused
