"""JetStream's direct gets (`$JS.API.DIRECT.GET.<stream>[.<subject>]`), answered as the
reference's stream answers them: a message by sequence, the first on a subject from a
sequence, the first at a time, the last on a subject; batches (`batch`, `max_bytes`) and
the last of several subjects (`multi_last`, `up_to_seq`, `up_to_time`), each message
with its Nats-Stream/-Subject/-Sequence/-Time-Stamp headers (and -Num-Pending /
-Last-Sequence in a batch), a batch ended by a `204 EOB` status; refusals as statuses
(408 Empty Request, Malformed Request, Bad Request; 404 Message Not Found, No Results;
413 Too Many Results). Sans-IO: the caller sends what `answer` returns."""

from __future__ import annotations

import json
from typing import Any

from ..protocol.headers import replace_header
from ..protocol.subjects import subject_matches
from ..server.gojson import go_time, parse_go_time
from .memstore import StoredMsg
from .stream import last_on, next_on

MAX_MULTI = 1024  # messages a multi_last get answers at most (the reference's)

Reply = tuple[bytes, bytes]  # headers, payload


def status(line: str, extra: str = "") -> Reply:
    return f"NATS/1.0 {line}\r\n{extra}\r\n".encode(), b""


def answer(stream: Any, key: str | None, payload: bytes, max_pending: int) -> list[Reply]:
    """What a direct get of `stream` answers (`key`: the subject of the last-by-subject
    form, in the request's subject)."""
    body = payload.strip()
    if key is not None:
        return _last_by_key(stream, key, body)
    if not body:
        return [status("408 Empty Request")]
    try:
        req = json.loads(body)
    except ValueError:
        return [status("408 Malformed Request")]
    if not isinstance(req, dict):
        return [status("408 Malformed Request")]
    seq, last, after = int(req.get("seq") or 0), req.get("last_by_subj"), req.get("next_by_subj")
    multi, start = req.get("multi_last") or [], req.get("start_time")
    batch = int(req.get("batch") or 0)
    if not (seq or last or after or multi or start):
        return [status("408 Empty Request")]
    if ((seq and last) or (seq and start) or (start and last) or (last and after)
            or (last and batch) or (last and multi) or (after and multi)
            or (req.get("up_to_seq") and req.get("up_to_time"))):
        return [status("408 Bad Request")]
    limit = int(req.get("max_bytes") or 0) or max_pending
    if multi:
        return _multi_last(stream, req, [str(m) for m in multi], seq, limit)
    if start:
        seq = stream.store.first_at(parse_go_time(str(start)))
    return _batch(stream, req, seq, last, after, batch, limit)


def _last_by_key(stream: Any, key: str, body: bytes) -> list[Reply]:
    if body:
        try:
            req = json.loads(body)
        except ValueError:
            return [status("408 Malformed Request")]
        if isinstance(req, dict) and any(req.get(k) for k in (
                "last_by_subj", "next_by_subj", "multi_last", "seq", "batch", "start_time",
                "up_to_seq", "up_to_time")):
            return [status("408 Bad Request")]
    msg = last_on(stream.store, key)
    if msg is None:
        return [status("404 Message Not Found")]
    return [(_headers(stream.name, msg), msg.data)]


def _batch(stream: Any, req: dict[str, Any], seq: int, last: Any, after: Any, batch: int,
           limit: int) -> list[Reply]:
    store = stream.store
    if last:
        msg = last_on(store, str(last))
        if msg is None:
            return [status("404 Message Not Found")]
        return [(_headers(stream.name, msg, no_headers=req.get("no_hdr")), msg.data)]
    filt = str(after) if after else ">"
    if not batch:
        msg = store.get(seq) if seq and not after else next_on(store, filt, seq)
        if msg is None:
            return [status("404 Message Not Found")]
        return [(_headers(stream.name, msg, no_headers=req.get("no_hdr")), msg.data)]
    pending = _pending(store, filt, seq)
    out: list[Reply] = []
    sent, last_seq = 0, 0
    for _ in range(batch):
        msg = next_on(store, filt, seq)
        if msg is None:
            break
        seq = msg.seq + 1
        pending = max(0, pending - 1)
        out.append((_headers(stream.name, msg, pending, last_seq, req.get("no_hdr")),
                    msg.data))
        last_seq = msg.seq
        sent += len(msg.subject) + len(msg.headers or b"") + len(msg.data)
        if sent >= limit:
            break
    if not out:
        return [status("404 Message Not Found")]
    out.append(status("204 EOB", f"Nats-Num-Pending: {pending}\r\n"
                                 f"Nats-Last-Sequence: {last_seq}\r\n"))
    return out


