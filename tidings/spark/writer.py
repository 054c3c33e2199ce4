"""Writing rows to NATS: `df.write.format("nats")` and `df.writeStream.format("nats")`.

Rows carry `subject` (string; or option `subject` for every row), `data` (binary or string)
and optionally `headers` (map<string,string>, core target only). Each Spark task opens its own
connection and publishes its rows:

- `target=streaming` (default): a PubMsg per row to the channel named by `subject`; the task
  returns only once the server has acknowledged every message (PubAck), so a task that
  succeeds has stored all its rows. A failed task is retried by Spark and republishes its rows:
  at-least-once, duplicates possible after a failure.
- `target=core`: a core NATS publish per row, flushed (a PING/PONG round trip after the last)
  before the task returns. Fire-and-forget: the server has received the rows, but nobody
  confirms that a subscriber got them; at-most-once for subscribers that are not connected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from ..client import connect
from .options import ConnectionOptions, OptionError, WriteOptions, check_channel
from .stan import StanConnection, StanError


@dataclass
class NatsCommitMessage(WriterCommitMessage):
    rows: int


def _check_schema(schema: StructType, wopts: WriteOptions) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "subject" not in fields and not wopts.subject:
        raise OptionError("writing to nats needs a `subject` column or option subject")
    if "subject" in fields and not isinstance(fields["subject"], StringType):
        raise OptionError("column subject must be a string")
    if "data" not in fields:
        raise OptionError("writing to nats needs a `data` column (binary or string)")
    if not isinstance(fields["data"], BinaryType | StringType):
        raise OptionError("column data must be binary or string")
    if "headers" in fields:
        if wopts.target != "core":
            raise OptionError("column headers: NATS Streaming messages have no headers; "
                              "use option target=core or drop the column")
        h = fields["headers"]
        if not (isinstance(h, MapType) and isinstance(h.keyType, StringType)
                and isinstance(h.valueType, StringType)):
            raise OptionError("column headers must be a map<string,string>")


def _rows(batch: pa.RecordBatch, default_subject: str | None
          ) -> Iterator[tuple[str, bytes, Any]]:
    names = batch.schema.names
    n = batch.num_rows
    subjects = (batch.column(names.index("subject")).to_pylist() if "subject" in names
                else [default_subject] * n)
    data = batch.column(names.index("data")).to_pylist()
    headers = (batch.column(names.index("headers")).to_pylist() if "headers" in names
               else [None] * n)
    for subj, payload, hdrs in zip(subjects, data, headers, strict=True):
        if subj is None:
            subj = default_subject
            if subj is None:
                raise OptionError("a row has a null subject and no option subject is set")
        if payload is None:
            payload = b""
        elif isinstance(payload, str):
            payload = payload.encode()
        yield subj, payload, hdrs


async def _publish_streaming(copts: ConnectionOptions, wopts: WriteOptions,
                             batches: Iterator[pa.RecordBatch]) -> int:
    conn = StanConnection(copts, "w")
    count = 0
    errors: list[StanError] = []

    def on_ack(guid: str, err: StanError | None) -> None:
        if err is not None:
            errors.append(err)

    try:
        sc = await conn.connect(ack_timeout=wopts.pub_ack_wait,
                                max_pub_acks_inflight=wopts.max_pub_acks_in_flight)
        checked: set[str] = set()
        for batch in batches:
            for subj, payload, _ in _rows(batch, wopts.subject):
                if errors:
                    raise StanError(f"publish to channel refused: {errors[0]}")
                if subj not in checked:
                    check_channel(subj)
                    checked.add(subj)
                await sc.publish_async(subj, payload, ack_handler=on_ack)
                count += 1
        await sc.wait_pub_acks()
        if errors:
            raise StanError(f"{len(errors)} messages refused: {errors[0]}")
    finally:
        await conn.close()
    return count


async def _publish_core(copts: ConnectionOptions, wopts: WriteOptions,
                        batches: Iterator[pa.RecordBatch]) -> int:
    nc = await connect(list(copts.servers), **copts.client_kwargs(
        f"{copts.client_id_prefix}-writer"))
    count = 0
    try:
        for batch in batches:
            for subj, payload, hdrs in _rows(batch, wopts.subject):
                if hdrs:
                    await nc.publish(subj, payload, headers=dict(hdrs))
                else:
                    await nc.publish(subj, payload)
                count += 1
        await nc.flush(timeout=wopts.pub_ack_wait)
    finally:
        await nc.close()
    return count


def write_batches(copts: ConnectionOptions, wopts: WriteOptions,
                  batches: Iterator[pa.RecordBatch]) -> int:
    """Publish every row of `batches`; the number published once all are confirmed."""
    publish = _publish_core if wopts.target == "core" else _publish_streaming
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(publish(copts, wopts, batches))
    finally:
        loop.close()


class NatsWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.wopts = WriteOptions.parse(options)
        _check_schema(schema, self.wopts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NatsCommitMessage:
        return NatsCommitMessage(write_batches(self.copts, self.wopts, iterator))


class NatsStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.wopts = WriteOptions.parse(options, stream=True)
        _check_schema(schema, self.wopts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NatsCommitMessage:
        return NatsCommitMessage(write_batches(self.copts, self.wopts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every row was confirmed (or flushed) before its task finished

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # published messages cannot be taken back; Spark reruns the batch
