"""Reading one partition (a channel's sequence range) on an executor.

`read()` of a Python data source runs in a Python worker that shares nothing with the driver
process that planned it, so a `NatsPartition` carries everything the read needs: the range,
the connection options and the read parameters. The read opens its own NATS connection and
first asks a tidings server for the range with bulk fetches (`fetch.py`: columnar replies that
become Arrow batches without a per-row Python step). When nobody answers the fetch subject (the
reference streaming server), or option `fetch` is false, it registers as a streaming client,
subscribes with SequenceStart at the range's first sequence, turns what arrives into Arrow
record batches and closes the subscription after the range's last sequence. Either way,
reading the same partition again produces the same rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..streaming.client import Subscription
from .arrow import columnar_batch, message_batch
from .fetch import HEADER, FetchUnsupported, fetch_range
from .options import ConnectionOptions, ReadOptions
from .planning import SeqRange
from .stan import RangeRead, StanConnection, wait_progress

MSG_OVERHEAD = 96  # bytes a delivered message costs besides its data (MSG line, MsgProto)


@dataclass(frozen=True)
class ReadParams:
    max_in_flight: int = 100_000
    max_bytes_in_flight: int = 64 * 1024 * 1024
    ack_wait: int = 60
    batch_size: int = 10_000
    read_timeout: float = 30.0
    fetch: bool = True
    fetch_window: int = 4  # fetch requests in flight

    @classmethod
    def of(cls, ropts: ReadOptions) -> ReadParams:
        return cls(ropts.max_in_flight, ropts.max_bytes_in_flight, ropts.ack_wait,
                   ropts.batch_size, ropts.read_timeout, ropts.fetch)

    def in_flight(self, count: int, msg_size: int) -> int:
        """The subscription's maxInFlight for a range of `count` messages of about `msg_size`.

        The whole range when it fits both limits: then no message is ever acknowledged (acks
        cost the server more than deliveries) and the subscription is simply closed at the end.
        """
        by_bytes = max(1, self.max_bytes_in_flight // (max(msg_size, 0) + MSG_OVERHEAD))
        return max(1, min(count, self.max_in_flight, by_bytes))


class NatsPartition(InputPartition):
    """One Spark task's share: messages `start`..`end` (inclusive) of `channel`."""

    def __init__(self, rng: SeqRange, copts: ConnectionOptions, params: ReadParams,
                 msg_size: int = 0, min_time: int = 0) -> None:
        super().__init__((rng.channel, rng.start, rng.end))
        self.range = rng
        self.min_time = min_time  # Unix ns; earlier messages are skipped (option startTime)
        self.copts = copts
        self.params = params
        self.in_flight = params.in_flight(rng.count, msg_size)


def read_partition(part: NatsPartition) -> Iterator[pa.RecordBatch]:
    """The messages of the partition's range as record batches, each sequence once."""
    rng = part.range
    if rng.end < rng.start:
        return
    loop = asyncio.new_event_loop()
    conn = StanConnection(part.copts, "r")
    try:
        loop.run_until_complete(conn.connect_nats())
        fetched = False
        if part.params.fetch:
            fetched = yield from fetch_read(part, loop, conn)
        if not fetched:
            yield from subscription_read(part, loop, conn)
    finally:
        try:
            loop.run_until_complete(conn.close())
        finally:
            loop.close()


def fetch_read(part: NatsPartition, loop: asyncio.AbstractEventLoop, conn: StanConnection
                ) -> Generator[pa.RecordBatch, None, bool]:
    """The range through bulk fetches; False (having yielded nothing) when unsupported."""
    rng = part.range
    replies = fetch_range(conn.nc, part.copts.cluster_id, rng.channel, rng.start, rng.end,
                          part.params.fetch_window, part.copts.request_timeout)
    try:
        while True:
            try:
                reply = loop.run_until_complete(anext(replies))
            except StopAsyncIteration:
                return True
            except FetchUnsupported:
                return False
            batch = columnar_batch(rng.channel, reply.data, reply.count, HEADER.size,
                                   part.min_time)
            if batch.num_rows:
                yield batch
    finally:
        loop.run_until_complete(replies.aclose())


def subscription_read(part: NatsPartition, loop: asyncio.AbstractEventLoop,
                       conn: StanConnection) -> Iterator[pa.RecordBatch]:
    """The range through a SequenceStart subscription (the standard protocol)."""
    rng, params = part.range, part.params
    in_flight = part.in_flight
    acking = rng.count > in_flight
    wake_every = params.batch_size
    if acking:
        wake_every = min(wake_every, max(1, in_flight // 2))
    read = RangeRead(rng.channel, rng.start, rng.end, wake_every, part.min_time)

    async def open_sub() -> Subscription:
        sc = await conn.connect()
        # raw_cb: payloads go from the client's read path straight to the column lists
        return await sc.subscribe(rng.channel, sequence=rng.start, raw_cb=read.on_msg,
                                  max_inflight=min(in_flight, 2**31 - 1),
                                  ack_wait=params.ack_wait)

    async def next_columns() -> tuple[list[int], list[bytes], list[int], list[bool]]:
        await wait_progress(read, params.read_timeout, lambda: (
            f"reading channel {rng.channel!r} sequences {rng.start}..{rng.end} "
            f"(next expected {read.expected})"))
        cols = read.take()
        if acking and not read.done:
            await sub.ack_sequences(cols[0])
        return cols

    sub = loop.run_until_complete(open_sub())
    while True:
        seqs, data, stamps, redelivered = loop.run_until_complete(next_columns())
        if seqs:
            yield message_batch(rng.channel, seqs, data, stamps, redelivered)
        if read.done and not read.seqs:
            break
