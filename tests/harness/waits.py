"""The waits of the tests, one set: for a log line, for a listener, for a condition.

A wait on an event is preferred where one exists: a server's log line
(`server.wait_for_log(pattern)`, `Process.wait_for(pattern)`: the reader thread wakes the
waiter, nothing polls), a client's callback, a PING/PONG. Polling, always with a deadline, is
left for what has no event: state that changes as time passes (expiry, heartbeats), another
process's files or endpoints, a port of a program that logs nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

INTERVAL = 0.02


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition",
               interval: float = INTERVAL) -> Any:
    """Poll `check()` until it returns something true (returned), at most `timeout`
    seconds: AssertionError naming `what` after that."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout:g} s")
        time.sleep(interval)
    return result


async def eventually(check: Callable[[], Any], timeout: float = 10.0,
                     what: str = "condition", interval: float = INTERVAL) -> Any:
    """`wait_until` for async tests: `check()` may return an awaitable; the loop runs
    between polls."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not met within {timeout:g} s")
        await asyncio.sleep(interval)


def wait_listening(port: int, host: str = "127.0.0.1", timeout: float = 15.0,
                   proc: subprocess.Popen[Any] | None = None) -> None:
    """Until something accepts connections on host:port (for a program whose log does not
    say; the servers' ports are read from their logs). Fails at once if `proc` exits."""

    def accepts() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(accepts, timeout, f"a listener on {host}:{port}")


def wait_for_file_line(path: str | Path, pattern: str, timeout: float = 20.0,
                       proc: subprocess.Popen[Any] | None = None) -> re.Match[str]:
    """The first match of `pattern` in a file another program writes (a server's `-l` log
    file: no pipe to watch, so this polls), once written. Fails at once if `proc` exits."""
    regex = re.compile(pattern)

    def found() -> re.Match[str] | None:
        try:
            match = regex.search(Path(path).read_text(errors="replace"))
        except FileNotFoundError:
            match = None
        if match is None and proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode} before "
                               f"{pattern!r} was in {path}")
        return match

    return wait_until(found, timeout, f"{pattern!r} in {path}")  # type: ignore[no-any-return]
