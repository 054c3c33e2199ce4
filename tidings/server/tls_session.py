"""TLS listeners, as nats-server runs them: a connection is handed to its protocol only once
the TLS handshake is over, so no plain byte ever reaches the protocol (uvloop starts
reading a transport as soon as it is made, before anything could pause it; so the socket is
accepted here and given to `connect_accepted_socket` with the SSL context).

A client: INFO in the clear first (it says `tls_required`), then the handshake, the server
side; with `handshake_first`, the handshake at once and INFO over TLS (with a fall-back
delay: if the client says nothing for that long, a plain INFO first, as the reference). A
route: the handshake at once, before CONNECT and INFO.

With `allow_non_tls` (TLS and plain clients on one port) INFO offers TLS (`tls_available`)
and the client's first byte decides, as the reference's: 0x16 (a TLS record of the
handshake: the ClientHello) starts the handshake, anything else (a CONNECT) makes a plain
connection of it; the byte is only peeked at, so it reaches the handshake or the parser
as sent. A client that says nothing within the TLS timeout is taken as plain (its auth
timeout then applies). `handshake_first` without a fall-back delay still requires TLS.

A handshake that fails, or is not over within the TLS timeout, closes that socket only,
logged as the reference logs it ("TLS handshake error: ...").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from ..config.tls import ssl_reason
from ..protocol import encode
from ..protocol.errors import MAX_CONNECTIONS_EXCEEDED
from .binding import listening_socket
from .tls import certificate_identities

if TYPE_CHECKING:
    from .client import ClientConnection
    from .server import Server

log = logging.getLogger("tidings.server")

# OpenSSL's reasons for a first record that is no TLS at all: a plain client, a probe.
_NOT_TLS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST",
            "UNSUPPORTED_PROTOCOL", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE",
            "PACKET_LENGTH_TOO_LONG"}

# A TLS record's first byte when it carries a handshake message (RFC 8446 5.1): what a
# ClientHello starts with.
TLS_HANDSHAKE_RECORD = 0x16


class Greeting(NamedTuple):
    """What happens to an accepted socket: its protocol, what to write first once TLS is
    up (a client's INFO when TLS comes first), and whether TLS comes at all (allow_non_tls:
    a plain client)."""

    protocol: asyncio.Protocol
    first: bytes = b""
    tls: bool = True


# Before the handshake: (socket, peer address) -> the Greeting, or None to drop the socket.
# It may write to the socket (a client's INFO in the clear) and wait for the client.
Greeter = Callable[[socket.socket, tuple[str, int]], Awaitable[Greeting | None]]


class TLSListener:
    """A listening socket whose connections are made TLS before their protocol sees them.
    In place of an asyncio Server: `sockets`, `close()`, `wait_closed()`."""

    def __init__(self, context: ssl.SSLContext, timeout: float, greet: Greeter,
                 kind: str = "") -> None:
        self.context = context
        self.timeout = timeout
        self.greet = greet
        self.kind = kind  # "" for clients, "route" for routes (the log's wording)
        self.sockets: list[socket.socket] = []
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, backlog: int = 4096) -> TLSListener:
        """Listen on host:port, bound as binding.py binds every port."""
        return self.serve(await listening_socket(host, port, backlog))

    def serve(self, sock: socket.socket) -> TLSListener:
        """Accept on `sock`, a listening socket (binding.listening_socket)."""
        self.sockets = [sock]
        self._accepting = asyncio.get_running_loop().create_task(self._accept(sock))
        return self

    def close(self) -> None:
        """Stop accepting; handshakes under way are abandoned (their sockets closed)."""
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        for task in list(self._handshakes):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # out of descriptors, a connection reset while queued
                log.error("Error accepting client connection: %s", exc)
                await asyncio.sleep(0.01)
                continue
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._secure(conn, peer))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _secure(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        who = f"{peer[0]}:{peer[1]}"
        made = False
        try:
            greeted = await self.greet(conn, peer)
            if greeted is None:
                return
            protocol, first, tls = greeted
            if not tls:  # allow_non_tls: a plain client
                await loop.connect_accepted_socket(lambda: protocol, conn)
                made = True
                return
            if not self.kind:
                who = describe(protocol, who)
            if log.isEnabledFor(logging.DEBUG):
                what = f"TLS {self.kind} server" if self.kind else "TLS client connection"
                log.debug("%s - Starting %s handshake", who, what)
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self.context,
                ssl_handshake_timeout=self.timeout)
            made = True
            if log.isEnabledFor(logging.DEBUG):
                log_complete(who, transport)
            if first and not transport.is_closing():
                transport.write(first)
        except asyncio.CancelledError:
            pass
        except (OSError, asyncio.TimeoutError, EOFError) as exc:
            log_failure(exc, who, self.kind)
        finally:
            if not made:
                conn.close()


def describe(protocol: object, default: str) -> str:
    how = getattr(protocol, "describe", None)
    return how() if callable(how) else default


def client_greeter(server: Server, make: Callable[[], ClientConnection]) -> Greeter:
    """What happens on a TLS client listener before the handshake: the client's id and
    address fixed (INFO names them), INFO written in the clear (unless TLS comes first;
    with a fall-back delay, written if the client has said nothing by then)."""

    async def greet(conn: socket.socket, peer: tuple[str, int]) -> Greeting | None:
        tls = server.options.tls
        assert tls is not None
        client = make()
        client.cid = server.next_cid()
        client.host, client.port = peer[0], peer[1]
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s - Client connection created", client.describe())
        loop = asyncio.get_running_loop()
        if tls.handshake_first and (tls.handshake_first_fallback <= 0 or await _speaks_within(
                conn, tls.handshake_first_fallback)):
            return Greeting(client, server.info_for(client, tls_first=True))
        # INFO in the clear (TLS after it; or, past the fall-back delay, for a client that
        # waits for INFO).
        await loop.sock_sendall(conn, server.info_for(client))
        if server.full():
            # As the reference: refused before the handshake, in the clear.
            await loop.sock_sendall(conn, encode.err(MAX_CONNECTIONS_EXCEEDED))
            log.error("%s - maximum connections exceeded", client.describe())
            return None
        if not server.options.allow_non_tls:
            return Greeting(client)
        first = await _first_byte(conn, tls.timeout)
        if first == b"":
            return None  # gone before saying anything
        return Greeting(client, tls=first is not None and first[0] == TLS_HANDSHAKE_RECORD)

    return greet


def tls_established(client: ClientConnection, transport: asyncio.BaseTransport) -> None:
    """connection_made of a client on a TLS listener (the handshake is over): with
    verify_and_map, the names its certificate gives."""
    tls = client.server.options.tls
    if tls is not None and tls.verify_and_map:
        client.tls_identities = certificate_identities(
            transport.get_extra_info("peercert") or {})


def log_complete(who: str, transport: asyncio.BaseTransport) -> None:
    obj = transport.get_extra_info("ssl_object")
    log.debug("%s - TLS handshake complete", who)
    if obj is not None:
        log.debug("%s - TLS version %s, cipher suite %s", who,
                  (obj.version() or "").replace("TLSv", ""), (obj.cipher() or ("?",))[0])


def log_failure(exc: BaseException, who: str, kind: str) -> None:
    """As the reference: a client's timeout, or first record that is no TLS (a plain client,
    a load balancer's probe) at debug level; any other failure, and any of a route, as an
    error: "<who> - TLS handshake error: <why>" ("TLS route handshake error" for routes)."""
    probe = False
    if isinstance(exc, asyncio.TimeoutError) or "longer than" in str(exc):
        text, probe = "i/o timeout", True
        if not kind:
            log.debug("%s - TLS handshake timeout", who)
    elif isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS:
        text, probe = "first record does not look like a TLS handshake", True
    elif isinstance(exc, ssl.SSLError):
        text = ssl_reason(exc)
    elif isinstance(exc, ConnectionResetError | BrokenPipeError | EOFError):
        text = "EOF"
    else:
        text = str(exc) or type(exc).__name__
    what = f"TLS {kind} handshake error" if kind else "TLS handshake error"
    if kind or not probe:
        log.error("%s - %s: %s", who, what, text)
    else:
        log.debug("%s - %s: %s", who, what, text)


async def _first_byte(conn: socket.socket, timeout: float) -> bytes | None:
    """The peer's first byte, left in the socket (peeked): b"" if it closed, None if it
    said nothing within `timeout` seconds."""
    if not await _speaks_within(conn, timeout):
        return None
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return None  # (readable, then nothing: not seen on Linux, but not an error either)
    except OSError:
        return b""


async def _speaks_within(conn: socket.socket, delay: float) -> bool:
    """Whether the peer sends something within `delay` seconds (nothing is read)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = conn.fileno()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(True))
    try:
        await asyncio.wait_for(ready, delay)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
