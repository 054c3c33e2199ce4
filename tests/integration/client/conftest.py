"""Fixtures for the client tests: connected clients, restartable servers of either kind and a
self-signed certificate for TLS (the proxy that freezes, `proxy_factory`, is the harness's)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tidings.client
from tests.harness import Server, start_reference, start_tidings


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Every client test runs on the default asyncio loop and on uvloop (what users run)."""
    factories: dict[str, Any] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop
    except ImportError:
        return factories
    factories["uvloop"] = uvloop.new_event_loop
    return factories


STARTERS: dict[str, Callable[..., Server]] = {
    "tidings": start_tidings,
    "reference": start_reference,
}


@pytest.fixture
async def nc(any_server: Server) -> AsyncIterator[tidings.client.Client]:
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
        self.running: list[Server] = []

    def start(self, **options: Any) -> Server:
        server = STARTERS[self.kind](**options)
        self.running.append(server)
        return server

    async def restart(self, old: Server) -> Server:
        """Start `old` (stopped or killed) again on its port, with its options, without
        blocking the loop."""
        return await asyncio.to_thread(old.start)

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
