"""A tidings server on the running event loop (the test's own), and `tidings.serve()`.

`InProcessServer` runs a `Node` (the core server, its cluster and embedded streaming, as
`tidings server` does) in the current loop: nothing to spawn, a few milliseconds to start. Its methods are
coroutines. While it runs, a logging handler keeps what the "tidings" loggers say (at INFO),
for the test report.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .spec import ServerHandle, ServerSpec

_FORMAT = logging.Formatter("%(asctime)s [%(levelname).3s] %(name)s: %(message)s")
_capturing: list[int] = []  # the "tidings" logger's level before the first capture


class _LogBuffer(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(_FORMAT.format(record))
        except Exception:  # never let the log break the server
            self.handleError(record)


def _capture(handler: _LogBuffer) -> None:
    logger = logging.getLogger("tidings")
    if not _capturing:
        _capturing.append(logger.level)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    else:
        _capturing.append(_capturing[-1])
    logger.addHandler(handler)


def _release(handler: _LogBuffer) -> None:
    logger = logging.getLogger("tidings")
    logger.removeHandler(handler)
    level = _capturing.pop()
    if not _capturing:
        logger.setLevel(level)


class InProcessServer(ServerHandle):
    """A server on the running loop. `await start()`, `await stop()`, `await restart()`."""

    mode = "inprocess"

    def __init__(self, spec: ServerSpec, workdir: Path, capture_log: bool = True) -> None:
        super().__init__(spec, workdir)
        self.node: Any = None  # tidings.node.Node, while it runs
        self._log = _LogBuffer() if capture_log else None

    @property
    def running(self) -> bool:
        return self.node is not None

    @property
    def core(self) -> Any:
        """The core server (tidings.server.server.Server), while it runs."""
        return self.node.server if self.node is not None else None

    @property
    def streaming(self) -> Any:
        """The embedded streaming server (RunningStreaming), while it runs."""
        return self.node.streaming if self.node is not None else None

    def log(self, since: int = 0) -> str:
        """What the "tidings" loggers said while this server ran (from line `since`)."""
        return "".join(line + "\n" for line in self._log.lines[since:]) if self._log else ""

    def log_size(self) -> int:
        return len(self._log.lines) if self._log else 0

    async def start(self) -> InProcessServer:
        if self.node is not None:
            return self
        from ..node import Node

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.options.port = self._port
        options, conf = self.options.core_options(self.workdir)
        if self._log is not None:
            if self.starts:
                self._log.lines.append("--- restarted ---")
            _capture(self._log)
        sopts = self.options.streaming_options(conf) if self.options.streaming else None
        node = Node(options, sopts)
        try:
            await node.start()
        except BaseException:
            self._release_log()
            raise
        self.node = node
        self._port = node.server.port
        if node.server.cluster is not None:  # a restart listens where this start did
            from .process import with_port

            self.options.cluster = with_port(str(self.options.cluster),
                                             node.server.cluster.port)
        self.starts += 1
        return self

    @property
    def ports(self) -> dict[str, int]:
        """The ports it listens on: "client", and "route", "websocket", "http", "https"
        when it has those listeners (while it runs)."""
        core = self.core
        if core is None:
            return {}
        ports = {"client": core.port}
        if core.cluster is not None:
            ports["route"] = core.cluster.port
        if core.monitor is not None:
            scheme = "http" if core.options.http_port else "https"
            ports[scheme] = core.monitor.bound[1]
        for listener in core.listeners:
            if type(listener).__name__ == "WebSocketListener":
                ports["websocket"] = listener.port
        return ports

    async def stop(self) -> None:
        """Stop streaming (its store closed cleanly), then the core server. Idempotent."""
        node, self.node = self.node, None
        try:
            if node is not None:
                await node.stop()
        finally:
            self._release_log()

    async def kill(self) -> None:
        """The closest in-process thing to a crash: connections dropped, nothing flushed
        (streaming's store is still closed; use a subprocess server to test a real crash)."""
        core = self.core
        if core is not None:
            for client in list(core.clients.values()):
                client.abort()
        await self.stop()

    async def restart(self) -> None:
        """Stop and start again: same port, same store directory."""
        await self.stop()
        await self.start()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<InProcessServer {self.url} {state}>"

    def _release_log(self) -> None:
        if self._log is not None and self._log in logging.getLogger("tidings").handlers:
            _release(self._log)


@contextlib.asynccontextmanager
async def serve(port: int = 0, host: str = "127.0.0.1", *, streaming: bool = False,
                store: str = "memory", store_dir: str = "",
                **options: Any) -> AsyncIterator[InProcessServer]:
    """A tidings server on the running loop for the `async with` block:

        async with tidings.serve(port=0) as srv:
            nc = await nats.connect(srv.url)

    Keywords: ServerSpec's (user, password, token, max_payload, config, cluster_id,
    cluster, routes, ...) and more ServerOptions fields. A file or sql store without
    `store_dir` lives in a temporary directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tidings-serve-") as tmp:
        if streaming and store != "memory" and not store_dir:
            store_dir = str(Path(tmp) / "store")
        spec = ServerSpec.from_kwargs(port=port, host=host, streaming=streaming, store=store,
                                      store_dir=store_dir, **options)
        server = InProcessServer(spec, Path(tmp), capture_log=False)
        await server.start()
        try:
            yield server
        finally:
            await server.stop()
