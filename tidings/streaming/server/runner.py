"""Starting the streaming server: embedded in `tidings server`, or standalone on any NATS URL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import replace
from typing import Any

from ... import __version__
from ...redact import redact_url
from ...signals import STANDALONE_STREAMING_SIGNALS, trap_unsupported_signals
from .conn import StanConn
from .options import StreamingOptions, open_store_for
from .server import StreamingServer

log = logging.getLogger("tidings.streaming")


class RunningStreaming:
    """A started streaming server with its connection and (optional) monitoring site."""

    def __init__(self, server: StreamingServer, monitor: Any = None) -> None:
        self.server = server
        self.monitor = monitor

    async def stop(self) -> None:
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                await self.monitor.cleanup()
            self.monitor = None
        await self.server.shutdown()


async def start_streaming(opts: StreamingOptions, url: str, monitor_required: bool = True,
                          **connect_opts: Any) -> RunningStreaming:
    """Open the store, connect to ``url``, start serving (and monitoring if http_port).

    With ``monitor_required=False`` a monitoring port that cannot be bound is logged and
    skipped instead of failing the start (embedded in a core server that may serve it).

    With ``opts.ft_group`` (FT mode, see :mod:`.ft`) this returns only once this server is
    the group's active one: standby until then, the store not even opened."""
    if opts.nats_user:
        connect_opts.setdefault("user", opts.nats_user)
        connect_opts.setdefault("password", opts.nats_password)
    if opts.nats_token:
        connect_opts.setdefault("token", opts.nats_token)
    ft = None
    if opts.ft_group:
        from .ft import FaultTolerance, ft_check

        ft_check(opts)
        conn = await StanConn.connect(url, **connect_opts)
        standby_monitor = None
        try:
            ft = FaultTolerance(opts, conn)
            await ft.setup()
            if opts.http_port:
                # A standby answers /streaming/serverz (FT_STANDBY) and /isFTActive (204).
                from .monitor import serve_routes, standby_routes

                standby_monitor = await serve_routes(
                    standby_routes(opts.cluster_id, __version__), opts.http_host,
                    opts.http_port)
                if opts.http_port == -1:  # any port: the active answers where it did
                    opts = replace(opts, http_port=standby_monitor.addresses[0][1])
            store = await ft.wait_for_store(lambda: open_store_for(opts))
        except BaseException:
            if ft is not None:
                ft.stop()
            await conn.close()
            raise
        finally:
            if standby_monitor is not None:
                await standby_monitor.cleanup()  # the active server's monitor takes the port
    else:
        store = open_store_for(opts)
        try:
            conn = await StanConn.connect(url, **connect_opts)
        except BaseException:
            store.close()
            raise
    server = StreamingServer(opts, store, conn)
    try:
        if ft is not None:
            server.state = "FT_ACTIVE"
            server.ft = ft
            ft.activate(server.server_id, store)
        await server.start()
    except BaseException:
        if ft is not None:
            ft.stop()
        await server.shutdown()
        raise
    monitor = None
    if opts.http_port:
        from .monitor import start_monitor

        try:
            monitor = await start_monitor(server, opts.http_host, opts.http_port)
        except OSError as exc:
            if monitor_required:
                await server.shutdown()
                raise
            log.error("streaming monitoring not served on port %d: %s", opts.http_port, exc)
        except BaseException:
            await server.shutdown()
            raise
    return RunningStreaming(server, monitor)


async def run_standalone(opts: StreamingOptions) -> None:
    """`tidings streaming --nats URL`: serve until SIGINT/SIGTERM."""
    loop = asyncio.get_running_loop()
    trap_unsupported_signals(loop, STANDALONE_STREAMING_SIGNALS)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    # a standby (FT mode) waits here until it is active, or until it is told to stop
    starting = loop.create_task(start_streaming(opts, opts.nats_url or "nats://127.0.0.1:4222"))
    stopping = loop.create_task(stop.wait())
    await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return
    stopping.cancel()
    running = starting.result()
    log.info("Streaming server connected to %s", redact_url(opts.nats_url))
    try:
        await stop.wait()
    finally:
        await running.stop()


async def start_embedded(core: Any, opts: StreamingOptions) -> RunningStreaming:
    """Start streaming as a client of the in-process core server ``core`` (a Server),
    joined to it in memory (node.py runs it, and stops it before the core)."""
    if opts.ft_group:
        raise ValueError("ft: --ft_group is supported by `tidings streaming --nats URL` only")
    copts = core.options
    # With the core's monitor on, it serves the streaming endpoints too, on its port.
    serve_on_core = core.monitor is not None and opts.http_port in (0, copts.http_port)
    if serve_on_core:
        opts.http_port = 0
    # Joined to the core in memory (Server.dial_internal): no socket, and none of what the
    # core requires of clients (TLS, certificates, users, permissions) applies to it.
    running = await start_streaming(opts, f"nats://in-process:{core.port}",
                                    monitor_required=False, dialer=core.dial_internal)
    if serve_on_core:
        from .monitor import routes

        core.monitor_routes.update(routes(running.server))
    return running
