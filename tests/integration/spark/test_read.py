"""Batch reads of streaming channels through the `nats` data source on real local Spark."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from .conftest import publish, wait_streaming


def _load(spark, server, **options):
    reader = spark.read.format("nats").option("url", server.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_of_a_channel(spark, stan_server, channel_name):
    ch = channel_name()
    payloads = [b"message %d" % i for i in range(1, 301)]
    before = dt.datetime.now(dt.timezone.utc)
    publish(stan_server.url, ch, payloads)
    after = dt.datetime.now(dt.timezone.utc)

    df = _load(spark, stan_server, channels=ch, messagesPerPartition=100)
    assert df.columns == ["channel", "sequence", "subject", "data", "timestamp", "redelivered"]
    assert df.rdd.getNumPartitions() == 3  # 300 messages, 100 per partition
    rows = df.orderBy("sequence").collect()

    assert [r.sequence for r in rows] == list(range(1, 301))
    assert [bytes(r.data) for r in rows] == payloads
    assert {r.channel for r in rows} == {ch}
    assert {r.subject for r in rows} == {ch}
    assert not any(r.redelivered for r in rows)
    stamps = [r.timestamp.replace(tzinfo=dt.timezone.utc) for r in rows]
    assert stamps == sorted(stamps)
    slack = dt.timedelta(seconds=1)
    assert before - slack <= stamps[0] and stamps[-1] <= after + slack


def test_sequence_bounds_and_several_channels(spark, stan_server, channel_name):
    a, b, empty = channel_name("a"), channel_name("b"), channel_name("empty")
    publish(stan_server.url, a, [b"a%d" % i for i in range(1, 51)])
    publish(stan_server.url, b, [b"b%d" % i for i in range(1, 21)])

    df = _load(spark, stan_server, channels=f"{a},{b},{empty}", startSequence=10,
               endSequence=30)
    got = sorted((r.channel, r.sequence, bytes(r.data)) for r in df.collect())
    want = sorted([(a, i, b"a%d" % i) for i in range(10, 31)]
                  + [(b, i, b"b%d" % i) for i in range(10, 21)])
    assert got == want

    # An aggregation runs on top of the partitions like on any other source.
    counts = {r.channel: r["count"] for r in
              _load(spark, stan_server, channels=f"{a},{b}").groupBy("channel").count().collect()}
    assert counts == {a: 50, b: 20}


def test_start_time(spark, stan_server, channel_name):
    ch = channel_name()
    publish(stan_server.url, ch, [b"old-%d" % i for i in range(5)])
    time.sleep(0.3)  # a gap in the stored timestamps, not a synchronisation
    publish(stan_server.url, ch, [b"new-%d" % i for i in range(7)])
    stamps = [r.timestamp for r in _load(spark, stan_server, channels=ch)
              .orderBy("sequence").collect()]
    cut = stamps[4] + (stamps[5] - stamps[4]) / 2  # between the last old and the first new

    df = _load(spark, stan_server, channels=ch, startTime=cut.isoformat() + "Z")
    rows = df.orderBy("sequence").collect()
    assert [bytes(r.data) for r in rows] == [b"new-%d" % i for i in range(7)]
    assert [r.sequence for r in rows] == list(range(6, 13))


def test_channel_pattern_with_monitoring(spark, stan_server, channel_name):
    one, two, other = channel_name("p.one"), channel_name("p.two"), channel_name("q.x")
    for ch in (one, two, other):
        publish(stan_server.url, ch, [ch.encode()])
    pattern = one.rsplit(".", 1)[0] + ".*"
    df = _load(spark, stan_server, channelPattern=pattern, monitorUrl=stan_server.monitor_url)
    assert sorted(r.channel for r in df.collect()) == sorted([one, two])


def test_errors_are_clear(spark, stan_server, channel_name):
    with pytest.raises(Exception, match="option channels"):
        _load(spark, stan_server).collect()
    with pytest.raises(Exception, match="no NATS Streaming server with cluster id 'nope'"):
        _load(spark, stan_server, channels=channel_name(), clusterId="nope",
              requestTimeout="0.5").collect()
    with pytest.raises(Exception, match="channelPattern needs option monitorUrl"):
        _load(spark, stan_server, channelPattern="x.*").collect()


def test_ranges_longer_than_max_in_flight_are_acknowledged(spark, stan_server, channel_name):
    ch = channel_name()
    payloads = [b"%05d" % i + b"." * 200 for i in range(1, 241)]
    publish(stan_server.url, ch, payloads)
    # One range of 240 with at most 16 unacknowledged: the reader has to ack to get the rest
    # (fetch=false: the subscription read, which a tidings server would otherwise not need).
    df = _load(spark, stan_server, channels=ch, messagesPerPartition=1000,
               minPartitionsPerChannel=1, maxInFlight=16, batchSize=5, fetch="false")
    assert df.rdd.getNumPartitions() == 1
    assert [bytes(r.data) for r in df.orderBy("sequence").collect()] == payloads
    # The byte bound does the same from the sampled message size (~200 bytes + overhead).
    df = _load(spark, stan_server, channels=ch, minPartitionsPerChannel=1,
               maxBytesInFlight=3000, fetch="false")
    assert sorted(r.sequence for r in df.collect()) == list(range(1, 241))


def test_credentials_reach_the_executors(spark, tidings_factory, channel_name):
    server = tidings_factory(user="spark", password="s3cret")
    wait_streaming(server.url, user="spark", password="s3cret")
    ch = channel_name()
    publish(server.url, ch, [b"one", b"two"], user="spark", password="s3cret")

    df = _load(spark, server, channels=ch, user="spark", password="s3cret")
    assert [bytes(r.data) for r in df.orderBy("sequence").collect()] == [b"one", b"two"]
    (spark.createDataFrame([(ch, "three")], "subject string, data string")
     .write.format("nats").mode("append").option("url", server.url)
     .option("user", "spark").option("password", "s3cret").save())
    assert df.count() == 2  # a loaded DataFrame keeps the ranges planned for it
    assert _load(spark, server, channels=ch, user="spark", password="s3cret").count() == 3
    with pytest.raises(Exception, match="(?i)authorization"):
        _load(spark, server, channels=ch, password="wrong", user="spark").collect()


def test_empty_channels_read_as_no_rows(spark, stan_server, channel_name):
    df = _load(spark, stan_server, channels=f"{channel_name('x')},{channel_name('y')}")
    assert df.count() == 0
    assert df.collect() == []
