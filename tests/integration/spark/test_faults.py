"""The connector when the server goes away: reads and writes resume on a restarted server, and
fail within their bound, naming the server, when it does not come back.

The partition readers and the task writer are driven directly here (no Spark) where the test
must choose the moment of the crash: between two record batches of one task. The server keeps
its messages in a file store, so a restarted server still has them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.harness import Server, start_tidings
from tidings.spark.options import ConnectionOptions, ReadOptions, WriteOptions
from tidings.spark.planning import SeqRange
from tidings.spark.reader import NatsPartition, ReadParams, read_partition
from tidings.spark.stan import StanError
from tidings.spark.writer import write_batches

from .conftest import publish, wait_streaming

BOUND_SLACK = 10.0  # seconds beyond reconnectTimeout + connectTimeout: catches a hang only


class Restartable:
    """A tidings server whose streaming store survives a kill -9, started again on the
    ports it got at its first start."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.server: Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def http_port(self) -> int:
        assert self.server is not None
        return self.server.ports["http"]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.server is None:
            self.server = start_tidings(store="file", store_dir=str(self.store), http_port=-1,
                                        extra_args=["--max_msgs", "0"])
        else:
            self.server.start()
        wait_streaming(self.url)

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    def clients(self) -> list[str]:
        """The ids of the streaming clients registered now."""
        url = f"http://127.0.0.1:{self.http_port}/streaming/clientsz"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return [c["id"] for c in json.loads(resp.read())["clients"] or []]

    def left_behind(self) -> list[str]:
        """The connector's readers' and writers' streaming clients still registered (not the
        readiness probe of `start`: under load its close request can time out while the
        restarted server reads its store back, which is not what these tests are about)."""
        return [c for c in self.clients()
                if c.startswith("spark-") and not c.startswith("spark-probe-")]

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[Restartable]:
    srv = Restartable(tmp_path / "store")
    srv.start()
    try:
        yield srv
    finally:
        if srv.server is not None:
            srv.server.stop()


def _partition(url: str, channel: str, end: int, fetch: bool, **options: str) -> NatsPartition:
    copts = ConnectionOptions.parse({"url": url, **options})
    params = ReadParams.of(ReadOptions.parse({"channels": channel, "batchSize": "100",
                                              "fetch": str(fetch), **options}))
    return NatsPartition(SeqRange(channel, 1, end), copts, params, 1000)


def _payloads(n: int, size: int = 2000) -> list[bytes]:
    return [b"%06d" % i + b"x" * size for i in range(1, n + 1)]


@pytest.mark.parametrize("fetch", [True, False], ids=["fetch", "subscription"])
def test_a_read_resumes_on_the_restarted_server(restartable, channel_name, fetch):
    ch = channel_name()
    payloads = _payloads(3000)
    publish(restartable.url, ch, payloads)
    # maxInFlight 100: the subscription read acknowledges as it goes; fetch replies of 1 MiB
    batches = read_partition(_partition(restartable.url, ch, 3000, fetch, maxInFlight="100"))
    first = next(batches)
    assert 0 < first.num_rows < 3000
    restartable.restart()
    rest = list(batches)
    table = pa.Table.from_batches([first, *rest])
    assert table.column("sequence").to_pylist() == list(range(1, 3001))
    assert table.column("data").to_pylist() == payloads
    # the reader's client from before the crash, which the server recovered from its store,
    # was closed by the reader that took over: no subscription is left delivering to it
    assert restartable.left_behind() == []


@pytest.mark.parametrize("fetch", [True, False], ids=["fetch", "subscription"])
def test_a_read_fails_in_time_naming_the_server_that_went_away(restartable, channel_name,
                                                               fetch):
    ch = channel_name()
    publish(restartable.url, ch, _payloads(3000))
    batches = read_partition(_partition(restartable.url, ch, 3000, fetch, maxInFlight="100",
                                        reconnectTimeout="1", connectTimeout="1"))
    next(batches)
    restartable.kill()
    began = time.monotonic()
    with pytest.raises(StanError, match="reconnectTimeout") as err:
        list(batches)
    assert restartable.url in str(err.value)
    assert time.monotonic() - began < 1 + 1 + BOUND_SLACK


def _rows(channel: str, payloads: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"subject": [channel] * len(payloads),
                                       "data": payloads})


def _crashing(batches: list[pa.RecordBatch], between: object) -> Iterator[pa.RecordBatch]:
    """The batches, calling `between()` after the first has been handed out (in a thread of
    its own: the writer consumes the batches on its event loop)."""
    yield batches[0]
    worker = threading.Thread(target=between)  # type: ignore[arg-type]
    worker.start()
    worker.join()
    yield from batches[1:]


