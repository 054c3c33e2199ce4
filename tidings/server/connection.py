"""What every connection of the server shares, a client's as well as a route's: reading within
the per-turn input budget, queued output written once per read (Server.flush), flow control,
keep-alive pings, slow-consumer handling and closing.

A subclass supplies the protocol: its parser, the handler methods the parser calls,
`connection_made` (greeting, registration) and `gone` (what to undo once the socket is lost).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..protocol import encode
from ..protocol.errors import AUTHENTICATION_TIMEOUT, STALE_CONNECTION, ProtocolError
from ..turns import InputBudget
from . import flow

if TYPE_CHECKING:
    from ..protocol.parser import ClientOpParser
    from .accounts import Account
    from .server import Server
    from .sublist import Subscription

log = logging.getLogger("tidings.server")

# How often the round trip is measured again (a PING even to a busy connection).
RTT_INTERVAL = 3600.0

# A connection's input is parsed within its budget per loop turn (turns.py), a large read
# slice by slice; the rest waits for the next turn with reading paused.
FEED_SLICE = 16 * 1024

# Payloads from this size on are written as their own buffer instead of being copied into
# each receiver's frame.
BIG_PAYLOAD = 32 * 1024

# A message as MSG/HMSG without its sid: (head, tail, big payload or None, size); `size`
# is the payload (with headers) length, counted in out_bytes as the reference counts it.
Frame = tuple[bytes, bytes, bytes | None, int]

# Why a connection was closed, by the -ERR it got, in the reference's words (/connz).
_REASONS = {
    "Authorization Violation": "Authentication Failure",
    "Authentication Timeout": "Authentication Timeout",
    "Stale Connection": "Stale Connection",
    "Maximum Payload Violation": "Maximum Payload Exceeded",
    "maximum connections exceeded": "Maximum Connections Exceeded",
    "maximum account active connections exceeded": "Maximum Account Connections Exceeded",
    "maximum subscriptions exceeded": "Maximum Subscriptions Exceeded",
    "maximum control line exceeded": "Maximum Control Line Exceeded",
    "Unknown Protocol Operation": "Parse Error",
}

# b"<n>\r\n" for common sizes: formatting costs more than the rest of a small frame; and an
# HMSG's b"<header size> " before it.
_SIZE_LINES = [b"%d\r\n" % n for n in range(4096)]
_HDR_SIZES = [b"%d " % n for n in range(4096)]


def msg_frame(
    op: bytes, subject: bytes, reply: bytes | None, data: bytes, hdr_len: int = -1
) -> Frame:
    """A MSG/HMSG frame without its sid: head + " <sid> " + tail (+ big + CRLF), and its size.

    `data` is the payload, or headers + payload for HMSG (hdr_len >= 0)."""
    size = len(data)
    if hdr_len >= 0:
        sizes = _HDR_SIZES[hdr_len] + _SIZE_LINES[size] if size < 4096 else \
            b"%d %d\r\n" % (hdr_len, size)
    elif size < 4096:
        sizes = _SIZE_LINES[size]
    else:
        sizes = b"%d\r\n" % size
    if reply:
        sizes = reply + b" " + sizes
    if size >= BIG_PAYLOAD:
        return op + subject, sizes, data, size
    return op + subject, sizes + data + b"\r\n", None, size


class Headerless:
    """A message with headers as a receiver that did not ask for headers gets it: MSG with
    the payload alone. Routing carries it beside the HMSG frame (see Server.route); it
    holds what that frame is made of, and makes the frame when a delivery first needs it
    (most receivers take headers, and the server's own subscriptions take the parts)."""

    __slots__ = ("subject", "reply", "data", "hdr_len", "_frame")

    def __init__(self, subject: bytes, reply: bytes | None, data: bytes, hdr_len: int) -> None:
        self.subject = subject  # the subject the HMSG frame carries
        self.reply = reply
        self.data = data  # headers + payload, as the HMSG frame carries them
        self.hdr_len = hdr_len
        self._frame: Frame | None = None

    def frame(self) -> Frame:
        """The message as MSG (made once)."""
        frame = self._frame
        if frame is None:
            frame = self._frame = msg_frame(b"MSG ", self.subject, self.reply,
                                            self.data[self.hdr_len:])
        return frame

    def renamed(self, subject: bytes, new_subject: bytes) -> Headerless:
        """As accounts.reframe renames the HMSG frame: `new_subject` instead of the subject
        it carries if that is `subject` (the one it was routed by)."""
        if self.subject != subject:
            return self
        return Headerless(new_subject, self.reply, self.data, self.hdr_len)


class Connection(asyncio.Protocol):
    """The server side of one TCP connection; see the module docstring."""

    is_route = False  # routes forward to other servers; clients are delivered to
    is_relay = False  # (accounts.Relay: a subscription that carries into another account)

    __slots__ = (
        "server", "cid", "transport", "parser", "subs", "out", "host", "port",
        "echo", "headers", "name", "connected", "closed", "auth_timer",
        "pings_out", "last_in", "ping_timer", "rtt_start", "rtt", "stalled_since", "drain_mark",
        "in_msgs", "in_bytes", "out_msgs", "out_bytes", "out_payload", "started",
        "congested", "stalled_by", "stalling", "stall_timer", "out_vectored",
        "backlog", "input_paused", "budget", "close_reason", "account",
    )

    parser: ClientOpParser

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cid = 0
        self.transport: asyncio.Transport | None = None
        self.subs: dict[bytes, Subscription] = {}
        self.out: list[bytes] = []
        self.host = ""
        self.port = 0
        self.echo = True
        self.headers = False
        self.name = ""
        self.connected = False  # CONNECT received (and accepted)
        self.closed = False
        self.auth_timer: asyncio.TimerHandle | None = None
        self.pings_out = 0
        self.last_in = 0.0
        self.ping_timer: asyncio.TimerHandle | None = None
        self.rtt_start = 0.0  # when we last sent a PING; 0 until the first one
        self.rtt = 0.0  # seconds from our last PING to its PONG (/connz)
        self.stalled_since = 0.0
        self.drain_mark = 0
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0  # bytes written to the socket (the write-deadline sweep)
        self.out_payload = 0  # payload bytes of the messages delivered (out_bytes in /connz)
        self.started = time.time()
        self.congested = False  # our socket buffer is over the stall mark
        self.out_vectored = False  # `out` holds big payloads: write it as separate buffers
        # Flow control (see flow.py): the consumers we wait for, the producers waiting for us.
        self.stalled_by: set[Connection] | None = None
        self.stalling: set[Connection] | None = None
        self.stall_timer: asyncio.TimerHandle | None = None
        self.backlog: bytes | None = None  # input read but not parsed yet (see _consume)
        self.input_paused = False
        self.budget = InputBudget(server.turns)
        self.close_reason = ""  # why we closed it, as /connz?state=closed says
        self.account: Account = server.accounts.global_account  # whose subjects it uses

    # -- to be supplied by the kind of connection ------------------------------
    def gone(self) -> None:
        """The socket is lost: undo what the connection registered."""

    def ping_interval(self) -> float:
        return self.server.options.ping_interval

    # -- asyncio callbacks -----------------------------------------------------
    def accepted(self, transport: asyncio.BaseTransport) -> None:
        """The part of connection_made every kind shares."""
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.host, self.port = peer[0], peer[1]
        # Over the congestion mark, producers sending to us are stalled (flow.py).
        mark = flow.congestion_mark(self.server.options.max_pending)
        self.transport.set_write_buffer_limits(high=mark, low=mark)
        if not self.cid:  # (a TLS listener names the client in INFO before the handshake)
            self.cid = self.server.next_cid()
        self.last_in = time.monotonic()

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
        does not hold up every other connection: the bytes left are returned, to go on later."""
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
                    if pos < n and (self.budget.spent() or self.parser.paused):
                        rest = data[pos:]
                        break
        except ProtocolError as exc:
            self.close_with_error(exc.err, str(exc))
        except Exception as exc:  # a defect, but one peer's input must not leak a traceback
            log.error("cid=%d closing: internal error on its input: %s: %s",
                      self.cid, type(exc).__name__, exc)
            self.close_with_error(None)
        server.flush()
        server.reader = None
        if rest is None and self.parser.paused and not self.closed:
            rest = b""  # what the parser holds is worked on once it goes on (resume_input)
        return rest

    def _work_backlog(self) -> None:
        if self.closed or self.stalled_by or self.backlog is None or self.parser.paused:
            return  # a stall's end (or the parser going on) resumes the work (resume_input)
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
        if self.closed or self.stalled_by or self.parser.paused:
            return
        if self.backlog is not None:
            self.server.loop.call_soon(self._work_backlog)
            return
        transport = self.transport
        if self.input_paused and transport is not None and not transport.is_closing():
            transport.resume_reading()
            self.input_paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.backlog is not None and not self.closed and not self.parser.paused:
            # What the peer sent before it went is still served, as the reference does.
            data, self.backlog = self.backlog, None
            while data is not None and not self.closed:
                data = self._consume(data)
        self.closed = True
        for timer in (self.ping_timer, self.auth_timer):
            if timer is not None:
                timer.cancel()
        flow.forget(self)
        self.gone()

    def pause_writing(self) -> None:
        self.congested = True

    def resume_writing(self) -> None:
        self.congested = False
        flow.drained(self)

    def past_max_pending(self) -> bool:
        """More than max_pending waits in our socket buffer: a client is closed as a slow
        consumer (True); a route stays (see RouteConnection)."""
        self.slow_consumer(f"MaxPending of {self.server.options.max_pending} exceeded")
        return True

    def slow_consumer(self, why: str) -> None:
        self.close_reason = ("Slow Consumer (Pending Bytes)" if "MaxPending" in why
                             else "Slow Consumer (Write Deadline)")
        self.server.slow_consumers += 1
        log.warning("cid=%d slow consumer: %s", self.cid, why)
        self.abort()
        flow.forget(self)

    def published(self) -> tuple[int, int]:
        """(messages, bytes) this connection published, with those nobody listened to."""
        parser = self.parser
        return self.in_msgs + parser.unrouted_msgs, self.in_bytes + parser.unrouted_bytes

    # -- subscriptions -----------------------------------------------------------
    def unsubscribe(self, sid: bytes, max_msgs: int) -> None:
        """UNSUB: now, or once the subscription has delivered `max_msgs` in all."""
        sub = self.subs.get(sid)
        if sub is None:
            return
        if max_msgs > 0 and max_msgs > sub.delivered:
            sub.max = max_msgs
        else:
            self.remove_sub(sub)

    def remove_sub(self, sub: Subscription) -> None:
        sub.closed = True
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
        self.account.sublist.remove(sub)

    # -- output ----------------------------------------------------------------
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
        if not self.close_reason:
            self.close_reason = _REASONS.get(err or "", "Protocol Violation")
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

    # -- timers ----------------------------------------------------------------
    def _ping_tick(self) -> None:
        if self.closed:
            return
        opts = self.server.options
        interval = self.ping_interval()
        now = time.monotonic()
        # As the reference: ping when the peer has been quiet for a whole interval, or to
        # measure the round trip (never measured since CONNECT, or an hour ago).
        need_rtt = not self.rtt_start or now - self.rtt_start > RTT_INTERVAL
        if now - self.last_in >= interval or need_rtt:
            if self.pings_out + 1 > opts.ping_max:
                self.server.stale["routes" if self.is_route else "clients"] += 1
                self.close_with_error(STALE_CONNECTION, "stale connection")
                return
            self.pings_out += 1
            self.rtt_start = now
            self.queue(encode.PING)
            self.server.flush()
        self.ping_timer = self.server.loop.call_later(interval, self._ping_tick)

    def _auth_expired(self) -> None:
        if not self.connected and not self.closed:
            self.close_with_error(AUTHENTICATION_TIMEOUT, "authentication timeout")

    def on_pong(self) -> None:
        if self.pings_out and self.rtt_start:
            self.rtt = time.monotonic() - self.rtt_start
        self.pings_out = 0

    def on_soft_error(self, err: str) -> None:
        self.send_err(err)
