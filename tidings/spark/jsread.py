"""Reading one partition of a JetStream stream (its sequences `start`..`end`) on an executor,
without leaving anything behind on the server and without taking messages from anyone:

- `direct`: the stream allows direct gets (`allow_direct`): batches of
  `$JS.API.DIRECT.GET.<stream>` `{"seq", "batch", "max_bytes"[, "next_by_subj"]}`, each
  answered by the messages and an end-of-batch status. Nothing is created on the server.
  The request asks for columnar replies (`tidings.jetstream.bulk`, a header the reference
  ignores): a tidings server answers with a few messages holding thousands each, which
  become Arrow arrays without a step per message.
- `consumer`: a limits stream without direct gets: an ordered ephemeral push consumer
  (no acks, flow control answered, in memory, gone once read or idle), from `start`,
  deleted at the end. A work-queue or interest stream never gets one (a consumer there
  would take messages away or hold them back).
- `get`: a work-queue or interest stream without direct gets: `STREAM.MSG.GET` a message
  at a time (a window of requests in flight): slow, but it changes nothing.

Each yields column chunks (`Columns`) or record batches, which `read_stream_partition`
regroups into batches of `batchSize` rows; rows are in sequence order, each sequence once;
messages stored before `min_time` are left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..client import Client
from ..client import errors as nats_errors
from ..jetstream import bulk
from ..protocol.subjects import subject_matches
from ..streaming.client import StanError
from .arrow import regrouped, stream_arrays_batch, stream_batch
from .connection import ConnectionLost, Losses, NatsConnection
from .jetstream import API, JetStreamError, api, message_of_get, parse_time

DIRECT_BATCH = 10_000  # messages a direct get asks for at most
COLUMNAR_BATCH = 100_000  # the same, answered in columns (each reply ~384 KiB of them)
DIRECT_BYTES = 8 * 1024 * 1024  # and bytes (the server ends the batch at whichever first)
GET_WINDOW = 64  # STREAM.MSG.GET requests in flight
# What a direct get adds after the message's own headers, in the order both servers write it.
_DIRECT_HEADERS = re.compile(rb"Nats-Stream: [^\r]*\r\nNats-Subject: ([^\r]*)\r\n"
                             rb"Nats-Sequence: (\d+)\r\nNats-Time-Stamp: ([^\r]*)\r\n")
_COLUMNAR = {bulk.HEADER_NAME.decode(): "1"}  # (tidings.jetstream.bulk's request header)
_ADDED = frozenset((b"nats-stream", b"nats-subject", b"nats-sequence", b"nats-time-stamp",
                    b"nats-num-pending", b"nats-last-sequence"))  # a direct get's own


class Columns:
    """Rows of one stream gathered column by column."""

    __slots__ = ("seqs", "subjects", "data", "stamps", "headers")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.subjects: list[str] = []
        self.data: list[bytes] = []
        self.stamps: list[int] = []  # Unix ns
        self.headers: list[list[tuple[str, str]] | None] = []

    def add(self, seq: int, subject: str, data: bytes, stamp: int,
            headers: list[tuple[str, str]] | None) -> None:
        self.seqs.append(seq)
        self.subjects.append(subject)
        self.data.append(data)
        self.stamps.append(stamp)
        self.headers.append(headers)

    def __len__(self) -> int:
        return len(self.seqs)


def header_pairs(block: bytes, skip: frozenset[bytes] = frozenset()) -> list[tuple[str, str]]:
    """The (name, value) pairs of a headers block, in order, repeated names kept."""
    out = []
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.lower() not in skip:
            out.append((name.decode(errors="replace"), value.strip().decode(errors="replace")))
    return out


def _wanted(filters: tuple[str, ...], subject: str) -> bool:
    return not filters or any(subject_matches(f, subject) for f in filters)


class _Batch:
    """The answers to one direct get batch, parsed as they arrive (on the read path)."""

    def __init__(self, stream: str, cols: Columns, end: int, filters: tuple[str, ...],
                 min_time: int) -> None:
        self.stream, self.cols, self.end = stream, cols, end
        self.filters, self.min_time = filters, min_time
        self.batches: list[pa.RecordBatch] = []  # columnar replies, in order
        self.last = 0  # the last sequence answered
        self.status = b""  # the status that ended the batch (204 EOB, 404, ...)
        self.done = asyncio.Event()
        self.arrived = asyncio.Event()  # a columnar reply (or the end)

    def on_msg(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
               payload: bytes) -> None:
        if self.status:
            return
        if not hdr:
            if payload[:4] == bulk.MAGIC:
                self._columnar(payload)
            return
        if hdr[8:9] == b" ":  # "NATS/1.0 204 EOB", "NATS/1.0 404 Message Not Found", ...
            self.status = hdr[9:hdr.find(b"\r\n")] or b"?"
            self.done.set()
            self.arrived.set()
            return
        found = _DIRECT_HEADERS.search(hdr)
        if found is None:  # (not the headers both servers write: read them one by one)
            return self._by_lines(hdr, payload)
        subj, seq_text, stamp_text = found.groups()
        seq, stamp = int(seq_text), parse_time(stamp_text)
        own = found.start()  # the message's own headers come first
        extra = header_pairs(hdr[:own]) or None if own > 10 else None
        self.last = seq
        if seq > self.end or stamp < self.min_time:
            return
        subject_text = subj.decode(errors="replace")
        if len(self.filters) > 1 and not _wanted(self.filters, subject_text):
            return
        self.cols.add(seq, subject_text, payload, stamp, extra)

    def _columnar(self, reply: bytes) -> None:
        batch, self.last = columnar_batch(self.stream, reply, self.end, self.min_time)
        if len(self.filters) > 1:
            batch = batch.filter(pa.array([_wanted(self.filters, s)
                                           for s in batch.column(2).to_pylist()], pa.bool_()))
        self.batches.append(batch)
        self.arrived.set()

    def _by_lines(self, hdr: bytes, payload: bytes) -> None:
        fields: dict[bytes, bytes] = {}
        for line in hdr.split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                fields.setdefault(name.strip().lower(), value.strip())
        seq = int(fields.get(b"nats-sequence") or 0)
        self.last = seq
        stamp = parse_time(fields[b"nats-time-stamp"]) if b"nats-time-stamp" in fields else 0
        if seq > self.end or stamp < self.min_time:
            return
        subject_text = fields.get(b"nats-subject", b"").decode(errors="replace")
        if len(self.filters) > 1 and not _wanted(self.filters, subject_text):
            return
        self.cols.add(seq, subject_text, payload, stamp, header_pairs(hdr, _ADDED) or None)


async def read_direct(nc: Client, stream: str, start: int, end: int, filters: tuple[str, ...],
                      min_time: int, timeout: float,
        lost: asyncio.Future[ConnectionLost] | None = None
                      ) -> AsyncIterator[Columns | pa.RecordBatch]:
    """`start`..`end` through direct get batches (one filter asked of the server; more are
    applied here), in columns where the server answers so."""
    seq = start
    columnar = True  # (until the server answers message by message)
    while seq <= end:
        columnar_asked = columnar
        cols = Columns()
        batch = _Batch(stream, cols, end, filters, min_time)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, raw_cb=batch.on_msg)
        body: dict[str, Any] = {
            "seq": seq, "batch": min(COLUMNAR_BATCH if columnar_asked else DIRECT_BATCH,
                                     end - seq + 1),
            "max_bytes": DIRECT_BYTES}
        if len(filters) == 1:
            body["next_by_subj"] = filters[0]
        try:
            await nc.publish(f"{API}.DIRECT.GET.{stream}", json.dumps(body).encode(),
                             reply=inbox, headers=_COLUMNAR)
            while True:  # (columnar replies handed on as they come)
                try:
                    await _wait(batch.arrived, timeout, lost)
                except asyncio.TimeoutError:
                    raise JetStreamError(f"stream {stream!r}: no answer to a direct get of "
                                         f"{seq}..{end} within {timeout:g} s") from None
                batch.arrived.clear()
                while batch.batches:
                    yield batch.batches.pop(0)
                if batch.done.is_set():
                    break
        finally:
            await sub.unsubscribe()
        if not batch.status.startswith((b"404", b"204")):
            raise JetStreamError(f"stream {stream!r}: direct get of {seq}..{end} refused: "
                                 f"{batch.status.decode(errors='replace')}")
        columnar = columnar and not cols
        if cols:
            yield cols
        if batch.status.startswith(b"404") or not batch.last:
            return  # (nothing more at or after seq)
        seq = batch.last + 1


def _ack_fields(reply: bytes) -> tuple[int, int, int] | None:
    """(stream sequence, time ns, pending) of a delivery's `$JS.ACK...` reply."""
    tokens = reply.split(b".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[7]), int(tokens[8])
    if len(tokens) >= 11:  # with a domain and an account hash first (and a token after)
        return int(tokens[7]), int(tokens[9]), int(tokens[10])
    return None


class _Ordered:
    """An ordered push consumer's deliveries, parsed as they arrive."""

    def __init__(self, nc: Client, end: int, min_time: int) -> None:
        self.nc, self.end, self.min_time = nc, end, min_time
        self.cols = Columns()
        self.next = 0  # the next stream sequence expected at least
        self.finished = False
        self.wake = asyncio.Event()
        self.error: str | None = None

    def on_msg(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
               payload: bytes) -> None:
        if self.finished:
            return
        if reply is None or not reply.startswith(b"$JS.ACK."):
            if hdr and hdr.startswith(b"NATS/1.0 100"):
                if reply:  # flow control: answered at once
                    self.nc.publish_nowait(reply.decode(), b"")
                elif b"Nats-Consumer-Stalled" in hdr:
                    for name, value in header_pairs(hdr):
                        if name == "Nats-Consumer-Stalled":
                            self.nc.publish_nowait(value, b"")
            return
        fields = _ack_fields(reply)
        if fields is None:
            return
        seq, stamp, pending = fields
        if seq <= self.end and stamp >= self.min_time:
            extra = header_pairs(hdr) if hdr else None
            self.cols.add(seq, subject.decode(errors="replace"), payload, stamp, extra)
        self.next = seq + 1
        if seq >= self.end or pending == 0:
            self.finished = True
        if self.finished or len(self.cols) >= DIRECT_BATCH:
            self.wake.set()


async def read_consumer(nc: Client, stream: str, start: int, end: int,
                        filters: tuple[str, ...], min_time: int, timeout: float,
        lost: asyncio.Future[ConnectionLost] | None = None
                        ) -> AsyncIterator[Columns]:
    """`start`..`end` through an ordered ephemeral push consumer, deleted at the end."""
    inbox = nc.new_inbox()
    state = _Ordered(nc, end, min_time)
    sub = await nc.subscribe(inbox, raw_cb=state.on_msg)
    config: dict[str, Any] = {
        "deliver_subject": inbox, "deliver_policy": "by_start_sequence", "opt_start_seq": start,
        "ack_policy": "none", "max_deliver": 1, "flow_control": True,
        "idle_heartbeat": 5 * 10**9, "mem_storage": True, "num_replicas": 1,
        "inactive_threshold": int(max(timeout, 5) * 2 * 10**9)}
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    elif filters:
        config["filter_subjects"] = list(filters)
    name = ""
    try:
        created = await api(nc, f"CONSUMER.CREATE.{stream}",
                            {"stream_name": stream, "config": config}, timeout)
        name = created["name"]
        if int(created.get("num_pending") or 0) == 0:
            return
        while True:
            try:
                await _wait(state.wake, timeout, lost)
            except asyncio.TimeoutError:
                raise JetStreamError(f"stream {stream!r}: nothing delivered from sequence "
                                     f"{state.next or start} within {timeout:g} s "
                                     "(readTimeout)") from None
            state.wake.clear()
            cols, state.cols = state.cols, Columns()
            if cols:
                yield cols
            if state.finished:
                return
    finally:
        await sub.unsubscribe()
        if name:
            try:
                await api(nc, f"CONSUMER.DELETE.{stream}.{name}", None, timeout)
            except (JetStreamError, nats_errors.Error):
                pass  # (its inactive threshold removes it)


async def read_gets(nc: Client, stream: str, start: int, end: int, filters: tuple[str, ...],
                    min_time: int, timeout: float,
        lost: asyncio.Future[ConnectionLost] | None = None) -> AsyncIterator[Columns]:
    """`start`..`end` with STREAM.MSG.GET, GET_WINDOW requests in flight (a removed message
    is a 404, passed over)."""
    seq = start
    while seq <= end:
        upto = min(end, seq + DIRECT_BATCH - 1)
        cols = Columns()
        for lo in range(seq, upto + 1, GET_WINDOW):
            asked = range(lo, min(upto, lo + GET_WINDOW - 1) + 1)
            answers = await asyncio.gather(*(
                _get(nc, stream, n, timeout) for n in asked))
            for got in answers:
                if got is None:
                    continue
                subject, n, hdrs, data, stamp = got
                if stamp >= min_time and _wanted(filters, subject):
                    cols.add(n, subject, data, stamp, header_pairs(hdrs) if hdrs else None)
        if cols:
            yield cols
        seq = upto + 1


async def _get(nc: Client, stream: str, seq: int, timeout: float
               ) -> tuple[str, int, bytes | None, bytes, int] | None:
    try:
        return message_of_get(await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq},
                                        timeout))
    except JetStreamError as exc:
        if exc.code == 404:
            return None
        raise