def _stored(url: str, channel: str, count: int) -> list[bytes]:
    part = _partition(url, channel, count, True)
    return pa.Table.from_batches(list(read_partition(part))).column("data").to_pylist()


def test_a_streaming_write_resumes_on_the_restarted_server(restartable, channel_name):
    ch = channel_name()
    payloads = _payloads(4000, 200)
    chunks = [_rows(ch, payloads[i:i + 1000]) for i in range(0, 4000, 1000)]
    copts = ConnectionOptions.parse({"url": restartable.url})
    written = write_batches(copts, WriteOptions.parse({}), _crashing(chunks, restartable.restart))
    assert written == 4000
    stored = _stored(restartable.url, ch, 8000)
    # at least once: every row, in order once the republished duplicates are dropped
    assert list(dict.fromkeys(stored)) == payloads
    assert restartable.left_behind() == []


def test_a_core_write_goes_on_after_a_restart(restartable, channel_name):
    from .test_write import CoreCollector

    ch = channel_name()
    payloads = _payloads(2000, 100)
    chunks = [_rows(ch, payloads[:1000]), _rows(ch, payloads[1000:])]
    collectors: list[CoreCollector] = []

    def restart() -> None:
        restartable.restart()
        collectors.append(CoreCollector(restartable.url, ch))

    copts = ConnectionOptions.parse({"url": restartable.url})
    try:
        assert write_batches(copts, WriteOptions.parse({"target": "core"}),
                             _crashing(chunks, restart)) == 2000
        assert [m[1] for m in collectors[0].wait(1000)] == payloads[1000:]
    finally:
        for c in collectors:
            c.close()


@pytest.mark.parametrize("target", ["streaming", "core"])
def test_a_write_fails_in_time_naming_the_server_that_went_away(restartable, channel_name,
                                                                target):
    ch = channel_name()
    payloads = _payloads(2000, 100)
    chunks = [_rows(ch, payloads[:1000]), _rows(ch, payloads[1000:])]
    copts = ConnectionOptions.parse({"url": restartable.url, "reconnectTimeout": "1",
                                     "connectTimeout": "1"})
    began: list[float] = []

    def crash() -> None:
        restartable.kill()
        began.append(time.monotonic())

    with pytest.raises(StanError, match="reconnectTimeout") as err:
        write_batches(copts, WriteOptions.parse({"target": target}), _crashing(chunks, crash))
    assert restartable.url in str(err.value)
    assert time.monotonic() - began[0] < 1 + 1 + BOUND_SLACK


@pytest.mark.parametrize("target", ["streaming", "core"])
def test_a_write_to_a_server_that_is_down_fails_in_time(channel_name, target, refused_port):
    url = f"nats://127.0.0.1:{refused_port}"
    copts = ConnectionOptions.parse({"url": url, "reconnectTimeout": "1",
                                     "connectTimeout": "1"})
    began = time.monotonic()
    with pytest.raises(StanError, match="reconnectTimeout") as err:
        write_batches(copts, WriteOptions.parse({"target": target}),
                      iter([_rows(channel_name(), [b"x"])]))
    assert url in str(err.value)
    assert time.monotonic() - began < 1 + 1 + BOUND_SLACK


# -- through Spark -------------------------------------------------------------------------


def _slow_read(spark, url: str, channel: str, **options: str):
    """One task reading with a subscription that takes one message per acknowledgement."""
    return (spark.read.format("nats").option("url", url).option("channels", channel)
            .option("fetch", "false").option("maxInFlight", 1).option("batchSize", 1)
            .option("minPartitionsPerChannel", 1).options(**options).load())


class CrashWhenRegistered(threading.Thread):
    """Calls `action()` (a kill or a restart) once a task's client (`spark-r-`: reader,
    `spark-w-`: writer) has registered with the streaming server; `at` is when."""

    def __init__(self, srv: Restartable, prefix: str, action) -> None:
        super().__init__()
        self.srv, self.prefix, self.action = srv, prefix, action
        self.at = 0.0
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not any(c.startswith(self.prefix) for c in self.srv.clients()):
            assert time.monotonic() < deadline, f"no {self.prefix}* client registered"
            time.sleep(0.02)
        self.at = time.monotonic()
        self.action()


def test_a_spark_read_recovers_from_a_restart_midway(spark, restartable, channel_name):
    ch = channel_name()
    payloads = _payloads(2000, 10)
    publish(restartable.url, ch, payloads)
    crash = CrashWhenRegistered(restartable, "spark-r-", restartable.restart)
    rows = _slow_read(spark, restartable.url, ch).orderBy("sequence").collect()
    read = time.monotonic()
    crash.join()
    assert crash.at < read  # the crash came while the task was reading
    assert [r.sequence for r in rows] == list(range(1, 2001))
    assert [bytes(r.data) for r in rows] == payloads


