"""Encoders for every NATS client and server operation. Subjects and sids are bytes."""

from __future__ import annotations

import json
from typing import Any

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"
CRLF = b"\r\n"


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# -- client → server ---------------------------------------------------------
def connect(options: dict[str, Any]) -> bytes:
    return b"CONNECT " + _json(options) + CRLF


def pub(subject: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    if reply:
        return b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(payload), payload)
    return b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload)


def hpub(subject: bytes, headers: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    hl = len(headers)
    tl = hl + len(payload)
    if reply:
        return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject, reply, hl, tl, headers, payload)
    return b"HPUB %s %d %d\r\n%s%s\r\n" % (subject, hl, tl, headers, payload)


def sub(subject: bytes, sid: bytes, queue: bytes | None = None) -> bytes:
    if queue:
        return b"SUB %s %s %s\r\n" % (subject, queue, sid)
    return b"SUB %s %s\r\n" % (subject, sid)


def unsub(sid: bytes, max_msgs: int | None = None) -> bytes:
    if max_msgs:
        return b"UNSUB %s %d\r\n" % (sid, max_msgs)
    return b"UNSUB %s\r\n" % sid


# -- server → client ---------------------------------------------------------
def info(fields: dict[str, Any]) -> bytes:
    return b"INFO " + _json(fields) + CRLF


def err(message: str) -> bytes:
    return b"-ERR '" + message.encode() + b"'\r\n"


def msg(subject: bytes, sid: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    if reply:
        return b"MSG %s %s %s %d\r\n%s\r\n" % (subject, sid, reply, len(payload), payload)
    return b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(payload), payload)


def hmsg(
    subject: bytes, sid: bytes, headers: bytes, payload: bytes, reply: bytes | None = None
) -> bytes:
    hl = len(headers)
    tl = hl + len(payload)
    if reply:
        return b"HMSG %s %s %s %d %d\r\n%s%s\r\n" % (subject, sid, reply, hl, tl, headers, payload)
    return b"HMSG %s %s %d %d\r\n%s%s\r\n" % (subject, sid, hl, tl, headers, payload)
