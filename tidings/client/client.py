"""The client: connect and reconnect, publish, subscribe, request/reply, flush, drain, close.

One `Client` owns a server pool, at most one live `Connection`, the subscriptions, a
`WriteBuffer` of publishes not yet handed to the transport, and an event task that runs the
user's callbacks in order. Publishes are buffered and written once per event-loop turn (or as
soon as 64 KiB are waiting). While the transport is over its high-water mark every `publish`
waits for it to drain, so the bytes held un-sent stay bounded whatever the publisher's rhythm;
`publish_nowait` raises `OutboundBufferLimitError` instead once `reconnect_buffer_size` bytes
are held. While disconnected, publishes are kept up to `reconnect_buffer_size` bytes and sent
after the reconnect; beyond that `publish` raises `OutboundBufferLimitError`.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import ParseResult, unquote

from ..protocol import encode
from ..protocol.headers import HeaderError, Headers
from ..protocol.subjects import is_valid_subject
from . import errors
from .auth import Credentials, JWTCallback, SignatureCallback
from .connection import CRLF, LARGE_PAYLOAD, Connection, WriteBuffer
from .events import EventCallback, EventDispatcher
from .msg import Msg
from .nuid import NUID
from .pool import Server, ServerPool, default_reconnect_delay
from .subscription import (
    DEFAULT_SUB_PENDING_BYTES_LIMIT,
    DEFAULT_SUB_PENDING_MSGS_LIMIT,
    MsgCallback,
    RawCallback,
    RawSubscription,
    ResponseMux,
    Subscription,
)
from .transport import TLS_SCHEMES, WS_SCHEMES, default_tls_context, open_tcp, open_websocket

__version__ = "0.1.0"

DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_PING_INTERVAL = 120.0
DEFAULT_MAX_PINGS_OUT = 2
DEFAULT_MAX_RECONNECT_ATTEMPTS = 60
DEFAULT_RECONNECT_BUFFER_SIZE = 8 * 1024 * 1024
DEFAULT_DRAIN_TIMEOUT = 30.0
DEFAULT_FLUSH_TIMEOUT = 10.0
DEFAULT_MAX_PAYLOAD = 1024 * 1024
DEFAULT_INBOX_PREFIX = "_INBOX"
SOFT_WRITE_LIMIT = 64 * 1024
CLOSE_TIMEOUT = 2.0

CONNECTING, CONNECTED, RECONNECTING, DRAINING_SUBS, DRAINING_PUBS, CLOSED = range(6)

_BAD_SUBJECT = re.compile(r"\s")
_SUBJECT_CACHE_MAX = 4096
_SIZE_LINES = [b"%d\r\n" % i for i in range(LARGE_PAYLOAD)]

Callback = Callable[[], Awaitable[None] | None]
ErrorCallback = Callable[[Exception], Awaitable[None] | None]


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(errors.TimeoutError())


class Client:
    """An asyncio NATS client. Use `await connect(...)`, or `Client()` then `await connect()`."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._status = CLOSED
        self._fast_max = -1  # largest payload publish() may take on its fast path; -1: none
        self._ever_connected = False
        self._conn: Connection | None = None
        self._srv: Server | None = None
        self._pool = ServerPool()
        self._info: dict[str, Any] = {}
        self._max_payload = DEFAULT_MAX_PAYLOAD
        self._wbuf = WriteBuffer()
        self._write_limit = SOFT_WRITE_LIMIT  # buffered bytes at which publish waits; 0: always
        self._flush_queued = False
        self._subs: dict[bytes, Subscription] = {}
        self._ssid = 0
        self._subjects: dict[str | bytes, bytes] = {}
        self._pub_prefixes: dict[str | bytes, bytes] = {}
        self._nuid = NUID()
        self._mux: ResponseMux | None = None
        self._resp_prefix = b""
        self._resp_seq = 0
        self._pending_flushes: list[asyncio.Future[None]] = []
        self._reconnect_task: asyncio.Task[None] | None = None
        self._events: EventDispatcher | None = None
        self._closed_fut: asyncio.Future[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._handshaking: Connection | None = None
        self._last_error: BaseException | None = None
        self.stats = {"in_msgs": 0, "out_msgs": 0, "reconnects": 0}
        self.options: dict[str, Any] = {}

    # -- connect -------------------------------------------------------------
    async def connect(
        self,
        servers: str | list[str] = "nats://127.0.0.1:4222",
        error_cb: ErrorCallback | None = None,
        disconnected_cb: Callback | None = None,
        closed_cb: Callback | None = None,
        discovered_server_cb: Callback | None = None,
        reconnected_cb: Callback | None = None,
        name: str | None = None,
        pedantic: bool = False,
        verbose: bool = False,
        allow_reconnect: bool = True,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        reconnect_time_wait: float | None = None,
        max_reconnect_attempts: int = DEFAULT_MAX_RECONNECT_ATTEMPTS,
        ping_interval: float = DEFAULT_PING_INTERVAL,
        max_outstanding_pings: int = DEFAULT_MAX_PINGS_OUT,
        dont_randomize: bool = False,
        flusher_queue_size: int = 0,
        no_echo: bool = False,
        tls: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        tls_handshake_first: bool = False,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        signature_cb: SignatureCallback | None = None,
        user_jwt_cb: JWTCallback | None = None,
        user_credentials: str | None = None,
        nkeys_seed: str | None = None,
        nkeys_seed_str: str | None = None,
        inbox_prefix: str | bytes = DEFAULT_INBOX_PREFIX,
        pending_size: int | None = None,
        flush_timeout: float | None = None,
        ws_connection_headers: dict[str, Any] | None = None,
        lame_duck_mode_cb: Callback | None = None,
        *,
        max_pings_out: int | None = None,
        reconnect_delay: Callable[[int], float] | None = None,
        reconnect_buffer_size: int | None = None,
        retain_servers_order: bool | None = None,
        event_cb: EventCallback | None = None,
        skip_subject_validation: bool = False,
        dialer: Callable[[asyncio.Protocol], asyncio.Transport] | None = None,
    ) -> None:
        """Connect to the first server of the pool that answers; see docs/client.md."""
        if self._status != CLOSED and self._conn is not None:
            raise errors.Error("nats: already connected")
        self._loop = asyncio.get_running_loop()
        urls = [servers] if isinstance(servers, str) else list(servers)
        if not urls:
            raise errors.NoServersError("empty server list")
        randomize = not (dont_randomize or bool(retain_servers_order))
        self._pool = ServerPool.from_urls(urls, randomize=randomize)
        if isinstance(inbox_prefix, bytes):
            inbox_prefix = inbox_prefix.decode()
        if not inbox_prefix or _BAD_SUBJECT.search(inbox_prefix) or inbox_prefix.endswith("."):
            raise errors.BadSubjectError()
        if reconnect_delay is None and reconnect_time_wait is not None:
            wait = float(reconnect_time_wait)
            reconnect_delay = lambda attempt: 0.0 if attempt <= 1 else wait  # noqa: E731
        if reconnect_buffer_size is None:
            reconnect_buffer_size = (
                pending_size if pending_size is not None else DEFAULT_RECONNECT_BUFFER_SIZE
            )
        self.options = {
            "name": name,
            "pedantic": pedantic,
            "verbose": verbose,
            "allow_reconnect": allow_reconnect,
            "connect_timeout": connect_timeout,
            "max_reconnect_attempts": max_reconnect_attempts,
            "ping_interval": ping_interval,
            "max_outstanding_pings": (
                max_pings_out if max_pings_out is not None else max_outstanding_pings
            ),
            "no_echo": no_echo,
            "tls": tls,
            "tls_hostname": tls_hostname,
            "tls_handshake_first": tls_handshake_first,
            "drain_timeout": drain_timeout,
            "inbox_prefix": inbox_prefix,
            "reconnect_buffer_size": reconnect_buffer_size,
            "flush_timeout": flush_timeout,
            "ws_connection_headers": ws_connection_headers,
            "reconnect_delay": reconnect_delay or default_reconnect_delay,
            "skip_subject_validation": skip_subject_validation,
            # In-process: instead of a socket, `dialer(protocol)` joins us to a server of
            # this process (Server.dial_internal) and returns our end of the pipe.
            "dialer": dialer,
        }
        self._credentials = Credentials.build(
            user=user, password=password, token=token, nkeys_seed=nkeys_seed,
            nkeys_seed_str=nkeys_seed_str, user_credentials=user_credentials,
            signature_cb=signature_cb, user_jwt_cb=user_jwt_cb,
        )
        callbacks: dict[str, Callable[..., Any] | None] = {
            "error": error_cb,
            "disconnected": disconnected_cb,
            "closed": closed_cb,
            "discovered_server": discovered_server_cb,
            "reconnected": reconnected_cb,
            "lame_duck": lame_duck_mode_cb,
        }
        self._inbox_prefix = inbox_prefix.encode()
        self._set_status(CONNECTING)
        self._closed_fut = self._loop.create_future()
        self._events = EventDispatcher(callbacks, event_cb)

        if self._pool.unresolved and dialer is None:
            await self._pool.resolve(connect_timeout)
        last: BaseException | None = None
        for srv in list(self._pool.servers):
            try:
                conn = await self._connect_to(srv)
            except (OSError, asyncio.TimeoutError, errors.Error, ssl.SSLError) as exc:
                self._pool.failed(srv, self._loop.time(), self.options["reconnect_delay"])
                last = exc
                if self._status == CLOSED:
                    break
                continue
            if self._status == CLOSED:  # close() was called while we were connecting
                conn.abort()
                break
            self._attach(conn, srv)
            self._emit("connected", srv.url)
            return
        if self._status == CLOSED:
            raise errors.ConnectionClosedError()
        await self._stop_events()
        self._set_status(CLOSED)
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)
        if isinstance(last, errors.ServerError | errors.SecureConnWantedError
                      | errors.SecureConnFailedError | errors.InvalidUserCredentialsError):
            raise last  # a typed answer (e.g. Authorization Violation) says more than "no servers"
        raise errors.NoServersError(str(last) if last else "") from last

    async def _connect_to(self, srv: Server) -> Connection:
        """Open a transport and run INFO → (TLS) → CONNECT → PING → PONG."""
        opts = self.options
        timeout = opts["connect_timeout"]
        uri = srv.uri
        host = uri.hostname or "127.0.0.1"
        port = uri.port or 4222
        tls: ssl.SSLContext | None = opts["tls"]
        tls_name = opts["tls_hostname"] or srv.tls_name or host
        conn = Connection(self)
        self._handshaking = conn
        try:
            if opts["dialer"] is not None:
                opts["dialer"](conn)
                info = await conn.wait_info(timeout)
            elif uri.scheme in WS_SCHEMES:
                ws_url = uri._replace(netloc=f"{host}:{port}" if ":" not in host
                                      else f"[{host}]:{port}").geturl()
                ws_tls = tls if uri.scheme == "wss" else None
                await asyncio.wait_for(
                    open_websocket(conn, ws_url, timeout, ws_tls, opts["ws_connection_headers"]),
                    timeout,
                )
                info = await conn.wait_info(timeout)
            elif opts["tls_handshake_first"]:
                await open_tcp(conn, host, port, timeout, tls or default_tls_context(), tls_name)
                info = await conn.wait_info(timeout)
            else:
                await open_tcp(conn, host, port, timeout)
                info = await conn.wait_info(timeout)
                want = uri.scheme in TLS_SCHEMES or tls is not None
                offered = bool(info.get("tls_required") or info.get("tls_available"))
                if want and not offered:
                    raise errors.SecureConnWantedError()
                if info.get("tls_required") or want:
                    await conn.upgrade_tls(tls or default_tls_context(), tls_name, timeout)
            await conn.finish_handshake(encode.connect(self._connect_fields(info, uri)), timeout)
        except BaseException:
            conn.abort()
            raise
        finally:
            self._handshaking = None
        return conn

    def _connect_fields(self, info: dict[str, Any], uri: ParseResult) -> dict[str, Any]:
        opts = self.options
        fields: dict[str, Any] = {
            "verbose": opts["verbose"],
            "pedantic": opts["pedantic"],
            "lang": "python3",
            "version": f"tidings-{__version__}",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
        }
        if opts["no_echo"]:
            fields["echo"] = False
        if opts["name"]:
            fields["name"] = opts["name"]
        if uri.scheme in TLS_SCHEMES or opts["tls"] is not None:
            fields["tls_required"] = True
        url_user = unquote(uri.username) if uri.username else None
        url_pass = unquote(uri.password) if uri.password else None
        fields.update(self._credentials.connect_fields(info, url_user, url_pass))
        return fields

    def _attach(self, conn: Connection, srv: Server) -> None:
        """Make a freshly handshaken connection the live one."""
        self._conn = conn
        self._srv = srv
        self._pool.connected(srv)
        self._write_limit = 0 if conn.paused else SOFT_WRITE_LIMIT
        self._ever_connected = True
        self._apply_info(conn.info, initial=True)
        conn.go_live(self.options["ping_interval"], self.options["max_outstanding_pings"])
        self._set_status(CONNECTED)

    def _set_status(self, status: int) -> None:
        self._status = status
        # The fast path is closed while the transport is full, so every publish waits then.
        self._fast_max = (
            min(LARGE_PAYLOAD - 1, self._max_payload)
            if status == CONNECTED and self._write_limit else -1
        )

    def _apply_info(self, info: dict[str, Any], initial: bool = False) -> None:
        self._info.update(info)
        if "max_payload" in info:
            self._max_payload = int(info["max_payload"])
            self._set_status(self._status)
        urls = info.get("connect_urls")
        if urls and self._srv is not None:
            scheme = self._srv.uri.scheme
            tls_name = self._srv.uri.hostname if info.get("tls_required") else None
            added = self._pool.add_discovered(urls, scheme, tls_name)
            if added and self._pool.unresolved:  # a name among them: merge duplicates soon
                self._spawn(self._pool.resolve(self.options["connect_timeout"]))
            if added and not initial:
                self._emit("discovered_server", [s.url for s in added])
        if not initial and info.get("ldm"):
            self._emit("lame_duck", None)

    # -- connection events (called by Connection) ----------------------------
    def on_msg(self, subject: bytes, sid: bytes, reply: bytes | None, hdr: bytes | None,
               payload: bytes) -> None:
        sub = self._subs.get(sid)
        if sub is not None:
            sub._deliver(subject, reply, hdr, payload)

    def on_async_info(self, info: dict[str, Any]) -> None:
        self._apply_info(info)

    def on_server_error(self, message: str) -> None:
        err = errors.server_error(message)
        self._last_error = err
        self._emit("error", err)

    def on_write_paused(self, conn: Connection, paused: bool) -> None:
        if conn is self._conn:
            self._write_limit = 0 if paused else SOFT_WRITE_LIMIT
            self._set_status(self._status)

    def on_connection_lost(self, conn: Connection, reason: BaseException) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        self._write_limit = SOFT_WRITE_LIMIT
        self._pool.lost = self._srv
        self._pending_flushes.extend(
            f for f in conn.pongs if f is not None and not f.done()
        )
        conn.pongs.clear()
        if self._status == CLOSED:
            return
        if not isinstance(reason, errors.ConnectionClosedError):
            self._last_error = reason
        self._emit("disconnected", reason)
        if self._status in (DRAINING_SUBS, DRAINING_PUBS) or not self.options["allow_reconnect"]:
            self._spawn(self._close())
            return
        self._set_status(RECONNECTING)
        self._reconnect_task = self._loop.create_task(self._reconnect())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = self._loop.create_task(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- reconnect -------------------------------------------------------------
    async def _reconnect(self) -> None:
        """Try the server that is due and has failed least; sleep only when none is due."""
        opts = self.options
        max_attempts: int = opts["max_reconnect_attempts"]
        delay_of: Callable[[int], float] = opts["reconnect_delay"]
        pool = self._pool
        if pool.unresolved:
            await pool.resolve(opts["connect_timeout"])
        attempts = 0
        while self._status == RECONNECTING:
            srv, wait = pool.next_attempt(self._loop.time())
            if srv is None:
                await asyncio.sleep(wait)
                continue
            attempts += 1
            if 0 <= max_attempts < attempts:
                self._last_error = errors.NoServersError("reconnect attempts exhausted")
                self._emit("error", self._last_error)
                await self._close()
                return
            try:
                conn = await self._connect_to(srv)
            except Exception as exc:
                pool.failed(srv, self._loop.time(), delay_of)
                self._last_error = exc
                if isinstance(exc, errors.ServerError):
                    self._emit("error", exc)
                continue
            if self._status != RECONNECTING:
                conn.abort()
                return
            self._resume(conn, srv)
            return

    def _resume(self, conn: Connection, srv: Server) -> None:
        """After a reconnect: resubscribe, send what was buffered, re-ping waiting flushes."""
        self._attach(conn, srv)
        self.stats["reconnects"] += 1
        out = bytearray()
        for sid, sub in list(self._subs.items()):
            if sub._max_msgs:
                left = sub._max_msgs - sub._received
                if left <= 0:
                    self._remove_sub(sub)
                    sub._finish()
                    continue
            out += encode.sub(sub._subject.encode(), sid, sub._queue_name.encode() or None)
            if sub._max_msgs:
                out += encode.unsub(sid, sub._max_msgs - sub._received)
        if out:
            conn.write(out)
        self._flush_now()
        flushes, self._pending_flushes = self._pending_flushes, []
        for fut in flushes:
            if not fut.done():
                conn.ping(fut)
        self._emit("reconnected", None)

    # -- write path ------------------------------------------------------------
    def _check_subject(self, subject: str | bytes) -> bytes:
        raw = subject.encode() if isinstance(subject, str) else bytes(subject)
        if not raw or (not self.options["skip_subject_validation"]
                       and _BAD_SUBJECT.search(raw.decode(errors="replace"))):
            raise errors.BadSubjectError()
        if len(self._subjects) >= _SUBJECT_CACHE_MAX:
            self._subjects.clear()
        self._subjects[subject] = raw
        return raw

    def _check_can_publish(self, size: int, nowait: bool = False) -> None:
        """Raise the error that forbids holding `size` more bytes un-sent, if there is one.

        While disconnected the reconnect buffer is the bound; while connected it bounds only
        `publish_nowait` (which cannot wait), and one message always fits an empty buffer."""
        status = self._status
        if status == CLOSED:
            raise errors.ConnectionClosedError()
        if status == DRAINING_PUBS:
            raise errors.ConnectionDrainingError()
        limit = self.options["reconnect_buffer_size"]
        if status in (RECONNECTING, CONNECTING):
            if limit <= 0 or self._wbuf.size + size > limit:
                raise errors.OutboundBufferLimitError()
        elif nowait:
            pending = self.pending_data_size
            if pending and pending + size > limit:
                raise errors.OutboundBufferLimitError()

    def _encode_headers(self, headers: Mapping[str, Any] | Headers) -> bytes:
        try:
            if not isinstance(headers, Headers):
                headers = Headers(headers)
            return headers.encode()
        except (HeaderError, TypeError, AttributeError) as exc:
            raise errors.BadHeaderError(str(exc)) from exc

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: Mapping[str, Any] | Headers | None = None,
    ) -> None:
        """Publish `payload` on `subject` (with an optional reply subject and headers)."""
        pre = self._pub_prefixes.get(subject)
        if pre is None:
            pre = self._pub_prefix(subject)
        n = len(payload)
        if n > self._fast_max or reply or headers is not None:
            if self._publish_checked(pre, payload, reply, headers):
                await self._soft_limit()
            return
        # The common case, kept flat: "PUB <subject> " is cached, the size line is a table.
        wb = self._wbuf
        buf = wb.flat
        buf.extend(pre)
        buf.extend(_SIZE_LINES[n])
        buf.extend(payload)
        buf.extend(CRLF)
        if not self._flush_queued:
            self._flush_queued = True
            self._loop.call_soon(self._flush_soon)
        if len(buf) + wb.chunked >= SOFT_WRITE_LIMIT:
            await self._soft_limit()

    def publish_nowait(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: Mapping[str, Any] | Headers | None = None,
    ) -> None:
        """Buffer a publish at once, without waiting for the socket to drain.

        For code that cannot await (timers, raw callbacks). Errors are raised as by
        publish(), and `OutboundBufferLimitError` when more than `reconnect_buffer_size`
        bytes would be held un-sent (buffered here or in the transport)."""
        pre = self._pub_prefixes.get(subject)
        if pre is None:
            pre = self._pub_prefix(subject)
        self._publish_checked(pre, payload, reply, headers, True)

    def publish_many_nowait(self, messages: list[tuple[str, bytes]]) -> None:
        """`publish_nowait` for many (subject, payload) messages without reply or headers,
        with one check of the buffer bound for all of them."""
        prefixes = self._pub_prefixes
        max_payload = self._max_payload
        parts = []
        for subject, payload in messages:
            pre = prefixes.get(subject)
            if pre is None:
                pre = self._pub_prefix(subject)
            n = len(payload)
            if n > max_payload:
                raise errors.MaxPayloadError()
            parts.append(pre)
            parts.append(_SIZE_LINES[n] if n < LARGE_PAYLOAD else b"%d\r\n" % n)
            parts.append(payload)
            parts.append(CRLF)
        data = b"".join(parts)
        self._check_can_publish(len(data), True)
        self._wbuf.flat.extend(data)
        if not self._flush_queued:
            self._flush_queued = True
            self._loop.call_soon(self._flush_soon)

    def _publish_checked(self, pre: bytes, payload: bytes, reply: str,
                         headers: Mapping[str, Any] | Headers | None,
                         nowait: bool = False) -> bool:
        rep = b""
        if reply:
            rep = self._subjects.get(reply) or self._check_subject(reply)
        return self._publish_raw(pre[4:-1], rep, payload, headers, nowait)

    def _pub_prefix(self, subject: str | bytes) -> bytes:
        pre = b"PUB " + self._check_subject(subject) + b" "
        if len(self._pub_prefixes) >= _SUBJECT_CACHE_MAX:
            self._pub_prefixes.clear()
        self._pub_prefixes[subject] = pre
        return pre

    def _publish_raw(self, subj: bytes, rep: bytes, payload: bytes,
                     headers: Mapping[str, Any] | Headers | None, nowait: bool = False) -> bool:
        """Queue a publish of checked subjects (replies and inboxes need no check).

        Returns True when the write limit is reached and the caller should wait."""
        n = len(payload)
        if headers is None:
            if n > self._max_payload:
                raise errors.MaxPayloadError()
            if rep:
                head = b"PUB %s %s %d\r\n" % (subj, rep, n)
            else:
                head = b"PUB %s %d\r\n" % (subj, n)
        else:
            head = self._hpub_head(subj, rep, n, headers)
        if self._status != CONNECTED or nowait:
            self._check_can_publish(len(head) + n + 2, nowait)
        wb = self._wbuf
        if n < LARGE_PAYLOAD:
            buf = wb.flat
            buf.extend(head)
            buf.extend(payload)
            buf.extend(CRLF)
        else:
            wb.add_large(head, payload)
        if not self._flush_queued:
            self._flush_queued = True
            self._loop.call_soon(self._flush_soon)
        return wb.size >= self._write_limit

    def _hpub_head(self, subj: bytes, rep: bytes, n: int,
                   headers: Mapping[str, Any] | Headers) -> bytes:
        hdr = self._encode_headers(headers)
        total = len(hdr) + n
        if total > self._max_payload:
            raise errors.MaxPayloadError()
        if rep:
            return b"HPUB %s %s %d %d\r\n%s" % (subj, rep, len(hdr), total, hdr)
        return b"HPUB %s %d %d\r\n%s" % (subj, len(hdr), total, hdr)

    def _flush_soon(self) -> None:
        self._flush_queued = False
        self._flush_now()

    def _flush_now(self) -> None:
        """Hand everything buffered to the transport (when connected)."""
        conn = self._conn
        if conn is None or self._status in (CONNECTING, RECONNECTING):
            return
        wb = self._wbuf
        if wb.chunks:
            conn.writelines(wb.take())
        elif wb.flat:
            data = wb.flat
            wb.flat = bytearray()
            conn.write(data)

    async def _soft_limit(self) -> None:
        """64 KiB are waiting, or the transport is full: write what is waiting unless the
        transport is full, and wait while it is."""
        if self._status in (CONNECTING, RECONNECTING):
            return
        conn = self._conn
        if conn is not None and not conn.paused:
            self._flush_now()
        while conn is not None and conn.paused and conn.is_live:
            await conn.drained()
            conn = self._conn
        self._flush_now()

    def _write_control(self, data: bytes) -> None:
        """SUB/UNSUB: after what is already buffered, so program order holds on the wire."""
        conn = self._conn
        if conn is None or self._status in (CONNECTING, RECONNECTING):
            return  # re-sent from the subscription table after the reconnect
        self._flush_now()
        conn.write(data)

    # -- subscribe -------------------------------------------------------------
    async def subscribe(
        self,
        subject: str,
        queue: str = "",
        cb: MsgCallback | None = None,
        future: asyncio.Future[Msg] | None = None,
        max_msgs: int = 0,
        pending_msgs_limit: int = DEFAULT_SUB_PENDING_MSGS_LIMIT,
        pending_bytes_limit: int = DEFAULT_SUB_PENDING_BYTES_LIMIT,
        raw_cb: RawCallback | None = None,
    ) -> Subscription:
        """Subscribe; with `cb` messages go to the callback, else to `sub.messages`.

        `raw_cb(subject, reply, headers_block, payload)` (bytes, no Msg) is called
        synchronously from the read path instead: the fastest way in, for code that never
        blocks (see RawSubscription)."""
        if not subject or not is_valid_subject(subject):
            raise errors.BadSubjectError()
        if queue and _BAD_SUBJECT.search(queue):
            raise errors.BadSubjectError()
        if self._status == CLOSED:
            raise errors.ConnectionClosedError()
        if self._status in (DRAINING_SUBS, DRAINING_PUBS):
            raise errors.ConnectionDrainingError()
        if future is not None:
            if cb is not None:
                raise errors.Error("nats: cb and future are exclusive")
            target = future

            async def _to_future(msg: Msg) -> None:
                if not target.done():
                    target.set_result(msg)

            cb = _to_future
            max_msgs = max_msgs or 1
        self._ssid += 1
        if raw_cb is not None:
            if cb is not None:
                raise errors.Error("nats: cb and raw_cb are exclusive")
            sub: Subscription = RawSubscription(self, self._ssid, subject, queue, raw_cb,
                                                max_msgs)
        else:
            sub = Subscription(self, self._ssid, subject, queue, cb, max_msgs,
                               pending_msgs_limit, pending_bytes_limit)
        sub._start()
        self._subs[sub._sid] = sub
        data = encode.sub(subject.encode(), sub._sid, queue.encode() or None)
        if max_msgs > 0:
            data += encode.unsub(sub._sid, max_msgs)
        self._write_control(data)
        return sub

    def _send_unsub(self, sid: bytes, limit: int) -> None:
        self._write_control(encode.unsub(sid, limit or None))

    def _remove_sub(self, sub: Subscription) -> None:
        self._subs.pop(sub._sid, None)

    def _slow_consumer(self, sub: Subscription, subject: bytes, reply: bytes | None) -> None:
        err = errors.SlowConsumerError(
            subject.decode(errors="replace"), (reply or b"").decode(errors="replace"), sub._id, sub
        )
        self._emit("slow_consumer", err)

    def _callback_error(self, exc: Exception) -> None:
        self._emit("error", exc)

    # -- request / reply ---------------------------------------------------------
    def new_inbox(self) -> str:
        """A unique subject under the inbox prefix, for hand-made reply subscriptions."""
        return (self._inbox_prefix + b"." + self._nuid.next()).decode()

    def _ensure_mux(self) -> ResponseMux:
        mux = self._mux
        if mux is None:
            prefix = self._inbox_prefix + b"." + self._nuid.next() + b"."
            self._ssid += 1
            mux = ResponseMux(self, self._ssid, prefix)
            self._resp_prefix = prefix
            self._subs[mux._sid] = mux
            self._mux = mux
            self._write_control(encode.sub(prefix + b"*", mux._sid))
        return mux

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = 0.5,
        old_style: bool = False,
        headers: Mapping[str, Any] | Headers | None = None,
    ) -> Msg:
        """Publish a request and wait for the first reply (over one shared inbox).

        Raises `NoRespondersError` when the server answers 503 (nobody subscribed) and
        `TimeoutError` after `timeout` seconds.
        """
        if old_style:
            return await self._request_old_style(subject, payload, timeout, headers)
        mux = self._mux
        if mux is None or mux._closed:
            if self._status in (DRAINING_SUBS, DRAINING_PUBS):
                raise errors.ConnectionDrainingError()
            self._mux = None
            mux = self._ensure_mux()
        pre = self._pub_prefixes.get(subject)
        if pre is None:
            pre = self._pub_prefix(subject)
        self._resp_seq += 1
        token = b"%x" % self._resp_seq
        fut: asyncio.Future[Msg] = self._loop.create_future()
        mux.waiting[token] = fut
        try:
            if self._publish_raw(pre[4:-1], self._resp_prefix + token, payload, headers):
                await self._soft_limit()
            else:
                self._flush_now()  # the caller waits anyway: spare the loop turn
            timer = None if timeout is None else self._loop.call_later(timeout, _expire, fut)
            try:
                msg = await fut
            finally:
                if timer is not None:
                    timer.cancel()
        finally:
            mux.waiting.pop(token, None)
        if msg._hdr is not None and msg.is_no_responders:
            raise errors.NoRespondersError()
        return msg

    async def _request_old_style(self, subject: str, payload: bytes, timeout: float | None,
                                 headers: Mapping[str, Any] | Headers | None) -> Msg:
        inbox = self.new_inbox()
        sub = await self.subscribe(inbox, max_msgs=1)
        try:
            await self.publish(subject, payload, inbox, headers)
            msg = await sub.next_msg(timeout)
        finally:
            if not sub._closed:
                try:
                    await sub.unsubscribe()
                except errors.Error:
                    pass
        if msg.is_no_responders:
            raise errors.NoRespondersError()
        return msg

    # -- flush, rtt --------------------------------------------------------------
    async def flush(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> None:
        """Wait until the server has processed everything sent so far (a PING's PONG).

        While reconnecting, the PING is sent after the reconnect, behind the buffered data.
        """
        if timeout is None or timeout <= 0:
            raise errors.BadTimeoutError()
        if self._status == CLOSED:
            raise errors.ConnectionClosedError()
        fut: asyncio.Future[None] = self._loop.create_future()
        conn = self._conn
        if conn is not None and self._status not in (CONNECTING, RECONNECTING):
            self._flush_now()
            conn.ping(fut)
        else:
            self._pending_flushes.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                raise fut.exception() from None  # type: ignore[misc]
            raise errors.FlushTimeoutError() from None

    async def rtt(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> float:
        """Seconds for one PING/PONG round trip."""
        start = time.perf_counter()  # uvloop's clock has millisecond steps
        await self.flush(timeout)
        return time.perf_counter() - start

    # -- drain and close ---------------------------------------------------------
    async def drain(self, timeout: float | None = None) -> None:
        """Stop all subscriptions but handle what is queued, send pending publishes, close."""
        if self._status in (DRAINING_SUBS, DRAINING_PUBS):
            return
        if self._status == CLOSED:
            raise errors.ConnectionClosedError()
        if self._status in (CONNECTING, RECONNECTING):
            raise errors.ConnectionReconnectingError()
        limit = self.options["drain_timeout"] if timeout is None else timeout
        deadline = self._loop.time() + limit  # for the whole drain, closing included
        self._set_status(DRAINING_SUBS)
        subs = list(self._subs.values())
        timed_out = False
        try:
            await asyncio.wait_for(self._drain_subs(subs), limit)
        except asyncio.TimeoutError:
            timed_out = True
        except errors.Error as exc:
            self._emit("error", exc)
        conn = self._conn
        if self._status == DRAINING_SUBS and conn is not None:
            self._set_status(DRAINING_PUBS)
            fut: asyncio.Future[None] = self._loop.create_future()
            self._flush_now()
            conn.ping(fut)
            try:
                await asyncio.wait_for(fut, max(deadline - self._loop.time(), 0.0))
            except asyncio.TimeoutError:
                timed_out = True
            except errors.Error:
                pass
        if timed_out:
            self._emit("error", errors.DrainTimeoutError())
        await self._close(max(deadline - self._loop.time(), 0.0))

    async def _drain_subs(self, subs: list[Subscription]) -> None:
        for sub in subs:
            self._send_unsub(sub._sid, 0)
        conn = self._conn
        if conn is not None:
            fut: asyncio.Future[None] = self._loop.create_future()
            self._flush_now()
            conn.ping(fut)
            await fut
        for sub in subs:
            self._remove_sub(sub)
            sub._finish()
        for sub in subs:
            await sub._wait_consumed()

    async def close(self) -> None:
        """Close the connection; always returns, whatever state the client is in."""
        await self._close()

    async def _close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Close; the socket gets `timeout` seconds to take what is buffered, then is aborted."""
        if self._status == CLOSED:
            if self._closed_fut is not None and not self._closed_fut.done():
                await asyncio.shield(self._closed_fut)
            return
        was_connected = self._conn is not None
        self._set_status(CLOSED)
        if self._handshaking is not None:
            self._handshaking.abort()  # a connect or reconnect in progress ends now
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task], timeout=2.0)
        conn = self._conn
        self._conn = None
        if conn is not None:
            wb = self._wbuf
            if wb.size:
                conn.writelines(wb.take())
            await conn.close(timeout)
        self._wbuf.clear()
        closed_err = errors.ConnectionClosedError()
        for fut in self._pending_flushes:
            if not fut.done():
                fut.set_exception(closed_err)
        self._pending_flushes = []
        if conn is not None:
            for pong in conn.pongs:
                if pong is not None and not pong.done():
                    pong.set_exception(closed_err)
        if self._mux is not None:
            for fut in self._mux.waiting.values():
                if not fut.done():
                    fut.set_exception(errors.ConnectionClosedError())
        for sub in list(self._subs.values()):
            sub._finish()
            if sub._task is not None and not sub._task.done():
                sub._task.cancel()
        self._subs.clear()
        if was_connected:
            self._emit("disconnected", None)
        self._emit("closed", None)
        await self._stop_events()
        if self._closed_fut is not None and not self._closed_fut.done():
            self._closed_fut.set_result(None)

    # -- events ------------------------------------------------------------------
    def _emit(self, kind: str, arg: Any) -> None:
        if self._events is not None:
            self._events.emit(kind, arg)

    async def _stop_events(self) -> None:
        if self._events is not None:
            await self._events.stop()

    # -- properties --------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        return self._status in (CONNECTED, DRAINING_SUBS, DRAINING_PUBS) and self._conn is not None

    @property
    def is_closed(self) -> bool:
        return self._status == CLOSED

    @property
    def is_reconnecting(self) -> bool:
        return self._status == RECONNECTING

    @property
    def is_connecting(self) -> bool:
        return self._status == CONNECTING

    @property
    def is_draining(self) -> bool:
        return self._status in (DRAINING_SUBS, DRAINING_PUBS)

    @property
    def is_draining_pubs(self) -> bool:
        return self._status == DRAINING_PUBS

    @property
    def connected_url(self) -> ParseResult | None:
        if self._srv is None or not self.is_connected:
            return None
        return self._srv.uri

    @property
    def servers(self) -> list[ParseResult]:
        return [s.uri for s in self._pool.servers]

    @property
    def discovered_servers(self) -> list[ParseResult]:
        return [s.uri for s in self._pool.servers if s.discovered]

    @property
    def server_info(self) -> dict[str, Any]:
        return dict(self._info)

    @property
    def max_payload(self) -> int:
        return self._max_payload

    @property
    def client_id(self) -> int | None:
        return self._info.get("client_id")

    @property
    def connected_server_version(self) -> str:
        return str(self._info.get("version", ""))

    @property
    def last_error(self) -> BaseException | None:
        return self._last_error

    @property
    def pending_data_size(self) -> int:
        """Bytes published but not yet taken by the socket (buffered here or in the transport)."""
        conn = self._conn
        return self._wbuf.size + (conn.buffered if conn is not None else 0)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def connect(servers: str | list[str] = "nats://127.0.0.1:4222", **options: Any) -> Client:
    """Connect a new `Client`; takes nats-py's `connect()` options."""
    nc = Client()
    await nc.connect(servers, **options)
    return nc
