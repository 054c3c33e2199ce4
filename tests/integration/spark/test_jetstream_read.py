"""Batch reads of JetStream streams through the `nats` data source on real local Spark, from
tidings and from nats-server: every way a range is read (direct gets, an ordered consumer,
message gets), subject filters, bounds, patterns, headers; nothing left on the server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from tests.harness import Server, start_reference, start_tidings

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
