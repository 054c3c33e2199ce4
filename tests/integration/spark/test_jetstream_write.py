"""Writes to JetStream streams through the `nats` data source (`target=jetstream`) on real local
Spark, to tidings and to nats-server: rows stored in order with their subjects, data and
headers; refusals (no stream for the subject, a `Nats-Expected-*` mismatch) fail the write
with the server's error; `msgIdColumn` makes a repeated write or a replayed streaming query
store each row once; a server restart midway is ridden out."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.harness import Server, start_reference, start_tidings
from tidings.spark.connection import ConnectorError
from tidings.spark.options import ConnectionOptions, OptionError, WriteOptions
from tidings.spark.writer import _check_schema, write_batches

KINDS = ["tidings", "reference"]


def start(kind: str, store: Path) -> Server:
    args = ["-js", "-sd", str(store)]
    return start_tidings(extra_args=args) if kind == "tidings" else start_reference(
        extra_args=args)


@pytest.fixture(scope="module", params=KINDS)
def js_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Server]:
    server = start(request.param, tmp_path_factory.mktemp("js"))
    yield server
    server.stop()


async def api(nc: Any, subject: str, body: Any = None) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode() if body else b"",
                             timeout=10)
    return json.loads(reply.data)


def create(url: str, stream: str, **config: Any) -> None:
    async def run() -> None:
        nc = await nats.connect(url)
        try:
            answer = await api(nc, f"STREAM.CREATE.{stream}",
                               {"name": stream, "subjects": [f"{stream}.>"], **config})
            assert "error" not in answer, answer
        finally:
            await nc.close()

    asyncio.run(run())


def stored(url: str, stream: str) -> list[tuple[int, str, bytes, list[tuple[str, str]]]]:
    """Every message of `stream`: (sequence, subject, data, header pairs in order)."""
    async def run() -> list[tuple[int, str, bytes, list[tuple[str, str]]]]:
        nc = await nats.connect(url)
        try:
            state = (await api(nc, f"STREAM.INFO.{stream}"))["state"]
            out = []
            for seq in range(state["first_seq"], state["last_seq"] + 1):
                answer = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
                if "error" in answer:
                    continue
                msg = answer["message"]
                block = base64.b64decode(msg.get("hdrs") or "")
                pairs = [tuple(p.strip() for p in line.decode().split(":", 1))
                         for line in block.split(b"\r\n")[1:] if b":" in line]
                out.append((msg["seq"], msg["subject"], base64.b64decode(msg.get("data") or ""),
                            pairs))
            return out
        finally:
            await nc.close()

    return asyncio.run(run())


def write(df: Any, server: Server, **options: Any) -> None:
    writer = (df.write.format("nats").mode("append").option("url", server.url)
              .option("target", "jetstream"))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def name() -> str:
    return "W" + uuid.uuid4().hex[:8]


def test_rows_are_stored_in_order_with_subjects_data_and_headers(spark: Any,
                                                                 js_server: Server) -> None:
    stream = name()
    create(js_server.url, stream, storage="file")
    rows = [(f"{stream}.{'eu' if i % 3 else 'us'}", b"order %d" % i,
             {"Id": [str(i)], "Tag": ["a", "b"]} if i % 10 == 0 else None)
            for i in range(1, 201)]
    df = spark.createDataFrame(rows, "subject string, data binary, "
                                     "headers map<string,array<string>>").coalesce(1)
    write(df, js_server)
    got = stored(js_server.url, stream)
    assert [(seq, subject, data) for seq, subject, data, _ in got] == [
        (i, s, d) for i, (s, d, _) in enumerate(rows, 1)]
    # (a map's keys come in no set order; a name's values in theirs)
    assert [(seq, sorted(pairs)) for seq, _, _, pairs in got if pairs] == [
        (i, [("Id", str(i)), ("Tag", "a"), ("Tag", "b")]) for i in range(10, 201, 10)]


def test_a_subject_no_stream_takes_fails_the_write_naming_it(spark: Any,
                                                             js_server: Server) -> None:
    subject = f"nostream{uuid.uuid4().hex[:6]}.x"
    df = spark.createDataFrame([("one",)], "data string")
    with pytest.raises(Exception, match=f"no stream takes subject '{subject}'"):
        write(df, js_server, subject=subject)


def test_a_repeated_write_with_message_ids_stores_each_row_once(spark: Any,
                                                                js_server: Server) -> None:
    stream = name()
    create(js_server.url, stream, storage="file")
    rows = [(f"{stream}.o", f"order {i}", f"order-{i}") for i in range(1, 301)]
    df = spark.createDataFrame(rows, "subject string, data string, msg_id string"
                               ).repartition(2)
    write(df, js_server, msgIdColumn="msg_id")
    write(df, js_server, msgIdColumn="MSG_ID")  # (a retried task or job: dropped)
    got = stored(js_server.url, stream)
    assert sorted(data for _, _, data, _ in got) == sorted(d.encode() for _, d, _ in rows)
    assert {pairs[0][0] for _, _, _, pairs in got} == {"Nats-Msg-Id"}


def test_an_expected_sequence_mismatch_fails_the_write(spark: Any, js_server: Server) -> None:
    stream = name()
    create(js_server.url, stream)
    a, b = f"{stream}.a", f"{stream}.b"
    schema = "subject string, data string, last_on_subject long, last long"
    first = spark.createDataFrame([(a, "1", 0, None), (b, "2", None, 1), (a, "3", 1, 2)],
                                  schema).coalesce(1)
    options = {"expectedLastSubjectSequenceColumn": "last_on_subject",
               "expectedLastSequenceColumn": "last"}
    write(first, js_server, **options)
    assert [(seq, s, d) for seq, s, d, _ in stored(js_server.url, stream)] == [
        (1, a, b"1"), (2, b, b"2"), (3, a, b"3")]
    stale_subject = spark.createDataFrame([(a, "4", 1, None)], schema)
    with pytest.raises(Exception, match="wrong last sequence: 3"):
        write(stale_subject, js_server, **options)
    stale = spark.createDataFrame([(b, "4", None, 2)], schema)
    with pytest.raises(Exception, match="wrong last sequence: 3"):
        write(stale, js_server, **options)
    assert len(stored(js_server.url, stream)) == 3


def test_a_streaming_query_writes_to_jetstream_once_even_when_replayed(
        spark: Any, js_server: Server, tmp_path: Path) -> None:
    stream = name()
    create(js_server.url, stream, storage="file")
    source = tmp_path / "in"
    source.mkdir()
    for part in range(3):
        (source / f"{part}.json").write_text("".join(
            json.dumps({"id": i, "body": f"event {i}"}) + "\n"
            for i in range(part * 20, part * 20 + 20)))
    events = (spark.readStream.schema("id long, body string").option("maxFilesPerTrigger", 1)
              .json(str(source))
              .selectExpr(f"'{stream}.events' as subject", "body as data",
                          "concat('event-', id) as msg_id"))
    for run in ("first", "replayed"):  # a fresh checkpoint: every batch again
        query = (events.writeStream.format("nats").option("url", js_server.url)
                 .option("target", "jetstream").option("msgIdColumn", "msg_id")
                 .option("checkpointLocation", str(tmp_path / run))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert query.exception() is None
    got = stored(js_server.url, stream)
    assert sorted(data for _, _, data, _ in got) == sorted(
        b"event %d" % i for i in range(60))


# -- without Spark: the task's writer driven directly -------------------------------------


def _batches(stream: str, n: int, per_batch: int, between: Any) -> Iterator[pa.RecordBatch]:
    """n rows in batches; `between()` runs (in a thread of its own: the writer consumes the
    batches on its event loop) after the first batch was handed out."""
    for start in range(0, n, per_batch):
        if start == per_batch:
            worker = threading.Thread(target=between)
            worker.start()
            worker.join()
        ids = range(start, min(start + per_batch, n))
        yield pa.RecordBatch.from_pydict({
            "subject": [f"{stream}.o"] * len(ids), "data": [b"%06d" % i for i in ids],
            "id": [f"row-{i}" for i in ids]})


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_rides_out_a_server_crash(kind: str, tmp_path: Path) -> None:
    server = start(kind, tmp_path / "store")
    try:
        stream = name()
        create(server.url, stream, storage="file")

        def crash() -> None:
            server.kill()
            server.start()

        copts = ConnectionOptions.parse({"url": server.url})
        wopts = WriteOptions.parse({"target": "jetstream", "msgIdColumn": "id"})
        assert write_batches(copts, wopts, _batches(stream, 4000, 1000, crash)) == 4000
        data = [d for _, _, d, _ in stored(server.url, stream)]
        # at least once, in order, whatever the crash took
        assert list(dict.fromkeys(data)) == [b"%06d" % i for i in range(4000)]
        assert len(data) == 4000  # the rows published again were dropped as duplicates
    finally:
        server.stop()


def test_a_full_stream_and_an_oversized_message_fail_the_write(js_server: Server) -> None:
    stream = name()
    create(js_server.url, stream, max_msgs=2, discard="new")
    copts = ConnectionOptions.parse({"url": js_server.url})
    wopts = WriteOptions.parse({"target": "jetstream"})

    def rows(*payloads: bytes) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"subject": [f"{stream}.x"] * len(payloads),
                                          "data": list(payloads)})

    with pytest.raises(ConnectorError, match=f"publish to '{stream}.x' \\(stream '{stream}'\\): "
                                             "maximum messages exceeded"):
        write_batches(copts, wopts, rows(b"1", b"2", b"3"))
    assert [d for _, _, d, _ in stored(js_server.url, stream)] == [b"1", b"2"]
    with pytest.raises(ConnectorError, match=f"publish to '{stream}.x': 1048577 bytes exceed "
                                             "the server's max_payload \\(1048576\\)"):
        write_batches(copts, wopts, rows(b"x" * (1024 * 1024 + 1)))


def test_a_subject_only_core_subscribers_listen_on_fails_after_pub_ack_wait(
        js_server: Server) -> None:
    subject = f"core{uuid.uuid4().hex[:6]}.x"

    async def run() -> None:
        nc = await nats.connect(js_server.url)
        try:
            await nc.subscribe(subject)  # interest, but nobody answers
            await nc.flush()
            copts = ConnectionOptions.parse({"url": js_server.url})
            wopts = WriteOptions.parse({"target": "jetstream", "pubAckWait": "0.5"})
            batch = pa.RecordBatch.from_pydict({"subject": [subject], "data": [b"x"]})
            with pytest.raises(ConnectorError, match=r"no PubAck from .* within 0.5 s "
                               r"\(pubAckWait\): is there a stream for the subjects\?"):
                await asyncio.to_thread(write_batches, copts, wopts, iter([batch]))
        finally:
            await nc.close()

    asyncio.run(run())


def _schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(n, t) for n, t in fields])


def test_header_columns_are_checked_before_anything_is_written() -> None:
    schema = _schema(("subject", StringType()), ("data", StringType()), ("Key", LongType()))
    wopts = _check_schema(schema, WriteOptions.parse(
        {"target": "jetstream", "msgidcolumn": "key", "expectedlastsequencecolumn": "KEY"}))
    assert (wopts.msg_id_column, wopts.expected_last_sequence_column) == ("Key", "Key")
    with pytest.raises(OptionError, match="option msgIdColumn sets a JetStream header: it "
                                          "needs target=jetstream"):
        WriteOptions.parse({"msgidcolumn": "key"})
    with pytest.raises(OptionError, match="option msgIdColumn: no column 'nope'"):
        _check_schema(schema, WriteOptions.parse({"target": "jetstream",
                                                  "msgidcolumn": "nope"}))
    with pytest.raises(OptionError, match="column 'data' must be an integer, not string"):
        _check_schema(schema, WriteOptions.parse({"target": "jetstream",
                                                  "expectedlastsequencecolumn": "data"}))


def test_bad_header_values_fail_the_task_before_publishing() -> None:
    copts = ConnectionOptions.parse({"url": "nats://127.0.0.1:1"})  # never reached
    wopts = WriteOptions.parse({"target": "jetstream", "msgidcolumn": "id"})
    for ids, why in ((["a", None], "a row has a null value"),
                     (["a", ""], "a row has an empty value"),
                     (["a", "b\r\nX: y"], "a value with a line break")):
        batch = pa.RecordBatch.from_pydict({"subject": ["s.a", "s.b"], "data": [b"1", b"2"],
                                            "id": pa.array(ids, pa.string())})
        with pytest.raises(OptionError, match=why):
            write_batches(copts, wopts, iter([batch]))
