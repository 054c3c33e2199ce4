"""A tidings server in a subprocess (`python -m tidings server ...`), for any test.

Its stderr goes through a pipe to a reader thread that appends it to a log file and notes
when the server is ready (its "Server is ready" line, and streaming's once it serves): no
polling. `restart()` starts it again on the same port with the same store directory.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import sys
import threading
import weakref
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO

from .spec import ServerHandle, ServerSpec

_LISTENING = re.compile(rb"Listening for client connections on \S+:(\d+)")
_STREAMING_READY = (b"Streaming server ready", b"runs without streaming")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0

_live: weakref.WeakSet[SubprocessServer] = weakref.WeakSet()


class Done:
    """What `stop()` and friends return: already done, and awaitable, so that an async test
    may `await server.restart()` whichever kind of server it has."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def __repr__(self) -> str:
        return "<done>"


class SubprocessServer(ServerHandle):
    """A `tidings server` process on 127.0.0.1 (by default) and a port of its own."""

    mode = "subprocess"

    def __init__(self, spec: ServerSpec, workdir: Path) -> None:
        super().__init__(spec, workdir)
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._ready = threading.Event()

    # -- what tests use --------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, since: int = 0) -> str:
        """What the server has logged (from byte offset `since`), over all its starts."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def start(self, timeout: float = START_TIMEOUT) -> SubprocessServer:
        """Start the process and wait until it serves (streaming too, when on)."""
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.options.port = self._port  # a restart listens where the first start did
        cmd = [sys.executable, "-m", "tidings", "server", *self.options.argv(self.workdir)]
        log = open(self.log_path, "ab")  # the reader thread closes it
        if self.starts:
            log.write(b"--- restarted ---\n")
        self._ready.clear()
        state: dict[str, Any] = {}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, cwd=self.workdir)
        self.starts += 1
        _live.add(self)
        self._reader = threading.Thread(
            target=self._read, args=(self.proc.stderr, log, state), daemon=True,
            name=f"tidings-log-{self.proc.pid}")
        self._reader.start()
        if not self._ready.wait(timeout) or not state.get("ready"):
            self._halt(kill=True)
            why = "did not start in time" if "ready" not in state else "exited"
            raise RuntimeError(f"tidings server {why} ({' '.join(cmd)}):\n{self.log()[-4000:]}")
        self._port = state["port"]
        return self

    def stop(self) -> Done:
        """Stop it as SIGTERM does (streaming's store closed cleanly). Idempotent."""
        self._halt(kill=False)
        return Done()

    def kill(self) -> Done:
        """SIGKILL: a crash, for tests of what clients do then."""
        self._halt(kill=True)
        return Done()

    def restart(self) -> Done:
        """Stop and start again: same port, same store directory."""
        self._halt(kill=False)
        self.start()
        return Done()

    def __await__(self) -> Generator[Any, None, SubprocessServer]:
        """`await factory(...)` works in async tests with subprocess servers too."""
        return self
        yield

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<SubprocessServer {self.url} {state}>"

    # -- inside ------------------------------------------------------------------------------
    def _read(self, pipe: BinaryIO, log: BinaryIO, state: dict[str, Any]) -> None:
        streaming = self.options.streaming
        try:
            for line in iter(pipe.readline, b""):
                log.write(line)
                log.flush()
                if "ready" in state:
                    continue
                if m := _LISTENING.search(line):
                    state["port"] = int(m.group(1))
                elif b"Server is ready" in line:
                    state["core"] = True
                elif any(s in line for s in _STREAMING_READY):
                    state["streaming"] = True
                if "port" in state and state.get("core") and (
                        not streaming or state.get("streaming")):
                    state["ready"] = True
                    self._ready.set()
        finally:
            state.setdefault("ready", False)
            pipe.close()
            log.close()
            self._ready.set()

    def _halt(self, kill: bool) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            if kill:
                proc.kill()
            else:
                proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join()
            self._reader = None
        _live.discard(self)


@atexit.register
def _kill_leftovers() -> None:
    """No server outlives the test run, even one whose fixture never finished."""
    for server in list(_live):
        server.kill()


def start_server(workdir: str | os.PathLike[str], **options: Any) -> SubprocessServer:
    """Start a subprocess server with `options` (ServerSpec's keywords), its files (log,
    configuration, streaming store) under `workdir`; stop it with `.stop()`."""
    spec = ServerSpec.from_kwargs(**options)
    if spec.streaming and not spec.store_dir and spec.store != "memory":
        spec.store_dir = str(Path(workdir) / "store")
    return SubprocessServer(spec, Path(workdir)).start()
