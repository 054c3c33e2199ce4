"""SIGHUP and SIGUSR1 (configuration reload, log re-open in nats-server) are logged and the
server keeps serving until they exist; SIGUSR2 puts it in lame duck mode, as nats-server."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
from collections.abc import Iterator

import pytest

from tests.harness import Process, start_server_process, tidings_command

pytestmark = pytest.mark.timeout(60)


def read_until(proc: Process, text: str, since: int = 0) -> str:
    """The first log line from line `since` on containing ``text``, once logged; fails if
    the process ends first."""
    return proc.wait_for(re.escape(text), 20, since=since).string


def ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(4096)  # INFO
        s.sendall(b"CONNECT {\"verbose\":false}\r\nPING\r\n")
        return s.recv(4096)


def signal_logged(proc: Process, sig: int, *texts: str) -> None:
    """Send `sig`, then wait for each of `texts` in what it logs after that."""
    since = proc.mark()
    proc.proc.send_signal(sig)
    for text in texts:
        read_until(proc, text, since)


@contextlib.contextmanager
def running(*args: str) -> Iterator[Process]:
    """`tidings <args>` with its log readable; it must end cleanly on SIGTERM afterwards."""
    proc = Process(tidings_command(*args), kind="tidings")
    try:
        yield proc
        assert proc.stop() == 0
    finally:
        proc.kill()


@pytest.mark.parametrize("streaming", [[], ["--no_streaming"]])
def test_server_survives_hup_usr1(streaming: list[str]) -> None:
    with running("server", "-a", "127.0.0.1", "-p", "-1", *streaming) as proc:
        read_until(proc, "Streaming server ready" if not streaming else "Server is ready")
        for sig, name, note in ((signal.SIGHUP, "hangup", "can only reload config when a file"),
                                (signal.SIGUSR1, "user defined signal 1", "re-open ignored")):
            signal_logged(proc, sig, f'Trapped "{name}" signal', note)
        assert ping(proc.ports["client"]).startswith(b"PONG")


def test_standalone_streaming_survives_hup_and_usr1(reference_server) -> None:
    with running("streaming", "--nats", reference_server.url) as proc:
        read_until(proc, "Streaming server ready")
        signal_logged(proc, signal.SIGHUP, "Reload supported only for embedded NATS Server")
        signal_logged(proc, signal.SIGUSR1, "re-open ignored")


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_lame_duck_mode(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGUSR2: no new clients, an INFO with "ldm": true to the protocol-1 clients, then
    after the grace period the clients are closed (a second apart at most, as the reference)
    and the server exits cleanly."""
    from tests.harness.rawnats import CONNECT_QUIET, RawConn

    conf = tmp_path / "ldm.conf"
    conf.write_text('listen: 127.0.0.1:-1\nlame_duck_grace_period: "300ms"\n'
                    'lame_duck_duration: "30s"\n')
    server = start_server_process(kind, "-c", str(conf))
    proc, port = server.proc, server.ports["client"]
    try:
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
        server.kill()


def test_reload_applies_the_file_and_refuses_what_cannot_change(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP re-reads -c FILE: a new password takes effect at once (a client that logged
    in with the old one is closed), max_payload changes, a new port is refused as the
    reference refuses it, and connections stay up."""
    from tests.harness.rawnats import RawConn

    conf = tmp_path / "r.conf"

    def write(password: str, payload: str, listen_port: int) -> None:
        conf.write_text(f"listen: 127.0.0.1:{listen_port}\nmax_payload: {payload}\n"
                        f"authorization {{ user: u, password: {password} }}\n")

    write("one", "1MB", -1)
    login = b'CONNECT {"verbose":false,"pedantic":false,"user":"u","pass":"%s"}\r\n'
    with running("server", "--no_streaming", "-c", str(conf)) as proc:
        read_until(proc, "Server is ready")
        port = proc.ports["client"]
        old = RawConn(port)
        old.connect(login % b"one")
        write("two", "1KB", port + 1 if port < 65535 else port - 1)
        signal_logged(proc, signal.SIGHUP, "config reload not supported for Port")
        assert old.barrier() == b""  # nothing applied, still connected
        write("two", "1KB", port)
        signal_logged(proc, signal.SIGHUP, "Reloaded server configuration")
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

    from tests.harness.rawnats import RawConn

    conf = tmp_path / "r.conf"
    conf.write_text("listen: 127.0.0.1:-1\nauthorization { user: u, password: p }\n")
    login = b'CONNECT {"verbose":false,"pedantic":false,"user":"u","pass":"p"}\r\n'
    with running("server", "--no_streaming", "-c", str(conf)) as proc:
        read_until(proc, "Server is ready")
        port = proc.ports["client"]
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
            signal_logged(proc, signal.SIGHUP, "Reloaded server configuration")
        sender.join(30)
        assert sub.count_msgs(count, timeout=30) == count


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_reload_keeps_the_port_a_file_of_any_port_got(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A server started on `listen: HOST:-1` reloads that file again (-1: the port it
    got), or the file naming the port it got; another port is refused, naming the port it
    got as the old one: as the reference's reload (RANDOM_PORT keeps the resolved port)."""
    conf = tmp_path / "any.conf"

    def write(port: int, payload: str) -> None:
        conf.write_text(f"listen: 127.0.0.1:{port}\nmax_payload: {payload}\n")

    write(-1, "1MB")
    server = start_server_process(kind, "-c", str(conf))
    try:
        port = server.ports["client"]
        for listen, payload in ((-1, "2KB"), (port, "1KB")):
            write(listen, payload)
            signal_logged(server, signal.SIGHUP, "Reloaded server configuration")
        other = port + 1 if port < 65535 else port - 1
        write(other, "1MB")
        signal_logged(server, signal.SIGHUP,
                      f"config reload not supported for Port: old={port}, new={other}")
        assert ping(port).startswith(b"PONG")
    finally:
        server.stop()


@pytest.mark.parametrize("streaming", [[], ["--no_streaming"]])
def test_signals_are_handled_once_the_server_says_it_is_ready(streaming: list[str],
                                                              tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP sent the moment "Server is ready" is logged reloads the file (the reference
    handles signals from before it starts), never the note of a server without -c."""
    conf = tmp_path / "ready.conf"
    conf.write_text("listen: 127.0.0.1:-1\n")
    for _ in range(5):
        with running("server", "-c", str(conf), *streaming) as proc:
            read_until(proc, "Server is ready")
            signal_logged(proc, signal.SIGHUP, "Reloaded server configuration")
            assert "can only reload config" not in proc.text()
