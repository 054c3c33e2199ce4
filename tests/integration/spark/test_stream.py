"""Structured Streaming reads: offsets in the checkpoint, admission control, restarts, retries."""

from __future__ import annotations

import time

import pytest

from .conftest import publish


def _stream(spark, server, channels, **options):
    reader = (spark.readStream.format("nats").option("url", server.url)
              .option("channels", ",".join(channels)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(spark, path):
    return sorted((r.channel, r.sequence, r.body) for r in
                  spark.read.parquet(str(path)).select("channel", "sequence", "body").collect())


def _expected(channel, bodies, first=1):
    return [(channel, first + i, body) for i, body in enumerate(bodies)]


def test_available_now_restart_from_checkpoint_exactly_once(spark, stan_server, channel_name,
                                                            tmp_path):
    a, b = channel_name("a"), channel_name("b")
    a1 = [f"a-{i}" for i in range(1, 11)]
    b1 = [f"b-{i}" for i in range(1, 8)]
    publish(stan_server.url, a, [x.encode() for x in a1])
    publish(stan_server.url, b, [x.encode() for x in b1])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run():
        df = _stream(spark, stan_server, [a, b], maxMessagesPerTrigger=6)
        query = (df.selectExpr("channel", "sequence", "cast(data as string) as body")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(ckpt))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress]

    sizes = run()
    assert sum(sizes) == 17
    assert max(sizes) <= 6  # maxMessagesPerTrigger is honoured (admission control)
    assert _rows(spark, out) == sorted(_expected(a, a1) + _expected(b, b1))

    a2 = [f"a-{i}" for i in range(11, 16)]
    b2 = [f"b-{i}" for i in range(8, 12)]
    publish(stan_server.url, a, [x.encode() for x in a2])
    publish(stan_server.url, b, [x.encode() for x in b2])
    sizes = run()
    assert sum(sizes) == 9  # only what came after the checkpointed offsets
    assert _rows(spark, out) == sorted(_expected(a, a1 + a2) + _expected(b, b1 + b2))


def test_failed_micro_batch_is_replayed_without_loss(spark, stan_server, channel_name,
                                                     tmp_path):
    from pyspark.errors import StreamingQueryException

    ch = channel_name()
    bodies = [f"m-{i}" for i in range(1, 26)]
    publish(stan_server.url, ch, [x.encode() for x in bodies])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    seen: list[tuple[int, list[int]]] = []

    def sink(df, batch_id):
        seqs = sorted(r.sequence for r in df.select("sequence").collect())
        seen.append((batch_id, seqs))
        if len(seen) == 1:
            raise RuntimeError("the sink failed on purpose")
        # Idempotent per batch: a replayed batch overwrites its own output.
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    def start():
        return (_stream(spark, stan_server, [ch], maxMessagesPerTrigger=10)
                .selectExpr("channel", "sequence", "cast(data as string) as body")
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
                .trigger(availableNow=True).start())

    failing = start()
    with pytest.raises(StreamingQueryException, match="failed on purpose"):
        failing.awaitTermination(120)

    retried = start()
    assert retried.awaitTermination(120)
    assert retried.exception() is None
    # The failed batch ran again with the same id and exactly the same messages.
    assert seen[0] == seen[1] == (0, list(range(1, 11)))
    assert [batch for batch, _ in seen] == [0, 0, 1, 2]
    assert _rows(spark, out) == _expected(ch, bodies)


def test_starting_offsets_and_new_messages_only(spark, stan_server, channel_name, tmp_path):
    ch = channel_name()
    publish(stan_server.url, ch, [b"before-1", b"before-2"])
    out = tmp_path / "out"
    query = (_stream(spark, stan_server, [ch], startingOffsets="latest")
             .selectExpr("channel", "sequence", "cast(data as string) as body")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    publish(stan_server.url, ch, [b"after-1"])
    query = (_stream(spark, stan_server, [ch], startingOffsets="latest")
             .selectExpr("channel", "sequence", "cast(data as string) as body")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert _rows(spark, out) == [(ch, 3, "after-1")]

    explicit = (_stream(spark, stan_server, [ch], startingOffsets=f'{{"{ch}": 1}}')
                .selectExpr("channel", "sequence", "cast(data as string) as body")
                .writeStream.format("memory").queryName("explicit_offsets")
                .trigger(availableNow=True).start())
    assert explicit.awaitTermination(120)
    got = [(r.sequence, r.body) for r in spark.sql("select * from explicit_offsets").collect()]
    assert sorted(got) == [(2, "before-2"), (3, "after-1")]


def _driver_clients(server):
    import json
    import urllib.request

    with urllib.request.urlopen(f"{server.monitor_url}/streaming/clientsz", timeout=10) as r:
        return {c["id"] for c in json.loads(r.read())["clients"] if c["id"].startswith("spark-d-")}


def test_queries_leave_no_streaming_client_registered(spark, stan_server, channel_name,
                                                      tmp_path):
    """Spark ends the stream reader's process without calling stop(): the driver holds no
    streaming client between calls, so none stays registered after a query."""
    ch = channel_name()
    publish(stan_server.url, ch, [b"x"] * 5)
    before = _driver_clients(stan_server)
    available_now = (_stream(spark, stan_server, [ch]).writeStream.format("noop")
                     .option("checkpointLocation", str(tmp_path / "a"))
                     .trigger(availableNow=True).start())
    assert available_now.awaitTermination(120)
    assert available_now.exception() is None
    continuous = (_stream(spark, stan_server, [ch]).writeStream.format("noop")
                  .option("checkpointLocation", str(tmp_path / "b"))
                  .trigger(processingTime="200 milliseconds").start())
    try:
        while not continuous.recentProgress or \
                sum(p["numInputRows"] for p in continuous.recentProgress) < 5:
            assert continuous.exception() is None
            continuous.awaitTermination(0.2)
    finally:
        continuous.stop()
    # stop() does not wait for a driver call under way: its client's close may still be on
    # its way (a client left behind would stay for minutes, until its heartbeats fail).
    deadline = time.monotonic() + 10
    while _driver_clients(stan_server) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _driver_clients(stan_server) - before == set()


def test_no_micro_batch_while_the_pause_file_exists(spark, stan_server, channel_name, tmp_path):
    channel, pause = channel_name("paused"), tmp_path / "pause"
    publish(stan_server.url, channel, [f"m{i}".encode() for i in range(1, 6)])
    pause.touch()
    df = _stream(spark, stan_server, [channel], pauseFile=str(pause))
    name = f"paused_{channel.replace('.', '_')}"
    query = (df.selectExpr("sequence").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        def stored() -> list[int]:
            query.processAllAvailable()  # until a trigger found nothing (more) to read
            return sorted(r.sequence for r in spark.table(name).collect())

        assert stored() == []
        pause.unlink()
        assert stored() == [1, 2, 3, 4, 5]
        pause.touch()
        publish(stan_server.url, channel, [b"m6", b"m7"])
        assert stored() == [1, 2, 3, 4, 5]
        pause.unlink()
        assert stored() == [1, 2, 3, 4, 5, 6, 7]
        assert query.exception() is None
    finally:
        query.stop()
