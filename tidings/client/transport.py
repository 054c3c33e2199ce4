"""Byte transports to a server: TCP, TLS (upgraded after INFO, or first), and WebSocket.

Each one drives an `asyncio.Protocol` (the `Connection`) the same way, so the protocol engine
does not know which one it runs on. TCP and TLS are the event loop's own transports; WebSocket
(ws://, wss://) is an adapter over aiohttp that turns binary frames into `data_received` calls.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from .errors import SecureConnFailedError

WS_SCHEMES = ("ws", "wss")
TLS_SCHEMES = ("tls", "wss")


def default_tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)


async def open_tcp(
    protocol: asyncio.Protocol,
    host: str,
    port: int,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    tls_hostname: str | None = None,
) -> asyncio.Transport:
    """Connect over TCP; with `tls` the TLS handshake happens at once (tls_handshake_first)."""
    loop = asyncio.get_running_loop()
    kwargs: dict[str, Any] = {}
    if tls is not None:
        kwargs = {"ssl": tls, "server_hostname": tls_hostname or host}
    transport, _ = await asyncio.wait_for(
        loop.create_connection(lambda: protocol, host, port, **kwargs), timeout
    )
    return transport  # type: ignore[return-value]


async def upgrade_tls(
    transport: asyncio.Transport,
    protocol: asyncio.Protocol,
    tls: ssl.SSLContext,
    hostname: str,
    timeout: float,
) -> asyncio.Transport:
    """Run the TLS handshake on an open TCP transport (after the server's INFO)."""
    loop = asyncio.get_running_loop()
    try:
        new = await loop.start_tls(
            transport, protocol, tls, server_hostname=hostname, ssl_handshake_timeout=timeout
        )
    except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
        raise SecureConnFailedError(str(exc)) from exc
    if new is None:
        raise SecureConnFailedError("TLS handshake did not complete")
    return new


class WebSocketTransport(asyncio.Transport):
    """An asyncio transport over an aiohttp WebSocket: binary frames in, binary frames out.

    Writes are queued and sent by one writer task, so `write()` stays synchronous like a
    socket transport's; the protocol is paused while more than `high_water` bytes wait.
    """

    def __init__(self, session: Any, ws: Any, protocol: asyncio.Protocol,
                 high_water: int = 64 * 1024) -> None:
        super().__init__()
        self._session = session
        self._ws = ws
        self._protocol = protocol
        self._queue: list[bytes] = []
        self._queued = 0
        self._high = high_water
        self._paused = False
        self._closing = False
        self._lost = False
        self._wake = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read_loop())
        self._writer = loop.create_task(self._write_loop())

    # -- asyncio.Transport -------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        self._queue.append(bytes(data))
        self._queued += len(data)
        self._wake.set()
        if not self._paused and self._queued > self._high:
            self._paused = True
            self._protocol.pause_writing()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._wake.set()  # the writer sends what is queued, then closes

    def abort(self) -> None:
        self._closing = True
        self._queue.clear()
        self._reader.cancel()
        self._writer.cancel()
        asyncio.get_running_loop().create_task(self._shutdown(None))

    def pause_reading(self) -> None:
        self._reading.clear()  # aiohttp keeps reading into its own bounded queue meanwhile

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._ws.get_extra_info("peername", default)
        return default

    def get_write_buffer_size(self) -> int:
        return self._queued

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- tasks -------------------------------------------------------------
    async def _read_loop(self) -> None:
        import aiohttp

        exc: BaseException | None = None
        try:
            async for m in self._ws:
                if m.type == aiohttp.WSMsgType.BINARY:
                    self._protocol.data_received(m.data)
                elif m.type == aiohttp.WSMsgType.TEXT:
                    self._protocol.data_received(m.data.encode())
                elif m.type == aiohttp.WSMsgType.ERROR:
                    exc = m.data if isinstance(m.data, BaseException) else None
                    break
                if not self._reading.is_set():
                    await self._reading.wait()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            exc = e
        self._closing = True
        self._writer.cancel()
        await self._shutdown(exc)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    data = b"".join(self._queue)
                    self._queue.clear()
                    self._queued = 0
                    await self._ws.send_bytes(data)
                    if self._paused and self._queued <= self._high // 4:
                        self._paused = False
                        self._protocol.resume_writing()
                if self._closing:
                    break
        except asyncio.CancelledError:
            return
        except Exception:
            pass
        self._closing = True
        self._reader.cancel()
        await self._shutdown(None)

    async def _shutdown(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        try:
            await asyncio.wait_for(self._ws.close(), 1.0)
        except BaseException:
            pass
        try:
            await self._session.close()
        except BaseException:
            pass
        self._protocol.connection_lost(exc)


async def open_websocket(
    protocol: asyncio.Protocol,
    url: str,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    headers: dict[str, Any] | None = None,
) -> asyncio.Transport:
    """Open ws:// or wss:// and return a transport feeding `protocol`."""
    import aiohttp

    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(
            url,
            ssl=tls if tls is not None else True,
            headers=headers,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=timeout),
            autoping=True,
            max_msg_size=0,
        )
    except BaseException:
        await session.close()
        raise
    transport = WebSocketTransport(session, ws, protocol)
    protocol.connection_made(transport)
    return transport