def test_a_spark_read_fails_in_time_when_the_server_is_gone(spark, restartable, channel_name):
    ch = channel_name()
    publish(restartable.url, ch, _payloads(2000, 10))
    crash = CrashWhenRegistered(restartable, "spark-r-", restartable.kill)
    with pytest.raises(Exception, match="reconnectTimeout") as err:
        _slow_read(spark, restartable.url, ch, reconnectTimeout="2").collect()
    crash.join()
    assert restartable.url in str(err.value)
    assert time.monotonic() - crash.at < 2 + 5 + BOUND_SLACK


def _slow_write(spark, url: str, channel: str, rows: int, **options: str) -> None:
    """One task publishing with a single PubAck outstanding."""
    (spark.range(rows).selectExpr(f"'{channel}' as subject", "cast(id as string) as data")
     .coalesce(1).write.format("nats").mode("append").option("url", url)
     .option("maxPubAcksInFlight", 1).options(**options).save())


def test_a_spark_write_recovers_from_a_restart_midway(spark, restartable, channel_name):
    ch = channel_name()
    crash = CrashWhenRegistered(restartable, "spark-w-", restartable.restart)
    _slow_write(spark, restartable.url, ch, 3000)
    written = time.monotonic()
    crash.join()
    assert crash.at < written  # the crash came while the task was writing
    stored = _stored(restartable.url, ch, 6000)
    assert list(dict.fromkeys(stored)) == [b"%d" % i for i in range(3000)]


def test_a_spark_write_fails_in_time_when_the_server_is_gone(spark, restartable, channel_name):
    crash = CrashWhenRegistered(restartable, "spark-w-", restartable.kill)
    with pytest.raises(Exception, match="reconnectTimeout") as err:
        _slow_write(spark, restartable.url, channel_name(), 3000, reconnectTimeout="2")
    crash.join()
    assert restartable.url in str(err.value)
    assert time.monotonic() - crash.at < 2 + 5 + BOUND_SLACK


def test_a_stream_rides_out_a_server_restart(spark, restartable, channel_name, tmp_path):
    src, dst = channel_name("in"), channel_name("out")
    publish(restartable.url, src, [b"a%d" % i for i in range(50)])
    query = (spark.readStream.format("nats").option("url", restartable.url)
             .option("channels", src).load().selectExpr(f"'{dst}' as subject", "data")
             .writeStream.format("nats").option("url", restartable.url)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        restartable.restart()
        publish(restartable.url, src, [b"b%d" % i for i in range(50)])
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    stored = _stored(restartable.url, dst, 200)
    want = [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
    assert sorted(set(stored)) == sorted(want)


def test_a_refused_login_fails_at_once_without_retrying(channel_name):
    server = start_tidings(extra_args=["--user", "u", "--pass", "right", "--no_streaming"])
    try:
        copts = ConnectionOptions.parse({"url": server.url, "user": "u", "password": "wrong",
                                         "reconnectTimeout": "30"})
        began = time.monotonic()
        with pytest.raises(StanError, match="(?i)authorization"):
            write_batches(copts, WriteOptions.parse({"target": "core"}),
                          iter([_rows(channel_name(), [b"x"])]))
        assert time.monotonic() - began < 30  # refused at once, not retried for 30 s
    finally:
        server.stop()


def test_a_subscription_read_waiting_for_missing_messages_fails_after_read_timeout(
        restartable, channel_name):
    ch = channel_name()
    publish(restartable.url, ch, _payloads(5, 10))
    # the range was planned up to 10, but the channel holds 5 (e.g. recreated since)
    batches = read_partition(_partition(restartable.url, ch, 10, False, readTimeout="1"))
    began = time.monotonic()
    with pytest.raises(StanError, match="no message for 1 s \\(readTimeout\\)"):
        list(batches)
    assert time.monotonic() - began < 1 + BOUND_SLACK


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_a_server_that_drops_every_connection_fails_the_write_instead_of_looping(kind):
    from tests.harness import start_configured

    # A PUB line past max_control_line: the server answers -ERR and closes the connection,
    # every time the write tries again.
    server = start_configured(kind, "max_control_line: 512\n")
    try:
        copts = ConnectionOptions.parse({"url": server.url})
        with pytest.raises(StanError, match="3 times in a row without progress"):
            write_batches(copts, WriteOptions.parse({"target": "core"}),
                          iter([_rows("x" * 600, [b"payload"])]))
    finally:
        server.stop()
