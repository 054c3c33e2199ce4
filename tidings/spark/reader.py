"""Reading one partition (a channel's sequence range) on an executor.

`read()` of a Python data source runs in a Python worker that shares nothing with the driver
process that planned it, so a `NatsPartition` carries everything the read needs: the range,
the connection options and the read parameters. The read opens its own NATS connection and,
when the driver found a tidings server answering bulk fetches, reads the range with them
(`fetch.py`: columnar replies that become Arrow batches without a per-row Python step).
Otherwise (the reference streaming server, or option `fetch` false) it registers as a
streaming client, subscribes with SequenceStart at the range's first sequence, turns what
arrives into Arrow record batches and closes the subscription after the range's last
sequence. Either way, reading the same partition again produces the same rows, and a lost
connection is resumed where it broke off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..client import errors as nats_errors
from ..streaming.client import Subscription
from .arrow import columnar_batch, message_batch
from .connection import ConnectionLost, Losses
from .fetch import HEADER, FetchReply, FetchUnsupported, fetch_range
from .options import ConnectionOptions, ReadOptions
from .planning import SeqRange
from .stan import RangeRead, StanConnection, StanError, wait_progress

MSG_OVERHEAD = 96  # bytes a delivered message costs besides its data (MSG line, MsgProto)


@dataclass(frozen=True)
class ReadParams:
    max_in_flight: int = 100_000
    max_bytes_in_flight: int = 64 * 1024 * 1024
    ack_wait: int = 60
    batch_size: int = 10_000
    read_timeout: float = 30.0
    fetch: bool = True  # read with bulk fetches (the driver found the server answering them)
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
    """One Spark task's share: messages `start`..`end` (inclusive) of a channel, or of a
    JetStream stream (`kind` "stream": `hint` says how its ranges are read, `subjects`
    which of its messages)."""

    def __init__(self, rng: SeqRange, copts: ConnectionOptions, params: ReadParams,
                 msg_size: int = 0, min_time: int = 0, kind: str = "channel", hint: str = "",
                 subjects: tuple[str, ...] = ()) -> None:
        super().__init__((rng.channel, rng.start, rng.end))
        self.range = rng
        self.min_time = min_time  # Unix ns; earlier messages are skipped (option startTime)
        self.copts = copts
        self.params = params
        self.in_flight = params.in_flight(rng.count, msg_size)
        self.kind, self.hint, self.subjects = kind, hint, subjects


def read_any(part: NatsPartition) -> Iterator[pa.RecordBatch]:
    """A partition's rows, read by its backend."""
    if part.kind == "stream":
        from .jsread import read_stream_partition

        return read_stream_partition(part)
    return read_partition(part)


def read_partition(part: NatsPartition) -> Iterator[pa.RecordBatch]:
    """The messages of the partition's range as record batches, each sequence once.

    When the connection is lost midway, a new one (`reconnectTimeout`) resumes at the first
    sequence not yet handed to Spark; a read that cannot reconnect fails naming the servers.
    """
    rng = part.range
    if rng.end < rng.start:
        return
    loop = asyncio.new_event_loop()
    read = RangeRead(rng.channel, rng.start, rng.end, part.params.batch_size, part.min_time)
    conn = StanConnection(part.copts, "r")
    losses = Losses()
    try:
        while True:
            try:
                loop.run_until_complete(conn.connect_nats())
                if part.params.fetch:
                    yield from fetch_read(part, loop, conn, read)
                else:
                    yield from subscription_read(part, loop, conn, read)
                return
            except (StanError, nats_errors.Error, OSError) as exc:
                lost = conn.check(exc)
                if not isinstance(lost, ConnectionLost):
                    raise
                losses.lost(read.expected, lost)
                read.error = None
                loop.run_until_complete(conn.close())
                conn = StanConnection(part.copts, "r", replaces=conn)
    finally:
        try:
            loop.run_until_complete(conn.close())
        finally:
            loop.close()


def fetch_read(part: NatsPartition, loop: asyncio.AbstractEventLoop, conn: StanConnection,
               read: RangeRead) -> Iterator[pa.RecordBatch]:
    """The rest of the range (from `read.expected`) through bulk fetches. The driver found
    the server answering them; an unanswered first fetch is a streaming server that is not
    (yet, after a restart) there, tried again for `reconnectTimeout`."""
    rng = part.range

    async def first() -> tuple[AsyncGenerator[FetchReply, None], FetchReply | None]:
        replies = fetch_range(conn.nc, part.copts.cluster_id, rng.channel, read.expected,
                              rng.end, part.params.fetch_window, part.copts.request_timeout)
        try:
            return replies, await anext(replies)
        except StopAsyncIteration:
            return replies, None
        except BaseException:
            await replies.aclose()
            raise

    replies, reply = loop.run_until_complete(conn.retrying(
        first, lambda exc: isinstance(exc, FetchUnsupported) and conn.alive(),
        "fetching from NATS Streaming"))
    size = part.params.batch_size
    held: list[pa.RecordBatch] = []  # rows fetched and not yet handed to Spark
    rows = upto = 0
    try:
        while reply is not None:
            upto = reply.next
            batch = columnar_batch(rng.channel, reply.data, reply.count, HEADER.size,
                                   part.min_time)
            if batch.num_rows:
                held.append(batch)
                rows += batch.num_rows
            if rows >= size:
                whole = pa.concat_batches(held)
                cut = rows - rows % size
                for at in range(0, cut, size):
                    nxt = at + size  # a resumed read starts at the first row not handed over
                    read.expected = whole.column(1)[nxt].as_py() if nxt < rows else upto
                    yield whole.slice(at, size)
                held = [whole.slice(cut)] if cut < rows else []
                rows -= cut
            if not held:
                read.expected = upto
            try:
                reply = loop.run_until_complete(anext(replies))
            except StopAsyncIteration:
                reply = None
        if held:
            read.expected = upto
            yield pa.concat_batches(held)
    finally:
        loop.run_until_complete(replies.aclose())


def subscription_read(part: NatsPartition, loop: asyncio.AbstractEventLoop,
                      conn: StanConnection, read: RangeRead) -> Iterator[pa.RecordBatch]:
    """The rest of the range (from `read.expected`) through a SequenceStart subscription (the
    standard protocol)."""
    rng, params = part.range, part.params
    start = read.expected
    in_flight = min(part.in_flight, rng.end - start + 1)
    acking = rng.end - start + 1 > in_flight
    read.wake_every = params.batch_size
    if acking:
        read.wake_every = min(params.batch_size, max(1, in_flight // 2))
    conn.on_lost.append(read.fail)

    async def open_sub() -> Subscription:
        sc = await conn.connect()
        # raw_cb: payloads go from the client's read path straight to the column lists
        return await sc.subscribe(rng.channel, sequence=start, raw_cb=read.on_msg,
                                  max_inflight=min(in_flight, 2**31 - 1),
                                  ack_wait=params.ack_wait)

    async def next_columns() -> tuple[list[int], list[bytes], list[int], list[bool]]:
        await wait_progress(read, params.read_timeout, lambda: (
            f"reading channel {rng.channel!r} sequences {rng.start}..{rng.end} "
            f"(next expected {read.expected}) from {conn.servers}"))
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
