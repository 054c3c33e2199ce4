"""A tidings server in a subprocess (`python -m tidings server ...`), for any test.

Its stderr goes through a pipe to a reader thread (`ProcessLog`) that appends it to a log
file, reads the ports the server says it listens on (client, route, WebSocket, monitoring:
the lines nats-server writes too) and wakes whoever waits for a line: the server is ready
when it says so ("Server is ready", and streaming's line once it serves), no polling. A
server asked for port 0 tells which port it got, and `restart()` starts it again on the
ports of its first start, with the same store directory.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading
import time
import weakref
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from .spec import ServerHandle, ServerSpec

# What nats-server (and tidings) says of each listener, once it listens.
_ADDRESS = re.compile(
    r"(?:Listening for (client|route|websocket) (?:connections|clients) on (?:wss?://)?"
    r"|Starting (https?) monitor on )(\S+):(\d+)")
_READY = "Server is ready"
_STREAMING_READY = ("Streaming server ready", "runs without streaming")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0

_live: weakref.WeakSet[SubprocessServer] = weakref.WeakSet()


def ports_in(text: str) -> dict[str, int]:
    """The ports a server's log names, by listener ("client", "route", "websocket",
    "http", "https"): the first of each."""
    ports: dict[str, int] = {}
    for m in _ADDRESS.finditer(text):
        ports.setdefault(m.group(1) or m.group(2), int(m.group(4)))
    return ports


class ProcessLog:
    """What a process writes to a pipe: kept in a file and in memory, read by a thread.

    `ports` maps each listener named in the log ("client", "route", "websocket", "http",
    "https") to its port, for the current run of the process (`attach` starts a run).
    `wait(predicate)` and `wait_for(pattern)` block until a line makes them true, or the
    pipe closes (the process exited), or the timeout passes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self.ports: dict[str, int] = {}
        self.closed = True
        self._idle = False  # the reader waits on the pipe, all it read being handled
        self._fd: int | None = None
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None

    def attach(self, pipe: IO[bytes], name: str = "process-log") -> None:
        """Read `pipe` (a new run of the process) until it closes."""
        with self._cond:
            self.ports = {}
            self.closed = False
            self._idle = False
            self._fd = pipe.fileno()
        self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True,
                                        name=name)
        self._reader.start()

    def join(self) -> None:
        """Until the pipe has been read to its end."""
        if self._reader is not None:
            self._reader.join()
            self._reader = None

    def mark(self) -> int:
        """Where the log stands (for `wait_for(..., since=mark)`): after all that the
        process had written when this was called."""
        self.sync()
        with self._cond:
            return len(self.lines)

    def text(self, since: int = 0) -> str:
        """What it wrote (from line `since`), all it had written when this was called."""
        self.sync()
        with self._cond:
            return "".join(line + "\n" for line in self.lines[since:])

    def wait(self, predicate: Callable[[], Any], timeout: float) -> Any:
        """Until `predicate()` (called under the log's lock after each line) is true:
        returns its value, or a false one when the pipe closed or time ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (result := predicate()):
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    return result
                self._cond.wait(left)
            return result

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float = START_TIMEOUT,
                 since: int = 0, count: int = 1) -> re.Match[str]:
        """The first line from line `since` on that matches `pattern` (a regular
        expression), once written (with `count`, the count-th such line); TimeoutError if
        none comes."""
        regex = re.compile(pattern)
        seen = [since, 0]  # the next line to look at, the matches before it

        def found() -> re.Match[str] | None:
            for i in range(seen[0], len(self.lines)):
                seen[0] = i + 1
                if m := regex.search(self.lines[i]):
                    seen[1] += 1
                    if seen[1] >= count:
                        return m
            return None

        match = self.wait(found, timeout)
        if match is None:
            why = "the process exited" if self.closed else f"not within {timeout:g} s"
            raise TimeoutError(f"no line matching {regex.pattern!r} ({why}):\n"
                               f"{self.text(since)[-4000:]}")
        return match

    def sync(self, timeout: float = 5.0) -> None:
        """Until what the process has written so far has been read (into `lines` and the
        log file): what it logged before an effect the test saw is then there to read."""
        fd = self._fd

        def drained() -> bool:
            if self.closed or fd is None:
                return True
            if not self._idle:
                return False
            try:
                waiting = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
            except OSError:
                return True
            return struct.unpack("i", waiting)[0] == 0

        self.wait(drained, timeout)

    def _read(self, pipe: IO[bytes]) -> None:
        fd, rest = pipe.fileno(), b""
        with open(self.path, "ab") as log:
            try:
                while True:
                    with self._cond:
                        self._idle = True  # in the read below, nothing unread but the pipe's
                        self._cond.notify_all()
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    log.write(data)
                    log.flush()
                    *complete, rest = (rest + data).split(b"\n")
                    with self._cond:
                        self._idle = False
                        for raw in complete:
                            self._add(raw.decode(errors="replace").rstrip("\r"))
                        self._cond.notify_all()
            finally:
                pipe.close()
                with self._cond:
                    if rest:
                        self._add(rest.decode(errors="replace"))
                    self.closed = True
                    self._fd = None
                    self._cond.notify_all()

    def _add(self, line: str) -> None:
        """One more line (under the lock): its listener's port, if it names one."""
        if m := _ADDRESS.search(line):
            self.ports.setdefault(m.group(1) or m.group(2), int(m.group(4)))
        self.lines.append(line)


