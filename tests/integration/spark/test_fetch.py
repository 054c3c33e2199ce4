"""The bulk fetch read path against the subscription read path: same rows, and the choice.

The partition reads here run `tidings.spark.reader` directly against real servers (no Spark)
where the test needs to know which path produced the rows; the last test goes through Spark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from tests.harness import start_tidings
from tidings.spark.options import ConnectionOptions, ReadOptions
from tidings.spark.planning import SeqRange
from tidings.spark.reader import (
    NatsPartition,
    ReadParams,
    fetch_read,
    read_partition,
    subscription_read,
)
from tidings.spark.stan import RangeRead, StanConnection, StanError

from .conftest import publish, wait_streaming


def _partition(url: str, channel: str, start: int, end: int, fetch: bool = True,
               min_time: int = 0, batch_size: int = 10_000, **options: str) -> NatsPartition:
    copts = ConnectionOptions.parse({"url": url, "requestTimeout": "5", **options})
    params = ReadParams.of(ReadOptions.parse({"channels": channel, "fetch": str(fetch),
                                              "batchSize": str(batch_size)}))
    return NatsPartition(SeqRange(channel, start, end), copts, params, 1000, min_time)


def _run(part: NatsPartition, read: Callable[..., Any]) -> list[pa.RecordBatch]:
    """The batches `read(part, loop, conn, range_read)` yields."""
    loop = asyncio.new_event_loop()
    conn = StanConnection(part.copts, "t")
    rng = part.range
    try:
        loop.run_until_complete(conn.connect_nats())
        state = RangeRead(rng.channel, rng.start, rng.end, part.params.batch_size,
                          part.min_time)
        return list(read(part, loop, conn, state))
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    from tidings.spark.arrow import ARROW_SCHEMA

    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks()


def test_fetch_crosses_reply_boundaries_with_the_subscription_rows(stan_server, channel_name):
    ch = channel_name()
    # ~100 KB each: a 1 MiB reply holds at most 10, so the range takes several replies
    payloads = [bytes([48 + i % 10]) * (90_000 + 997 * i) + b"|%d" % i for i in range(45)]
    publish(stan_server.url, ch, payloads)
    fetched = _run(_partition(stan_server.url, ch, 3, 44, batch_size=5), fetch_read)
    assert [b.num_rows for b in fetched] == [5] * 8 + [2]
    subscribed = _run(_partition(stan_server.url, ch, 3, 44), subscription_read)
    a, b = _table(fetched), _table(subscribed)
    assert a.column("sequence").to_pylist() == list(range(3, 45))
    assert a.column("data").to_pylist() == payloads[2:44]
    assert a.equals(b)  # sequences, payloads, timestamps, channel, subject, redelivered


def test_fetched_rows_reach_spark_in_batches_of_batch_size(stan_server, channel_name):
    """Replies of 384 KiB (~190 of these rows) are regrouped into batches of batchSize rows:
    fewer, larger batches cost Spark less per row."""
    ch = channel_name()
    payloads = [b"%06d" % i + b"y" * 2000 for i in range(2900)]
    publish(stan_server.url, ch, payloads)
    fetched = _run(_partition(stan_server.url, ch, 1, 2900, batch_size=500), fetch_read)
    assert [b.num_rows for b in fetched] == [500] * 5 + [400]
    assert _table(fetched).column("data").to_pylist() == payloads


def test_start_time_filters_fetched_rows_like_subscribed_ones(stan_server, channel_name):
    ch = channel_name()
    publish(stan_server.url, ch, [b"early%d" % i for i in range(5)])
    probe = _run(_partition(stan_server.url, ch, 1, 5), fetch_read)
    cut = (probe[0].column("timestamp").cast(pa.int64()).to_pylist()[-1] + 1) * 1000
    publish(stan_server.url, ch, [b"late%d" % i for i in range(5)])
    fetched = _run(_partition(stan_server.url, ch, 1, 10, min_time=cut), fetch_read)
    subscribed = _run(_partition(stan_server.url, ch, 1, 10, min_time=cut),
                         subscription_read)
    got = _table(fetched)
    assert got.column("data").to_pylist() == [b"late%d" % i for i in range(5)]
    assert got.equals(_table(subscribed))


@pytest.fixture(scope="module")
def limited_server() -> Iterator[str]:
    server = start_tidings(extra_args=["--max_msgs", "5"])
    try:
        wait_streaming(server.url)
        yield server.url
    finally:
        server.stop()


def test_a_range_below_the_first_sequence_after_limits(limited_server, channel_name):
    ch = channel_name()
    publish(limited_server, ch, [b"m%d" % i for i in range(1, 13)])  # only 8..12 stay
    fetched = _run(_partition(limited_server, ch, 2, 12), fetch_read)
    subscribed = _run(_partition(limited_server, ch, 2, 12), subscription_read)
    got = _table(fetched)
    assert got.column("sequence").to_pylist() == [8, 9, 10, 11, 12]
    assert got.column("data").to_pylist() == [b"m%d" % i for i in range(8, 13)]
    assert got.equals(_table(subscribed))
    gone = _run(_partition(limited_server, ch, 1, 6), fetch_read)
    assert sum(b.num_rows for b in gone) == 0


def test_without_a_streaming_server_fetching_and_subscribing_fail_in_time(channel_name):
    server = start_tidings(extra_args=["--no_streaming"])
    try:
        from tidings.spark.catalog import ChannelCatalog

        catalog = ChannelCatalog(ConnectionOptions.parse({"url": server.url}))
        try:  # the driver plans subscription reads for a server without bulk fetches
            assert catalog.fetch_supported() is False
        finally:
            catalog.close()
        for fetch, what in ((True, "fetching from NATS Streaming"),
                            (False, "no NATS Streaming server")):
            part = _partition(server.url, channel_name(), 1, 10, fetch,
                              reconnectTimeout="1")
            loop = asyncio.new_event_loop()
            began = loop.time()
            with pytest.raises(StanError, match=what) as err:
                list(read_partition(part))
            assert server.url in str(err.value)
            assert loop.time() - began < 1 + 5  # reconnectTimeout + one request
            loop.close()
    finally:
        server.stop()


def test_spark_reads_the_same_rows_with_and_without_fetch(spark, stan_server, channel_name):
    ch = channel_name()
    payloads = [b"%04d" % i + b"z" * (i * 211 % 3000) for i in range(1, 401)]
    publish(stan_server.url, ch, payloads)

    def rows(fetch: str) -> list[tuple[Any, ...]]:
        df = (spark.read.format("nats").option("url", stan_server.url).option("channels", ch)
              .option("messagesPerPartition", 150).option("fetch", fetch).load())
        return [tuple(r) for r in df.orderBy("sequence").collect()]

    fetched = rows("true")
    assert [r[1] for r in fetched] == list(range(1, 401))
    assert [bytes(r[3]) for r in fetched] == payloads
    assert fetched == rows("false")


def test_the_driver_sizes_partitions_for_the_fetch_read(stan_server):
    from tidings.spark.catalog import ChannelCatalog
    from tidings.spark.options import FETCH_PARTITION, SUBSCRIPTION_PARTITION

    catalog = ChannelCatalog(ConnectionOptions.parse({"url": stan_server.url}))
    try:
        assert catalog.fetch_supported() is True
    finally:
        catalog.close()
    ropts = ReadOptions.parse({"channels": "x"})
    assert ropts.partition_size(True) == FETCH_PARTITION > SUBSCRIPTION_PARTITION
    assert ropts.partition_size(False) == SUBSCRIPTION_PARTITION
    given = ReadOptions.parse({"channels": "x", "messagesPerPartition": "77"})
    assert given.partition_size(True) == given.partition_size(False) == 77
