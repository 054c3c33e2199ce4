"""SIGHUP and SIGUSR1 (configuration reload, log re-open in nats-server) are logged and the
server keeps serving until they exist; SIGUSR2 puts it in lame duck mode, as nats-server."""

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
def test_server_survives_hup_usr1(streaming: list[str]) -> None:
    port = free_port()
    with running("server", "-a", "127.0.0.1", "-p", str(port), *streaming) as proc:
        read_until(proc, "Streaming server ready" if not streaming else "Server is ready")
        for sig, name, note in ((signal.SIGHUP, "hangup", "can only reload config when a file"),
                                (signal.SIGUSR1, "user defined signal 1", "re-open ignored")):
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


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_lame_duck_mode(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGUSR2: no new clients, an INFO with "ldm": true to the protocol-1 clients, then
    after the grace period the clients are closed (a second apart at most, as the reference)
    and the server exits cleanly."""
    from tests.integration.core.rawnats import CONNECT_QUIET, RawConn
    from tests.servers import _wait_ready, nats_server_binary

    port = free_port()
    conf = tmp_path / "ldm.conf"
    conf.write_text(f'listen: 127.0.0.1:{port}\nlame_duck_grace_period: "300ms"\n'
                    'lame_duck_duration: "30s"\n')
    cmd = ([sys.executable, "-m", "tidings", "server", "--no_streaming", "-c", str(conf)]
           if kind == "tidings" else [nats_server_binary(), "-c", str(conf)])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(port, proc)
        clients = [RawConn(port) for _ in range(3)]
        for c in clients:
            c.send(CONNECT_QUIET + b"PING\r\n")
            assert c.read_line() == b"PONG\r\n"
            assert c.read_line().startswith(b"INFO ")
        proc.send_signal(signal.SIGUSR2)
        for c in clients:
            line = c.read_line(timeout=10)
            assert line.startswith(b"INFO ") and b'"ldm":true' in line, line
        for c in clients:
            c.read_to_eof(timeout=10)  # closed once the grace period is over
        assert proc.wait(10) == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_reload_applies_the_file_and_refuses_what_cannot_change(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP re-reads -c FILE: a new password takes effect at once (a client that logged
    in with the old one is closed), max_payload changes, a new port is refused as the
    reference refuses it, and connections stay up."""
    from tests.integration.core.rawnats import RawConn

    port = free_port()
    conf = tmp_path / "r.conf"

    def write(password: str, payload: str, listen_port: int) -> None:
        conf.write_text(f"listen: 127.0.0.1:{listen_port}\nmax_payload: {payload}\n"
                        f"authorization {{ user: u, password: {password} }}\n")

    write("one", "1MB", port)
    login = b'CONNECT {"verbose":false,"pedantic":false,"user":"u","pass":"%s"}\r\n'
    with running("server", "--no_streaming", "-c", str(conf)) as proc:
        read_until(proc, "Server is ready")
        old = RawConn(port)
        old.connect(login % b"one")
        write("two", "1KB", port + 1 if port < 65535 else port - 1)
        proc.send_signal(signal.SIGHUP)
        read_until(proc, "config reload not supported for Port")
        assert old.barrier() == b""  # nothing applied, still connected
        write("two", "1KB", port)
        proc.send_signal(signal.SIGHUP)
        read_until(proc, "Reloaded server configuration")
        assert old.read_to_eof() == b"-ERR 'Authorization Violation'\r\n"
        new = RawConn(port)
        assert new.info["max_payload"] == 1024
        new.connect(login % b"two")
        new.send(b"PUB big 2000\r\n")
        assert new.read_to_eof() == b"-ERR 'Maximum Payload Violation'\r\n"


def test_reload_under_load_loses_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A publisher and a subscriber keep going while SIGHUP reloads the configuration (their
    credentials still valid): every message arrives."""
    import threading

    from tests.integration.core.rawnats import RawConn

    port = free_port()
    conf = tmp_path / "r.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\nauthorization {{ user: u, password: p }}\n")
    login = b'CONNECT {"verbose":false,"pedantic":false,"user":"u","pass":"p"}\r\n'
    with running("server", "--no_streaming", "-c", str(conf)) as proc:
        read_until(proc, "Server is ready")
        sub, pub = RawConn(port, timeout=30), RawConn(port, timeout=30)
        sub.connect(login)
        sub.send(b"SUB load 1\r\n")
        sub.barrier()
        pub.connect(login)
        count = 50_000
        sender = threading.Thread(target=pub.send, args=(b"PUB load 2\r\nhi\r\n" * count,))
        sender.start()
        for limit in ("2MB", "512KB", "1MB"):
            conf.write_text(f"listen: 127.0.0.1:{port}\nmax_payload: {limit}\n"
                            "authorization { user: u, password: p }\n")
            proc.send_signal(signal.SIGHUP)
            read_until(proc, "Reloaded server configuration")
        sender.join(30)
        assert sub.count_msgs(count, timeout=30) == count