def _multi_last(stream: Any, req: dict[str, Any], filters: list[str], start: int,
                limit: int) -> list[Reply]:
    store = stream.store
    up_to = int(req.get("up_to_seq") or 0)
    if req.get("up_to_time"):
        up_to = store.first_at(parse_go_time(str(req["up_to_time"])))
        if up_to <= store.first_seq:
            return [status("404 No Results")]
        up_to -= 1
    up_to = up_to or store.last_seq
    found: list[StoredMsg] = []
    for subject in list(store.subjects):
        if not any(subject_matches(f, subject) for f in filters):
            continue
        msg = _last_upto(store, subject, up_to)
        if msg is not None and msg.seq >= start:
            found.append(msg)
    if len(found) > MAX_MULTI:
        return [status("413 Too Many Results")]
    if not found:
        return [status("404 No Results")]
    found.sort(key=lambda m: m.seq)
    out: list[Reply] = []
    batch, sent, last_seq = int(req.get("batch") or 0), 0, 0
    for n, msg in enumerate(found):
        pending = len(found) - n - 1
        out.append((_headers(stream.name, msg, pending, last_seq), msg.data))
        last_seq = msg.seq
        sent += len(msg.subject) + len(msg.headers or b"") + len(msg.data)
        if sent >= limit or (batch and n + 1 >= batch):
            break
    out.append(status("204 EOB", f"Nats-Num-Pending: {len(found) - len(out)}\r\n"
                                 f"Nats-Last-Sequence: {last_seq}\r\n"
                                 f"Nats-UpTo-Sequence: {up_to}\r\n"))
    return out


_PLAIN = ("NATS/1.0\r\nNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
          "Nats-Time-Stamp: %s\r\n\r\n")
_PLAIN_PENDING = ("NATS/1.0\r\nNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
                  "Nats-Time-Stamp: %s\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n"
                  "\r\n")


def _headers(stream: str, msg: StoredMsg, pending: int | None = None, last_seq: int = 0,
             no_headers: Any = False) -> bytes:
    if no_headers:
        return b""
    if not msg.headers:  # (most messages: one formatting, no header block to edit)
        if pending is None:
            return (_PLAIN % (stream, msg.subject, msg.seq,
                              go_time(msg.ts, utc=True))).encode()
        return (_PLAIN_PENDING % (stream, msg.subject, msg.seq, go_time(msg.ts, utc=True),
                                  pending, last_seq)).encode()
    block = msg.headers
    fields = [("Nats-Stream", stream), ("Nats-Subject", msg.subject),
              ("Nats-Sequence", str(msg.seq)), ("Nats-Time-Stamp", go_time(msg.ts, utc=True))]
    if pending is not None:
        fields += [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last_seq))]
    for name, value in fields:
        block = replace_header(block, name, value)
    return block


def _pending(store: Any, subject: str, seq: int) -> int:
    if subject == ">":
        return int(store.count_from(seq))
    return sum(1 for _ in store.matching(max(seq, 1), lambda s: subject_matches(subject, s)))


def _last_upto(store: Any, subject: str, up_to: int) -> StoredMsg | None:
    msg = store.last_for(subject)
    if msg is None or msg.seq <= up_to:
        return msg  # type: ignore[no-any-return]
    for seq in range(up_to, store.first_seq - 1, -1):
        found = store.get(seq)
        if found is not None and found.subject == subject:
            return found  # type: ignore[no-any-return]
    return None
