"""One TCP proxy for the tests, on 127.0.0.1: stands in for a server that hangs or dies.

`freeze()` stops forwarding on every current connection, both ways: the proxy stops reading
(the peers' writes fill the kernel's buffers and then block, as with a frozen process), the
sockets stay open, nothing is lost. `thaw()` forwards again what was held and what follows.
`drop()` closes the current connections (as a server that dies would). Connections made
after any of these are forwarded normally.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable


class Proxy:
    """A proxy to 127.0.0.1:`target_port`; `await start()` binds a port of its own."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.port = 0
        self.accepted = 0
        self._server: asyncio.AbstractServer | None = None
        # Each direction of each connection: (from, to), and the task forwarding it.
        self._pipes: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._pumps: dict[int, asyncio.Task[None]] = {}
        self._frozen: set[int] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        for pipe in ((reader, up_writer), (up_reader, writer)):
            self._pipes.append(pipe)
            self._forward(len(self._pipes) - 1)

    def _forward(self, index: int) -> None:
        self._pumps[index] = asyncio.create_task(self._pump(*self._pipes[index]))

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except asyncio.CancelledError:
            return  # frozen: the sockets stay open, what was not read stays unread
        except OSError:
            pass
        writer.close()

    def freeze(self) -> None:
        """Every current connection goes silent both ways; new connections work normally."""
        for index, task in self._pumps.items():
            if not task.done():
                task.cancel()
                self._frozen.add(index)

    def thaw(self) -> None:
        """Forward again on the connections that `freeze()` silenced."""
        for index in sorted(self._frozen):
            old = self._pumps[index]
            self._pumps[index] = asyncio.create_task(self._resume(old, *self._pipes[index]))
        self._frozen = set()

    async def _resume(self, old: asyncio.Task[None], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        await asyncio.wait([old])  # its cancellation taken, whatever it was doing
        await self._pump(reader, writer)

    def drop(self) -> None:
        """Close every current connection both ways; new connections work normally."""
        self.freeze()
        for writer in self._writers:
            writer.close()
        self._writers, self._pipes, self._pumps, self._frozen = [], [], {}, set()

    async def close(self) -> None:
        self.drop()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


ProxyFactory = Callable[[int], Awaitable[Proxy]]


@contextlib.asynccontextmanager
async def proxies() -> AsyncIterator[ProxyFactory]:
    """`make(port)` starts a proxy to `port`; all are closed at the end of the block."""
    made: list[Proxy] = []

    async def make(target_port: int) -> Proxy:
        made.append(await Proxy(target_port).start())
        return made[-1]

    try:
        yield make
    finally:
        for proxy in made:
            await proxy.close()
