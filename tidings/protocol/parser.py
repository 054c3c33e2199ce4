"""Incremental parsers for both directions of the NATS client protocol.

`ClientOpParser` reads what a client sends (CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG) and is
used by the server; with `route=True` it reads what another server sends over a route instead,
the way the reference's parser switches on the connection kind: the seed's `SUB ... RSID:..`,
`UNSUB`, `MSG`/`HMSG` with a route sid, and the reference's `RS+`, `RS-`, `LS+`, `LS-`, `RMSG`,
`HMSG` with an account, besides INFO, CONNECT, PUB, PING, PONG, +OK and -ERR.
`ServerOpParser` reads what a server sends to a client (INFO, MSG, HMSG, PING, PONG, +OK,
-ERR) and is used by clients. Both take bytes split at any position and call methods of a
handler object for every complete operation; they never touch a socket.

The client-op parser reproduces the reference server's parser where it matters on the wire:
operation names are case-insensitive; fields are separated by runs of spaces or tabs; a line
may end in CRLF or a bare LF; a PUB larger than max_payload is refused from its control line,
before its payload is read; a control line longer than max_control_line is refused even while
it is still arriving; malformed arguments close the connection without an -ERR, as the
reference does, while unknown operations get `-ERR 'Unknown Protocol Operation'`.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Protocol

from .errors import (
    AUTHORIZATION_VIOLATION,
    INVALID_PUBLISH_SUBJECT,
    MAX_CONTROL_LINE_EXCEEDED,
    MAX_PAYLOAD_VIOLATION,
    UNKNOWN_PROTOCOL_OPERATION,
    ProtocolError,
)
from .subjects import is_valid_literal_subject

try:
    if os.environ.get("TIDINGS_PURE_PYTHON"):
        raise ImportError("pure Python requested")
    from ._speedups import scan_pubs
except ImportError:  # no compiler at install time, or TIDINGS_PURE_PYTHON set
    scan_pubs = None

MAX_CONTROL_LINE = 4096
MAX_PAYLOAD = 1024 * 1024
_MAX_SIZE_DIGITS = 9

_FIELDS_SPACE_TAB = re.compile(rb"[^ \t]+")
_FIELDS_WS = re.compile(rb"[^ \t\r\n]+")


def parse_size(field: bytes) -> int:
    """A decimal size as the reference parses it: 1..9 ASCII digits, else -1."""
    if 0 < len(field) <= _MAX_SIZE_DIGITS and field.isdigit():
        return int(field)
    return -1


def decode_json(arg: bytes | str, what: str) -> Any:
    """JSON from the network; anything undecodable (also nesting too deep for the decoder)
    is a ProtocolError, never a traceback."""
    try:
        return json.loads(arg)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(None, f"bad {what} JSON") from exc


def split_fields(arg: bytes) -> list[bytes]:
    """Fields separated by runs of spaces or tabs (PUB, HPUB, MSG arguments)."""
    return _FIELDS_SPACE_TAB.findall(arg)


def split_fields_ws(arg: bytes) -> list[bytes]:
    """Fields separated by runs of spaces, tabs, CR or LF (SUB, UNSUB arguments)."""
    return _FIELDS_WS.findall(arg)


class ClientOpHandler(Protocol):
    """What the server implements to receive client operations."""

    def on_connect(self, arg: bytes) -> None: ...
    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None: ...
    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None: ...
    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None: ...
    def on_unsub(self, sid: bytes, max_msgs: int) -> None: ...
    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...
    def on_soft_error(self, err: str) -> None: ...
    def on_hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        """An HPUB over max_payload, before the connection is closed: `hdr` is what of
        its header block has arrived (message tracing reports the error)."""


class RouteOpHandler(ClientOpHandler, Protocol):
    """What a route connection implements besides the client operations (PUB, SUB, UNSUB,
    CONNECT, PING, PONG keep their meaning; SUB/UNSUB carry the seed's RSID sids)."""

    def on_info(self, info: dict[str, Any]) -> None: ...
    def on_err(self, message: str) -> None: ...
    def on_remote_sub(self, fields: list[bytes], leaf: bool) -> None:
        """RS+ / LS+ with its fields split."""
    def on_remote_unsub(self, fields: list[bytes], leaf: bool) -> None:
        """RS- / LS- with its fields split."""
    def on_routed(
        self, account: bytes | None, subject: bytes, sid: bytes | None, reply: bytes | None,
        queues: list[bytes] | None, hdr_len: int, data: bytes,
    ) -> None:
        """A message from another server: the seed's MSG/HMSG (`sid` set, no account) or
        the reference's RMSG/HMSG (`account` set; `queues` the queue groups it is for).
        `hdr_len` is -1 without headers."""


# Operation names: (name, kind). kind "sep" needs a space or tab after the name and takes an
# argument; "arg" (CONNECT) skips optional blanks and takes the rest; "bare" ignores the rest.
_CLIENT_OPS: tuple[tuple[bytes, str], ...] = (
    (b"PUB", "sep"),
    (b"PING", "bare"),
    (b"PONG", "bare"),
    (b"SUB", "sep"),
    (b"UNSUB", "sep"),
    (b"HPUB", "sep"),
    (b"HMSG", "sep"),
    (b"CONNECT", "arg"),
    (b"INFO", "arg"),
    (b"+OK", "bare"),
    (b"-ERR", "sep"),
)
_ROUTE_OPS: tuple[tuple[bytes, str], ...] = (
    (b"RMSG", "sep"),
    (b"MSG", "sep"),
    (b"HMSG", "sep"),
    (b"RS+", "sep"),
    (b"RS-", "sep"),
    (b"LS+", "sep"),
    (b"LS-", "sep"),
    (b"LMSG", "sep"),
    (b"PUB", "sep"),
    (b"HPUB", "sep"),
    (b"SUB", "sep"),
    (b"UNSUB", "sep"),
    (b"PING", "bare"),
    (b"PONG", "bare"),
    (b"CONNECT", "arg"),
    (b"INFO", "arg"),
    (b"+OK", "bare"),
    (b"-ERR", "sep"),
)
# A route's control lines carry accounts, replies and queue names: the reference allows 16
# times max_control_line on them.
ROUTE_CONTROL_LINE_FACTOR = 16
_ROUTED = b"ROUTED"  # marks a pending routed message (see _finish_payload)
_SEED_SID = (b"RSID:", b"QRSID:")
_SERVER_OPS: tuple[tuple[bytes, str], ...] = (
    (b"MSG", "sep"),
    (b"HMSG", "sep"),
    (b"PING", "bare"),
    (b"PONG", "bare"),
    (b"INFO", "sep"),
    (b"+OK", "bare"),
    (b"-ERR", "sep"),
)
_INCOMPLETE = -1
_BAD = -2
_RESTART = -3  # from _slow_op: the rest of the buffer is to be parsed anew (after CONNECT)
_SLOW = -4  # from _fast_hpub: an HPUB for _slow_op (an error, or blanks of other kinds)
# The operation the compiled scanner walks runs of, by scan_mode: it stops at once at any
# other (so it is not called for an HPUB, a SUB, ...).
_SCAN_OPS = (b"PUB ", b"MSG ", b"RMSG ")


def _classify(
    ops: tuple[tuple[bytes, str], ...], buf: bytes, pos: int, end: int
) -> tuple[bytes, str, int] | int:
    """Identify the operation starting at buf[pos] in the bytes up to `end`.

    Returns (name, kind, arg_start), _INCOMPLETE when the bytes so far are a valid beginning,
    or _BAD when no operation can start this way. For "sep" and "arg" operations arg_start is
    the first byte after the name and its blanks (== end when none has arrived yet).
    """
    head = buf[pos : min(end, pos + 8)].upper()
    for name, kind in ops:
        ln = len(name)
        if not head.startswith(name):
            if len(head) < ln and name.startswith(head):
                return _INCOMPLETE
            continue
        i = pos + ln
        if kind == "bare":
            return name, kind, i
        if kind == "sep":
            if i >= end:
                return _INCOMPLETE
            if buf[i] not in (32, 9):
                return _BAD
        while i < end and buf[i] in (32, 9):
            i += 1
        return name, kind, i
    return _BAD


class _Framer:
    """Shared buffering: partial control lines and payloads split across reads."""

    def __init__(self) -> None:
        self._buf = b""
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0  # bytes of payload + CRLF still owed when > 0
        self._pending: tuple[Any, ...] | None = None

    def _take(self, data: bytes) -> bytes | None:
        """Join new data with what was left over; None while a payload is still incomplete."""
        if self._need:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return None
            buf = b"".join(self._chunks)
            self._chunks = []
            self._need = 0
            return buf
        if self._buf:
            buf = self._buf + data
            self._buf = b""
            return buf
        return data

    def _wait_payload(self, buf: bytes, start: int, size: int, pending: tuple[Any, ...]) -> None:
        """Hold buf[start:] until `size` payload bytes and their CRLF have arrived.

        `pending` describes the operation; its last item is the payload size."""
        self._pending = pending
        rest = buf[start:]
        self._chunks = [rest]
        self._have = len(rest)
        self._need = size + 2

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of an operation."""
        return len(self._buf) + (self._have if self._need else 0)


class ClientOpParser(_Framer):
    """Parses client operations for the server; see the module docstring for the rules.

    `interest` is an optional (cache, empty) pair: a dict from subject to routing result and
    the value that means "nobody listens". With it, and while `bulk` is set (the handler
    wants no per-message acknowledgement or subject check), runs of plain PUB frames go
    through the compiled scanner, which skips messages nobody listens to (counted in
    `unrouted_msgs`/`unrouted_bytes`) and hands the rest to on_pub.
    """

    def __init__(
        self,
        handler: ClientOpHandler,
        max_payload: int = MAX_PAYLOAD,
        max_control_line: int = MAX_CONTROL_LINE,
        interest: tuple[dict[bytes, Any], Any] | None = None,
        route: bool = False,
    ) -> None:
        super().__init__()
        self.handler = handler
        self.max_payload = max_payload
        self.route = route
        self._ops = _ROUTE_OPS if route else _CLIENT_OPS
        # What the compiled scanner walks: 0 PUBs; on a route 1 the seed's MSGs, 2 RMSGs.
        self.scan_mode = 0
        if route:
            max_control_line *= ROUTE_CONTROL_LINE_FACTOR
            # A route's HMSG: the seed's form (subject sid ...) or the reference's (account
            # subject ...); None until the handler knows which protocol the peer speaks.
            self.seed_hmsg: bool | None = None
        self.max_control_line = max_control_line
        self.headers = False  # set once CONNECT says the client supports headers
        self.pedantic = False
        self.awaiting_connect = False  # when auth is required, the first op must be CONNECT
        # ... or one of these (first letters of the operations taken before CONNECT).
        self.before_connect = b"Cc"
        # Set by the handler in on_connect while it decides (a password check in a thread):
        # what follows CONNECT is held, unparsed, until it is cleared and feed() called again.
        self.paused = False
        self.bulk = False
        self.keep_replies = False  # pass unrouted requests on (for no-responders replies)
        self.unrouted_msgs = 0
        self.unrouted_bytes = 0
        self._interest_given = interest if scan_pubs is not None else None
        self._interest = self._interest_given
        self._on_pub = handler.on_pub
        self._skipping: bytes | None = None  # a bare op whose line end has not come yet

    def _wait_payload(self, buf: bytes, start: int, size: int, pending: tuple[Any, ...]) -> None:
        super()._wait_payload(buf, start, size, pending)
        subject = pending[1]
        if (self.pedantic and pending[0] is not _ROUTED and subject
                and not is_valid_literal_subject(subject)):
            # As the reference: a message whose payload is not all in this read has its
            # arguments parsed again (clonePubArg), so a pedantic client hears of an invalid
            # subject twice.
            self.handler.on_soft_error(INVALID_PUBLISH_SUBJECT)

    def watch_interest(self, interest: tuple[dict[bytes, Any], Any]) -> None:
        """Read another (cache, empty) pair from now on (a client bound to an account);
        route_pubs_to decides again whether it is used."""
        if self._interest_given is not None:
            self._interest_given = interest

    def route_pubs_to(self, on_pub: Any, skip_unrouted: bool) -> None:
        """Hand PUBs to `on_pub` instead of the handler's; `skip_unrouted` False makes every
        PUB reach it, also those the compiled scanner would skip as nobody listens."""
        self._on_pub = on_pub
        self._interest = self._interest_given if skip_unrouted else None

    def feed(self, data: bytes) -> None:
        """Consume bytes; calls the handler per operation; raises ProtocolError to close."""
        while self._feed(data):
            data = b""  # what followed a CONNECT, parsed anew

    def _feed(self, data: bytes) -> bool:
        """feed(); True when the rest (kept in _buf) is to be parsed anew."""
        if self.paused:
            self._buf += data
            return False
        if self._skipping is not None:
            # The rest of a PING/PONG/+OK line: ignored up to its LF, as the reference does,
            # and never buffered, however long it is.
            eol = data.find(b"\n")
            if eol < 0:
                return False
            name, self._skipping = self._skipping, None
            self._bare_op(name)
            data = data[eol + 1 :]
            if not data:
                return False
        buf = self._take(data)
        if buf is None:
            # Payload still incomplete; the byte after it must be CR, refused at once if not.
            if self._have == self._need - 1 and data and data[-1] != 13:
                raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
            return False
        pos = 0
        if self._pending is not None:
            pos = self._finish_payload(buf)
        n = len(buf)
        on_pub = self._on_pub
        max_payload = self.max_payload
        interest = self._interest
        while pos < n:
            if (interest is not None and self.bulk and not self.awaiting_connect
                    and buf.startswith(_SCAN_OPS[self.scan_mode], pos)):
                ops: list[tuple[bytes, bytes | None, bytes]] = []
                mode = self.scan_mode
                pos, skipped, skipped_bytes = scan_pubs(  # type: ignore[misc]
                    buf, pos, max_payload, self.max_control_line, interest[0], interest[1],
                    self.keep_replies, ops, mode,
                )
                self.unrouted_msgs += skipped
                self.unrouted_bytes += skipped_bytes
                if mode == 0:
                    for subject, reply, payload in ops:
                        on_pub(subject, reply, payload)
                elif ops:
                    self._routed_run(ops, mode)
                if pos >= n:
                    break
            # Fast path: "PUB <subject> [reply] <size>\r\n", blanks as the reference splits.
            if buf.startswith(b"PUB ", pos) and not self.awaiting_connect:
                eol = buf.find(b"\n", pos)
                if eol < 0:
                    break
                if buf[eol - 1] == 13:
                    arg = buf[pos + 4 : eol - 1]
                    # bytes.split() also splits at CR, VT and FF, which the reference keeps.
                    if len(arg) <= self.max_control_line and not (
                        13 in arg or 11 in arg or 12 in arg
                    ):
                        parts = arg.split()
                        np = len(parts)
                        if np == 2:
                            subject, szb = parts
                            reply = None
                        elif np == 3:
                            subject, reply, szb = parts
                        else:
                            subject = b""
                        if subject and szb.isdigit() and len(szb) <= 9:
                            size = int(szb)
                            if size > max_payload:
                                raise ProtocolError(MAX_PAYLOAD_VIOLATION)
                            if self.pedantic and not is_valid_literal_subject(subject):
                                self.handler.on_soft_error(INVALID_PUBLISH_SUBJECT)
                            start = eol + 1
                            end = start + size
                            if end + 2 > n:
                                if end < n and buf[end] != 13:
                                    raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
                                self._wait_payload(buf, start, size, (None, subject, reply, 0, size))
                                return False
                            if buf[end] != 13 or buf[end + 1] != 10:
                                raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
                            on_pub(subject, reply, buf[start:end])
                            pos = end + 2
                            continue
            elif buf.startswith(b"HPUB ", pos) and self.headers and not self.awaiting_connect:
                nxt = self._fast_hpub(buf, pos, n)
                if nxt >= 0:
                    pos = nxt
                    continue
                if nxt == _INCOMPLETE:
                    return False
            pos = self._slow_op(buf, pos, n)
            if pos < 0:
                return pos == _RESTART
        if pos < n:
            self._hold_partial(buf, pos, n)
        return False

    def _fast_hpub(self, buf: bytes, pos: int, n: int) -> int:
        """The fast path of "HPUB <subject> [reply] <hdr size> <size>\\r\\n" (a publish with
        headers, as the PUB fast path reads a PUB): the next position, _INCOMPLETE while
        its payload is still to come, or _SLOW for _slow_op (errors, odd blanks)."""
        eol = buf.find(b"\n", pos)
        if eol < 0 or buf[eol - 1] != 13:
            return _SLOW
        arg = buf[pos + 5 : eol - 1]
        if len(arg) > self.max_control_line or 13 in arg or 11 in arg or 12 in arg:
            return _SLOW
        parts = arg.split()
        if len(parts) == 3:
            subject, hdb, szb = parts
            reply = None
        elif len(parts) == 4:
            subject, reply, hdb, szb = parts
        else:
            return _SLOW
        if not (hdb.isdigit() and szb.isdigit() and len(hdb) <= 9 and len(szb) <= 9):
            return _SLOW
        hdr, size = int(hdb), int(szb)
        if hdr > size or size > self.max_payload:
            return _SLOW
        if self.pedantic and not is_valid_literal_subject(subject):
            self.handler.on_soft_error(INVALID_PUBLISH_SUBJECT)
        start = eol + 1
        end = start + size
        if end + 2 > n:
            if end < n and buf[end] != 13:
                raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
            self._wait_payload(buf, start, size, (b"HPUB", subject, reply, hdr, size))
            return _INCOMPLETE
        if buf[end] != 13 or buf[end + 1] != 10:
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        self.handler.on_hpub(subject, reply, hdr, buf[start:end])
        return end + 2

    def _routed_run(self, ops: list[Any], mode: int) -> None:
        on_routed = self.handler.on_routed  # type: ignore[attr-defined]
        if mode == 1:
            for subject, sid, reply, payload in ops:
                on_routed(None, subject, sid, reply, None, -1, payload)
        else:
            for subject, account, reply, payload in ops:
                on_routed(account, subject, None, reply, None, -1, payload)

    def _finish_payload(self, buf: bytes) -> int:
        op, subject, reply, hdr, size = self._pending  # type: ignore[misc]
        self._pending = None
        if buf[size] != 13 or buf[size + 1] != 10:
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        payload = buf[:size]
        if op is None:
            self._on_pub(subject, reply, payload)
        elif op is _ROUTED:
            self.handler.on_routed(*subject, payload)  # type: ignore[attr-defined]
        else:
            self.handler.on_hpub(subject, reply, hdr, payload)
        return size + 2

    def _bare_op(self, name: bytes) -> None:
        if name == b"PING":
            self.handler.on_ping()
        elif name == b"PONG":
            self.handler.on_pong()

    def _hold_partial(self, buf: bytes, pos: int, n: int) -> None:
        """Keep an incomplete control line, refusing it early the way the reference does."""
        if self.awaiting_connect and buf[pos] not in self.before_connect:
            raise ProtocolError(AUTHORIZATION_VIOLATION)
        op = _classify(self._ops, buf, pos, n)
        if op == _BAD:
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        if isinstance(op, tuple):
            if op[1] == "bare":
                self._skipping = op[0]
                return
            # As the reference, a CR the line end has not followed yet is not counted.
            if n - op[2] - (buf[n - 1] == 13) > self.max_control_line:
                raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
        self._buf = buf[pos:]

    def _slow_op(self, buf: bytes, pos: int, n: int) -> int:
        """Parse one operation in full generality. Returns the next position, or -1 when
        the rest of buf has been stored to wait for more bytes."""
        if self.awaiting_connect and buf[pos] not in self.before_connect:
            raise ProtocolError(AUTHORIZATION_VIOLATION)
        eol = buf.find(b"\n", pos)
        if eol < 0:
            self._hold_partial(buf, pos, n)
            return -1
        op = _classify(self._ops, buf, pos, eol)
        if not isinstance(op, tuple):
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        name, kind, arg_start = op
        handler = self.handler
        if kind == "bare":
            self._bare_op(name)
            return eol + 1
        if arg_start == eol:
            # The reference takes a LF right after the blanks as the first argument byte,
            # so the argument runs on to the next LF.
            eol = buf.find(b"\n", eol + 1)
            if eol < 0:
                if n - arg_start > self.max_control_line:
                    raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
                self._buf = buf[pos:]
                return -1
        arg = buf[arg_start:eol]
        if b"\r" in arg[1:]:
            arg = arg[:-1]
        if len(arg) > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
        nxt = eol + 1
        if self.route:
            done = self._route_op(name, arg, buf, nxt, n)
            if done is not None:
                return done
        if name == b"PUB" or name == b"HPUB":
            return self._pub_args(name, arg, buf, nxt, n)
        if name == b"SUB":
            f = split_fields_ws(arg)
            if len(f) == 2:
                handler.on_sub(f[0], None, f[1])
            elif len(f) == 3:
                handler.on_sub(f[0], f[1], f[2])
            else:
                raise ProtocolError(None, f"SUB parse error: {arg!r}")
            return nxt
        if name == b"UNSUB":
            f = split_fields_ws(arg)
            if len(f) == 1:
                handler.on_unsub(f[0], -1)
            elif len(f) == 2:
                handler.on_unsub(f[0], parse_size(f[1]))
            else:
                raise ProtocolError(None, f"UNSUB parse error: {arg!r}")
            return nxt
        if name == b"CONNECT":
            handler.on_connect(arg)
            if nxt < n:
                # What follows is parsed anew: CONNECT may have changed how (the PUB handler,
                # the compiled path), or paused us until the client's login is decided.
                self._buf = buf[nxt:n]
                return -1 if self.paused else _RESTART
            return nxt
        if name == b"INFO":
            decode_json(arg, "INFO from client")
            return nxt
        if name == b"HMSG":
            # The reference accepts HMSG from a client as an empty message with no subject.
            if nxt + 2 > n:
                self._wait_payload(buf, nxt, 0, (None, b"", None, 0, 0))
                return -1
            if buf[nxt] != 13 or buf[nxt + 1] != 10:
                raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
            self._on_pub(b"", None, b"")
            return nxt + 2
        # -ERR from a client: the reference logs it and closes the connection.
        raise ProtocolError(None, f"client sent -ERR {arg!r}")

    def _route_op(self, name: bytes, arg: bytes, buf: bytes, start: int, n: int) -> int | None:
        """The operations only a route has, and those whose meaning differs on a route.
        Returns the next position (-1: waiting for the payload), None for the others."""
        handler: Any = self.handler
        if name in (b"RMSG", b"MSG", b"HMSG", b"LMSG"):
            args = self._routed_args(name, split_fields_ws(arg))
            size = args[-1]
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD_VIOLATION)
            end = self._payload_end(buf, start, n, (_ROUTED, args[:-1], None, 0, size))
            if end < 0:
                return -1
            handler.on_routed(*args[:-1], buf[start:end])
            return end + 2
        if name == b"RS+" or name == b"LS+":
            handler.on_remote_sub(split_fields_ws(arg), name == b"LS+")
            return start
        if name == b"RS-" or name == b"LS-":
            handler.on_remote_unsub(split_fields_ws(arg), name == b"LS-")
            return start
        if name == b"INFO":
            info = decode_json(arg, "route INFO")
            if not isinstance(info, dict):
                raise ProtocolError(None, "route INFO is not a JSON object")
            handler.on_info(info)
            return start
        if name == b"-ERR":
            handler.on_err(_unquote(arg.decode(errors="replace")))
            return start
        return None

    def _routed_args(
        self, name: bytes, f: list[bytes]
    ) -> tuple[bytes | None, bytes, bytes | None, bytes | None, list[bytes] | None, int, int]:
        """(account, subject, sid, reply, queues, hdr_len, size) of a routed message line."""
        hdr = -1
        if name == b"LMSG":
            f = f[1:]  # the origin cluster: no leaf nodes here, so nothing to do with it
        headers = name == b"HMSG"
        seed = name == b"MSG" or (
            headers and (self.seed_hmsg if self.seed_hmsg is not None
                         else len(f) > 1 and f[1].startswith(_SEED_SID))
        )
        if headers:
            if len(f) < 4:
                raise ProtocolError(None, f"route HMSG parse error: {f!r}")
            hdr = parse_size(f[-2])
            body = f[:-2]
        else:
            if len(f) < 3:
                raise ProtocolError(None, f"route {name.decode()} parse error: {f!r}")
            body = f[:-1]
        size = parse_size(f[-1])
        if size < 0 or (headers and (hdr < 0 or hdr > size)):
            raise ProtocolError(None, f"route {name.decode()} bad sizes: {f!r}")
        if seed:
            # subject sid [reply]
            if len(body) == 2:
                return None, body[0], body[1], None, None, hdr, size
            if len(body) == 3:
                return None, body[0], body[1], body[2], None, hdr, size
            raise ProtocolError(None, f"route {name.decode()} parse error: {f!r}")
        # account subject [reply | + reply queue... | "|" queue...]
        if len(body) == 2:
            return body[0], body[1], None, None, None, hdr, size
        if len(body) == 3:
            return body[0], body[1], None, body[2], None, hdr, size
        marker = body[2]
        if marker == b"+":
            return body[0], body[1], None, body[3], body[4:], hdr, size
        if marker == b"|":
            return body[0], body[1], None, None, body[3:], hdr, size
        raise ProtocolError(None, f"route {name.decode()} bad reply indicator: {f!r}")

    def _payload_end(self, buf: bytes, start: int, n: int, pending: tuple[Any, ...]) -> int:
        """Where the payload starting at buf[start] ends (its size is pending's last item),
        checked for its CRLF; -1 when it has not all arrived: it waits, as `pending`."""
        size = pending[-1]
        end = start + size
        if end + 2 > n:
            if end < n and buf[end] != 13:
                raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
            self._wait_payload(buf, start, size, pending)
            return -1
        if buf[end] != 13 or buf[end + 1] != 10:
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        return end

    def _pub_args(self, name: bytes, arg: bytes, buf: bytes, start: int, n: int) -> int:
        f = split_fields(arg)
        hdr = 0
        if name == b"PUB":
            if len(f) == 2:
                subject, reply, size = f[0], None, parse_size(f[1])
            elif len(f) == 3:
                subject, reply, size = f[0], f[1], parse_size(f[2])
            else:
                raise ProtocolError(None, f"PUB parse error: {arg!r}")
            if size < 0:
                raise ProtocolError(None, f"PUB bad or missing size: {arg!r}")
        else:
            if not self.headers:
                raise ProtocolError(None, "HPUB without headers support")
            if len(f) == 3:
                subject, reply, hdr, size = f[0], None, parse_size(f[1]), parse_size(f[2])
            elif len(f) == 4:
                subject, reply, hdr, size = f[0], f[1], parse_size(f[2]), parse_size(f[3])
            else:
                raise ProtocolError(None, f"HPUB parse error: {arg!r}")
            if hdr < 0 or size < 0 or hdr > size:
                raise ProtocolError(None, f"HPUB bad sizes: {arg!r}")
        if size > self.max_payload:
            if hdr > 0 and start < n:
                # The reference traces it still: what of the headers has arrived goes along.
                self.handler.on_hpub_too_big(subject, buf[start : min(start + hdr, n)], size)
            raise ProtocolError(MAX_PAYLOAD_VIOLATION)
        if self.pedantic and not is_valid_literal_subject(subject):
            self.handler.on_soft_error(INVALID_PUBLISH_SUBJECT)
        end = self._payload_end(
            buf, start, n, (None if name == b"PUB" else name, subject, reply, hdr, size)
        )
        if end < 0:
            return -1
        if name == b"PUB":
            self._on_pub(subject, reply, buf[start:end])
        else:
            self.handler.on_hpub(subject, reply, hdr, buf[start:end])
        return end + 2


class ServerOpHandler(Protocol):
    """What a client implements to receive server operations."""

    def on_info(self, info: dict[str, Any]) -> None: ...
    def on_msg(
        self, subject: bytes, sid: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes
    ) -> None: ...
    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...
    def on_ok(self) -> None: ...
    def on_err(self, message: str) -> None: ...


class ServerOpParser(_Framer):
    """Parses server operations for a client. Raises ProtocolError on malformed input."""

    def __init__(self, handler: ServerOpHandler, max_control_line: int = 1024 * 1024) -> None:
        super().__init__()
        self.handler = handler
        self.max_control_line = max_control_line
        self._on_msg = handler.on_msg

    def feed(self, data: bytes) -> None:
        buf = self._take(data)
        if buf is None:
            return
        pos = 0
        if self._pending is not None:
            sid, subject, reply, hdr, size = self._pending
            self._pending = None
            if buf[size] != 13 or buf[size + 1] != 10:
                raise ProtocolError(None, "payload not followed by CRLF")
            if hdr:
                self._on_msg(subject, sid, reply, buf[:hdr], buf[hdr:size])
            else:
                self._on_msg(subject, sid, reply, None, buf[:size])
            pos = size + 2
        n = len(buf)
        on_msg = self._on_msg
        while pos < n:
            eol = buf.find(b"\n", pos)
            if eol < 0:
                if n - pos > self.max_control_line:
                    raise ProtocolError(None, "control line too long")
                op = _classify(_SERVER_OPS, buf, pos, n)
                if op == _BAD:
                    raise ProtocolError(None, f"unknown operation {buf[pos:pos + 16]!r}")
                self._buf = buf[pos:]
                return
            line_end = eol - 1 if buf[eol - 1] == 13 else eol
            if buf.startswith(b"MSG ", pos):
                f = buf[pos + 4 : line_end].split()
                hdr = 0
                if len(f) == 3:
                    subject, sid, szb = f
                    reply = None
                elif len(f) == 4:
                    subject, sid, reply, szb = f
                else:
                    raise ProtocolError(None, f"bad MSG line {buf[pos:eol]!r}")
                # parse_size inlined: this line runs once per message a client receives
                size = int(szb) if szb.isdigit() and len(szb) <= _MAX_SIZE_DIGITS else -1
            elif buf.startswith(b"HMSG ", pos):  # (as MSG: a JetStream client's every message)
                f = buf[pos + 5 : line_end].split()
                if len(f) == 4:
                    subject, sid, hdrb, szb = f
                    reply = None
                elif len(f) == 5:
                    subject, sid, reply, hdrb, szb = f
                else:
                    raise ProtocolError(None, f"bad HMSG line {buf[pos:eol]!r}")
                hdr = int(hdrb) if hdrb.isdigit() and len(hdrb) <= _MAX_SIZE_DIGITS else -1
                size = int(szb) if szb.isdigit() and len(szb) <= _MAX_SIZE_DIGITS else -1
                if hdr < 0 or hdr > size:
                    raise ProtocolError(None, f"bad HMSG sizes {buf[pos:eol]!r}")
            else:
                op = _classify(_SERVER_OPS, buf, pos, eol)
                if not isinstance(op, tuple):
                    raise ProtocolError(None, f"unknown operation {buf[pos:eol]!r}")
                name, _kind, arg_start = op
                arg = buf[arg_start:line_end]
                if name == b"PING":
                    self.handler.on_ping()
                    pos = eol + 1
                    continue
                if name == b"PONG":
                    self.handler.on_pong()
                    pos = eol + 1
                    continue
                if name == b"+OK":
                    self.handler.on_ok()
                    pos = eol + 1
                    continue
                if name == b"-ERR":
                    self.handler.on_err(_unquote(arg.decode(errors="replace")))
                    pos = eol + 1
                    continue
                if name == b"INFO":
                    self.handler.on_info(decode_json(arg, "INFO"))
                    pos = eol + 1
                    continue
                if name == b"MSG":
                    f = arg.split()
                    hdr = 0
                    if len(f) == 3:
                        subject, sid, reply, szb = f[0], f[1], None, f[2]
                    elif len(f) == 4:
                        subject, sid, reply, szb = f
                    else:
                        raise ProtocolError(None, f"bad MSG line {buf[pos:eol]!r}")
                    size = parse_size(szb)
                else:  # HMSG
                    f = arg.split()
                    if len(f) == 4:
                        subject, sid, reply = f[0], f[1], None
                        hdr, size = parse_size(f[2]), parse_size(f[3])
                    elif len(f) == 5:
                        subject, sid, reply = f[0], f[1], f[2]
                        hdr, size = parse_size(f[3]), parse_size(f[4])
                    else:
                        raise ProtocolError(None, f"bad HMSG line {buf[pos:eol]!r}")
                    if hdr < 0 or hdr > size:
                        raise ProtocolError(None, f"bad HMSG sizes {buf[pos:eol]!r}")
            if size < 0:
                raise ProtocolError(None, f"bad size in {buf[pos:eol]!r}")
            start = eol + 1
            end = start + size
            if end + 2 > n:
                self._wait_payload(buf, start, size, (sid, subject, reply, hdr, size))
                return
            if buf[end] != 13 or buf[end + 1] != 10:
                raise ProtocolError(None, "payload not followed by CRLF")
            if hdr:
                on_msg(subject, sid, reply, buf[start : start + hdr], buf[start + hdr : end])
            else:
                on_msg(subject, sid, reply, None, buf[start:end])
            pos = end + 2


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1]
    return text
