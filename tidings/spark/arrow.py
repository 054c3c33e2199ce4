"""The row schemas of the `nats` source (a channel's rows, a JetStream stream's rows) and
Arrow record batches built from column lists.

A Python data source that yields tuples is converted row by row by Spark (about 0.45 M rows/s
on a small machine); yielding `pyarrow.RecordBatch`es skips that (about 1.5 M rows/s). Spark
checks a batch's schema for equality with the declared one, so the Arrow schema here is exactly
what Spark derives from `SCHEMA` (nullable fields, timestamps in microseconds, UTC).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_DDL = (
    "channel string, sequence long, subject string, data binary, "
    "timestamp timestamp, redelivered boolean"
)

ARROW_SCHEMA = pa.schema([
    pa.field("channel", pa.string()),
    pa.field("sequence", pa.int64()),
    pa.field("subject", pa.string()),
    pa.field("data", pa.binary()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("redelivered", pa.bool_()),
])

_TS_TYPE = ARROW_SCHEMA.field("timestamp").type
# Typed scalars made once: pyarrow converting a bare Python int or bool looks for the
# optional dateutil package, an import that fails again on every call where it is missing
# (about 0.1 ms a batch, more on a Spark worker's long sys.path).
_NS_PER_US = pa.scalar(1000, pa.int64())
_FALSE = pa.scalar(False, pa.bool_())


def spark_schema():  # -> pyspark.sql.types.StructType (imported lazily: pyspark is optional)
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([
        StructField("channel", StringType()),
        StructField("sequence", LongType()),
        StructField("subject", StringType()),
        StructField("data", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("redelivered", BooleanType()),
    ])


STREAM_ARROW_SCHEMA = pa.schema([
    pa.field("stream", pa.string()),
    pa.field("sequence", pa.int64()),
    pa.field("subject", pa.string()),
    pa.field("data", pa.binary()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("headers", pa.map_(pa.string(), pa.list_(pa.string()))),
])
_HEADERS_TYPE = STREAM_ARROW_SCHEMA.field("headers").type


def stream_spark_schema():  # -> StructType: a JetStream stream's rows
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([
        StructField("stream", StringType()),
        StructField("sequence", LongType()),
        StructField("subject", StringType()),
        StructField("data", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("headers", MapType(StringType(), ArrayType(StringType()))),
    ])


def stream_batch(stream: str, sequences: Sequence[int], subjects: Sequence[str],
                 data: Sequence[bytes], timestamps_ns: Sequence[int],
                 headers: Sequence[Sequence[tuple[str, str]] | None]) -> pa.RecordBatch:
    """One record batch of a stream's messages from parallel column lists; `headers` each
    a message's (name, value) pairs in order (a repeated name: its values in one list), or
    None for a message without headers."""
    return stream_arrays_batch(stream, pa.array(sequences, pa.int64()),
                               pa.array(subjects, pa.string()), pa.array(data, pa.binary()),
                               pa.array(timestamps_ns, pa.int64()), headers)


def stream_arrays_batch(stream: str, sequences: pa.Array, subjects: pa.Array, data: pa.Array,
                        timestamps_ns: pa.Array,
                        headers: Sequence[Sequence[tuple[str, str]] | None] | None
                        ) -> pa.RecordBatch:
    """As `stream_batch`, from Arrow arrays (int64, string, binary, int64 ns); `headers`
    None: no message has any."""
    n = len(sequences)
    name = pa.repeat(pa.scalar(stream, pa.string()), n)
    stamps = pc.divide(timestamps_ns, _NS_PER_US).cast(_TS_TYPE)
    maps = pa.array([None if h is None else _grouped(h) for h in headers], _HEADERS_TYPE) \
        if headers is not None and any(h is not None for h in headers) \
        else pa.nulls(n, _HEADERS_TYPE)
    return pa.RecordBatch.from_arrays([name, sequences, subjects, data, stamps, maps],
                                      schema=STREAM_ARROW_SCHEMA)


def regrouped(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """`batches` again as batches of `size` rows (the last one fewer): the JVM takes fewer,
    larger batches for less per row."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        held.append(batch)
        rows += batch.num_rows
        if rows >= size:
            whole = pa.concat_batches(held) if len(held) > 1 else held[0]
            cut = rows - rows % size
            for at in range(0, cut, size):
                yield whole.slice(at, size)
            held = [whole.slice(cut)] if cut < rows else []
            rows -= cut
    if held:
        yield pa.concat_batches(held) if len(held) > 1 else held[0]


def _grouped(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(name, [values]) in the order names first appear."""
    out: dict[str, list[str]] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return list(out.items())


def message_batch(
    channel: str,
    sequences: Sequence[int],
    data: Sequence[bytes],
    timestamps_ns: Sequence[int],
    redelivered: Sequence[bool] | None = None,
    subjects: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """One record batch of a channel's messages from parallel column lists.

    `subjects` defaults to the channel name (a streaming message's subject is its channel);
    `redelivered` defaults to all false.
    """
    n = len(sequences)
    chan = pa.repeat(pa.scalar(channel, pa.string()), n)
    subj = chan if subjects is None else pa.array(subjects, pa.string())
    stamps = pc.divide(pa.array(timestamps_ns, pa.int64()), _NS_PER_US).cast(_TS_TYPE)
    if redelivered is None:
        redo = pa.repeat(_FALSE, n)
    else:
        redo = pa.array(redelivered, pa.bool_())
    return pa.RecordBatch.from_arrays(
        [chan, pa.array(sequences, pa.int64()), subj, pa.array(data, pa.binary()), stamps, redo],
        schema=ARROW_SCHEMA,
    )


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in ARROW_SCHEMA],
                                      schema=ARROW_SCHEMA)


def columnar_batch(channel: str, reply: bytes, count: int, offset: int,
                   min_time: int = 0) -> pa.RecordBatch:
    """A record batch over a fetch reply's columns, without a per-row Python step.

    `reply[offset:]` holds `count` int64 sequences, `count` int64 timestamps (Unix ns),
    `count + 1` int32 offsets and the concatenated payloads (little-endian, see
    `tidings.streaming.server.fetch`). The sequence and data columns are views of `reply`;
    rows stored before `min_time` (Unix ns) are left out.
    """
    buf = pa.py_buffer(reply)
    seq_at, ts_at, off_at = offset, offset + 8 * count, offset + 16 * count
    data_at = off_at + 4 * (count + 1)
    seqs = pa.Array.from_buffers(pa.int64(), count, [None, buf.slice(seq_at, 8 * count)])
    stamps_ns = pa.Array.from_buffers(pa.int64(), count, [None, buf.slice(ts_at, 8 * count)])
    data = pa.Array.from_buffers(pa.binary(), count,
                                 [None, buf.slice(off_at, 4 * (count + 1)), buf.slice(data_at)])
    chan = pa.repeat(pa.scalar(channel, pa.string()), count)
    stamps = pc.divide(stamps_ns, _NS_PER_US).cast(_TS_TYPE)
    redo = pa.repeat(_FALSE, count)
    batch = pa.RecordBatch.from_arrays([chan, seqs, chan, data, stamps, redo],
                                       schema=ARROW_SCHEMA)
    if min_time:
        batch = batch.filter(pc.greater_equal(stamps_ns, pa.scalar(min_time, pa.int64())))
    return batch
