"""Writing rows to NATS: `df.write.format("nats")` and `df.writeStream.format("nats")`.

Rows carry `subject` (string; or option `subject` for every row), `data` (binary or string)
and optionally `headers` (map<string,string> or map<string,array<string>>; JetStream and core
targets). Each Spark task opens its own connection and publishes its rows:

- `target=streaming` (default): a PubMsg per row to the channel named by `subject`; the task
  returns only once the server has acknowledged every message (PubAck), so a task that
  succeeds has stored all its rows. A connection lost midway is reopened and the rows not yet
  acknowledged are published again; a failed task is retried by Spark and republishes its
  rows: at-least-once, duplicates possible after a failure.
- `target=jetstream`: a publish per row to the stream that takes its subject, answered by a
  PubAck, with the same window, reconnects and guarantee (jswrite.py); with `msgIdColumn`
  the stream's duplicate window drops what a retry publishes again: exactly once within it.
  Both acknowledged targets run on `publishing.AckedPublisher`.
- `target=core`: a core NATS publish per row, flushed (a PING/PONG round trip) after each
  record batch and before the task returns; a connection lost midway publishes the batch
  again. Fire-and-forget: the server has received the rows, but nobody confirms that a
  subscriber got them; at-most-once for subscribers that are not connected.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

from ..client import errors as nats_errors
from ..streaming.client import ERR_PUB_ACK_TIMEOUT, StreamingClient
from .connection import ConnectionLost, Losses, NatsConnection, unique_id
from .jswrite import JetStreamPublisher, check_header_columns
from .options import ConnectionOptions, OptionError, WriteOptions, check_channel
from .publishing import AckedPublisher, columns, header_rows
from .stan import StanConnection, StanError


@dataclass
class NatsCommitMessage(WriterCommitMessage):
    rows: int


def _check_schema(schema: StructType, wopts: WriteOptions) -> WriteOptions:
    """Refuse columns the target cannot write; the options with the column names they give
    as the schema spells them."""
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
        if wopts.target == "streaming":
            raise OptionError("column headers: NATS Streaming messages have no headers; "
                              "use option target=jetstream or target=core, or drop the column")
        h = fields["headers"]
        if not (isinstance(h, MapType) and isinstance(h.keyType, StringType)
                and (isinstance(h.valueType, StringType) or (
                    isinstance(h.valueType, ArrayType)
                    and isinstance(h.valueType.elementType, StringType)))):
            raise OptionError("column headers must be a map<string,string> or a "
                              "map<string,array<string>>")
    return check_header_columns(schema, wopts) if wopts.target == "jetstream" else wopts


def _rows(batch: pa.RecordBatch, wopts: WriteOptions) -> Iterator[tuple[str, bytes, Any]]:
    subjects, payloads = columns(batch, wopts.subject)
    headers = header_rows(batch, wopts)
    return zip(subjects, payloads, [None] * len(subjects) if headers is None else headers,
               strict=True)


class _StreamingPublisher(AckedPublisher[str, tuple[str, bytes]]):
    """NATS Streaming: a PubMsg per row under a guid the task chooses (`<nuid><row number>`,
    so the row is tracked before its PubAck can come), PubAcks matched by guid."""

    def __init__(self, copts: ConnectionOptions, wopts: WriteOptions) -> None:
        super().__init__(copts, wopts, map(f"{unique_id()}{{}}".format, itertools.count()))
        self.conn: StanConnection | None = None
        self.sc: StreamingClient | None = None
        self.checked: set[str] = set()

    def rows(self, batch: pa.RecordBatch) -> Iterable[tuple[str, bytes]]:
        subjects, payloads = columns(batch, self.wopts.subject)
        for subj in set(subjects).difference(self.checked):
            self.checked.add(check_channel(subj))
        return zip(subjects, payloads, strict=True)

    def _on_ack(self, guid: str, err: StanError | None) -> None:
        if err is None:
            self.answered(guid)
        elif isinstance(err, ConnectionLost):
            self.lost(err)  # published again on the next connection
        elif str(err) == ERR_PUB_ACK_TIMEOUT:
            self.unanswered(guid)
        else:
            self.answered(guid, str(err))

    async def _connect(self) -> None:
        self.sc = None
        self.conn = conn = StanConnection(self.copts, "w", replaces=self.conn)
        conn.on_lost.append(self.lost)
        self.sc = await conn.connect(ack_timeout=self.wopts.pub_ack_wait,
                                     max_pub_acks_inflight=self.window)

    def _send(self, key: str, row: tuple[str, bytes]) -> Awaitable[object]:
        return self.sc.publish_async(row[0], row[1], self._on_ack,  # type: ignore[union-attr]
                                     key)



async def _publish_core(copts: ConnectionOptions, wopts: WriteOptions,
                        batches: Iterator[pa.RecordBatch]) -> int:
    """Core publishes, flushed (PING/PONG) after each record batch. When the connection is
    lost midway, a new one (`reconnectTimeout`) publishes the batch again from its start."""
    losses = Losses()
    dropped: list[ConnectionLost] = []  # disconnects seen while a batch was under way

    async def connect() -> NatsConnection:
        conn = NatsConnection(copts, "w")
        conn.on_lost.append(dropped.append)
        return await conn.connect_nats()

    conn = await connect()
    count = 0
    try:
        for batch in batches:
            rows = list(_rows(batch, wopts))
            while True:
                nc = conn.nc
                assert nc is not None
                dropped.clear()
                try:
                    for subj, payload, hdrs in rows:
                        await nc.publish(subj, payload, headers=hdrs)
                    await nc.flush(timeout=wopts.pub_ack_wait)
                    if dropped:  # (the client reconnected by itself: what it wrote to the
                        raise dropped[0]  # dead connection is gone, the flush says nothing)
                    break
                except (nats_errors.Error, OSError, ConnectionLost) as exc:
                    lost = conn.check(exc)
                    if not isinstance(lost, ConnectionLost):
                        raise
                    losses.lost(count, lost)
                await conn.close()
                conn = await connect()
            count += len(rows)
    finally:
        await conn.close()
    return count


def write_batches(copts: ConnectionOptions, wopts: WriteOptions,
                  batches: Iterator[pa.RecordBatch]) -> int:
    """Publish every row of `batches`; the number published once all are confirmed."""
    if wopts.target == "core":
        work = _publish_core(copts, wopts, batches)
    else:
        publisher = (JetStreamPublisher if wopts.target == "jetstream"
                     else _StreamingPublisher)(copts, wopts)
        work = publisher.write(batches)
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


class NatsWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.wopts = _check_schema(schema, WriteOptions.parse(options))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NatsCommitMessage:
        return NatsCommitMessage(write_batches(self.copts, self.wopts, iterator))


class NatsStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.wopts = _check_schema(schema, WriteOptions.parse(options, stream=True))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NatsCommitMessage:
        return NatsCommitMessage(write_batches(self.copts, self.wopts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every row was confirmed (or flushed) before its task finished

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # published messages cannot be taken back; Spark reruns the batch
