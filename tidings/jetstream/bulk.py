"""Columnar direct get batches: a tidings extension that answers a direct get batch with a
few messages holding many stored messages each, instead of a message for each.

A direct get batch (`$JS.API.DIRECT.GET.<stream>` with `{"seq", "batch"[, "max_bytes",
"next_by_subj"]}`) that carries the request header `Tidings-Columnar: 1` is answered by
header-less messages in the layout below, then the same `204 EOB` status (with
`Nats-Num-Pending` and `Nats-Last-Sequence`) or `404 Message Not Found` as a batch that
does not. The reference ignores the header and answers message by message: a reader that
asks with it reads both. Little-endian::

    header (24 bytes): magic b"TJB1", count u32, flags u32 (0),
                       subject bytes u32, header bytes u32, data bytes u32
    count x i64   stream sequences
    count x i64   timestamps (Unix ns)
    count+1 x i32 offsets of each subject (offsets[0] == 0), then of each header block
                  (b"" for a message without headers), then of each payload
    the subjects (UTF-8), the header blocks ("NATS/1.0\\r\\n..." as stored), the payloads

A message of the batch holds about `CHUNK_BYTES` of stored bytes (one at least); the batch
ends at `batch` messages or `max_bytes` (the request's, else the server's max_pending), as
a direct get batch does. Sans-IO: the caller sends each reply the iterator gives, one loop
turn apart, so that a large batch does not hold the server for others.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from ..protocol.subjects import subject_matches
from .direct import Reply, status
from .direct import _pending as pending_from
from .memstore import Run

HEADER_NAME = b"Tidings-Columnar"
MAGIC = b"TJB1"
HEADER = struct.Struct("<4sIIIII")
CHUNK_BYTES = 384 * 1024  # as the streaming bulk fetch: larger replies cost the server more
PER_MSG = 28  # bytes a message costs besides its own: sequence, time, three offsets
_BIG_ENDIAN = sys.byteorder == "big"
_BATCH_FIELDS = frozenset(("seq", "batch", "max_bytes", "next_by_subj"))


def wanted(headers: bytes | None) -> bool:
    """The request asked for columnar replies."""
    return bool(headers) and HEADER_NAME + b": 1" in headers  # type: ignore[operator]


def request_of(payload: bytes) -> dict[str, Any] | None:
    """The direct get in `payload` if it is a plain batch (`seq`, `batch`, optionally
    `max_bytes` and `next_by_subj`), the one form answered in columns; None: any other
    (answered as the reference answers it)."""
    try:
        req = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(req, dict) or set(req) - _BATCH_FIELDS:
        return None
    numbers = [req.get(k, 0) for k in ("seq", "batch", "max_bytes")]
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numbers):
        return None
    after = req.get("next_by_subj")
    if after is not None and not isinstance(after, str):
        return None
    return req if numbers[0] > 0 and numbers[1] > 0 else None


def answer(stream: Any, req: dict[str, Any], max_pending: int, max_payload: int
           ) -> Iterator[Reply]:
    """The replies to a columnar batch request of `stream` (`req`: from `request_of`): the
    messages a plain batch holds (`max_bytes` counted as it counts it), in replies within
    `CHUNK_BYTES` and `max_payload` unless one message alone is larger."""
    store = stream.store
    seq, count = int(req["seq"]), int(req["batch"])
    limit = int(req.get("max_bytes") or 0) or max_pending
    filt = str(req.get("next_by_subj") or ">")
    matches = None if filt == ">" else (lambda subject: subject_matches(filt, subject))
    room = min(CHUNK_BYTES, max_payload) - HEADER.size - 4 * 3
    stored = total = last = 0
    while total < count and stored < limit:
        run, size = _within(store.scan(seq, store.last_seq, room, matches, PER_MSG),
                            count - total, limit - stored)
        if not run.seqs:
            break
        seq = run.next
        total += len(run.seqs)
        stored += size
        last = run.seqs[-1]
        yield b"", encode(run)
    if not total:
        yield status("404 Message Not Found")
        return
    pending = pending_from(store, filt, seq)
    yield status("204 EOB", f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n")


def _within(run: Run, most: int, left: int) -> tuple[Run, int]:
    """`run` cut to `most` messages and to the one whose bytes reach `left` (a plain batch
    stops after the message that reaches its max_bytes); and its bytes."""
    if len(run.seqs) <= most and run.size < left:
        return run, run.size
    sizes = [len(s) + len(h) + len(d)
             for s, h, d in zip(run.subjects, run.headers, run.data, strict=True)][:most]
    reached = next((i + 1 for i, total in enumerate(accumulate(sizes)) if total >= left),
                   len(sizes))
    cut = Run(*(column[:reached] for column in run[:5]), next=run.seqs[reached - 1] + 1)
    return cut, sum(sizes[:reached])


def encode(run: Run) -> bytes:
    """One reply holding `run` (the module's layout)."""
    count = len(run.seqs)
    columns = [array("q", run.seqs), array("q", run.stamps)]
    columns += [_offsets(run.subjects), _offsets(run.headers),
                array("i", accumulate(map(len, run.data), initial=0))]
    if _BIG_ENDIAN:
        for column in columns:
            column.byteswap()
    sizes = [columns[k][-1] for k in (2, 3, 4)]
    return b"".join((HEADER.pack(MAGIC, count, 0, *sizes), *(c.tobytes() for c in columns),
                     b"".join(run.subjects), b"".join(run.headers), b"".join(run.data)))


def _offsets(values: list[bytes]) -> array[int]:
    """Where each subject (or header block) starts, and the end. (Most runs are of one
    subject, and of messages without headers: all of the same length, counted without a
    step per value.)"""
    first, n = values[0], len(values)
    if values.count(first) == n:  # (the same object, mostly: compared by identity)
        size = len(first)
        return array("i", range(0, (n + 1) * size, size)) if size else array("i", bytes(4 * (n + 1)))
    return array("i", accumulate(map(len, values), initial=0))
