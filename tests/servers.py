"""The old home of the test servers, left while the tests move onto tests/harness/ (which
starts them through tidings.testing, on ports read back from their logs). What is still
here that the harness does not have (`free_port`, `_wait_ready`) goes with the last test
that uses it."""

from __future__ import annotations

import socket
import subprocess
import time

from tests.harness.processes import stop_process
from tests.harness.servers import (
    Server,
    nats_server_binary,
    start_configured,
    start_reference,
    start_tidings,
)
from tests.harness.waits import wait_listening as _wait_listening

RunningServer = Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    _wait_listening(port, timeout=timeout, proc=proc)


__all__ = ["RunningServer", "_wait_ready", "free_port", "nats_server_binary",
           "start_configured", "start_reference", "start_tidings", "stop_process",
           "wait_listening"]
