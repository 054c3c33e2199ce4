"""Options that would do nothing where they are given are refused, with the valid ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tidings.spark.options import (
    OPTIONS,
    SPARK_OPTIONS,
    ConnectionOptions,
    OptionError,
    ReadOptions,
    Use,
    WriteOptions,
    check_names,
)
from tidings.spark.planning import name_matches

from .conftest import publish


def _read_back(spark, server, channel):
    df = (spark.read.format("nats").option("url", server.url).option("channels", channel)
          .load())
    return [bytes(r.data) for r in df.orderBy("sequence").collect()]


def test_misspelt_stream_option_is_refused(spark, stan_server, channel_name):
    ch = channel_name()
    publish(stan_server.url, ch, [b"m%d" % i for i in range(6)])
    # Spark hands options lower-cased; the error suggests the documented name.
    with pytest.raises(Exception, match=re.escape(
            "unknown option 'maxmessagespertriger' for a streaming read "
            "(did you mean maxMessagesPerTrigger?); valid options: channels,")):
        query = (spark.readStream.format("nats").option("url", stan_server.url)
                 .option("channels", ch).option("maxMessagesPerTriger", 2).load()
                 .writeStream.format("noop").trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
            # Ignored, the option let every message into one micro-batch.
            assert query.exception() is not None, [p["numInputRows"]
                                                   for p in query.recentProgress]
            raise query.exception()
        finally:
            query.stop()


def test_misspelt_write_option_is_refused_before_anything_is_written(spark, stan_server,
                                                                      channel_name):
    ch = channel_name()
    df = spark.createDataFrame([(ch, "meant for core NATS")], "subject string, data string")
    with pytest.raises(Exception, match=re.escape(
            "unknown option 'taget' for a batch write (did you mean target?); "
            "valid options: target, subject, pubAckWait, maxPubAcksInFlight, url,")):
        (df.write.format("nats").mode("append").option("url", stan_server.url)
         .option("taget", "core").save())
    assert _read_back(spark, stan_server, ch) == []


def test_stream_options_are_refused_on_a_batch_read(spark, stan_server, channel_name):
    ch = channel_name()
    publish(stan_server.url, ch, [b"a", b"b"])
    reader = spark.read.format("nats").option("url", stan_server.url).option("channels", ch)
    with pytest.raises(Exception, match=re.escape(
            "option startingOffsets is for streaming reads, not for a batch read "
            "(batch reads use startSequence, endSequence, startTime)")):
        reader.option("startingOffsets", json.dumps({ch: 1})).load().collect()
    with pytest.raises(Exception, match=re.escape(
            "option maxMessagesPerTrigger is for streaming reads, not for a batch read")):
        reader.option("maxMessagesPerTrigger", 1).load().collect()


def test_starting_offsets_name_only_channels_the_stream_reads(spark, stan_server, channel_name,
                                                              tmp_path):
    a, b, other = channel_name("a"), channel_name("b"), channel_name("zz.other")
    publish(stan_server.url, a, [b"a1", b"a2", b"a3"])
    publish(stan_server.url, b, [b"b1", b"b2"])

    def run(offsets: dict[str, int], name: str) -> list[tuple[str, int]]:
        query = (spark.readStream.format("nats").option("url", stan_server.url)
                 .option("monitorUrl", stan_server.monitor_url).option("channels", a)
                 .option("channelPattern", a.rsplit(".", 1)[0] + ".*")
                 .option("startingOffsets", json.dumps(offsets)).load()
                 .writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / name))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120), "the availableNow query did not finish"
            if query.exception() is not None:
                raise query.exception()
        finally:
            query.stop()
        return sorted((r.channel, r.sequence) for r in
                      spark.sql(f"select channel, sequence from {name}").collect())

    # b is not in `channels` but matches channelPattern: its offset counts.
    name = f"offsets_{a.split('.')[0]}"
    assert run({a: 2, b: 1}, name) == [(a, 3), (b, 2)]
    with pytest.raises(Exception, match=re.escape(
            f"option startingOffsets: {other!r} not among channels ({a}) "
            f"nor matching channelPattern")):
        run({a: 2, other: 1}, name + "_typo")



@pytest.mark.parametrize("pattern,channel,matches", [
    # A `*` token or a last `>` token: matched as the server matches subjects.
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.x", False),
    ("orders.>", "orders.eu.x", True),
    ("orders.>", "orders", False),
    ("*.eu", "orders.eu", True),
    ("orders.*", "orders.e?", True),
    # Anything else: a shell glob, whose `*` crosses dots.
    ("orders*", "orders.eu.x", True),
    ("orders.e?", "orders.eu", True),
    ("orders.[ab]", "orders.a", True),
    ("orders", "orders", True),
    ("orders", "orders.eu", False),
    ("orders.*.[ab]", "orders.x.[ab]", True),  # a `*` token: NATS-style, `[ab]` literal
    ("a.>.b", "a.x", False),  # a `>` that is not last: a glob, matching itself only
    ("a.>.b", "a.>.b", True),
])
def test_channel_pattern_nats_style_or_glob(pattern: str, channel: str, matches: bool) -> None:
    assert name_matches(pattern, channel) is matches

def test_spark_own_option_keys_are_accepted():
    # Recorded from Spark 4.3 (a probe data source's `self.options`): read.load(path) and
    # load([paths]), write.save(path), readStream.load(path),
    # writeStream.queryName(q).option("checkpointLocation", c).start(path).
    seen = {
        Use.BATCH_READ: [{"path": "/p"}, {"paths": '["/a","/b"]'}],
        Use.STREAM_READ: [{"path": "/p"}],
        Use.BATCH_WRITE: [{"path": "/p"}],
        Use.STREAM_WRITE: [{"queryname": "q", "path": "/p", "checkpointlocation": "/c"}],
    }
    for use, option_maps in seen.items():
        for options in option_maps:
            check_names(options, use)
    ReadOptions.parse({"channels": "a", "path": "/p"}, stream=True)
    WriteOptions.parse({"queryname": "q", "checkpointlocation": "/c"}, stream=True)
    with pytest.raises(OptionError, match="option queryName is for streaming writes"):
        WriteOptions.parse({"queryname": "q"})


def test_every_option_a_parser_reads_is_in_the_table():
    # `_get` refuses a name missing from OPTIONS, so parsing once proves that the parsers and
    # the table (from which the valid names come) agree.
    ConnectionOptions.parse({})
    ReadOptions.parse({"channels": "a"})
    ReadOptions.parse({"channels": "a"}, stream=True)
    WriteOptions.parse({})
    assert not set(OPTIONS) & set(SPARK_OPTIONS)


def test_docs_list_every_option():
    docs = (Path(__file__).parents[3] / "docs" / "spark.md").read_text()
    missing = [name for name in OPTIONS if f"`{name}`" not in docs]
    assert missing == []
