"""SIGHUP, SIGUSR1 and SIGUSR2 (configuration reload, log re-open, lame duck mode in
nats-server) are logged and the server keeps serving until reload and lame duck exist."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.servers import free_port

pytestmark = pytest.mark.timeout(60)


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """Log lines up to the one containing ``text``; fails if the process ends first."""
    seen = []
    while True:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        assert line, f"exited with {proc.wait()} before {text!r}:\n{''.join(seen)}"
        seen.append(line)
        if text in line:
            return line


def ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(4096)  # INFO
        s.sendall(b"CONNECT {\"verbose\":false}\r\nPING\r\n")
        return s.recv(4096)


@contextlib.contextmanager
def running(*args: str) -> Iterator[subprocess.Popen[str]]:
    """`tidings <args>` with its log readable; it must end cleanly on SIGTERM afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "tidings", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("streaming", [[], ["--no_streaming"]])
def test_server_survives_hup_usr1_usr2(streaming: list[str]) -> None:
    port = free_port()
    with running("server", "-a", "127.0.0.1", "-p", str(port), *streaming) as proc:
        read_until(proc, "Streaming server ready" if not streaming else "Server is ready")
        for sig, name, note in ((signal.SIGHUP, "hangup", "reload is not supported"),
                                (signal.SIGUSR1, "user defined signal 1", "re-open ignored"),
                                (signal.SIGUSR2, "user defined signal 2", "Lame duck mode is "
                                                                          "not supported")):
            proc.send_signal(sig)
            read_until(proc, f'Trapped "{name}" signal')
            read_until(proc, note)
        assert ping(port).startswith(b"PONG")


def test_standalone_streaming_survives_hup_and_usr1(reference_server) -> None:
    with running("streaming", "--nats", reference_server.url) as proc:
        read_until(proc, "Streaming server ready")
        proc.send_signal(signal.SIGHUP)
        read_until(proc, "Reload supported only for embedded NATS Server")
        proc.send_signal(signal.SIGUSR1)
        read_until(proc, "re-open ignored")
