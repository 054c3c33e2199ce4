"""Commands of the tests' own (a standalone `tidings streaming`, a start that must fail, a
server with flags no fixture has), logged and watched as the servers are: stderr (and
stdout, unless kept apart) goes to a `ProcessLog`, and `wait_for(pattern)` waits for a line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidings.testing.process import ProcessLog

from .servers import CLUSTER_BLOCK, nats_server_binary, workdir

STOP_GRACE = 10.0


def stop_process(proc: subprocess.Popen[Any], grace: float = STOP_GRACE) -> None:
    """SIGTERM, and SIGKILL if it has not exited after `grace` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def tidings_command(*args: str) -> list[str]:
    """`python -m tidings ARGS...` with this interpreter."""
    return [sys.executable, "-m", "tidings", *args]


def server_command(kind: str, *args: str, streaming: bool = False) -> list[str]:
    """The command line of a server of `kind` ("tidings" or "reference") with `args`
    exactly (tidings without its embedded streaming unless `streaming`)."""
    if kind == "reference":
        return [nats_server_binary(), *args]
    return tidings_command("server", *([] if streaming else ["--no_streaming"]), *args)


class Process:
    """`cmd` running with its output in a log file of its own (`log_path`), read by a
    thread: `wait_for(pattern)` returns the first matching line's match once it is
    written. `stdout=True` keeps stdout apart (in `proc.stdout`, a pipe)."""

    def __init__(self, cmd: Sequence[str], kind: str = "process",
                 env: dict[str, str] | None = None, cwd: str | Path | None = None,
                 stdout: bool = False) -> None:
        self.cmd = list(cmd)
        self.workdir = workdir(kind)
        self.log_path = self.workdir / "process.log"
        self.log = ProcessLog(self.log_path)
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stdout else subprocess.STDOUT, env=env, cwd=cwd)
        pipe = self.proc.stderr if stdout else self.proc.stdout
        assert pipe is not None
        self.log.attach(pipe, name=f"{kind}-log-{self.proc.pid}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    @property
    def ports(self) -> dict[str, int]:
        """The listeners' ports its log named (see ProcessLog)."""
        return dict(self.log.ports)

    def text(self, since: int = 0) -> str:
        """What it has written (from line `since`)."""
        return self.log.text(since)

    def mark(self) -> int:
        return self.log.mark()

    def wait_for(self, pattern: str, timeout: float = 20.0, since: int = 0,
                 count: int = 1) -> re.Match[str]:
        """The first line (from line `since`; the count-th with `count`) matching the
        regular expression `pattern`, once written."""
        return self.log.wait_for(pattern, timeout, since, count)

    def wait(self, timeout: float = STOP_GRACE) -> int:
        """Until it exits (its output read to the end): its exit code."""
        code = self.proc.wait(timeout)
        self.log.join()
        return code

    def stop(self, grace: float = STOP_GRACE) -> int:
        """SIGTERM (SIGKILL after `grace`): its exit code."""
        stop_process(self.proc, grace)
        self.log.join()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


def _clustered(args: Sequence[str]) -> bool:
    """Whether a server with `args` has a route listener (a flag, or its -c file's
    `cluster` block)."""
    if any(a.lstrip("-") in ("cluster", "routes") for a in args):
        return True
    for flag, value in zip(args, args[1:], strict=False):
        if flag in ("-c", "--config") and CLUSTER_BLOCK.search(Path(value).read_text()):
            return True
    return False


def start_server_process(kind: str, *args: str, streaming: bool = False,
                         timeout: float = 20.0) -> Process:
    """A server of `kind` started with `args` exactly (a configuration file naming its
    own addresses, flags no ServerSpec has), once its log says it is ready, and its route
    listener too when it has one (the reference opens it after): `.ports` has them."""
    proc = Process(server_command(kind, *args, streaming=streaming), kind=kind)
    try:
        proc.wait_for("Server is ready", timeout)
        if kind == "reference" and _clustered(args):
            proc.wait_for("Listening for route connections", timeout)
    except BaseException:
        proc.kill()
        raise
    return proc
