"""The WebSocket listener (`websocket { }`): NATS clients over ws:// and wss://, as nats-server.

aiohttp's server does the HTTP upgrade and the framing. Before it does, the request is checked
as the reference checks it (method, Host, Upgrade, Connection, Sec-WebSocket-Key and -Version,
same_origin and allowed_origins), with the reference's statuses. Each upgraded connection runs
an ordinary ClientConnection (the same protocol as over TCP) on `WebSocketTransport`, an
asyncio transport over the WebSocket: binary (or text) frames in are `data_received`, each
write of the server (one per flush) goes out as one binary frame, and the transport reports its
pending bytes and calls pause_writing/resume_writing around the limits, so flow control,
slow consumers and the write deadline work as over TCP. A close frame carries the status and
reason the reference gives for why the connection was closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from .options import WebSocketOptions

if TYPE_CHECKING:
    from .client import ClientConnection
    from .server import Server

log = logging.getLogger("tidings.server")

# The largest message taken in one WebSocket message (the reference's limit for compressed
# ones; uncompressed it has none, aiohttp needs one).
MAX_MESSAGE = 64 * 1024 * 1024
# While congested with nothing left to send: how often to look whether the socket drained.
DRAIN_POLL = 0.005
# How long a closing handshake waits for the client's close frame.
CLOSE_TIMEOUT = 1.0

# The close status and reason for why the server closed a client (its /connz reason), as the
# reference's close frame gives them.
_CLOSE_STATUS = {
    "Client Closed": 1000,
    "Authentication Timeout": 1008,
    "Authentication Failure": 1008,
    "Slow Consumer (Pending Bytes)": 1008,
    "Slow Consumer (Write Deadline)": 1008,
    "Maximum Connections Exceeded": 1008,
    "Maximum Control Line Exceeded": 1008,
    "Maximum Subscriptions Exceeded": 1008,
    "Authentication Expired": 1008,
    "Parse Error": 1002,
    "Protocol Violation": 1002,
    "Bad Client Protocol Version": 1002,
    "Maximum Payload Exceeded": 1009,
    "Write Error": 1001,
    "Read Error": 1001,
    "Stale Connection": 1001,
    "Server Shutdown": 1001,
}
_CLOSE_TEXT = {"Maximum Payload Exceeded": "Maximum Message Payload Exceeded"}


def close_frame_for(reason: str) -> tuple[int, bytes]:
    """(status, body) of the close frame for a connection closed for `reason`."""
    status = _CLOSE_STATUS.get(reason, 1011)
    body = _CLOSE_TEXT.get(reason, reason).encode()
    if len(body) > 123:  # a control frame's payload is at most 125 bytes
        body = body[:120] + b"..."
    return status, body


class WebSocketTransport(asyncio.Transport):
    """An asyncio transport for the server's protocol over one upgraded WebSocket."""

    def __init__(self, ws: web.WebSocketResponse, request: web.BaseRequest,
                 protocol: ClientConnection) -> None:
        super().__init__()
        self._ws = ws
        self._raw: asyncio.Transport | None = request.transport  # type: ignore[assignment]
        self._protocol = protocol
        raw = self._raw
        self._extra = {
            "peername": raw.get_extra_info("peername") if raw is not None else None,
            "sockname": raw.get_extra_info("sockname") if raw is not None else None,
            "ssl_object": raw.get_extra_info("ssl_object") if raw is not None else None,
            "peercert": raw.get_extra_info("peercert") if raw is not None else None,
        }
        self._out: list[bytes] = []
        self._queued = 0  # bytes in _out
        self._inflight = 0  # bytes being compressed, not yet in the socket's buffer
        self._sending = False  # the writer is in a send (waiting for the socket to drain)
        self._high = 64 * 1024
        self._low = 16 * 1024
        self._congested = False  # the protocol's pause_writing was called
        self._closing = False
        self._wake = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()

    # -- asyncio.Transport ---------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._out.append(bytes(data))
        self._queued += len(data)
        self._wake.set()
        self._check_high()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._closing:
            return
        for data in list_of_data:
            self._out.append(bytes(data))
            self._queued += len(data)
        self._wake.set()
        self._check_high()

    def get_write_buffer_size(self) -> int:
        """What the socket has not taken. Bytes queued while the writer is idle go to the
        socket on the next loop turn (as a socket transport's write would send them at
        once): they count only while the writer waits for the socket to drain."""
        raw = self._raw
        buffered = raw.get_write_buffer_size() if raw is not None and not raw.is_closing() else 0
        waiting = self._queued if self._sending else 0
        return waiting + self._inflight + buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        self._high, self._low = high, low

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is queued, then a close frame with the reason, then close."""
        if not self._closing:
            self._closing = True
            self._wake.set()
            self._reading.set()

    def abort(self) -> None:
        """Close at once, dropping what is queued (a slow consumer)."""
        self._closing = True
        self._out.clear()
        self._queued = 0
        self._wake.set()
        self._reading.set()
        if self._raw is not None:
            self._raw.abort()

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "websocket":
            return self._ws
        value = self._extra.get(name)
        if value is None and self._raw is not None:
            value = self._raw.get_extra_info(name)
        return default if value is None else value

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- flow control ----------------------------------------------------------
    def _check_high(self) -> None:
        if not self._congested and self.get_write_buffer_size() > self._high:
            self._congested = True
            self._protocol.pause_writing()

    def _check_low(self) -> None:
        if self._congested and self.get_write_buffer_size() <= self._low:
            self._congested = False
            self._protocol.resume_writing()

    # -- the connection's life -------------------------------------------------
    async def run(self) -> None:
        """Read until the WebSocket closes (the writer runs beside), then tell the protocol."""
        writer = asyncio.ensure_future(self._write_loop())
        exc: Exception | None = None
        try:
            exc = await self._read_loop()
        finally:
            self._closing = True
            self._wake.set()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(writer, CLOSE_TIMEOUT + 1)
            if not writer.done():
                writer.cancel()
            self._out.clear()
            self._queued = self._inflight = 0
            self._raw = None
            self._protocol.connection_lost(exc)

    async def _read_loop(self) -> Exception | None:
        ws, protocol = self._ws, self._protocol
        while not self._closing:
            if not self._reading.is_set():
                await self._reading.wait()
                continue
            msg = await ws.receive()
            if msg.type is WSMsgType.BINARY or msg.type is WSMsgType.TEXT:
                data = msg.data
                protocol.data_received(data if isinstance(data, bytes) else data.encode())
            elif msg.type is WSMsgType.ERROR:
                return msg.data if isinstance(msg.data, Exception) else None
            else:  # CLOSE, CLOSING, CLOSED: the client is gone (aiohttp answered its close)
                return None
        # We are closing: the writer sends the close frame, whose answer ends the reading.
        while not ws.closed:
            msg = await ws.receive()
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED,
                            WSMsgType.ERROR):
                break
        return None

    async def _write_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                if not self._out:
                    if self._closing:
                        break
                    if self._congested:
                        # Nothing more to send, but the socket still holds too much: look
                        # again shortly (aiohttp does not tell us when it drains).
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), DRAIN_POLL)
                        self._check_low()
                    else:
                        await self._wake.wait()
                    self._wake.clear()
                    continue
                out = self._out
                data = out[0] if len(out) == 1 else b"".join(out)
                self._out = []
                self._queued = 0
                self._inflight = len(data) if ws.compress else 0
                self._sending = True
                try:
                    await ws.send_bytes(data)
                finally:
                    self._inflight = 0
                    self._sending = False
                self._check_high()
                self._check_low()
            if not ws.closed:
                status, body = close_frame_for(self._protocol.close_reason or "Client Closed")
                await ws.close(code=status, message=body)
        except (ConnectionError, RuntimeError, OSError) as exc:
            log.debug("websocket write failed: %s", exc)
            self._closing = True
            if self._raw is not None:
                self._raw.abort()


# -- the HTTP side -------------------------------------------------------------------------
def _header_has(request: web.BaseRequest, name: str, value: str) -> bool:
    """Whether one of the comma-separated tokens of header `name` is `value` (any case)."""
    for line in request.headers.getall(name, ()):
        for token in line.split(","):
            if token.strip(" \t").lower() == value.lower():
                return True
    return False


def _host_and_port(tls: bool, hostport: str) -> tuple[str, str]:
    """Host (lower case) and port of "host[:port]", the port defaulting by scheme."""
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, _, port = hostport.partition(":")
    else:
        host, port = hostport, ""
    return host.lower(), port or ("443" if tls else "80")


class _Origins:
    """same_origin and allowed_origins, checked as the reference checks them."""

    def __init__(self, options: WebSocketOptions) -> None:
        self.same = options.same_origin
        self.allowed: dict[str, list[tuple[str, str]]] = {}
        for origin in options.allowed_origins:
            parts = urlsplit(origin)
            host, port = _host_and_port(parts.scheme == "https", parts.netloc)
            self.allowed.setdefault(host, []).append((parts.scheme, port))

    def refusal(self, request: web.BaseRequest, tls: bool) -> str | None:
        """Why the request's origin is not allowed, or None."""
        if not self.same and not self.allowed:
            return None
        origin = request.headers.get("Origin") or request.headers.get("Sec-WebSocket-Origin")
        if not origin:
            return None
        parts = urlsplit(origin)
        if not parts.scheme or not parts.netloc:
            return f'parse "{origin}": invalid URI for request'
        host, port = _host_and_port(parts.scheme == "https", parts.netloc)
        if self.same:
            own_host, own_port = _host_and_port(tls, request.host)
            scheme = "https" if tls else "http"
            if (host, port) != (own_host, own_port) or parts.scheme.lower() != scheme:
                return "not same origin"
        if self.allowed and (parts.scheme, port) not in self.allowed.get(host, ()):
            return "not in the allowed list"
        return None


