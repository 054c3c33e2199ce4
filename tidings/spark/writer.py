"""Writing rows to NATS: `df.write.format("nats")` and `df.writeStream.format("nats")`.

Rows carry `subject` (string; or option `subject` for every row), `data` (binary or string)
and optionally `headers` (map<string,string>, core target only). Each Spark task opens its own
connection and publishes its rows:

- `target=streaming` (default): a PubMsg per row to the channel named by `subject`; the task
  returns only once the server has acknowledged every message (PubAck), so a task that
  succeeds has stored all its rows. A connection lost midway is reopened and the rows not yet
  acknowledged are published again; a failed task is retried by Spark and republishes its
  rows: at-least-once, duplicates possible after a failure.
- `target=core`: a core NATS publish per row, flushed (a PING/PONG round trip) after each
  record batch and before the task returns; a connection lost midway publishes the batch
  again. Fire-and-forget: the server has received the rows, but nobody confirms that a
  subscriber got them; at-most-once for subscribers that are not connected.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from ..client import errors as nats_errors
from ..streaming.client import ERR_PUB_ACK_TIMEOUT, StreamingClient
from .connection import ConnectionLost, Losses, unique_id
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


def _columns(batch: pa.RecordBatch, default_subject: str | None
             ) -> tuple[list[str], list[bytes]]:
    """The batch's subjects (nulls: option subject) and payloads (bytes; null: empty)."""
    names = batch.schema.names
    if "subject" in names:
        col = batch.column(names.index("subject"))
        if col.null_count:
            if default_subject is None:
                raise OptionError("a row has a null subject and no option subject is set")
            col = pc.fill_null(col, default_subject)
        subjects = col.to_pylist()
    else:
        subjects = [default_subject] * batch.num_rows
    data = batch.column(names.index("data"))
    if not pa.types.is_binary(data.type):
        data = data.cast(pa.binary())  # strings: the same bytes, UTF-8
    if data.null_count:
        data = pc.fill_null(data, b"")
    return subjects, data.to_pylist()


def _rows(batch: pa.RecordBatch, default_subject: str | None
          ) -> Iterator[tuple[str, bytes, Any]]:
    subjects, payloads = _columns(batch, default_subject)
    names = batch.schema.names
    headers = (batch.column(names.index("headers")).to_pylist() if "headers" in names
               else [None] * batch.num_rows)
    return zip(subjects, payloads, headers, strict=True)


