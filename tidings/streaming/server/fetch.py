"""Bulk range fetch: a tidings extension that hands out a run of stored messages in one reply.

Request subject ``_TIDINGS.fetch.<cluster_id>``; the request is JSON
``{"channel": str, "start": int, "end": int, "max_bytes": int}`` (``end`` inclusive,
``max_bytes`` optional). The reply is one NATS message in a columnar little-endian layout::

    header (40 bytes): magic b"TFR1", status u32, count u32, flags u32,
                       first i64, last i64, next i64
    count  x i64  sequences
    count  x i64  timestamps (Unix ns)
    count+1 x i32 offsets into the payload area (offsets[0] == 0)
    payloads, concatenated

``status`` is 0 (ok), 1 (bad request), 2 (unknown channel), 3 (a single message does not
fit in max_payload) or 4 (the store could not be read: its database is away); when it is not 0,
``count`` is 0
and the bytes after the header are the UTF-8 error text. ``first``/``last`` are the channel's
stored bounds (0 when it holds nothing; ``last`` counts only messages already acknowledged to
their publishers, those that are durable), ``next`` the sequence to ask for next (greater than
``end`` once the range is exhausted). ``flags`` bit 0 (``CLIPPED``) says the requested start was
below the channel's first sequence (messages removed by limits) and the run starts at ``first``.
The reply never exceeds ``max_bytes`` nor the server's max_payload, except that it always holds
at least one message when one is available. Read-only: it creates no channel and touches no
subscription.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Callable
from itertools import accumulate
from operator import itemgetter

from ..stores import Store
from .state import is_channel_name_valid

FETCH_PREFIX = "_TIDINGS.fetch"
MAGIC = b"TFR1"
HEADER = struct.Struct("<4sIIIqqq")
PER_MSG = 20  # bytes a message costs besides its payload: sequence, timestamp, offset
OK, BAD_REQUEST, UNKNOWN_CHANNEL, TOO_LARGE, UNAVAILABLE = 0, 1, 2, 3, 4
CLIPPED = 1

_seq, _stamp, _data = itemgetter(0), itemgetter(1), itemgetter(4)
_BIG_ENDIAN = sys.byteorder == "big"


def fetch_subject(cluster_id: str) -> str:
    return f"{FETCH_PREFIX}.{cluster_id}"


def error_reply(status: int, text: str) -> bytes:
    return HEADER.pack(MAGIC, status, 0, 0, 0, 0, 0) + text.encode()


def _parse(data: bytes) -> tuple[str, int, int, int]:
    """channel, start, end, max_bytes of a request; ValueError with the reason."""
    try:
        req = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to decode
        raise ValueError("request is not JSON") from None
    if not isinstance(req, dict):
        raise ValueError("request must be a JSON object")
    channel = req.get("channel")
    if not isinstance(channel, str) or not is_channel_name_valid(channel):
        raise ValueError(f"invalid channel name: {channel!r}")
    values = []
    for key, default in (("start", None), ("end", None), ("max_bytes", 1 << 20)):
        value = req.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        values.append(value)
    start, end, max_bytes = values
    if start < 1:
        raise ValueError(f"start must be >= 1, got {start}")
    if end < start:
        raise ValueError(f"start ({start}) > end ({end})")
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    return channel, start, end, max_bytes


def _fit(cum: list[int], room: int) -> int:
    """The largest k with cum[k-1] + PER_MSG * k <= room (binary search, cum ascending)."""
    lo, hi = 0, len(cum)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cum[mid - 1] + PER_MSG * mid <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def handle_fetch(store: Store, data: bytes, max_payload: int,
                 durable_last: Callable[[str], int]) -> bytes:
    """The reply to one fetch request.

    Only messages up to ``durable_last(channel)`` are read: a message not yet synced may
    still be rolled back, and one that was never acknowledged must not be handed out.
    """
    try:
        channel, start, end, max_bytes = _parse(data)
    except ValueError as exc:
        return error_reply(BAD_REQUEST, str(exc))
    if not store.has_channel(channel):
        return error_reply(UNKNOWN_CHANNEL, f"unknown channel: {channel!r}")
    first, last = store.first_last(channel)
    last = min(last, durable_last(channel))
    if last < first or last == 0:
        first = last = 0
    flags = 0
    pos = start
    if first and pos < first:
        pos, flags = first, CLIPPED
    hi = min(end, last)
    room = min(max_bytes, max_payload) - HEADER.size - 4  # offsets[0]
    records: list = []
    sizes: list[int] = []
    # Read about as many messages as fit (judged by the channel's mean size): a message read
    # and left out is read again by the next request.
    info = store.channel_info(channel)
    mean = info.bytes // info.msgs if info.msgs else 0
    while pos <= hi and room > 0:
        want = min(hi - pos + 1, max(1, room // PER_MSG), room // (PER_MSG + mean) + 16)
        chunk = store.get_rows(channel, pos, want)
        if not chunk:
            break
        lens = list(map(len, map(_data, chunk)))
        cum = list(accumulate(lens))
        k = _fit(cum, room)
        if k == 0 and not records:
            k = 1  # one message always goes, whatever its size
        if k == 0:
            break
        if k < len(chunk):
            records.extend(chunk[:k])
            sizes.extend(lens[:k])
        else:
            records.extend(chunk)
            sizes.extend(lens)
        room -= cum[k - 1] + PER_MSG * k
        pos = chunk[k - 1][0] + 1
        if k < len(chunk):
            break
        mean = cum[-1] // len(chunk)
    n = len(records)
    seqs = array("q", map(_seq, records))
    stamps = array("q", map(_stamp, records))
    payloads = map(_data, records)
    offsets = array("i", [0])
    offsets.extend(accumulate(sizes))
    if _BIG_ENDIAN:
        for arr in (seqs, stamps, offsets):
            arr.byteswap()
    nxt = pos if n == 0 else records[-1][0] + 1
    head = HEADER.pack(MAGIC, OK, n, flags, first, last, nxt)
    reply = b"".join((head, seqs.tobytes(), stamps.tobytes(), offsets.tobytes(), *payloads))
    if len(reply) > max_payload:
        return error_reply(TOO_LARGE, f"message {records[0][0]} of channel {channel!r} does "
                                      f"not fit in a reply of max_payload {max_payload} bytes")
    return reply
