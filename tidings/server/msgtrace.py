"""Message tracing as in nats-server 2.11: a message with a `Nats-Trace-Dest` header makes the
server publish a JSON trace event to that subject, listing the ingress, the subject mapping
that sent it on (if one applied) and every egress.

`Nats-Trace-Only: true` (or 1, on, in any case) traces without delivering. Only messages whose
header block contains the bytes `Nats-Trace-Dest` come here (see ClientConnection.on_hpub),
so untraced traffic never pays for parsing. A client may only trace to a destination its
publish permissions let it publish to; otherwise the whole message is refused, as by the
reference. The W3C `traceparent` header triggers tracing in the reference only through an
account's trace destination; tidings has no accounts, so it is ignored, as by a reference
server without that configuration.
"""

from __future__ import annotations

import gzip
import logging
import time
from typing import TYPE_CHECKING, Any

from ..protocol.subjects import is_valid_literal_subject, is_valid_subject
from .connection import Headerless, msg_frame
from .gojson import go_json, go_time
from .server import NATS_VERSION

if TYPE_CHECKING:
    from .client import ClientConnection
    from .connection import Frame
    from .server import Server
    from .sublist import Subscription

log = logging.getLogger("tidings.server")

TRACE_DEST = b"Nats-Trace-Dest"
TRACE_ONLY = "Nats-Trace-Only"
ORIGIN_ACCOUNT = "Nats-Trace-Origin-Account"
ACCEPT_ENCODING = "Accept-Encoding"
# A value the reference writes into Nats-Trace-Dest to switch tracing off downstream.
DEST_DISABLED = b"trace disabled"
HDR_LINE = b"NATS/1.0\r\n"
RESERVED_DESTS = ("_GR_.", "$NRG.")

KIND_CLIENT = 0  # the reference's connection kind for clients

# Egress errors, in the reference's words.
ERR_NO_ECHO = "Not delivered because of no echo"
ERR_SUB_CLOSED = "Not delivered because subscription is closed"
ERR_CLIENT_CLOSED = "Not delivered because client is closed"

_TRUE = ("1", "true", "on")


def trace_headers(hdr: bytes) -> dict[str, list[str]] | None:
    """The header block as {name: [values]} when it asks for tracing (a non-empty
    Nats-Trace-Dest other than "trace disabled"), else None.

    Parsed as the reference does: names keep their case and are not trimmed, values are
    trimmed of blanks, pairs with an empty name or value are left out, and a block that does
    not start with the plain "NATS/1.0" line (a status line, say) is never traced."""
    if not hdr.startswith(HDR_LINE):
        return None
    pairs: list[tuple[bytes, bytes]] = []
    found = False
    i, end = len(HDR_LINE), len(hdr)
    while i < end:
        colon = hdr.find(b":", i)
        if colon < 0:
            break
        key = hdr[i:colon]
        i = colon + 1
        while i < end and hdr[i] in b" \t":
            i += 1
        nl = hdr.find(b"\r\n", i)
        if nl < 0:
            break
        val = hdr[i:nl].rstrip(b" \t")
        if key and val:
            if not found and key == TRACE_DEST:
                if val == DEST_DISABLED:
                    return None
                found = True
            pairs.append((key, val))
        i = nl + 2
    if not found:
        return None
    headers: dict[str, list[str]] = {}
    for key, val in pairs:
        headers.setdefault(key.decode("utf-8", "replace"), []).append(
            val.decode("utf-8", "replace"))
    return headers


def disable_trace(hdr: bytes) -> bytes:
    """The header block with every Nats-Trace-Dest line replaced by one `Nats-Trace-Dest:
    trace disabled` at its end, as the reference rewrites a message it refuses to trace."""
    body = hdr[:-2]  # the block ends with an empty line
    if body.endswith(b"\r\n"):
        body = body[:-2]
    lines = body.split(b"\r\n")
    kept = [line for line in lines[1:] if not line.startswith(TRACE_DEST + b":")]
    kept.append(TRACE_DEST + b": " + DEST_DISABLED)
    return b"\r\n".join([lines[0], *kept, b"", b""])