class Done:
    """What `stop()` and friends return: already done, and awaitable, so that an async test
    may `await server.restart()` whichever kind of server it has."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def __repr__(self) -> str:
        return "<done>"


def with_port(url: str, port: int) -> str:
    """`url` (nats://[user:pass@]host:port) on `port` instead."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition(":")[0] if parts.port is not None else parts.netloc
    return urlunsplit(parts._replace(netloc=f"{netloc}:{port}"))


class SubprocessServer(ServerHandle):
    """A `tidings server` process on 127.0.0.1 (by default) and a port of its own."""

    mode = "subprocess"
    kind = "tidings"

    def __init__(self, spec: ServerSpec, workdir: Path) -> None:
        super().__init__(spec, workdir)
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.process_log = ProcessLog(self.log_path)
        self.env: dict[str, str] | None = None  # the environment, when not this one's

    # -- what tests use --------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def ports(self) -> dict[str, int]:
        """The ports this run listens on, as its log says: "client", "route",
        "websocket", "http", "https"."""
        return dict(self.process_log.ports)

    def log(self, since: int = 0) -> str:
        """What the server has logged (from byte offset `since`), over all its starts: all
        it had logged when this was called."""
        self.process_log.sync()
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

    def mark(self) -> int:
        """Where the log stands, in lines (for `wait_for_log(..., since=mark)`)."""
        return self.process_log.mark()

    def wait_for_log(self, pattern: str, timeout: float = START_TIMEOUT,
                     since: int = 0) -> re.Match[str]:
        """The first line from line `since` on matching `pattern`, once logged."""
        return self.process_log.wait_for(pattern, timeout, since)

    def command(self) -> list[str]:
        """The command line of the next start."""
        return [sys.executable, "-m", "tidings", "server", *self.options.argv(self.workdir)]

    def start(self, timeout: float = START_TIMEOUT) -> SubprocessServer:
        """Start the process and wait until it serves (streaming too, when on)."""
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.options.port = self._port  # a restart listens where the first start did
        cmd = self.command()
        if self.starts:
            self.process_log.lines.append("--- restarted ---")
            with open(self.log_path, "ab") as f:
                f.write(b"--- restarted ---\n")
        since = self.process_log.mark()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, cwd=self.workdir, env=self.env)
        self.starts += 1
        _live.add(self)
        assert self.proc.stderr is not None
        self.process_log.attach(self.proc.stderr, name=f"{self.kind}-log-{self.proc.pid}")
        if not self.process_log.wait(lambda: self.ready(since), timeout):
            self._halt(kill=True)
            why = "exited" if self.process_log.closed else "did not start in time"
            raise RuntimeError(f"{self.kind} server {why} ({' '.join(cmd)}):\n"
                               f"{self.log()[-4000:]}")
        self._started()
        return self

    def ready(self, since: int) -> bool:
        """Whether the lines logged since line `since` say that the server serves (called
        under the log's lock)."""
        lines = self.process_log.lines[since:]
        if "client" not in self.process_log.ports or not any(_READY in x for x in lines):
            return False
        return not self.options.streaming or any(
            s in x for x in lines for s in _STREAMING_READY)

    def _started(self) -> None:
        """Keep the ports read back from the log for the next start."""
        ports = self.process_log.ports
        self._port = ports["client"]
        if "route" in ports and self.options.cluster:
            self.options.cluster = with_port(str(self.options.cluster), ports["route"])
        for key, name in (("http_port", "http"), ("https_port", "https")):
            if self.options.extra.get(key) == -1 and name in ports:
                self.options.extra[key] = ports[name]

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
        return f"<{type(self).__name__} {self.url} {state}>"

    # -- inside ------------------------------------------------------------------------------
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
        self.process_log.join()
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
