"""Batch reads of JetStream streams through the `nats` data source on real local Spark, from
tidings and from nats-server: every way a range is read (direct gets, an ordered consumer,
message gets), subject filters, bounds, patterns, headers; nothing left on the server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from tests.harness import Server, start_reference, start_tidings
from tidings.spark.jetstream import parse_time

KINDS = ["tidings", "reference"]


@pytest.fixture(scope="module", params=KINDS)
def js_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Server]:
    store = str(tmp_path_factory.mktemp("js"))
    if request.param == "tidings":
        server = start_tidings(extra_args=["-js", "-sd", store])
    else:
        server = start_reference(extra_args=["-js", "-sd", store])
    yield server
    server.stop()


def fill(url: str, stream: str, config: dict[str, Any], messages: list[tuple[str, bytes, Any]],
         delete: tuple[int, ...] = ()) -> dict[str, Any]:
    """Create `stream`, store `messages` (subject, data, headers) and delete some; its info."""
    async def run() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            await api(nc, f"STREAM.CREATE.{stream}", {"name": stream, **config})
            js = nc.jetstream()
            for subject, data, headers in messages:
                await js.publish(subject, data, headers=headers)
            for seq in delete:
                await api(nc, f"STREAM.MSG.DELETE.{stream}", {"seq": seq})
            return await api(nc, f"STREAM.INFO.{stream}")
        finally:
            await nc.close()

    return asyncio.run(run())


async def api(nc: Any, subject: str, body: Any = None) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode() if body else b"",
                             timeout=5)
    answer = json.loads(reply.data)
    assert "error" not in answer, answer
    return answer


def info(url: str, stream: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            return await api(nc, f"STREAM.INFO.{stream}")
        finally:
            await nc.close()

    return asyncio.run(run())


def load(spark: Any, server: Server, **options: Any) -> Any:
    reader = spark.read.format("nats").option("url", server.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def name() -> str:
    return "S" + uuid.uuid4().hex[:8]


MESSAGES = [(f"orders.{'eu' if i % 3 else 'us'}", b"order %d" % i,
             {"Id": str(i)} if i % 10 == 0 else None) for i in range(1, 201)]


@pytest.mark.parametrize("config,how", [
    ({"allow_direct": True}, "direct gets"),
    ({}, "an ordered consumer"),
    ({"retention": "workqueue"}, "message gets"),
])
def test_a_stream_is_read_whole_each_way(spark: Any, js_server: Server,
                                         config: dict[str, Any], how: str) -> None:
    stream = name()
    before = dt.datetime.now(dt.timezone.utc)
    fill(js_server.url, stream, {"subjects": [f"{stream}.>"], **config},
         [(f"{stream}.{s}", d, h) for s, d, h in MESSAGES], delete=(7, 8))
    df = load(spark, js_server, streams=stream, messagesPerPartition=60)
    assert df.columns == ["stream", "sequence", "subject", "data", "timestamp", "headers"]
    rows = df.orderBy("sequence").collect()
    want = [(i, f"{stream}.{s}", d) for i, (s, d, _) in enumerate(MESSAGES, 1) if i not in (7, 8)]
    assert [(r.sequence, r.subject, bytes(r.data)) for r in rows] == want, how
    assert {r.stream for r in rows} == {stream}
    assert [(r.sequence, r.headers) for r in rows if r.headers] == [
        (i, {"Id": [str(i)]}) for i in range(10, 201, 10)]
    stamps = [r.timestamp.replace(tzinfo=dt.timezone.utc) for r in rows]
    assert stamps == sorted(stamps) and stamps[0] >= before - dt.timedelta(seconds=1)
    state = info(js_server.url, stream)["state"]
    assert (state["messages"], state["consumer_count"]) == (198, 0)  # nothing taken or left


def test_subjects_bounds_and_patterns(spark: Any, js_server: Server) -> None:
    tag = uuid.uuid4().hex[:6].upper()
    a, b = f"P{tag}_A", f"P{tag}_B"
    for stream in (a, b):
        fill(js_server.url, stream, {"subjects": [f"{stream}.>"], "allow_direct": True},
             [(f"{stream}.{s}", d, h) for s, d, h in MESSAGES])
    eu = load(spark, js_server, streams=a, subjects=f"{a}.orders.eu", startSequence=50,
              endSequence=100).collect()
    assert sorted(r.sequence for r in eu) == [i for i in range(50, 101) if i % 3]
    both = load(spark, js_server, streamPattern=f"P{tag}_*",
                subjects=f"{a}.orders.us,{b}.orders.us").collect()
    assert sorted((r.stream, r.sequence) for r in both) == sorted(
        (s, i) for s in (a, b) for i in range(3, 201, 3))


def test_headers_with_repeated_values(spark: Any, js_server: Server) -> None:
    stream = name()

    async def run() -> None:
        nc = await nats.connect(js_server.url)
        try:
            await api(nc, f"STREAM.CREATE.{stream}", {"name": stream, "allow_direct": True})
            block = b"NATS/1.0\r\nTag: a\r\nTag: b\r\nOther: x\r\n\r\n"
            reply = nc.new_inbox()
            sub = await nc.subscribe(reply, max_msgs=1)
            # (nats-py's headers are a dict: a repeated name goes out raw)
            await nc._send_command(  # noqa: SLF001
                b"HPUB %s %s %d %d\r\n%sdata\r\n" % (stream.encode(), reply.encode(), len(block),
                                                   len(block) + 4, block))
            await sub.next_msg(timeout=5)
        finally:
            await nc.close()

    asyncio.run(run())
    (row,) = load(spark, js_server, streams=stream).collect()
    assert row.headers == {"Tag": ["a", "b"], "Other": ["x"]}


def test_a_stream_that_does_not_exist_is_named(spark: Any, js_server: Server) -> None:
    with pytest.raises(Exception, match="stream 'NOPE_NOT_THERE' not found"):
        load(spark, js_server, streams="NOPE_NOT_THERE").collect()


def _stream(spark: Any, server: Server, **options: Any) -> Any:
    reader = spark.readStream.format("nats").option("url", server.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run(spark: Any, df: Any, out: Any, ckpt: Any) -> list[int]:
    query = (df.selectExpr("stream", "sequence", "cast(data as string) as body")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the availableNow query did not finish"
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


def _stored(spark: Any, out: Any) -> list[tuple[str, int, str]]:
    return sorted((r.stream, r.sequence, r.body) for r in spark.read.parquet(str(out)).collect())


def test_a_streaming_read_restarts_from_its_checkpoint_exactly_once(
        spark: Any, js_server: Server, tmp_path: Any) -> None:
    a, b = name(), name()
    for stream in (a, b):
        fill(js_server.url, stream, {"subjects": [f"{stream}.>"], "allow_direct": stream == a},
             [(f"{stream}.x", b"%s-%d" % (stream.encode(), i), None) for i in range(1, 11)],
             delete=(4,))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    sizes = _run(spark, _stream(spark, js_server, streams=f"{a},{b}", maxMessagesPerTrigger=7),
                 out, ckpt)
    assert sum(sizes) == 18 and max(sizes) <= 7
    want = [(s, i, f"{s}-{i}") for s in (a, b) for i in range(1, 11) if i != 4]
    assert _stored(spark, out) == sorted(want)

    fill(js_server.url, a, {"subjects": [f"{a}.>"], "allow_direct": True},
         [(f"{a}.x", b"%s-%d" % (a.encode(), i), None) for i in range(11, 14)])
    assert sum(_run(spark, _stream(spark, js_server, streams=f"{a},{b}",
                                   maxMessagesPerTrigger=7), out, ckpt)) == 3
    want += [(a, i, f"{a}-{i}") for i in range(11, 14)]
    assert _stored(spark, out) == sorted(want)


def test_starting_offsets_of_streams(spark: Any, js_server: Server, tmp_path: Any) -> None:
    a, b = name(), name()
    for stream in (a, b):
        fill(js_server.url, stream, {"subjects": [f"{stream}.>"], "allow_direct": True},
             [(f"{stream}.x", b"%s-%d" % (stream.encode(), i), None) for i in range(1, 6)])
    out = tmp_path / "out"
    offsets = json.dumps({a: 3})
    _run(spark, _stream(spark, js_server, streams=f"{a},{b}", startingOffsets=offsets),
         out, tmp_path / "ckpt")
    assert _stored(spark, out) == sorted(
        [(a, 4, f"{a}-4"), (a, 5, f"{a}-5")] + [(b, i, f"{b}-{i}") for i in range(1, 6)])
    latest = tmp_path / "latest"
    assert sum(_run(spark, _stream(spark, js_server, streams=a, startingOffsets="latest"),
                    latest, tmp_path / "ckpt2")) == 0


def _five_read_by_a_running_query(spark: Any, js_server: Server, tmp_path: Any
                                  ) -> tuple[str, dict[str, Any], Any]:
    """A stream of five messages and a processingTime query into a memory table
    (`q<stream>`) that has read them: (stream, its config, the query)."""
    stream = name()
    config = {"subjects": [f"{stream}.>"], "allow_direct": True}
    fill(js_server.url, stream, config, [(f"{stream}.x", b"m", None)] * 5)
    query = (_stream(spark, js_server, streams=stream).selectExpr("sequence")
             .writeStream.format("memory").queryName(f"q{stream}")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 60
    while spark.sql(f"select count(*) from q{stream}").collect()[0][0] < 5:
        if time.monotonic() > deadline:
            query.stop()
            raise AssertionError("the query read nothing")
        time.sleep(0.2)
    return stream, config, query


@pytest.mark.parametrize("again", [1, 8], ids=["shorter", "longer"])
def test_a_stream_deleted_under_a_running_query_fails_it_clearly(
        spark: Any, js_server: Server, tmp_path: Any, again: int) -> None:
    """Made again with fewer messages than the query read, or more (its sequences pass the
    query's offset: only its creation time tells)."""
    from pyspark.errors import StreamingQueryException

    stream, config, query = _five_read_by_a_running_query(spark, js_server, tmp_path)
    try:
        async def recreate() -> None:  # deleted, and made again (its sequence from 1)
            nc = await nats.connect(js_server.url)
            try:
                await api(nc, f"STREAM.DELETE.{stream}")
                await api(nc, f"STREAM.CREATE.{stream}", {"name": stream, **config})
                for _ in range(again):
                    await nc.request(f"{stream}.x", b"again", timeout=5)
            finally:
                await nc.close()

        asyncio.run(recreate())
        with pytest.raises(StreamingQueryException, match="deleted"):
            query.awaitTermination(60)
    finally:
        query.stop()


def test_a_stream_purged_under_a_running_query_goes_on_past_the_purge(
        spark: Any, js_server: Server, tmp_path: Any) -> None:
    stream, _, query = _five_read_by_a_running_query(spark, js_server, tmp_path)

    def read_until(n: int) -> list[int]:
        deadline = time.monotonic() + 60
        while True:
            seqs = [r[0] for r in spark.sql(f"select sequence from q{stream}").collect()]
            if len(seqs) >= n:
                return sorted(seqs)
            assert query.exception() is None and time.monotonic() < deadline, seqs
            time.sleep(0.2)

    try:
        async def purge_and_publish() -> None:
            nc = await nats.connect(js_server.url)
            try:
                await api(nc, f"STREAM.PURGE.{stream}", {})
                for _ in range(3):
                    await nc.request(f"{stream}.x", b"after", timeout=5)
            finally:
                await nc.close()

        asyncio.run(purge_and_publish())
        assert read_until(8) == list(range(1, 9))
    finally:
        query.stop()


def test_a_migrated_channel_reads_as_the_channel_did(spark: Any, tmp_path: Any) -> None:
    """A channel read by Spark, moved to JetStream by `tidings streaming migrate`, and the
    stream read by Spark: the same sequences, subjects and payloads; the stream's messages
    carry the channel's times (Nats-Streaming-Timestamp)."""
    import subprocess
    import sys

    from .conftest import publish, wait_streaming

    server = start_tidings(http_port=-1, extra_args=["-js", "-sd", str(tmp_path / "js")])
    try:
        wait_streaming(server.url)
        channel = f"mig{uuid.uuid4().hex[:6]}"
        publish(server.url, channel, [b"event %d" % i for i in range(1, 121)])
        before = sorted((r.sequence, r.subject, bytes(r.data), r.timestamp) for r in load(
            spark, server, channels=channel, fetch="false").collect())
        done = subprocess.run(
            [sys.executable, "-m", "tidings", "streaming", "migrate", "--url", server.url,
             "--monitor", f"http://127.0.0.1:{server.ports['http']}", "--to", server.url,
             "--channel", channel], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        after = sorted((r.sequence, r.subject, bytes(r.data), r.headers) for r in load(
            spark, server, streams=channel).collect())
        assert [row[:3] for row in after] == [row[:3] for row in before]
        for (_, _, _, stamp), (_, _, _, headers) in zip(before, after, strict=True):
            original = parse_time(headers["Nats-Streaming-Timestamp"][0].encode())
            micros = stamp.replace(tzinfo=dt.timezone.utc) - dt.datetime(
                1970, 1, 1, tzinfo=dt.timezone.utc)
            assert original // 1000 == micros // dt.timedelta(microseconds=1)
    finally:
        server.stop()


def test_a_start_time_reads_what_was_stored_from_then_on(spark: Any, js_server: Server) -> None:
    for config in ({"allow_direct": True}, {}):
        stream = name()
        fill(js_server.url, stream, {"subjects": [f"{stream}.>"], **config},
             [(f"{stream}.x", b"before %d" % i, None) for i in range(5)])
        time.sleep(0.05)  # (a time between the two fills, on the server's clock too)
        since = dt.datetime.now(dt.timezone.utc)
        time.sleep(0.05)
        fill(js_server.url, stream, {"subjects": [f"{stream}.>"], **config},
             [(f"{stream}.x", b"after %d" % i, None) for i in range(3)])
        rows = load(spark, js_server, streams=stream, startTime=since.isoformat()).collect()
        assert sorted(bytes(r.data) for r in rows) == [b"after 0", b"after 1", b"after 2"]