class MsgTrace:
    """The trace of one published message; `deliver` stands in for Server.deliver."""

    __slots__ = ("server", "dest", "only", "encoding", "event", "events", "account")

    def __init__(
        self, server: Server, pub: ClientConnection, subject: bytes, dest: str, only: bool,
        headers: dict[str, list[str]], size: int,
    ) -> None:
        self.server = server
        self.account = pub.account  # the events go to its subjects
        self.dest = dest
        self.only = only
        self.encoding = headers.get(ACCEPT_ENCODING, [""])[0].lower()
        ingress: dict[str, Any] = {"type": "in", "ts": go_time(time.time_ns()),
                                   "kind": KIND_CLIENT, "cid": pub.cid}
        if pub.name:
            ingress["name"] = pub.name
        ingress["acc"] = pub.account.name
        ingress["subj"] = subject.decode("utf-8", "replace")
        self.events: list[dict[str, Any]] = [ingress]
        request: dict[str, Any] = {"header": dict(sorted(headers.items()))}
        if size:
            request["msgsize"] = size
        self.event = {"server": None, "request": request, "events": self.events}

    def mapped(self, subject: bytes) -> None:
        """A subject mapping sent the message on to `subject` (the reference's "sm" event,
        also when the mapping left the subject as it was)."""
        self.events.append({"type": "sm", "ts": go_time(time.time_ns()),
                            "to": subject.decode("utf-8", "replace")})

    def _egress(self, sub: Subscription, error: str = "") -> None:
        client = sub.client
        egress: dict[str, Any] = {"type": "eg", "ts": go_time(time.time_ns()),
                                  "kind": KIND_CLIENT, "cid": client.cid}
        if client.name:
            egress["name"] = client.name
        egress["sub"] = sub.subject.decode("utf-8", "replace")
        if sub.queue:
            egress["queue"] = sub.queue.decode("utf-8", "replace")
        if error:
            egress["error"] = error
        self.events.append(egress)

    def deliver(
        self, pub: ClientConnection, sub: Subscription, frame: Frame,
        plain_frame: Headerless | None
    ) -> bool:
        """Deliver (unless trace-only) and record the egress, checks in the reference's order.
        A trace-only message counts as delivered (a queue group stops at its first member)."""
        client = sub.client
        if client is pub and not pub.echo:
            self._egress(sub, ERR_NO_ECHO)
            return False
        if sub.closed:
            self._egress(sub, ERR_SUB_CLOSED)
            return False
        if self.only:
            self._egress(sub)
            return True
        if client.closed:
            self._egress(sub, ERR_CLIENT_CLOSED)
            return False
        delivered = self.server.deliver(pub, sub, frame, plain_frame)  # (-V logs it)
        if delivered:
            self._egress(sub)
        return delivered

    def fail(self, error: str) -> None:
        """The message was refused at its ingress with `error`: send the event now."""
        self.events[0]["error"] = error
        self.send()

    def send(self) -> None:
        """Publish the trace event to its destination, as the server's own message."""
        server = self.server
        server.trace_seq += 1
        self.event["server"] = {
            "name": server.name, "host": server.options.host, "id": server.server_id,
            "ver": NATS_VERSION, "jetstream": False, "flags": 0,
            "seq": server.trace_seq, "time": go_time(time.time_ns(), utc=True),
        }
        body = go_json(self.event)
        dest = self.dest.encode()
        encoding = _content_encoding(self.encoding)
        if encoding is None:
            frame = msg_frame(b"MSG ", dest, None, body)
            server.route(None, dest, None, frame, None, None, self.account)
            return
        if encoding == "gzip":
            body = gzip.compress(body)
        elif encoding == "snappy":
            body = snappy_framed(body)
        hdr = b"NATS/1.0\r\nContent-Encoding: %s\r\n\r\n" % encoding.encode()
        data = hdr + body
        server.route(
            None, dest, None,
            msg_frame(b"HMSG ", dest, None, data, len(hdr)),
            Headerless(dest, None, data, len(hdr)),
            None, self.account,
        )


