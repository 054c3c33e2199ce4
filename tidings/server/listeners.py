"""The ports of a server, each one `Listener`: the client port, the monitoring port, and what
is plugged in beside them (the cluster's route port, the WebSocket port). The server starts
them in order, stops accepting on all of them at shutdown and in lame duck mode, and releases
them, without knowing which kinds it has (`server/` does not import `cluster/`: `node.py`
plugs the cluster in). Each binds its socket with binding.py (a wildcard host is dual-stack,
as the reference's) and names its URLs for the ports file (portsfile.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..oserrors import listen_error
from .binding import join_host_port, listener_urls, listening_socket

if TYPE_CHECKING:
    from .client import ClientConnection
    from .server import Server

log = logging.getLogger("tidings.server")


class Listener:
    """What the server asks of each of its ports."""

    # Released before the clients are closed at shutdown (routes, monitoring), instead of
    # after them (the ports clients come through).
    stops_before_clients = False

    async def start(self) -> None:
        """Listen; a failure is an OSError naming this listener and its address."""

    def close(self) -> None:
        """Accept nothing new (the first step of shutdown)."""

    def lame_duck(self) -> None:
        """Lame duck mode has begun: clients go elsewhere (stop accepting them, or tell
        the peers that we are leaving)."""

    async def stop(self) -> None:
        """Release the port and what it still holds."""

    def tls_changed(self, context: Any) -> None:
        """A reload gave the client port's TLS a new SSL context."""

    def ports(self) -> dict[str, list[str]]:
        """The URLs this listener is reached at, under its key of the ports file ("nats",
        "monitoring", "cluster", "websocket"); {} when it is not listening."""
        return {}


class ClientPort(Listener):
    """The client port: plain TCP, or TLS (tls_session.py)."""

    def __init__(self, server: Server, kind: type[ClientConnection]) -> None:
        self.server = server
        self.kind = kind
        self._listener: Any = None
        self._bound: tuple[Any, ...] = ()  # the listening socket's address

    async def start(self) -> None:
        server, kind = self.server, self.kind
        opts = server.options
        try:
            sock = await listening_socket(opts.host, opts.port)
        except OSError as exc:
            # As the reference words it (each listener names itself).
            raise listen_error("error listening on port", opts.host, opts.port, exc) from exc
        self._bound = sock.getsockname()
        if opts.tls is not None:
            from .tls_session import TLSListener, client_greeter

            self._listener = TLSListener(
                server.tls_context, opts.tls.timeout,
                client_greeter(server, lambda: kind(server)),
            ).serve(sock)
        else:
            try:
                self._listener = await server.loop.create_server(
                    lambda: kind(server), sock=sock, backlog=4096)
            except BaseException:
                sock.close()
                raise
        server.port = self._bound[1]
        server.build_info()

    def ports(self) -> dict[str, list[str]]:
        if self._listener is None:
            return {}
        tls = self.server.info_fields().get("tls_required")
        return {"nats": listener_urls("tls" if tls else "nats", self._bound)}

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    lame_duck = close

    def tls_changed(self, context: Any) -> None:
        if self._listener is not None and hasattr(self._listener, "context"):
            self._listener.context = context  # (a TLSListener's, read at each handshake)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
            self._listener = None


class MonitorPort(Listener):
    """-m / -ms / `http` / `https`: the monitoring endpoints (monitor.py), on `http: HOST`
    or the client host."""

    stops_before_clients = True

    def __init__(self, server: Server) -> None:
        self.server = server

    async def start(self) -> None:
        from .monitor import Monitor

        server = self.server
        opts = server.options
        monitor = Monitor(server)
        secure = not opts.http_port  # -ms: HTTPS with the client listener's certificate
        port = max(opts.http_port or opts.https_port, 0)  # -1: any free port
        host = opts.http_host or opts.host
        try:
            await monitor.start(await listening_socket(host, port), secure=secure)
        except OSError as exc:
            raise listen_error("can't start monitoring: can't listen to the "
                               f"{'https ' if secure else ''}monitor port", host, port,
                               exc) from exc
        server.monitor = monitor
        log.info("Starting %s monitor on %s", self.scheme,
                 join_host_port(host, monitor.bound[1]))

    @property
    def scheme(self) -> str:
        return "http" if self.server.options.http_port else "https"

    def ports(self) -> dict[str, list[str]]:
        monitor = self.server.monitor
        return {} if monitor is None else {"monitoring": listener_urls(self.scheme,
                                                                        monitor.bound)}

    async def stop(self) -> None:
        if self.server.monitor is not None:
            await self.server.monitor.stop()