def method_for(direct: bool, retention: str) -> str:
    """How a stream's ranges are read (see the module's docstring)."""
    if direct:
        return "direct"
    return "consumer" if retention == "limits" else "get"


READERS = {"direct": read_direct, "consumer": read_consumer, "get": read_gets}


def _batches(loop: asyncio.AbstractEventLoop, read: AsyncIterator[Columns | pa.RecordBatch],
             stream: str) -> Iterator[pa.RecordBatch]:
    """What a reader yields, as record batches."""
    while True:
        try:
            got = loop.run_until_complete(anext(read))
        except StopAsyncIteration:
            return
        if isinstance(got, Columns):
            got = stream_batch(stream, got.seqs, got.subjects, got.data, got.stamps,
                               got.headers)
        yield got


async def _wait(event: asyncio.Event, timeout: float,
                lost: asyncio.Future[ConnectionLost] | None) -> None:
    """`event` set; asyncio.TimeoutError after `timeout`, ConnectionLost as soon as `lost`
    is told (the connector's clients do not reconnect: nothing else would wake the wait)."""
    if lost is None:
        await asyncio.wait_for(event.wait(), timeout)
        return
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter, lost), timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if lost.done():
        raise lost.result()
    if not event.is_set():
        raise asyncio.TimeoutError