def _content_encoding(accept: str) -> str | None:
    """How the event is sent for a (lower-cased) Accept-Encoding value, as the reference
    chooses: None (plain), "snappy", "gzip" or "identity" (an encoding nobody offers)."""
    if not accept:
        return None
    if "snappy" in accept or "s2" in accept:
        return "snappy"
    if "gzip" in accept:
        return "gzip"
    return "identity"


_SNAPPY_STREAM = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_CHUNK = 65536  # the most data one chunk may carry
_crc32c_table: list[int] = []


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as the snappy framing format checksums its chunks."""
    if not _crc32c_table:
        for n in range(256):
            for _ in range(8):
                n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1
            _crc32c_table.append(n)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _crc32c_table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def snappy_framed(data: bytes) -> bytes:
    """`data` as a snappy framed stream (what the reference's s2 writer produces in its
    snappy-compatible mode), made of uncompressed-data chunks: any snappy reader decodes it,
    and tidings needs no compression codec. Events are small; this is not about size."""
    out = [_SNAPPY_STREAM]
    for start in range(0, len(data), _SNAPPY_CHUNK):
        chunk = data[start:start + _SNAPPY_CHUNK]
        crc = _crc32c(chunk)
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        size = len(chunk) + 4
        out.append(bytes((1, size & 0xFF, size >> 8 & 0xFF, size >> 16)))
        out.append(masked.to_bytes(4, "little") + chunk)
    return b"".join(out)


def trace_refused(
    client: ClientConnection, subject: bytes, hdr: bytes, size: int, error: str
) -> None:
    """Send the trace event of a message refused before routing: its ingress, with `error`."""
    traced = start_trace(client, subject, len(hdr), hdr, size)
    if traced is not None and traced[2] is not None:
        traced[2].fail(error)


def may_trace_to(client: ClientConnection, dest: str) -> bool:
    """Whether `client` may have trace events sent to `dest`, as the reference decides: never
    to the reserved prefixes (gateway replies, Raft traffic), and only where its publish
    permissions let it publish (the lists: a reply it was sent does not count)."""
    if dest.startswith(RESERVED_DESTS):
        return False
    rights = client.rights
    return rights is None or not rights.limits_publish or rights.may_publish(dest.encode())


def start_trace(
    client: ClientConnection, subject: bytes, hdr_len: int, data: bytes, size: int = -1
) -> tuple[int, bytes, MsgTrace | None] | None:
    """For an HPUB whose header block mentions Nats-Trace-Dest, what to route, as the
    reference decides: (hdr_len, data, trace), with trace None to deliver untraced (and the
    headers possibly rewritten), or None to drop the message (trace-only to a destination
    that cannot be traced to). `size` is the message's size when `data` is not all of it."""
    headers = trace_headers(data[:hdr_len])
    if headers is None:
        return hdr_len, data, None
    only = headers.get(TRACE_ONLY, [""])[0].lower() in _TRUE
    dest = headers[TRACE_DEST.decode()][0]
    origin = headers.get(ORIGIN_ACCOUNT)
    if origin:
        log.error("cid=%d message tracing disabled because of header %r with value=%r",
                  client.cid, ORIGIN_ACCOUNT, origin[0])
        if only:
            return None
        hdr = disable_trace(data[:hdr_len])
        return len(hdr), hdr + data[hdr_len:], None
    if not (is_valid_subject(dest) and is_valid_literal_subject(dest)):
        log.error("cid=%d destination %r is not valid, won't be able to trace events",
                  client.cid, dest)
        return None if only else (hdr_len, data, None)
    if not may_trace_to(client, dest):
        client.publish_refused(dest.encode())
        return None  # the whole message dropped, not only its trace
    size = len(data) if size < 0 else size
    trace = MsgTrace(client.server, client, subject, dest, only, headers, size)
    return hdr_len, data, trace
