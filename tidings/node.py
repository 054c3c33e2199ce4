"""One lifecycle for a node: a core server, its cluster and its embedded streaming server,
started in one order and stopped in the reverse one. `tidings server`, the in-process test
server and `tidings.serve` all run a node, so what one of them starts the others start the
same way.

The cluster is plugged into the server as one more listener (the server does not know its
kind); the embedded streaming server joins the core in memory (`Server.dial_internal`) once
the core listens, after the seed routes when clustered (one streaming server per cluster id:
a server that finds another one runs without streaming and says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .config.server import ServerOptions
from .server.server import Server
from .signals import SERVER_SIGNALS, trap_unsupported_signals

log = logging.getLogger("tidings.server")

# In a cluster, how long embedded streaming waits for the seed routes before it looks for
# another streaming server with its cluster id.
STREAMING_SEED_WAIT = 2.0


class Node:
    """A core server with its cluster (when `options.cluster`) and its embedded streaming
    server (when `streaming`, a StreamingOptions, is given). `await start()`, then
    `await stop()`; or `await run()` for a command's whole life."""

    def __init__(self, options: ServerOptions, streaming: Any = None) -> None:
        self.options = options
        self.streaming_options = streaming
        self.server: Server | None = None
        self.streaming: Any = None  # streaming.server.RunningStreaming, while it runs

    async def start(self, core_started: Callable[[Server], None] | None = None) -> Server:
        """Start the core (and its cluster), then streaming; on a failure, what started is
        stopped again and the error raised (a listener's names it and its address).
        `core_started(server)` is called once the core listens, before streaming starts.
        Once all is up, the ports file is written (ports_file_dir)."""
        server = Server(self.options)
        if self.options.cluster:
            from .cluster.cluster import Cluster

            server.cluster = Cluster(server)
            server.plug(server.cluster)
        await server.start(announce=False)
        self.server = server
        jetstream = getattr(self.options, "jetstream", None)
        if jetstream is not None and jetstream.enabled:
            from .jetstream.api import JetStream

            server.jetstream = JetStream(server)
            try:
                server.jetstream.start()
            except OSError:
                server.jetstream = None
                self.server = None
                await server.shutdown()
                raise
        if core_started is not None:
            core_started(server)
        if self.streaming_options is not None:
            try:
                self.streaming = await self._start_streaming(server)
            except BaseException:
                self.server = None
                await server.shutdown()
                raise
        server.ports_file.write()
        log.info("Server is ready")  # only once everything started, its ports file written
        return server

    async def _start_streaming(self, core: Server) -> Any:
        from .streaming.server.banner import log_embedded_banner

        sopts = replace(self.streaming_options)
        log_embedded_banner(sopts, core)
        # The streaming modules load in a thread: the core serves its first clients meanwhile
        # instead of waiting for the imports.
        await asyncio.to_thread(importlib.import_module, "tidings.streaming.server.runner")
        from .streaming.server import start_embedded
        from .streaming.server.server import AnotherServerRunning

        if core.cluster is not None:
            # One streaming server per cluster id: look for another once the seed routes
            # are up (a server that started first already serves it).
            await core.cluster.seeded(STREAMING_SEED_WAIT)
        try:
            return await start_embedded(core, sopts)
        except AnotherServerRunning as exc:
            if core.cluster is None:
                raise
            logging.getLogger("tidings.streaming").warning(
                "%s in the cluster: this server runs without streaming", exc)
            return None

    async def stop(self) -> None:
        """Stop streaming first (its last group commit, its store closed cleanly), then the
        core. Idempotent."""
        running, self.streaming = self.streaming, None
        server, self.server = self.server, None
        try:
            if running is not None:
                await running.stop()
        finally:
            if server is not None:
                await server.shutdown()
                server.ports_file.remove()

    async def run(self, reload_options: Callable[[], ServerOptions] | None = None) -> None:
        """`tidings server`: start, serve until SIGINT or SIGTERM (or the end of lame duck
        mode), stop. SIGHUP reloads with `reload_options()`, SIGUSR2 enters lame duck mode.
        A stop signal while starting (streaming may take a while) stops what has started."""
        loop = asyncio.get_running_loop()
        trap_unsupported_signals(loop, SERVER_SIGNALS)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

        def core_started(server: Server) -> None:
            # As soon as the core listens (a client may signal it while streaming starts).
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGUSR2, server.enter_lame_duck)
                if reload_options is not None:
                    loop.add_signal_handler(signal.SIGHUP, server.reload_with, reload_options)

        starting = loop.create_task(self.start(core_started))
        if not await _first(starting, stop):
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            await self.stop()
            log.info("Server Exiting..")
            return
        server = starting.result()
        try:
            await _first(loop.create_task(server.serve_forever()), stop)
        finally:
            await self.stop()
        log.info("Server Exiting..")


async def _first(task: asyncio.Task[Any], event: asyncio.Event) -> bool:
    """Wait for `task` or `event`, whichever comes first; True if `task` finished (its
    exception, if any, raised), False if the event came first."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if task.done():
        task.result()
        return True
    return False
