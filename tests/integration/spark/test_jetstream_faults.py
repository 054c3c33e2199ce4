"""Faults under Spark reads of JetStream streams, on tidings and on nats-server (file storage,
a store directory that survives the restart): the server restarted in the middle of a batch
read and under a running streaming query, and a Spark task whose Python worker dies in the
middle of its read and is retried. Each gives every message exactly once and leaves no
consumer on the server.

Where a test must choose the moment, a gate stands after the source: a mapInArrow whose
first attempt, on its first rows, says so (a marker file) and waits for the test's go
(another). The source's output is not taken meanwhile, so the reader stays in the middle of
its range, its connection open (the stream holds more than the pipes between the processes
take in). A partition's reader is found by its connection: named `spark-r-...` in the
server's /connz, from a port that /proc/net/tcp ties to a process under the test's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow as pa
import pytest

from tests.harness import Server, start_reference, start_tidings, wait_until
from tidings.spark.options import ConnectionOptions, ReadOptions
from tidings.spark.planning import SeqRange
from tidings.spark.reader import NatsPartition, ReadParams, read_any

pytestmark = pytest.mark.timeout(300)  # a Spark session of its own, reads after restarts

KINDS = ["tidings", "reference"]
METHODS = {"direct-gets": {"allow_direct": True}, "ordered-consumer": {}}
# 24 MB: more than the pipes after a reader hold, and more than one answer of the server
# (a direct get answers 8 MiB at most; an ordered consumer's reader hands on its deliveries
# 10,000 at a time)
MESSAGES = 12_000
PAYLOAD = 2000
# A read that loses its connection while it waits for an answer is woken only by its
# readTimeout today (see test_a_partition_read_resumes_at_once_after_a_restart): the Spark
# tests shorten it, their subject is exactly once.
READ_TIMEOUT = "10"
GATE_WAIT = 120.0  # seconds the gate waits for the test's go at most


def start(kind: str, store: Path) -> Server:
    args = ["-js", "-sd", str(store)]
    if kind == "tidings":
        return start_tidings(extra_args=[*args, "--no_streaming"], http_port=-1)
    return start_reference(extra_args=args, http_port=-1)


@pytest.fixture(params=KINDS)
def js_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    server = start(request.param, tmp_path / "store")
    yield server
    server.stop()


def crash_and_restart(server: Server) -> None:
    """kill -9, and a start on the same port and store."""
    server.kill()
    server.start()


def name() -> str:
    return "F" + uuid.uuid4().hex[:8]


def payload(i: int) -> bytes:
    return b"%06d" % i + b"x" * (PAYLOAD - 6)


async def _api(nc: Any, subject: str, body: Any = None) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}",
                             json.dumps(body).encode() if body is not None else b"", timeout=10)
    answer = json.loads(reply.data)
    assert "error" not in answer, answer
    return answer


def fill(url: str, stream: str, numbers: range, config: dict[str, Any] | None = None) -> None:
    """`payload(i)` for each i of `numbers` stored in `stream` (created first when `config`
    is given: file storage, subjects `<stream>.>`)."""
    async def run() -> None:
        nc = await nats.connect(url)
        try:
            if config is not None:
                await _api(nc, f"STREAM.CREATE.{stream}", {
                    "name": stream, "subjects": [f"{stream}.>"], "storage": "file", **config})
            js = nc.jetstream()
            for lo in range(numbers.start, numbers.stop, 500):
                acks = [await js.publish_async(f"{stream}.x", payload(i))
                        for i in range(lo, min(lo + 500, numbers.stop))]
                await asyncio.gather(*acks)
        finally:
            await nc.close()

    asyncio.run(run())


def consumers(url: str, stream: str) -> list[dict[str, Any]]:
    """The consumers of `stream` (`$JS.API.CONSUMER.LIST`: name, config), and those
    `CONSUMER.NAMES` names that the list (asked after it) no longer holds (one that expired
    in between), by name alone."""
    async def run() -> list[dict[str, Any]]:
        nc = await nats.connect(url)
        try:
            names = (await _api(nc, f"CONSUMER.NAMES.{stream}"))["consumers"] or []
            listed = (await _api(nc, f"CONSUMER.LIST.{stream}"))["consumers"] or []
            gone = set(names) - {c["name"] for c in listed}
            return listed + [{"name": n, "config": {"mem_storage": True}} for n in gone]
        finally:
            await nc.close()

    return asyncio.run(run())


def want(stream: str, count: int) -> list[tuple[str, int, str]]:
    return [(stream, i, f"{i:06d}") for i in range(1, count + 1)]


def got(rows: list[Any]) -> list[tuple[str, int, str]]:
    """(stream, sequence, the payload's number) of each row, sorted, repeats kept."""
    return sorted((r.stream, r.sequence, bytes(r.data)[:6].decode()) for r in rows)


# -- finding a partition's reader ------------------------------------------------------------


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _socket_inodes(server_port: int, client_ports: set[int]) -> set[str]:
    """The inodes of the sockets connected from one of `client_ports` to `server_port`."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if (int(remote.rsplit(":", 1)[1], 16) == server_port
                    and int(local.rsplit(":", 1)[1], 16) in client_ports):
                out.add(inode)
    return out


def reader_pids(server: Server, root: int) -> set[int]:
    """The processes under `root` holding a partition reader's connection to `server`."""
    url = f"http://127.0.0.1:{server.ports['http']}/connz?limit=1024"
    with urllib.request.urlopen(url, timeout=10) as resp:
        conns = json.loads(resp.read())["connections"] or []
    ports = {c["port"] for c in conns if (c.get("name") or "").startswith("spark-r-")}
    inodes = _socket_inodes(server.port, ports)
    pids = set()
    for pid in _descendants(root):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                pids.add(pid)
    return pids


# -- the gate --------------------------------------------------------------------------------


def gated(df: Any, gate: Path) -> Any:
    """`df` through a gate, a Python UDF of each row's sequence and data (so that what Spark
    hands it fills the pipe to it when it stops taking rows): the first attempt of each
    task, on its first row, creates `gate/reached-<partition>` and waits for `gate/go`;
    later attempts create `gate/attempt-<n>-<partition>` and pass."""
    from pyspark.sql.functions import udf

    where, wait = str(gate), GATE_WAIT
    seen = set()  # the tasks (stage, partition, attempt) passed already, in this worker

    def through(sequence, data):  # (no type hints: Spark would look for a pandas UDF in them)
        import os
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        if task in seen:
            return sequence
        seen.add(task)
        attempt, part = task[2], task[1]
        if attempt == 0:
            open(os.path.join(where, f"reached-{part}"), "w").close()
            deadline = time.monotonic() + wait
            while not os.path.exists(os.path.join(where, "go")):
                if time.monotonic() > deadline:
                    raise RuntimeError("the test gave no go")
                time.sleep(0.02)
        else:
            open(os.path.join(where, f"attempt-{attempt}-{part}"), "w").close()
        return sequence

    return df.withColumn("sequence", udf(through, "long", useArrow=False)("sequence", "data"))


def read(spark: Any, server: Server, streams: str) -> Any:
    """A batch read of `streams`, a partition each."""
    return (spark.read.format("nats").option("url", server.url).option("streams", streams)
            .option("minPartitionsPerChannel", 1).option("batchSize", 100)
            .option("readTimeout", READ_TIMEOUT).load())


# -- a server restart during a batch read ----------------------------------------------------


@pytest.mark.parametrize("config", METHODS.values(), ids=METHODS.keys())
def test_a_batch_read_rides_out_a_server_restart_midway(spark: Any, js_server: Server,
                                                        tmp_path: Path,
                                                        config: dict[str, Any]) -> None:
    stream = name()
    fill(js_server.url, stream, range(1, MESSAGES + 1), config)
    gate = tmp_path / "gate"
    gate.mkdir()
    readers: list[set[int]] = []

    def restart_once_reading() -> None:
        try:
            wait_until(lambda: (gate / "reached-0").exists(), GATE_WAIT, "the gate reached")
            readers.append(reader_pids(js_server, os.getpid()))
            crash_and_restart(js_server)
        finally:
            (gate / "go").touch()

    controller = threading.Thread(target=restart_once_reading)
    controller.start()
    try:
        rows = gated(read(spark, js_server, stream), gate).collect()
    finally:
        controller.join()
    assert readers and len(readers[0]) == 1, readers  # the reader was connected, mid-read
    assert got(rows) == want(stream, MESSAGES)
    assert consumers(js_server.url, stream) == []


# -- a server restart under a streaming query ------------------------------------------------


@pytest.mark.parametrize("config", METHODS.values(), ids=METHODS.keys())
def test_a_streaming_read_rides_out_a_server_restart(spark: Any, js_server: Server,
                                                     tmp_path: Path,
                                                     config: dict[str, Any]) -> None:
    stream = name()
    fill(js_server.url, stream, range(1, 51), config)
    table = f"q{stream}"
    query = (spark.readStream.format("nats").option("url", js_server.url)
             .option("streams", stream).option("readTimeout", READ_TIMEOUT)
             .option("maxMessagesPerTrigger", 20).load()
             .writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        crash_and_restart(js_server)
        fill(js_server.url, stream, range(51, 121))
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        rows = spark.sql(f"select * from {table}").collect()
    finally:
        query.stop()
    assert got(rows) == want(stream, 120)
    assert consumers(js_server.url, stream) == []


# -- a Python worker killed in the middle of its read, its task retried ----------------------

RETRYING_READ = r"""
import json, os, sys
sys.path.insert(0, os.environ["TEST_ROOT"])
from pyspark.sql import SparkSession
import tidings.spark
from tests.integration.spark.test_jetstream_faults import gated

url, streams, gate, out = sys.argv[1:5]
spark = (SparkSession.builder.master("local[2,2]")  # 2 threads, a task tried twice
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("OFF")
tidings.spark.register(spark)
df = (spark.read.format("nats").option("url", url).option("streams", streams)
      .option("minPartitionsPerChannel", 1).option("batchSize", 100)
      .option("readTimeout", sys.argv[5]).load())
from pathlib import Path
rows = gated(df, Path(gate)).selectExpr("stream", "sequence", "substr(data, 1, 6) as n").collect()
with open(out, "w") as f:
    json.dump([[r.stream, r.sequence, bytes(r.n).decode()] for r in rows], f)
spark.stop()
"""


def test_a_task_whose_python_worker_dies_mid_read_is_retried_exactly_once(
        js_server: Server, tmp_path: Path) -> None:
    """A Spark session of its own (local[2,2]: a failed task is tried again, which a plain
    local master never does) reads two streams, one with direct gets and one with an ordered
    consumer; the Python worker of each partition is killed in the middle of its read."""
    streams = {}
    for method, config in METHODS.items():
        streams[method] = name()
        fill(js_server.url, streams[method], range(1, MESSAGES + 1), config)
    gate, out = tmp_path / "gate", tmp_path / "rows.json"
    gate.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_DRIVER_PYTHON": sys.executable, "TEST_ROOT": str(Path(__file__).resolve().parents[3])}
    log = (tmp_path / "driver.log").open("w")  # (a file: a pipe nobody reads may fill)
    driver = subprocess.Popen(
        [sys.executable, "-c", RETRYING_READ, js_server.url, ",".join(streams.values()),
         str(gate), str(out), READ_TIMEOUT], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_until(lambda: (gate / "reached-0").exists() and (gate / "reached-1").exists()
                       or driver.poll() is not None, 300, "both gates reached")
            killed = reader_pids(js_server, driver.pid)
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        finally:
            (gate / "go").touch()
        driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        log.close()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-4000:]
    assert len(killed) == 2  # each task's reader, connected, in the middle of its range
    # each task failed once and its second attempt read the whole partition again
    assert {p.name for p in gate.glob("attempt-*")} == {"attempt-1-0", "attempt-1-1"}
    rows = sorted(tuple(r) for r in json.loads(out.read_text()))
    assert rows == sorted(want(streams["direct-gets"], MESSAGES)
                          + want(streams["ordered-consumer"], MESSAGES))
    assert consumers(js_server.url, streams["direct-gets"]) == []
    # The killed reader's ordered consumer: ephemeral, in memory, gone once its inactive
    # threshold (twice readTimeout) has passed without interest; nothing durable, ever.
    for consumer in consumers(js_server.url, streams["ordered-consumer"]):
        config = consumer["config"]
        assert not config.get("durable_name") and config.get("mem_storage"), consumer
    wait_until(lambda: consumers(js_server.url, streams["ordered-consumer"]) == [],
               2 * float(READ_TIMEOUT) + 30, "the killed reader's consumer gone")


# -- without Spark: how soon a partition's read notices the restart --------------------------


@pytest.mark.timeout(120)  # (readTimeout is 600 s: waiting it out is a hang, and fails)
def test_a_partition_read_resumes_at_once_after_a_restart(js_server: Server) -> None:
    """The partition reader driven directly, stopped after its first batch (the range is
    three direct gets of 8 MiB: the next is asked after the restart), the server restarted:
    the rest of the range comes from the restarted server, without waiting out readTimeout
    on the connection that went away. (An ordered consumer's read waits the same way, but
    whether its next deliveries were in before the crash is a matter of timing.)"""
    stream = name()
    fill(js_server.url, stream, range(1, MESSAGES + 1), METHODS["direct-gets"])
    copts = ConnectionOptions.parse({"url": js_server.url})
    params = ReadParams.of(ReadOptions.parse({"streams": stream, "batchSize": "100",
                                              "readTimeout": "600"}))
    part = NatsPartition(SeqRange(stream, 1, MESSAGES), copts, params, PAYLOAD, kind="stream",
                         hint="direct")
    batches = read_any(part)
    first = next(batches)
    crash_and_restart(js_server)
    rest = list(batches)
    table = pa.Table.from_batches([first, *rest])
    assert table.column("sequence").to_pylist() == list(range(1, MESSAGES + 1))
    assert [d[:6] for d in table.column("data").to_pylist()] == [
        b"%06d" % i for i in range(1, MESSAGES + 1)]