def _refuse(request: web.BaseRequest, status: int, reason: str) -> web.Response:
    """The reference's answer to a bad upgrade request: the status and its standard text."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    where = f"{peer[0]}:{peer[1]}" if peer else "?"
    log.error("%s - websocket handshake error: %s", where, reason)
    response = web.Response(status=status, text=f"{_STATUS_TEXT.get(status, 'Error')}\n")
    response.headers["Sec-WebSocket-Version"] = "13"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 404: "Not Found",
                405: "Method Not Allowed"}


def _check_upgrade(request: web.BaseRequest, origins: _Origins, tls: bool
                   ) -> tuple[int, str] | None:
    """(status, reason) when the upgrade request is refused, in the reference's order."""
    if request.path.endswith("/mqtt"):
        return 404, "mqtt websocket endpoint not enabled"
    if request.method != "GET":
        return 405, "request method must be GET"
    if not request.headers.get("Host"):
        return 400, "'Host' missing in request"
    if not _header_has(request, "Upgrade", "websocket"):
        return 400, "invalid value for header 'Upgrade'"
    if not _header_has(request, "Connection", "Upgrade"):
        return 400, "invalid value for header 'Connection'"
    key = request.headers.get("Sec-WebSocket-Key", "")
    if not key:
        return 400, "key missing"
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        return 400, "invalid websocket key"
    if not _header_has(request, "Sec-WebSocket-Version", "13"):
        return 400, "invalid version"
    why = origins.refusal(request, tls)
    if why:
        return 403, f"origin not allowed: {why}"
    return None