class _StreamingPublisher:
    """Publishes rows with PubAcks, across lost connections.

    Every row stays in `unacked` (by its guid) until its PubAck. When the connection is lost,
    a new one is opened (for `reconnectTimeout`) and the unacknowledged rows are published
    again, in their order, before the next row: at least once, as a retried task would be.
    """

    def __init__(self, copts: ConnectionOptions, wopts: WriteOptions) -> None:
        self.copts, self.wopts = copts, wopts
        self.conn: StanConnection | None = None
        self.sc: StreamingClient | None = None
        self.unacked: dict[str, tuple[str, bytes]] = {}
        self.refused: list[StanError] = []
        self.prefix = unique_id()
        self.counter = itertools.count()
        self.acked = 0
        self.losses = Losses()

    def _on_ack(self, guid: str, err: StanError | None) -> None:
        if isinstance(err, ConnectionLost):
            return  # published again on the next connection
        self.unacked.pop(guid, None)
        self.acked += 1
        if err is not None:
            self.refused.append(err)

    def _check_refused(self) -> None:
        if not self.refused:
            return
        err = self.refused[0]
        if str(err) == ERR_PUB_ACK_TIMEOUT:
            raise StanError(f"no PubAck from {', '.join(self.copts.servers)} within "
                            f"{self.wopts.pub_ack_wait:g} s (pubAckWait)")
        raise StanError(f"{len(self.refused)} messages refused: {err}")

    def _lost(self, exc: BaseException) -> bool:
        return self.conn is not None and isinstance(self.conn.check(exc), ConnectionLost)

    async def open(self) -> StreamingClient:
        """A new connection, on which every unacknowledged row has been published (again)."""
        while True:
            old = self.conn
            if old is not None:
                self.losses.lost(self.acked, ConnectionLost(
                    f"lost the connection to {old.servers}"))
                await old.close()
            self.conn = StanConnection(self.copts, "w", replaces=old)
            self.sc = None
            try:
                sc = await self.conn.connect(
                    ack_timeout=self.wopts.pub_ack_wait,
                    max_pub_acks_inflight=self.wopts.max_pub_acks_in_flight)
                for guid, (subj, payload) in list(self.unacked.items()):
                    await sc.publish_async(subj, payload, self._on_ack, guid)
                self.sc = sc
                return sc
            except (StanError, nats_errors.Error, OSError) as exc:
                if not self._lost(exc):
                    raise

    async def publish(self, subjects: list[str], payloads: list[bytes]) -> None:
        """Publish rows (subjects[i], payloads[i]); returns once they are all sent."""
        prefix, counter, unacked, on_ack = self.prefix, self.counter, self.unacked, self._on_ack
        i, n = 0, len(subjects)
        while i < n:
            self._check_refused()
            sc = self.sc
            if sc is None or sc.closed:
                await self.open()  # publishes what was sent and not acknowledged
                continue
            publish = sc.publish_async
            try:
                while i < n:
                    subj, payload = subjects[i], payloads[i]
                    guid = f"{prefix}{next(counter)}"
                    unacked[guid] = (subj, payload)
                    i += 1
                    await publish(subj, payload, on_ack, guid)
            except (StanError, nats_errors.Error, OSError) as exc:
                if not self._lost(exc):
                    raise
                self.sc = None

    async def finish(self) -> None:
        """Until every row is acknowledged (or a refusal fails the write)."""
        while True:
            sc = self.sc if self.sc is not None and not self.sc.closed else await self.open()
            await sc.wait_pub_acks()
            self._check_refused()
            if not self.unacked:
                return
            if not sc.closed:
                raise AssertionError(f"{len(self.unacked)} rows neither acked nor failed")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def _publish_streaming(copts: ConnectionOptions, wopts: WriteOptions,
                             batches: Iterator[pa.RecordBatch]) -> int:
    publisher = _StreamingPublisher(copts, wopts)
    count = 0
    try:
        await publisher.open()
        checked: set[str] = set()
        for batch in batches:
            subjects, payloads = _columns(batch, wopts.subject)
            for subj in set(subjects).difference(checked):
                check_channel(subj)
                checked.add(subj)
            await publisher.publish(subjects, payloads)
            count += len(subjects)
        await publisher.finish()
    finally:
        await publisher.close()
    return count


async def _publish_core(copts: ConnectionOptions, wopts: WriteOptions,
                        batches: Iterator[pa.RecordBatch]) -> int:
    """Core publishes, flushed (PING/PONG) after each record batch. When the connection is
    lost midway, a new one (`reconnectTimeout`) publishes the batch again from its start."""
    conn = StanConnection(copts, "w")
    losses = Losses()
    count = 0
    try:
        await conn.connect_nats()
        for batch in batches:
            rows = list(_rows(batch, wopts.subject))
            while True:
                nc = conn.nc
                assert nc is not None
                try:
                    for subj, payload, hdrs in rows:
                        if hdrs:
                            await nc.publish(subj, payload, headers=dict(hdrs))
                        else:
                            await nc.publish(subj, payload)
                    await nc.flush(timeout=wopts.pub_ack_wait)
                    break
                except (nats_errors.Error, OSError) as exc:
                    lost = conn.check(exc)
                    if not isinstance(lost, ConnectionLost):
                        raise
                    losses.lost(count, lost)
                await conn.close()
                conn = StanConnection(copts, "w")
                await conn.connect_nats()
            count += len(rows)
    finally:
        await conn.close()
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
