"""Fixtures for the client tests: connected clients, restartable servers of either kind, a TCP
proxy that can freeze (a half-open connection), and a self-signed certificate for TLS."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tidings.client
from tests.servers import (
    RunningServer,
    free_port,
    nats_server_binary,
    start_reference,
    start_tidings,
)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Every client test runs on the default asyncio loop and on uvloop (what users run)."""
    factories: dict[str, Any] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop
    except ImportError:
        return factories
    factories["uvloop"] = uvloop.new_event_loop
    return factories


STARTERS: dict[str, Callable[..., RunningServer]] = {
    "tidings": start_tidings,
    "reference": start_reference,
}


@pytest.fixture
async def nc(any_server: RunningServer) -> AsyncIterator[tidings.client.Client]:
    """A client connected to the parametrised server (tidings, then the reference)."""
    client = await tidings.client.connect(any_server.url, name="test")
    yield client
    await client.close()


@pytest.fixture
def fast_reconnect() -> dict[str, Any]:
    """Client options that keep reconnect tests short."""
    return {
        "reconnect_delay": lambda attempt: 0.05,
        "max_reconnect_attempts": -1,
        "connect_timeout": 1.0,
    }


class Servers:
    """Starts servers of one kind for a test, restarts them on their port, stops them all."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.running: list[RunningServer] = []

    def start(self, port: int | None = None, **options: Any) -> RunningServer:
        server = STARTERS[self.kind](port=port, **options)
        self.running.append(server)
        return server

    async def restart(self, old: RunningServer) -> RunningServer:
        """Start a new server on `old`'s port (and options) without blocking the loop."""
        return await asyncio.to_thread(self.start, old.port, **old.options)

    def stop_all(self) -> None:
        for server in self.running:
            server.stop()


@pytest.fixture(params=["tidings", "reference"])
def servers(request: pytest.FixtureRequest) -> Iterator[Servers]:
    """Per-test servers of each kind in turn (the test runs once per kind)."""
    s = Servers(request.param)
    yield s
    s.stop_all()


@dataclass
class Proxy:
    """A TCP proxy on loopback; `freeze()` stops forwarding and reading, sockets left open;
    `drop()` closes the connections (as a server that dies would) and keeps accepting."""

    target_port: int
    port: int = 0
    accepted: int = 0
    _server: asyncio.AbstractServer | None = None
    _pumps: list[asyncio.Task[None]] = field(default_factory=list)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        self._pumps.append(asyncio.create_task(self._pump(reader, up_writer)))
        self._pumps.append(asyncio.create_task(self._pump(up_reader, writer)))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except asyncio.CancelledError:
            return  # frozen: the sockets stay open, nothing moves
        except OSError:
            pass
        writer.close()

    def freeze(self) -> None:
        """Every current connection goes silent both ways; new connections work normally."""
        for task in self._pumps:
            task.cancel()
        self._pumps = []

    def drop(self) -> None:
        """Close every current connection both ways; new connections work normally."""
        self.freeze()
        for w in self._writers:
            w.close()
        self._writers = []

    async def close(self) -> None:
        for task in self._pumps:
            task.cancel()
        for w in self._writers:
            w.close()
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def proxy_factory() -> AsyncIterator[Callable[[int], Any]]:
    proxies: list[Proxy] = []

    async def make(target_port: int) -> Proxy:
        p = Proxy(target_port)
        await p.start()
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        await p.close()


@dataclass
class Cert:
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.cert))
        return ctx


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """A self-signed certificate for 127.0.0.1 and localhost (made with the openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "server.pem", d / "server-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return Cert(cert, key)


class Events:
    """Records client events (via event_cb) and lets a test wait for one by name."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self._cond = asyncio.Condition()

    async def __call__(self, kind: str, arg: Any) -> None:
        async with self._cond:
            self.seen.append((kind, arg))
            self._cond.notify_all()

    def kinds(self) -> list[str]:
        return [k for k, _ in self.seen]

    def count(self, kind: str) -> int:
        return self.kinds().count(kind)

    async def wait(self, kind: str, count: int = 1, timeout: float = 10.0) -> Any:
        """Wait until `kind` has been seen `count` times; returns the last argument."""
        async def seen_enough() -> None:
            async with self._cond:
                await self._cond.wait_for(lambda: self.count(kind) >= count)

        await asyncio.wait_for(seen_enough(), timeout)
        return [a for k, a in self.seen if k == kind][-1]


@pytest.fixture
def events() -> Events:
    return Events()


def start_reference_config(config: str) -> RunningServer:
    """A reference nats-server from a config text, ready once its port accepts connections.

    For set-ups where the server says nothing first (TLS handshake first), which the shared
    starter cannot wait for."""
    port = free_port()
    fd, conf = tempfile.mkstemp(suffix=".conf", prefix="nats-client-test-")
    with os.fdopen(fd, "w") as f:
        f.write(config)
    proc = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-c", conf],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("nats-server did not start") from None
            time.sleep(0.02)
    return RunningServer("reference", port, proc, {}, [conf])
