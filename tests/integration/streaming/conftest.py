"""Fixtures for the streaming tests: streaming servers over real sockets.

``stan`` builds a streaming server in the test's event loop, as a NATS client of a tidings
core server (also in-process) or of any NATS URL (the reference nats-server). Subprocess
servers (the `tidings` command, kill -9) use tests/servers.py.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from tidings.client import connect as nats_connect
from tidings.config.server import ServerOptions
from tidings.server.server import Server
from tidings.streaming.client import StanError, StreamingClient
from tidings.streaming.client import connect as stan_connect
from tidings.streaming.server import RunningStreaming, StreamingOptions, start_streaming
from tidings.testing.spec import free_port


class Env:
    """A running streaming server, its core NATS server (if in-process) and its clients."""

    def __init__(self, opts: StreamingOptions, url: str, core: Server | None) -> None:
        self.opts = opts
        self.url = url
        self.core = core
        self.running: RunningStreaming | None = None
        self.clients: list[StreamingClient] = []
        self.ncs: list[Any] = []

    @property
    def server(self) -> Any:
        assert self.running is not None
        return self.running.server

    @property
    def cluster_id(self) -> str:
        return self.opts.cluster_id

    async def start(self) -> None:
        self.running = await start_streaming(replace(self.opts), self.url)

    async def stop_streaming(self) -> None:
        if self.running is not None:
            await self.running.stop()
            self.running = None

    async def restart(self) -> None:
        await self.stop_streaming()
        await self.start()

    async def connect(self, client_id: str, **kw: Any) -> StreamingClient:
        kw.setdefault("url", self.url)
        kw.setdefault("connect_timeout", 2.0)
        sc = await stan_connect(self.cluster_id, client_id, **kw)
        self.clients.append(sc)
        return sc

    async def nats(self) -> Any:
        nc = await nats_connect(self.url)
        self.ncs.append(nc)
        return nc

    async def request(self, subject: str, msg: Any, resp_type: Any, timeout: float = 2.0) -> Any:
        """One raw protocol request: a protobuf in, the decoded protobuf reply out."""
        if not self.ncs:
            await self.nats()
        reply = await self.ncs[0].request(subject, msg.SerializeToString(), timeout=timeout)
        out = resp_type()
        out.ParseFromString(reply.data)
        return out

    def monitor(self, path: str) -> Any:
        """GET a monitoring endpoint: (status, decoded JSON or text)."""
        url = f"http://127.0.0.1:{self.opts.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read().decode()
                return r.status, json.loads(body)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    async def get(self, path: str) -> Any:
        return await asyncio.to_thread(self.monitor, path)

    async def close(self) -> None:
        for sc in self.clients:
            if not sc.closed:
                try:
                    await asyncio.wait_for(sc.close(), 3)
                except (StanError, asyncio.TimeoutError, Exception):
                    pass
        for nc in self.ncs:
            if not nc.is_closed:
                await nc.close()
        await self.stop_streaming()
        if self.core is not None:
            await self.core.shutdown()


StanFactory = Callable[..., Awaitable[Env]]


@pytest.fixture
async def stan() -> AsyncIterator[StanFactory]:
    """``env = await stan(**StreamingOptions fields, nats_url=None)``: a started server."""
    envs: list[Env] = []

    async def make(nats_url: str | None = None, monitor: bool = False, **opts: Any) -> Env:
        core = None
        if nats_url is None:
            core = Server(ServerOptions(host="127.0.0.1", port=0, no_log=True))
            await core.start()
            nats_url = f"nats://127.0.0.1:{core.port}"
        if monitor:
            opts.setdefault("http_port", free_port())
            opts.setdefault("http_host", "127.0.0.1")
        env = Env(StreamingOptions(**opts), nats_url, core)
        envs.append(env)
        await env.start()
        return env

    yield make
    for env in reversed(envs):
        await env.close()


async def wait_for(cond: Callable[[], Any], timeout: float = 10.0, step: float = 0.02) -> Any:
    """Poll a condition that depends on time passing (expiry, heartbeats, redelivery)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        res = cond()
        if asyncio.iscoroutine(res):
            res = await res
        if res:
            return res
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(step)


class Inbox:
    """Collects a subscription's messages; ``await inbox.next()``, ``await inbox.take(n)``."""

    def __init__(self) -> None:
        self.q: asyncio.Queue[Any] = asyncio.Queue()
        self.all: list[Any] = []

    def __call__(self, msg: Any) -> None:
        self.all.append(msg)
        self.q.put_nowait(msg)

    async def next(self, timeout: float = 5.0) -> Any:
        return await asyncio.wait_for(self.q.get(), timeout)

    async def take(self, n: int, timeout: float = 10.0) -> list[Any]:
        return [await self.next(timeout) for _ in range(n)]

    def empty(self) -> bool:
        return self.q.empty()


class FreezableProxy:
    """A TCP proxy in front of a NATS server whose traffic can be held (a frozen process)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.frozen = False
        self._server: asyncio.AbstractServer | None = None
        self._held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, uw]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if self.frozen:
                        self._held.append((dst, data))
                    else:
                        dst.write(data)
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, uw), pump(ur, writer))

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False
        held, self._held = self._held, []
        for dst, data in held:
            if not dst.is_closing():
                dst.write(data)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            w.close()


@pytest.fixture
async def proxy_factory() -> AsyncIterator[Callable[[int], Awaitable[FreezableProxy]]]:
    made: list[FreezableProxy] = []

    async def make(port: int) -> FreezableProxy:
        p = FreezableProxy(port)
        await p.start()
        made.append(p)
        return p

    yield make
    for p in made:
        await p.close()
