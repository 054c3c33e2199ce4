"""SIGHUP, SIGUSR1 and SIGUSR2 (configuration reload, log re-open, lame duck mode in
nats-server) are logged and the server keeps serving until reload and lame duck exist."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

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


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tidings", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("streaming", [[], ["--no_streaming"]])
def test_server_survives_hup_usr1_usr2(streaming: list[str]) -> None:
    port = free_port()
    proc = start("server", "-a", "127.0.0.1", "-p", str(port), *streaming)
    try:
        read_until(proc, "Streaming server ready" if not streaming else "Server is ready")
        for sig, name, note in ((signal.SIGHUP, "hangup", "reload is not supported"),
                                (signal.SIGUSR1, "user defined signal 1", "re-open ignored"),
                                (signal.SIGUSR2, "user defined signal 2", "Lame duck mode is "
                                                                          "not supported")):
            proc.send_signal(sig)
            read_until(proc, f'Trapped "{name}" signal')
            read_until(proc, note)
        assert ping(port).startswith(b"PONG")
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_standalone_streaming_survives_hup_and_usr1(reference_server) -> None:
    proc = start("streaming", "--nats", reference_server.url)
    try:
        read_until(proc, "Streaming server ready")
        proc.send_signal(signal.SIGHUP)
        read_until(proc, "Reload supported only for embedded NATS Server")
        proc.send_signal(signal.SIGUSR1)
        read_until(proc, "re-open ignored")
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
