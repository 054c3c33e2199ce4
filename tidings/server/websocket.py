"""The WebSocket listener (`websocket { }`): NATS clients over ws:// and wss://, as nats-server.

Each accepted socket is a `WebSocketSession` (an asyncio Protocol): first the HTTP upgrade
request, checked as the reference checks it (method, Host, Upgrade, Connection,
Sec-WebSocket-Key and -Version, same_origin and allowed_origins) and refused with the
reference's statuses; then the frames (ws_frames.py), read and written here, on the socket's
own transport. The client on top is an ordinary ClientConnection (the same protocol as over
TCP) on `WebSocketTransport`: the payload of the client's frames is its `data_received` as it
arrives (a fragment is not held until its message ends, as the reference does not), each
write of the server (one per flush) goes out as one binary frame, and the socket's own write
buffer, limits and pause_writing/resume_writing are the client's, so flow control, slow
consumers and the write deadline work as over TCP. A frame that breaks RFC 6455's rules
fails the connection with a close frame of status 1002 and the reference's reason; when the
server closes a client, its close frame carries the status and reason the reference gives
for why.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..config.websocket import WebSocketOptions
from ..oserrors import StartError
from . import ws_frames
from .binding import listener_urls, listening_socket
from .listeners import Listener
from .ws_frames import BINARY, CLOSE, PONG, Deflater, FrameReader, control_frame

if TYPE_CHECKING:
    from .client import ClientConnection
    from .server import Server

log = logging.getLogger("tidings.server")

# An upgrade request's head (request line and headers) may be this long, as Go's
# http.Server's default (DefaultMaxHeaderBytes, and its 4 KiB of slack).
MAX_REQUEST_HEAD = 1024 * 1024 + 4096
# RFC 6455 1.3: what the client's key is hashed with for Sec-WebSocket-Accept.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PMC_RESPONSE = (b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; "
                 b"client_no_context_takeover\r\n")
_NO_MASKING = "Nats-No-Masking"

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
    payload = ws_frames.close_payload(status, _CLOSE_TEXT.get(reason, reason))
    return status, payload[2:]


class WebSocketTransport(asyncio.Transport):
    """The transport a WebSocket client's ClientConnection writes to and reads through:
    writes become binary frames on the socket, the rest is the socket's own."""

    __slots__ = ("_session", "_raw", "_protocol", "_deflater", "close_sent", "_closing")

    def __init__(self, session: WebSocketSession, raw: asyncio.Transport,
                 protocol: ClientConnection, compress: bool) -> None:
        super().__init__()
        self._session = session
        self._raw = raw
        self._protocol = protocol
        self._deflater = Deflater() if compress else None
        self.close_sent = False  # a close frame went out: nothing more may follow
        self._closing = False

    # -- writing ----------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self.close_sent or not data:
            return
        size = len(data)
        if self._deflater is not None and size > ws_frames.COMPRESS_THRESHOLD:
            body = self._deflater.deflate(bytes(data))
            self._raw.write(ws_frames.header(BINARY, len(body), compressed=True) + body)
        elif size < 16384:
            self._raw.write(ws_frames.header(BINARY, size) + data)
        else:  # not copied into a new buffer
            self._raw.writelines((ws_frames.header(BINARY, size), data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._closing or self.close_sent:
            return
        pieces = list(list_of_data)
        if self._deflater is not None:
            self.write(b"".join(pieces))
            return
        size = sum(len(piece) for piece in pieces)
        if size:
            self._raw.writelines([ws_frames.header(BINARY, size), *pieces])

    def send_close(self, payload: bytes) -> None:
        """A close frame with `payload`; nothing is written after it."""
        if not self.close_sent and not self._raw.is_closing():
            self.close_sent = True
            self._raw.write(control_frame(CLOSE, payload))

    def send_pong(self, payload: bytes) -> None:
        if not self.close_sent and not self._raw.is_closing():
            self._raw.write(control_frame(PONG, payload))

    # -- asyncio.Transport ------------------------------------------------------------------
    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def close(self) -> None:
        """The close frame with the status and reason of why the client is closed (unless
        one went already), after what is queued, then the socket's close."""
        if self._closing:
            return
        self._closing = True
        status, body = close_frame_for(self._protocol.close_reason or "Client Closed")
        self.send_close(status.to_bytes(2, "big") + body)
        self._raw.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued (a slow consumer)."""
        self._closing = True
        self._raw.abort()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "websocket":
            return self._session
        return self._raw.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol


@dataclass
class UpgradeRequest:
    """An HTTP request's head, as far as the upgrade needs it."""

    method: str
    path: str
    headers: dict[str, list[str]] = field(default_factory=dict)  # lower-case name -> values
    peer: str = "?"

    def get(self, name: str) -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else ""

    def getall(self, name: str) -> list[str]:
        return self.headers.get(name.lower(), [])

    @property
    def host(self) -> str:
        return self.get("Host")


def parse_request(head: bytes, peer: str) -> UpgradeRequest | None:
    """The request line and headers (up to the blank line), or None if they are not HTTP."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0]:
        return None
    try:
        path = urlsplit(parts[1]).path or "/"
    except ValueError:  # "http://[nonsense"
        return None
    request = UpgradeRequest(parts[0], path, peer=peer)
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            return None
        request.headers.setdefault(name.lower(), []).append(value.strip(" \t"))
    return request


class WebSocketSession(asyncio.Protocol):
    """One socket of the WebSocket listener: the upgrade, then the frames of its client."""

    def __init__(self, listener: WebSocketListener) -> None:
        self.listener = listener
        self.raw: asyncio.Transport | None = None
        self.peer = "?"
        self._head = bytearray()  # the upgrade request so far
        self._timer: asyncio.TimerHandle | None = None
        self.client: ClientConnection | None = None
        self.transport: WebSocketTransport | None = None
        self.reader: FrameReader | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.listener.sessions.add(self)
        timeout = self.listener.options.handshake_timeout
        if timeout > 0:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self.reader is not None:
            self._frames(data)
        elif self.raw is not None and not self.raw.is_closing():
            self._upgrade(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.sessions.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self.client is not None:
            self.client.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.client is not None:
            self.client.pause_writing()

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.resume_writing()

    def close(self) -> None:
        """Close a socket still in its upgrade (shutdown)."""
        if self.client is None and self.raw is not None:
            self.raw.close()

    # -- the frames -------------------------------------------------------------------------
    def _frames(self, data: bytes) -> None:
        reader, client, transport = self.reader, self.client, self.transport
        assert reader is not None and client is not None and transport is not None
        reader.max_payload = client.parser.max_payload
        payload = reader.feed(data)
        if reader.pings:  # answered first, as the reference puts control frames first
            for ping in reader.pings:
                transport.send_pong(ping)
            reader.pings.clear()
        if payload:
            client.data_received(payload)
        if reader.error is not None:
            self._failed(reader.error)
        elif reader.close is not None:
            # The client is done: its close frame answered, then the socket closed, as the
            # reference ("Client Closed").
            transport.send_close(reader.close)
            client.close_reason = client.close_reason or "Client Closed"
            client.close_with_error(None)

    def _failed(self, error: ws_frames.FrameError) -> None:
        """A frame broke a rule (or a compressed message its bounds): as the reference, a
        read error, with a close frame of status 1002 and the reason for a broken rule."""
        client, transport = self.client, self.transport
        assert client is not None and transport is not None
        if client.closed:
            return
        log.error("%s - read error: %s", client.describe(), error.reason)
        client.close_reason = "Read Error"
        if error.protocol:
            client.server.flush()
            transport.send_close(ws_frames.close_payload(ws_frames.STATUS_PROTOCOL_ERROR,
                                                         error.reason))
        client.close_with_error(None)

    # -- the upgrade ------------------------------------------------------------------------
    def _too_slow(self) -> None:
        if self.client is None and self.raw is not None:
            log.debug("%s - websocket handshake timeout", self.peer)
            self.raw.close()

    def _upgrade(self, data: bytes) -> None:
        raw = self.raw
        assert raw is not None
        seen = len(self._head)
        self._head += data
        end = self._head.find(b"\r\n\r\n", max(seen - 3, 0))
        if end < 0:
            if len(self._head) > MAX_REQUEST_HEAD:
                self._respond(431, "")
            return
        head, rest = bytes(self._head[:end]), self._head[end + 4:]
        self._head = bytearray()
        request = parse_request(head, self.peer)
        if request is None:
            self._respond(400, "")
            return
        listener = self.listener
        refused = _check_upgrade(request, listener.origins, listener.tls)
        if refused is not None:
            self._respond(*refused)
            return
        if rest:
            # As the reference: frames may not come before the upgrade's answer.
            log.error("%s - websocket handshake error: client sent data before handshake "
                      "is complete", self.peer)
            raw.close()
            return
        self._accept(request)

    def _respond(self, status: int, reason: str) -> None:
        """Refuse the request with `status` (logging `reason`, if any), then close."""
        assert self.raw is not None
        if reason:
            log.error("%s - websocket handshake error: %s", self.peer, reason)
        text = f"{_STATUS_TEXT.get(status, 'Error')}\n".encode()
        self.raw.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Sec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%b"
            % (status, _STATUS_TEXT.get(status, "Error").encode(), len(text), text))
        self.raw.close()

    def _accept(self, request: UpgradeRequest) -> None:
        """The 101 answer (the reference's headers), then the client."""
        raw, listener = self.raw, self.listener
        assert raw is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        compress = listener.options.compression and _header_has_pmc(request)
        no_masking = request.get(_NO_MASKING) == "true"
        key = request.get("Sec-WebSocket-Key").encode()
        accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
        raw.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n"
                  + (_PMC_RESPONSE if compress else b"")
                  + (b"Nats-No-Masking: true\r\n" if no_masking else b"") + b"\r\n")
        if request.path.endswith("/leafnode"):
            log.error("Not configured to accept leaf node connections")
            raw.write(control_frame(CLOSE, ws_frames.close_payload(1000, "")))
            raw.close()
            return
        server = listener.server
        client = server.client_kind(server)
        client.websocket = True
        self.reader = FrameReader(masked=not no_masking, compressed=compress,
                                  max_payload=server.options.max_payload)
        self.transport = WebSocketTransport(self, raw, client, compress)
        self.client = client
        client.connection_made(self.transport)


# -- the HTTP checks -----------------------------------------------------------------------------
def _header_has(request: UpgradeRequest, name: str, value: str) -> bool:
    """Whether one of the comma-separated tokens of header `name` is `value` (any case)."""
    for line in request.getall(name):
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

    def refusal(self, request: UpgradeRequest, tls: bool) -> str | None:
        """Why the request's origin is not allowed, or None."""
        if not self.same and not self.allowed:
            return None
        origin = request.get("Origin") or request.get("Sec-WebSocket-Origin")
        if not origin:
            return None
        try:
            parts = urlsplit(origin)
        except ValueError:
            parts = None
        if parts is None or not parts.scheme or not parts.netloc:
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


_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 404: "Not Found",
                405: "Method Not Allowed", 431: "Request Header Fields Too Large"}


def _check_upgrade(request: UpgradeRequest, origins: _Origins, tls: bool
                   ) -> tuple[int, str] | None:
    """(status, reason) when the upgrade request is refused, in the reference's order."""
    if request.path.endswith("/mqtt"):
        return 404, "mqtt websocket endpoint not enabled"
    if request.method != "GET":
        return 405, "request method must be GET"
    if not request.host:
        return 400, "'Host' missing in request"
    if not _header_has(request, "Upgrade", "websocket"):
        return 400, "invalid value for header 'Upgrade'"
    if not _header_has(request, "Connection", "Upgrade"):
        return 400, "invalid value for header 'Connection'"
    key = request.get("Sec-WebSocket-Key")
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


def _header_has_pmc(request: UpgradeRequest) -> bool:
    """Whether the client offers permessage-deflate."""
    for line in request.getall("Sec-WebSocket-Extensions"):
        for extension in line.split(","):
            for param in extension.split(";"):
                if param.strip(" \t").lower() == "permessage-deflate":
                    return True
    return False


class WebSocketListener(Listener):
    """The listening socket whose connections are WebSocket sessions."""

    def __init__(self, server: Server, options: WebSocketOptions) -> None:
        self.server = server
        self.options = options
        self.origins = _Origins(options)
        self.tls = options.tls is not None
        self.host = options.host
        self.port = max(options.port, 0)
        self.sessions: set[WebSocketSession] = set()
        self._server: asyncio.Server | None = None
        self._bound: tuple[Any, ...] = ()  # the listening socket's address
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
        try:
            await self._listen()
        except OSError as exc:
            raise StartError(self.listen_error(exc)) from exc
        opts = self.options
        log.info("Listening for websocket clients on %s://%s:%d", self.scheme, opts.host,
                 self.port)
        if not self.tls:
            log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    async def _listen(self) -> None:
        opts = self.options
        ssl_context = None
        timeout = None
        if opts.tls is not None:
            from .tls import server_context

            ssl_context = server_context(opts.tls)
            timeout = opts.tls.timeout
        loop = asyncio.get_running_loop()
        sock = await listening_socket(opts.host, self.port)
        self._bound = sock.getsockname()
        self._server = await loop.create_server(
            lambda: WebSocketSession(self), sock=sock, ssl=ssl_context,
            ssl_handshake_timeout=timeout, backlog=4096)
        self.listening = True
        self.port = self._bound[1]

    def ports(self) -> dict[str, list[str]]:
        if self._server is None:
            return {}
        return {"websocket": listener_urls(self.scheme, self._bound)}

    def close(self) -> None:
        """Stop accepting new WebSocket clients (shutdown, lame duck)."""
        if self._server is not None:
            self._server.close()

    lame_duck = close

    async def stop(self) -> None:
        """Stop listening, and close the sockets still in their upgrade (the clients are
        closed by the server before)."""
        self.close()
        for session in list(self.sessions):
            session.close()
        self._server = None

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
