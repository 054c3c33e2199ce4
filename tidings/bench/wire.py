"""Raw NATS wire helpers for the load generator: URLs, the handshake and pre-built frames.

The bench deliberately talks to the server over plain sockets instead of a client library,
so that the load generator costs as little CPU as possible and the server is what gets measured.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

CLIENT_NAME = "tidings-bench"
DEFAULT_PORT = 4222


class ProtocolError(Exception):
    """The server sent something the bench did not expect (including -ERR)."""


@dataclass(frozen=True)
class Endpoint:
    """Where the server under test listens, with optional credentials."""

    host: str
    port: int
    user: str | None = None
    password: str | None = None
    token: str | None = None

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Accept ``nats://[user[:pass]@]host[:port]`` or a bare ``host[:port]``."""
        if "://" not in url:
            url = "nats://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("nats", "tcp"):
            raise ValueError(f"unsupported scheme {parts.scheme!r} (the bench speaks plain TCP)")
        user = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        token = None
        if user is not None and password is None:
            user, token = None, user  # nats://TOKEN@host is token auth
        return cls(parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT, user, password, token)

    def __str__(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def connect_options(self, name: str) -> bytes:
        opts: dict[str, object] = {
            "verbose": False,
            "pedantic": False,
            "tls_required": False,
            "name": name,
            "lang": "python-raw",
            "version": "tidings-bench",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
        }
        if self.user is not None:
            opts["user"], opts["pass"] = self.user, self.password or ""
        if self.token is not None:
            opts["auth_token"] = self.token
        return b"CONNECT " + json.dumps(opts, separators=(",", ":")).encode() + b"\r\n"


class Conn:
    """A raw client connection with a small line reader for the handshake and control traffic.

    Hot paths take ``conn.sock`` and do their own ``recv_into``; this class only covers the
    slow parts (INFO, CONNECT, PING/PONG barriers).
    """

    def __init__(self, endpoint: Endpoint, name: str = CLIENT_NAME, timeout: float = 10.0):
        self.sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        line = self.readline()
        if not line.startswith(b"INFO"):
            raise ProtocolError(f"expected INFO, got {line[:80]!r}")
        self.info: dict[str, object] = json.loads(line[4:].strip() or b"{}")
        if self.info.get("tls_required"):
            raise ProtocolError("the server requires TLS; the bench only speaks plain TCP")
        self.sock.sendall(endpoint.connect_options(name) + b"PING\r\n")
        self.expect_pong()

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            tail = bytes(self.buf[-200:])
            raise ProtocolError(f"server closed the connection (buffered: {tail!r})")
        self.buf += data

    def readline(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            self._fill()

    def expect_pong(self) -> None:
        while True:
            line = self.readline()
            if line == b"PONG":
                return
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise ProtocolError(line.decode(errors="replace"))
            elif line != b"+OK" and not line.startswith(b"INFO"):
                raise ProtocolError(f"unexpected {line[:80]!r} while waiting for PONG")

    def flush(self) -> None:
        """PING/PONG barrier: everything sent before has been processed by the server."""
        self.sock.sendall(b"PING\r\n")
        self.expect_pong()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def await_interest(pub: Endpoint, sub: Endpoint, timeout: float) -> None:
    """Until a message published at `pub` reaches a subscription made at `sub` (another
    server of the cluster): interest made at `sub` before this call has reached `pub`, since
    a route carries it in order."""
    subject = unique_subject("route-probe")
    receiver, sender = Conn(sub, f"{CLIENT_NAME}-probe"), Conn(pub, f"{CLIENT_NAME}-probe")
    try:
        receiver.sock.sendall(f"SUB {subject} 1\r\n".encode())
        receiver.flush()
        deadline = time.monotonic() + timeout
        receiver.sock.settimeout(0.05)
        seen = b""
        while b"MSG " not in seen:
            if time.monotonic() > deadline:
                raise ProtocolError(f"no route from {pub} to {sub} in {timeout:.0f}s")
            sender.sock.sendall(f"PUB {subject} 0\r\n\r\n".encode())
            sender.flush()
            try:
                seen += receiver.sock.recv(65536)
            except TimeoutError:
                pass
    finally:
        receiver.close()
        sender.close()


def make_payload(size: int) -> bytes:
    # Only 'x': a MSG marker can then never appear inside a payload, which the counter relies on.
    return b"x" * size


def unique_subject(tag: str) -> str:
    return f"bench.{tag}.{uuid.uuid4().hex[:10]}"


def pub_frame(subject: str, payload: bytes, reply: str | None = None) -> bytes:
    head = f"PUB {subject} {reply} " if reply else f"PUB {subject} "
    return f"{head}{len(payload)}\r\n".encode() + payload + b"\r\n"


def sub_frame(subject: str, sid: str, queue: str | None = None) -> bytes:
    return (f"SUB {subject} {queue} {sid}\r\n" if queue else f"SUB {subject} {sid}\r\n").encode()


def msg_frame_len(subject: str, sid: str, size: int, reply: str | None = None) -> int:
    """Length on the wire of the MSG frame a subscriber receives for one message."""
    head = f"MSG {subject} {sid} {reply} " if reply else f"MSG {subject} {sid} "
    return len(f"{head}{size}\r\n") + size + 2
