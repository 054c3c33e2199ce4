"""One client connection on the server: protocol handler, routing of its publishes, limits.

Outbound bytes are collected per connection in `out` and written once per read of the
publisher (see Server.flush), so a burst of messages costs one socket write per receiver.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from ..protocol import encode
from ..protocol.errors import (
    AUTHENTICATION_TIMEOUT,
    AUTHORIZATION_VIOLATION,
    INVALID_CLIENT_PROTOCOL,
    INVALID_SUBJECT,
    NO_RESPONDERS_REQUIRES_HEADERS,
    STALE_CONNECTION,
    ProtocolError,
)
from ..protocol.parser import ClientOpParser
from ..protocol.subjects import is_valid_subscription
from ..turns import InputBudget
from . import flow
from .sublist import EMPTY_RESULT, Subscription

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("tidings.server")

OK = encode.OK
PING = encode.PING
PONG = encode.PONG

# CONNECT fields and the JSON types the reference accepts for them.
_CONNECT_TYPES: dict[str, type | tuple[type, ...]] = {
    "verbose": bool,
    "pedantic": bool,
    "tls_required": bool,
    "echo": bool,
    "headers": bool,
    "no_responders": bool,
    "protocol": int,
    "name": str,
    "lang": str,
    "version": str,
    "user": str,
    "pass": str,
    "auth_token": str,
    "jwt": str,
    "nkey": str,
    "sig": str,
    "account": str,
    "new_account": bool,
    "remote_account": str,
    "proxy_sig": str,
    "import": dict,
    "export": dict,
}
_INT64 = 1 << 63


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_connect(arg: bytes) -> dict[str, Any]:
    """The CONNECT options as Go's encoding/json fills the reference's struct: names match
    case-insensitively (the last one wins), null leaves a field alone, unknown names are
    ignored, a value of the wrong JSON type (or an int out of int64 range) is an error,
    invalid UTF-8 is replaced rather than refused. Raises ProtocolError (close, no -ERR)."""
    try:
        raw: Any = json.loads(arg.decode("utf-8", "replace"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(None, f"bad CONNECT JSON: {arg[:64]!r}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(None, "CONNECT is not a JSON object")
    opts: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.lower()
        kind = _CONNECT_TYPES.get(name)
        if kind is None or value is None:
            continue
        if not isinstance(value, kind) or (
            kind is int and (isinstance(value, bool) or not -_INT64 <= value < _INT64)
        ):
            raise ProtocolError(None, f"CONNECT field {key} has the wrong type")
        opts[name] = value
    return opts


# The first server PING after CONNECT, and how often the round trip is measured again.
FIRST_PING_INTERVAL = 2.0
RTT_INTERVAL = 3600.0

# A connection's input is parsed within its budget per loop turn (turns.py), a large read
# slice by slice; the rest waits for the next turn with reading paused.
FEED_SLICE = 16 * 1024

# Payloads from this size on are written as their own buffer instead of being copied into
# each receiver's frame.
BIG_PAYLOAD = 32 * 1024

Frame = tuple[bytes, bytes, bytes | None]

# b"<n>\r\n" for common sizes: formatting costs more than the rest of a small frame.
_SIZE_LINES = [b"%d\r\n" % n for n in range(4096)]


def msg_frame(
    op: bytes, subject: bytes, reply: bytes | None, data: bytes, hdr_len: int = -1
) -> Frame:
    """A MSG/HMSG frame without its sid: head + " <sid> " + tail (+ big + CRLF).

    `data` is the payload, or headers + payload for HMSG (hdr_len >= 0)."""
    size = len(data)
    if hdr_len >= 0:
        sizes = b"%d %d\r\n" % (hdr_len, size)
    elif size < 4096:
        sizes = _SIZE_LINES[size]
    else:
        sizes = b"%d\r\n" % size
    if reply:
        sizes = reply + b" " + sizes
    if size >= BIG_PAYLOAD:
        return op + subject, sizes, data
    return op + subject, sizes + data + b"\r\n", None


class ClientConnection(asyncio.Protocol):
    """The server side of one client's TCP connection."""

    __slots__ = (
        "server", "cid", "transport", "parser", "subs", "out", "host", "port",
        "verbose", "pedantic", "echo", "headers", "no_responders", "protocol",
        "name", "lang", "version", "connected", "closed", "first_pong_sent",
        "pings_out", "last_in", "ping_timer", "auth_timer", "stalled_since", "drain_mark",
        "rtt_start",
        "in_msgs", "in_bytes", "out_msgs", "out_bytes", "started",
        "congested", "stalled_by", "stalling", "stall_timer", "out_vectored",
        "backlog", "input_paused", "budget",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cid = 0
        self.transport: asyncio.Transport | None = None
        opts = server.options
        self.parser = ClientOpParser(
            self, opts.max_payload, opts.max_control_line,
            interest=(server.sublist.cache, EMPTY_RESULT),
        )
        self.parser.pedantic = True
        self.subs: dict[bytes, Subscription] = {}
        self.out: list[bytes] = []
        self.host = ""
        self.port = 0
        # The reference's defaults before (and for fields absent from) CONNECT.
        self.verbose = True
        self.pedantic = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.protocol = 0
        self.name = ""
        self.lang = ""
        self.version = ""
        self.connected = False
        self.closed = False
        self.first_pong_sent = False
        self.pings_out = 0
        self.last_in = 0.0
        self.ping_timer: asyncio.TimerHandle | None = None
        self.rtt_start = 0.0  # when we last sent a PING; 0 until the first one
        self.auth_timer: asyncio.TimerHandle | None = None
        self.stalled_since = 0.0
        self.drain_mark = 0
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.started = time.time()
        self.congested = False  # our socket buffer is over the stall mark
        self.out_vectored = False  # `out` holds big payloads: write it as separate buffers
        # Flow control (see flow.py): the consumers we wait for, the producers waiting for us.
        self.stalled_by: set[ClientConnection] | None = None
        self.stalling: set[ClientConnection] | None = None
        self.stall_timer: asyncio.TimerHandle | None = None
        self.backlog: bytes | None = None  # input read but not parsed yet (see _consume)
        self.input_paused = False
        self.budget = InputBudget(server.turns)

    # -- asyncio callbacks ---------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        opts = server.options
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = peer[0], peer[1]
        # Over the congestion mark, producers sending to us are stalled (flow.py).
        mark = flow.congestion_mark(opts.max_pending)
        transport.set_write_buffer_limits(high=mark, low=mark)
        self.cid = server.next_cid()
        self.last_in = time.monotonic()
        transport.write(server.info_for(self))
        if not server.register(self):
            return
        loop = server.loop
        self.ping_timer = loop.call_later(opts.ping_interval, self._ping_tick)
        if opts.auth_required:
            self.parser.awaiting_connect = True
            self.auth_timer = loop.call_later(opts.auth_timeout, self._auth_expired)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_in = time.monotonic()
        if self.backlog is not None:  # still working through an earlier read: queue behind
            self.backlog += data
            self.pause_input()
            return
        self.budget.start()
        rest = self._consume(data)
        if rest is not None:
            self.backlog = rest
            self.pause_input()
            self.server.loop.call_soon(self._work_backlog)
        elif self.budget.spent() and not self.closed:
            # Spent: the next read of this socket waits for the next turn.
            self.pause_input()
            self.server.loop.call_soon(self.resume_input)

    def _consume(self, data: bytes) -> bytes | None:
        """Parse and route `data`, then flush. A large read is parsed a slice at a time and
        given up when this turn's budget is spent, so that a read full of costly operations
        does not hold up every other client: the bytes left are returned, to go on later."""
        server = self.server
        server.reader = self
        rest = None
        try:
            if len(data) <= FEED_SLICE:
                self.parser.feed(data)
            else:
                pos, n = 0, len(data)
                while pos < n and not self.closed:
                    self.parser.feed(data[pos : pos + FEED_SLICE])
                    pos += FEED_SLICE
                    if pos < n and self.budget.spent():
                        rest = data[pos:]
                        break
        except ProtocolError as exc:
            self.close_with_error(exc.err, str(exc))
        except Exception as exc:  # a defect, but one client's input must not leak a traceback
            log.error("cid=%d closing: internal error on its input: %s: %s",
                      self.cid, type(exc).__name__, exc)
            self.close_with_error(None)
        server.flush()
        server.reader = None
        return rest

    def _work_backlog(self) -> None:
        if self.closed or self.stalled_by or self.backlog is None:
            return  # a stall's end resumes the work (resume_input)
        data, self.backlog = self.backlog, None
        self.budget.start()
        rest = self._consume(data)
        if rest is not None:
            self.backlog = rest
            self.server.loop.call_soon(self._work_backlog)
        else:
            self.resume_input()

    def pause_input(self) -> None:
        """Stop reading the socket (a flow-control stall, or input still being worked on)."""
        transport = self.transport
        if not self.input_paused and transport is not None and not transport.is_closing():
            transport.pause_reading()
            self.input_paused = True

    def resume_input(self) -> None:
        """Go on with input unless something still holds it."""
        if self.closed or self.stalled_by:
            return
        if self.backlog is not None:
            self.server.loop.call_soon(self._work_backlog)
            return
        transport = self.transport
        if self.input_paused and transport is not None and not transport.is_closing():
            transport.resume_reading()
            self.input_paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.backlog is not None and not self.closed:
            # What the client sent before it went is still served, as the reference does.
            data, self.backlog = self.backlog, None
            while data is not None and not self.closed:
                data = self._consume(data)
        self.closed = True
        for timer in (self.ping_timer, self.auth_timer):
            if timer is not None:
                timer.cancel()
        flow.forget(self)
        self.server.unregister(self)

    def pause_writing(self) -> None:
        self.congested = True

    def resume_writing(self) -> None:
        self.congested = False
        flow.drained(self)

    def slow_consumer(self, why: str) -> None:
        self.server.slow_consumers += 1
        log.warning("cid=%d slow consumer: %s", self.cid, why)
        self.abort()
        flow.forget(self)

    # -- output --------------------------------------------------------------
    def queue(self, data: bytes) -> None:
        if self.closed:
            return
        out = self.out
        if not out:
            self.server.dirty.append(self)
        out.append(data)

    def send_err(self, err: str) -> None:
        self.queue(encode.err(err))

    def close_with_error(self, err: str | None, detail: str = "") -> None:
        """Send `-ERR '<err>'` (if any), flush what is queued, and close."""
        if self.closed:
            return
        if err:
            self.send_err(err)
        if detail:
            log.debug("cid=%d closing: %s", self.cid, detail)
        self.server.flush()
        self.closed = True
        self.parser.awaiting_connect = False
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- timers --------------------------------------------------------------
    def _ping_tick(self) -> None:
        if self.closed:
            return
        opts = self.server.options
        now = time.monotonic()
        # As the reference: ping when the client has been quiet for a whole interval, or to
        # measure the round trip (never measured since CONNECT, or an hour ago).
        need_rtt = not self.rtt_start or now - self.rtt_start > RTT_INTERVAL
        if now - self.last_in >= opts.ping_interval or need_rtt:
            if self.pings_out + 1 > opts.ping_max:
                self.close_with_error(STALE_CONNECTION, "stale connection")
                return
            self.pings_out += 1
            self.rtt_start = now
            self.queue(PING)
            self.server.flush()
        self.ping_timer = self.server.loop.call_later(opts.ping_interval, self._ping_tick)

    def _auth_expired(self) -> None:
        if not self.connected and not self.closed:
            self.close_with_error(AUTHENTICATION_TIMEOUT, "authentication timeout")

    # -- ClientOpHandler -----------------------------------------------------
    def on_connect(self, arg: bytes) -> None:
        opts = decode_connect(arg)
        server = self.server
        if self.connected:
            # A second CONNECT starts over: the reference drops every subscription.
            for sub in list(self.subs.values()):
                self.remove_sub(sub)
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        if server.options.auth_required and not server.authenticate(opts):
            raise ProtocolError(AUTHORIZATION_VIOLATION, "authorization violation")
        if opts.get("account") or opts.get("new_account"):
            # The reference no longer lets a client pick or create an account this way.
            raise ProtocolError(AUTHORIZATION_VIOLATION, "account in CONNECT")
        self.parser.awaiting_connect = False
        self.connected = True
        # The reference restarts its ping timer on CONNECT with a short first interval (2s,
        # plus up to 20%), so a new client gets its first PING early.
        if self.ping_timer is not None:
            self.ping_timer.cancel()
            first = min(server.options.ping_interval, FIRST_PING_INTERVAL)
            self.ping_timer = server.loop.call_later(
                first * (1 + random.random() / 5), self._ping_tick
            )
        self.verbose = opts.get("verbose", self.verbose)
        self.pedantic = self.parser.pedantic = opts.get("pedantic", self.pedantic)
        self.echo = opts.get("echo", self.echo)
        self.headers = self.parser.headers = bool(opts.get("headers", self.headers))
        self.no_responders = opts.get("no_responders", self.no_responders)
        self.protocol = opts.get("protocol", self.protocol)
        self.name = opts.get("name", self.name)
        self.lang = opts.get("lang", self.lang)
        self.version = opts.get("version", self.version)
        if self.protocol < 0 or self.protocol > 1:
            raise ProtocolError(INVALID_CLIENT_PROTOCOL)
        if self.no_responders and not self.headers:
            raise ProtocolError(NO_RESPONDERS_REQUIRES_HEADERS)
        self.parser.bulk = not self.verbose and not self.pedantic
        self.parser.keep_replies = bool(self.no_responders)
        if self.verbose:
            self.queue(OK)

    def on_ping(self) -> None:
        self.queue(PONG)
        if self.connected and not self.first_pong_sent:
            self.first_pong_sent = True
            if self.protocol >= 1:
                self.queue(self.server.info_for(self, connect_info=True))

    def on_pong(self) -> None:
        self.pings_out = 0

    def on_soft_error(self, err: str) -> None:
        self.send_err(err)

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        if sid not in self.subs:
            if not is_valid_subscription(subject):
                self.send_err(INVALID_SUBJECT)
                return
            sub = Subscription(self, subject, queue, sid)
            self.subs[sid] = sub
            self.server.sublist.insert(sub)
        if self.verbose:
            self.queue(OK)

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs > 0 and max_msgs > sub.delivered:
                sub.max = max_msgs
            else:
                self.remove_sub(sub)
        if self.verbose:
            self.queue(OK)

    def remove_sub(self, sub: Subscription) -> None:
        sub.closed = True
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
        self.server.sublist.remove(sub)

    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        if self.verbose:
            self.queue(OK)
        self.in_msgs += 1
        self.in_bytes += len(payload)
        self.server.route(self, subject, reply, msg_frame(b"MSG ", subject, reply, payload), None)

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        if not hdr_len:
            # As the reference: a header block of size 0 is no header block, so MSG.
            self.on_pub(subject, reply, data)
            return
        trace = None
        if data.find(b"Nats-Trace-Dest", 0, hdr_len) >= 0:
            from .tracing import start_trace  # only messages that ask for tracing pay for it

            traced = start_trace(self, subject, hdr_len, data)
            if traced is None:
                return  # dropped, as the reference drops it
            hdr_len, data, trace = traced
        if self.verbose:
            self.queue(OK)
        self.in_msgs += 1
        self.in_bytes += len(data)
        self.server.route(
            self,
            subject,
            reply,
            msg_frame(b"HMSG ", subject, reply, data, hdr_len),
            msg_frame(b"MSG ", subject, reply, data[hdr_len:]),
            trace,
        )
        if trace is not None:
            trace.send()

    def on_hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        if hdr.find(b"Nats-Trace-Dest") >= 0:
            from .tracing import trace_refused

            trace_refused(self, subject, hdr, size, "maximum payload exceeded")

    def no_responders_reply(self, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody listens on `subject`, with a 503 status message."""
        plain, _ = self.server.sublist.match(reply)
        for sub in plain:
            if sub.client is self:
                hdr = b"NATS/1.0 503\r\nNats-Subject: %b\r\n\r\n" % subject
                self.queue(b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sub.sid, len(hdr), len(hdr), hdr))
                return
