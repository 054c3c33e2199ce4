"""The `nats` data source: batch reader, stream reader, batch and stream writers.

    from tidings.spark import register
    register(spark)
    df = (spark.read.format("nats").option("url", "nats://127.0.0.1:4222")
          .option("channels", "orders,payments").load())

Rows: `(channel string, sequence long, subject string, data binary, timestamp timestamp,
redelivered boolean)`. See docs/spark.md for every option.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .arrow import spark_schema, stream_spark_schema
from .catalog import ChannelCatalog
from .connection import ConnectorError
from .options import ConnectionOptions, OptionError, ReadOptions, parse_offsets_json
from .planning import SeqRange, limit_offsets, merge_offsets, ranges_between, split_range
from .reader import NatsPartition, ReadParams, read_any


class NatsDataSource(DataSource):
    """`spark.read.format("nats")`, `readStream`, `write` and `writeStream`."""

    @classmethod
    def name(cls) -> str:
        return "nats"

    def schema(self) -> StructType:
        if {"streams", "stream", "streampattern"} & {k.lower() for k in self.options}:
            return stream_spark_schema()
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return NatsBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NatsStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import NatsWriter

        if overwrite:
            raise OptionError("a NATS channel or subject cannot be overwritten: "
                              "write with mode('append')")
        return NatsWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import NatsStreamWriter

        # outputMode("complete") arrives as overwrite: every trigger publishes the whole
        # result table again, which is a fine thing to do on a messaging system.
        return NatsStreamWriter(self.options, schema)


def catalog_for(copts: ConnectionOptions, ropts: ReadOptions) -> Any:
    """The driver's catalog of what `ropts` reads: channels (NATS Streaming) or streams
    (JetStream); both answer the same questions (catalog.py, jscatalog.py)."""
    if ropts.kind == "stream":
        from .jscatalog import StreamCatalog

        return StreamCatalog(copts)
    return ChannelCatalog(copts)


def _names(catalog: Any, ropts: ReadOptions) -> list[str]:
    names = list(ropts.names)
    if ropts.pattern:
        names.extend(catalog.discover(ropts.pattern))
    return list(dict.fromkeys(names))


def _check_not_behind(start: dict[str, int], latest: dict[str, int]) -> None:
    """A stream's sequence never goes back: one whose last is before where the query
    stands was deleted and made again (its messages are not those the offsets count)."""
    for name, last in latest.items():
        if last < start.get(name, 0):
            raise ConnectorError(
                f"stream {name!r} ends at sequence {last}, before the query's offset "
                f"{start[name]}: it was deleted (and created again) under the query; start "
                "the query again with a new checkpoint, or startingOffsets")


def _partition(rng: SeqRange, copts: ConnectionOptions, params: ReadParams, catalog: Any,
               ropts: ReadOptions) -> NatsPartition:
    return NatsPartition(rng, copts, params, catalog.sizes.get(rng.channel, 0),
                         ropts.start_time_ns or 0, ropts.kind, catalog.hint(rng.channel),
                         ropts.subjects)


class NatsBatchReader(DataSourceReader):
    """Plans sequence ranges on the driver; each partition reads its range on an executor."""

    def __init__(self, options: dict[str, str]) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.ropts = ReadOptions.parse(options)
        self.params = ReadParams.of(self.ropts)
        self.catalog: Any = None

    def plan(self) -> list[SeqRange]:
        ropts = self.ropts
        catalog = self.catalog = catalog_for(self.copts, ropts)
        try:
            channels = _names(catalog, ropts)
            bounds = catalog.info(channels)
            starts: dict[str, int | None] = {}
            if ropts.start_time_ns is not None:
                live = [ch for ch in channels if bounds[ch] is not None]
                starts.update(catalog.first_at_or_after(live, ropts.start_time_ns))
            size, self.params = catalog.partitioning(ropts, self.params)
        finally:
            catalog.close()
        ranges: list[SeqRange] = []
        for ch in channels:
            b = bounds[ch]
            if b is None:
                continue
            first, last = b.first, b.last
            lo = first
            if ropts.start_sequence is not None:
                lo = max(lo, ropts.start_sequence)
            if ropts.start_time_ns is not None:
                at = starts.get(ch)
                if at is None:
                    continue
                lo = max(lo, at)
            hi = last if ropts.end_sequence is None else min(last, ropts.end_sequence)
            ranges.extend(split_range(ch, lo, hi, size,
                                      ropts.min_partitions_per_channel))
        return ranges

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self.plan()
        return [_partition(r, self.copts, self.params, self.catalog, self.ropts)
                for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, NatsPartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_any(partition)


R = TypeVar("R")


def _releasing(method: Callable[..., R]) -> Callable[..., R]:
    """Close the driver's streaming connection when the call returns. Spark ends the
    process that runs a stream reader without calling `stop()`, so a client held between
    calls would stay registered on the streaming server (and in its store) after the query."""

    @functools.wraps(method)
    def call(self: NatsStreamReader, *args: Any) -> R:
        try:
            return method(self, *args)
        finally:
            self.catalog.close()

    return call


class NatsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over channels; offsets are `{channel: last sequence handed to Spark}`."""

    def __init__(self, options: dict[str, str]) -> None:
        self.copts = ConnectionOptions.parse(options)
        self.ropts = ReadOptions.parse(options, stream=True)
        self.params = ReadParams.of(self.ropts)
        self.catalog = catalog_for(self.copts, self.ropts)
        self.target: dict[str, int] | None = None  # Trigger.AvailableNow's end

    # -- offsets ----------------------------------------------------------------
    def _channels(self) -> list[str]:
        return _names(self.catalog, self.ropts)

    def _new_channel_start(self, channels: list[str]) -> dict[str, int]:
        """Where reading of channels without an offset yet begins (the value is 'before')."""
        ropts = self.ropts
        out = dict.fromkeys(channels, 0)
        if ropts.start_sequence is not None:
            out = dict.fromkeys(channels, ropts.start_sequence - 1)
        elif ropts.start_time_ns is not None:
            firsts = self.catalog.first_at_or_after(channels, ropts.start_time_ns)
            lasts = self.catalog.last_sequences(channels)
            out = {ch: (firsts[ch] - 1 if firsts[ch] is not None else lasts[ch])
                   for ch in channels}
        elif ropts.starting_offsets == "latest":
            out = self.catalog.last_sequences(channels)
        elif ropts.starting_offsets != "earliest":
            given = parse_offsets_json(ropts.starting_offsets, "startingOffsets")
            out = {ch: given.get(ch, 0) for ch in channels}
        return out

    @_releasing
    def initialOffset(self) -> dict:
        return self._new_channel_start(self._channels())

    @_releasing
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch.

        Channels already in `start` advance to their last sequence (at most up to the
        AvailableNow target, at most `limit.max_rows` messages in all). A channel seen for the
        first time enters the offset at its starting point and is read from the next batch on,
        so `partitions(start, end)` never needs anything but the two offsets. While the
        `pauseFile` exists, the end is the start: no new micro-batch (`tidings pipeline`
        stops its queries between micro-batches this way). It is looked at again once the
        channels' ends are known: a pause that came while they were read (and the messages
        published after it) stays out of this batch.
        """
        start = {str(k): int(v) for k, v in start.items()}
        if self._paused():
            return start
        if self.target is not None:
            known = [ch for ch in self.target if ch in start]
            new = [ch for ch in self.target if ch not in start]
            latest = {ch: self.target[ch] for ch in known}
        else:
            channels = self._channels()
            known = [ch for ch in channels if ch in start]
            new = [ch for ch in channels if ch not in start]
            latest = self.catalog.last_sequences(known) if known else {}
            if self.ropts.kind == "stream":
                _check_not_behind(start, latest)
        end = merge_offsets(start, latest)
        if isinstance(limit, ReadMaxRows):
            end = merge_offsets(start, limit_offsets(start, end, limit.max_rows))
        if new:
            end.update(self._new_channel_start(new))
        if self._paused():
            return start
        return end

    def _paused(self) -> bool:
        return bool(self.ropts.pause_file) and os.path.exists(self.ropts.pause_file)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.ropts.max_messages_per_trigger:
            return ReadMaxRows(self.ropts.max_messages_per_trigger)
        return ReadAllAvailable()

    @_releasing
    def prepareForTriggerAvailableNow(self) -> None:
        channels = self._channels()
        self.target = self.catalog.last_sequences(channels)

    def reportLatestOffset(self) -> dict | None:
        return None

    # -- partitions -------------------------------------------------------------
    @_releasing
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start = {str(k): int(v) for k, v in start.items()}
        end = {str(k): int(v) for k, v in end.items()}
        size, params = self.catalog.partitioning(self.ropts, self.params)
        ranges = ranges_between(start, end, size, 1)
        unknown = {r.channel for r in ranges if not self.catalog.hint(r.channel)}
        if unknown:  # (how each stream is read: learnt with its bounds)
            self.catalog.info(sorted(unknown))
        return [_partition(r, self.copts, params, self.catalog, self.ropts) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, NatsPartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_any(partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        self.catalog.close()