class WebSocketListener:
    """The HTTP server that upgrades requests and hands each WebSocket to a client."""

    def __init__(self, server: Server, options: WebSocketOptions) -> None:
        self.server = server
        self.options = options
        self.origins = _Origins(options)
        self.tls = options.tls is not None
        self.host = options.host
        self.port = max(options.port, 0)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.listening = False

    def listen_error(self, exc: OSError) -> str:
        """A failure to listen, as the reference words it."""
        reason = os.strerror(exc.errno) if (exc.errno or 0) > 0 else exc.strerror or str(exc)
        return (f"Unable to listen for websocket connections: listen tcp "
                f"{self.host}:{self.port}: bind: {reason.lower()}")

    @property
    def scheme(self) -> str:
        return "wss" if self.tls else "ws"

    async def start(self) -> None:
        opts = self.options
        ssl_context = None
        if opts.tls is not None:
            from .tls import server_context

            ssl_context = server_context(opts.tls)
        app = web.Application(handler_args={"max_field_size": 8190})
        app.router.add_route("*", "/{tail:.*}", self._handle)
        keepalive = opts.handshake_timeout if opts.handshake_timeout > 0 else 75.0
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     keepalive_timeout=keepalive, shutdown_timeout=1.0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, opts.host, self.port, ssl_context=ssl_context,
                                 reuse_address=True, backlog=4096)
        try:
            await self._site.start()
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.listening = True
        server = getattr(self._site, "_server", None)
        sockets = getattr(server, "sockets", None)
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("Listening for websocket clients on %s://%s:%d", self.scheme, opts.host,
                 self.port)
        if not self.tls:
            log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    def close(self) -> None:
        """Stop accepting new WebSocket clients (shutdown, lame duck)."""
        site = self._site
        server = getattr(site, "_server", None)
        if server is not None:
            server.close()

    async def stop(self) -> None:
        """Stop the HTTP server, once the clients are closed."""
        self.close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                await runner.cleanup()

    def adjust_info(self, info: dict[str, Any]) -> None:
        """The INFO of a WebSocket client, as the reference makes it: the WebSocket host and
        port, TLS as the listener has it, and no TCP connect_urls."""
        info["host"], info["port"] = self.host, self.port
        if self.tls:
            info["tls_required"] = info["tls_available"] = True
        else:  # whatever the client port has (tls_verify stays, as the reference's)
            info.pop("tls_required", None)
            info.pop("tls_available", None)
        info.pop("connect_urls", None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        refused = _check_upgrade(request, self.origins, self.tls)
        if refused is not None:
            return _refuse(request, *refused)
        compress = self.options.compression and _header_has_pmc(request)
        ws = web.WebSocketResponse(compress=compress, max_msg_size=MAX_MESSAGE,
                                   timeout=CLOSE_TIMEOUT, autoping=True, decode_text=False)
        await ws.prepare(request)
        if request.path.endswith("/leafnode"):
            log.error("Not configured to accept leaf node connections")
            await ws.close()
            return ws
        server = self.server
        client = server.client_kind(server)
        client.websocket = True
        transport = WebSocketTransport(ws, request, client)
        client.connection_made(transport)
        await transport.run()
        return ws


def _header_has_pmc(request: web.BaseRequest) -> bool:
    """Whether the client offers permessage-deflate."""
    for line in request.headers.getall("Sec-WebSocket-Extensions", ()):
        for extension in line.split(","):
            for param in extension.split(";"):
                if param.strip(" \t").lower() == "permessage-deflate":
                    return True
    return False