def columnar_batch(stream: str, reply: bytes, end: int, min_time: int
                   ) -> tuple[pa.RecordBatch, int]:
    """A record batch over a columnar reply's buffers (`tidings.jetstream.bulk`'s layout),
    its rows past `end` or stored before `min_time` left out, and the reply's last
    sequence. Only the headers of messages that have any are read in Python."""
    _, count, _, n_subjects, n_headers, n_data = bulk.HEADER.unpack_from(reply)
    buf = pa.py_buffer(reply)
    at = bulk.HEADER.size
    seqs = pa.Array.from_buffers(pa.int64(), count, [None, buf.slice(at, 8 * count)])
    stamps = pa.Array.from_buffers(pa.int64(), count,
                                   [None, buf.slice(at + 8 * count, 8 * count)])
    at += 16 * count
    width = 4 * (count + 1)
    values = at + 3 * width
    subjects = pa.Array.from_buffers(pa.string(), count, [
        None, buf.slice(at, width), buf.slice(values, n_subjects)])
    data = pa.Array.from_buffers(pa.binary(), count, [
        None, buf.slice(at + 2 * width, width),
        buf.slice(values + n_subjects + n_headers, n_data)])
    headers = None
    if n_headers:
        offsets = memoryview(reply)[at + width:at + 2 * width].cast("i")
        blocks = reply[values + n_subjects:values + n_subjects + n_headers]
        headers = [header_pairs(blocks[offsets[i]:offsets[i + 1]]) or None
                   if offsets[i + 1] > offsets[i] else None for i in range(count)]
    batch = stream_arrays_batch(stream, seqs, subjects, data, stamps, headers)
    last = seqs[-1].as_py() if count else 0
    keep = pc.less_equal(seqs, pa.scalar(end, pa.int64())) if last > end else None
    if min_time and count and pc.min(stamps).as_py() < min_time:
        late = pc.greater_equal(stamps, pa.scalar(min_time, pa.int64()))
        keep = late if keep is None else pc.and_(keep, late)
    return (batch if keep is None else batch.filter(keep)), last


