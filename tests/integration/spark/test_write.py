"""Writes through the `nats` data source: to streaming channels (PubAck'ed) and core subjects."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tidings.client import connect

from .conftest import publish


def _read_back(spark, server, channel):
    df = (spark.read.format("nats").option("url", server.url).option("channels", channel)
          .load())
    return [(r.sequence, bytes(r.data)) for r in df.orderBy("sequence").collect()]


class CoreCollector:
    """A core NATS subscriber on its own loop thread; `wait(n)` until n messages arrived."""

    def __init__(self, url: str, subject: str) -> None:
        self.msgs: list[Any] = []
        self.want = 0
        self.enough = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self._run(connect(url))

        async def on_msg(msg: Any) -> None:
            self.msgs.append((msg.subject, msg.data, dict(msg.headers or {})))
            if len(self.msgs) >= self.want:
                self.enough.set()

        self._run(self.nc.subscribe(subject, cb=on_msg))
        self._run(self.nc.flush())

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def wait(self, n: int, timeout: float = 30) -> list[Any]:
        self.want = n
        self.enough.clear()  # set by messages that came before this wait
        if len(self.msgs) >= n:
            self.enough.set()
        assert self.enough.wait(timeout), f"{len(self.msgs)} of {n} messages arrived"
        return self.msgs

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def test_batch_write_to_channels_is_acknowledged(spark, stan_server, channel_name):
    a, b = channel_name("a"), channel_name("b")
    rows = [(a if i % 3 else b, b"payload %d" % i) for i in range(1, 121)]
    df = spark.createDataFrame(rows, "subject string, data binary").repartition(3)
    df.write.format("nats").option("url", stan_server.url).mode("append").save()

    # save() returned after every task had all its PubAcks: everything is stored.
    got_a, got_b = _read_back(spark, stan_server, a), _read_back(spark, stan_server, b)
    assert sorted(d for _, d in got_a) == sorted(d for s, d in rows if s == a)
    assert sorted(d for _, d in got_b) == sorted(d for s, d in rows if s == b)
    assert [s for s, _ in got_a] == list(range(1, 81))


def test_string_data_and_fixed_subject(spark, stan_server, channel_name):
    ch = channel_name()
    df = spark.createDataFrame([("hello",), ("world",)], "data string").coalesce(1)
    (df.write.format("nats").mode("append").option("url", stan_server.url)
     .option("subject", ch).save())
    assert _read_back(spark, stan_server, ch) == [(1, b"hello"), (2, b"world")]


def test_core_target_with_headers(spark, stan_server, channel_name):
    subject = channel_name("core")
    collector = CoreCollector(stan_server.url, subject + ".>")
    try:
        rows = [(f"{subject}.{i % 2}", f"body {i}", {"n": str(i)}) for i in range(50)]
        df = spark.createDataFrame(rows, "subject string, data string, headers map<string,string>")
        (df.write.format("nats").mode("append").option("url", stan_server.url)
         .option("target", "core").save())
        got = collector.wait(50)
        assert sorted((s, d.decode(), h["n"]) for s, d, h in got) == sorted(
            (s, d, h["n"]) for s, d, h in rows)
    finally:
        collector.close()


def test_streaming_write_between_channels(spark, stan_server, channel_name, tmp_path):
    src, dst = channel_name("src"), channel_name("dst")
    publish(stan_server.url, src, [b"x%d" % i for i in range(1, 41)])
    query = (spark.readStream.format("nats").option("url", stan_server.url)
             .option("channels", src).option("maxMessagesPerTrigger", 15).load()
             .selectExpr(f"'{dst}' as subject", "concat(data, cast('!' as binary)) as data")
             .writeStream.format("nats").option("url", stan_server.url)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = _read_back(spark, stan_server, dst)
    assert sorted(d for _, d in got) == sorted(b"x%d!" % i for i in range(1, 41))


def test_write_errors(spark, stan_server, channel_name):
    df = spark.createDataFrame([("a", "b", {"k": "v"})],
                               "subject string, data string, headers map<string,string>")
    with pytest.raises(Exception, match="NATS Streaming messages have no headers"):
        df.write.format("nats").mode("append").option("url", stan_server.url).save()
    no_subject = spark.createDataFrame([("b",)], "data string")
    with pytest.raises(Exception, match="needs a `subject` column"):
        no_subject.write.format("nats").mode("append").option("url", stan_server.url).save()
    ok = spark.createDataFrame([(channel_name(), "b")], "subject string, data string")
    with pytest.raises(Exception, match="cannot be overwritten"):
        ok.write.format("nats").mode("overwrite").option("url", stan_server.url).save()


def test_writes_from_another_thread(spark, stan_server, channel_name, tmp_path):
    import tidings.spark

    src, dst, batch_dst = channel_name("src"), channel_name("dst"), channel_name("batch")
    publish(stan_server.url, src, [b"s1", b"s2", b"s3"])
    df = spark.createDataFrame([(batch_dst, "from a thread")], "subject string, data string")
    outcome: dict[str, str] = {}

    def batch_write(label: str, register: bool) -> None:
        try:
            if register:
                tidings.spark.register(spark)
            df.write.format("nats").mode("append").option("url", stan_server.url).save()
            outcome[label] = "written"
        except Exception as exc:  # noqa: BLE001 - reported to the test thread
            outcome[label] = str(exc)

    def stream_write() -> None:
        try:
            tidings.spark.register(spark)
            query = (spark.readStream.format("nats").option("url", stan_server.url)
                     .option("channels", src).load()
                     .selectExpr(f"'{dst}' as subject", "data")
                     .writeStream.format("nats").option("url", stan_server.url)
                     .option("checkpointLocation", str(tmp_path / "ckpt"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            outcome["stream"] = str(query.exception() or "written")
        except Exception as exc:  # noqa: BLE001 - reported to the test thread
            outcome["stream"] = str(exc)

    for target, args in ((batch_write, ("bare", False)), (batch_write, ("registered", True)),
                         (stream_write, ())):
        thread = threading.Thread(target=target, args=args)
        thread.start()
        thread.join(180)
    # Spark looks the source up in the calling thread's active session; a new thread has
    # none until register() sets it.
    assert "DATA_SOURCE_NOT_FOUND" in outcome["bare"]
    assert outcome["registered"] == "written"
    assert outcome["stream"] == "written"
    assert _read_back(spark, stan_server, batch_dst) == [(1, b"from a thread")]
    assert sorted(d for _, d in _read_back(spark, stan_server, dst)) == [b"s1", b"s2", b"s3"]