def read_stream_partition(part: Any) -> Iterator[pa.RecordBatch]:
    """A partition of a stream (`part`: reader.NatsPartition) as record batches of at most
    `batchSize` rows, each sequence once. A lost connection is resumed after the last
    sequence handed to Spark; one that cannot be made again fails naming the servers."""
    rng, params = part.range, part.params
    if rng.end < rng.start:
        return
    loop = asyncio.new_event_loop()
    conn = NatsConnection(part.copts, "r")
    losses = Losses()
    expected = rng.start
    try:
        while True:
            try:
                gone: asyncio.Future[ConnectionLost] = loop.create_future()
                conn.on_lost.append(lambda err, gone=gone: gone.done() or gone.set_result(err))
                loop.run_until_complete(conn.connect_nats())
                read = READERS[part.hint or "get"](
                    conn.nc, rng.channel, expected, rng.end, part.subjects, part.min_time,
                    params.read_timeout, gone)
                try:
                    for batch in regrouped(_batches(loop, read, rng.channel),
                                           params.batch_size):
                        yield batch
                        expected = batch.column(1)[-1].as_py() + 1
                    return
                finally:
                    with contextlib.suppress(nats_errors.Error):  # (a connection gone)
                        loop.run_until_complete(read.aclose())
            except (StanError, nats_errors.Error, OSError) as exc:
                lost = conn.check(exc)
                if not isinstance(lost, ConnectionLost):
                    raise
                losses.lost(expected, lost)
                loop.run_until_complete(conn.close())
                conn = NatsConnection(part.copts, "r")
    finally:
        try:
            loop.run_until_complete(conn.close())
        finally:
            loop.close()
