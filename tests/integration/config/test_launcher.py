"""What the official clients' test launchers ask of a server, tidings and the reference side by
side: nats.js's starts each server on a file with `port: -1`, `http: "127.0.0.1:-1"`,
`server_tags` and `ports_file_dir: DIR`, waits for `DIR/<exe>_<pid>.ports` (the URLs of every
listener, written once the server is ready, removed when it stops), and connects to
`localhost`, which may be tried as `::1` first."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.certs import make_certs
from tests.harness import nats_server_binary, stop_process
from tests.harness.rawnats import CONNECT_PLAIN

pytestmark = pytest.mark.timeout(90)

KINDS = ("tidings", "reference")
# The ports file is named after the executable: `python -m tidings` is "tidings".
EXE = {"tidings": "tidings", "reference": "nats-server"}


@dataclass
class Launched:
    kind: str
    proc: subprocess.Popen[bytes]
    ports_path: Path
    ports: dict[str, list[str]]
    log_path: Path

    def port_of(self, key: str) -> int:
        found = {urlsplit(url).port for url in self.ports[key]}
        assert len(found) == 1, self.ports
        return found.pop()  # type: ignore[return-value]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def launch(kind: str, where: Path, args: list[str]) -> Launched:
    """Start `kind` with `args` (its ports file going to `where`) and wait for that file, as
    nats.js's launcher does."""
    cmd = ([nats_server_binary()] if kind == "reference"
           else [sys.executable, "-m", "tidings", "server"])
    log_path = where / f"{kind}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*cmd, *args], stdout=subprocess.DEVNULL, stderr=log)
    path = where / f"{EXE[kind]}_{proc.pid}.ports"
    deadline = time.monotonic() + 60
    while True:
        try:
            return Launched(kind, proc, path, json.loads(path.read_text()), log_path)
        except (OSError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise AssertionError(f"{kind}: no ports file {path}: {log_path.read_text()[-2000:]}")
        time.sleep(0.02)


@pytest.fixture
def started() -> Iterator[list[Launched]]:
    running: list[Launched] = []
    yield running
    for server in running:
        stop_process(server.proc)


def launch_configured(kind: str, tmp_path: Path, conf: str, started: list[Launched]) -> Launched:
    """`kind` on a file holding `conf` and `ports_file_dir` (a directory of its own)."""
    where = tmp_path / kind
    where.mkdir()
    path = where / "server.conf"
    path.write_text(f'{conf}\nports_file_dir: "{where}"\n')
    server = launch(kind, where, ["-c", str(path)])
    started.append(server)
    return server


def hosts(urls: list[str]) -> list[str]:
    return [urlsplit(url).hostname or "" for url in urls]


def info_from(family: int, host: str, port: int) -> dict[str, Any]:
    """The INFO a client gets at host:port, once a PING has its PONG."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect((host, port))
        reader = sock.makefile("rb")
        line = reader.readline()
        assert line.startswith(b"INFO "), line
        sock.sendall(CONNECT_PLAIN + b"PING\r\n")
        assert reader.readline() == b"PONG\r\n"
        return json.loads(line[5:])


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def stop_and_check_removed(server: Launched) -> None:
    stop_process(server.proc)
    assert not server.ports_path.exists(), f"{server.kind} left its ports file"


# -- the ports file and a monitor on a random port -------------------------------------------
def test_the_ports_file_names_the_listeners(tmp_path: Path, started: list[Launched]) -> None:
    """nats.js's file: the client and monitor ports both random; the ports file names them
    (every address of the host for the client port's 0.0.0.0, as the reference lists them),
    a client and /varz answer there, and the file is gone once the server has stopped."""
    conf = 'port: -1\nhttp: "127.0.0.1:-1"\n'
    servers = {kind: launch_configured(kind, tmp_path, conf, started) for kind in KINDS}
    for kind, server in servers.items():
        assert [p.name for p in server.ports_path.parent.glob("*.ports")] == \
            [server.ports_path.name], kind
        assert list(server.ports) == ["nats", "monitoring"], (kind, server.ports)
        port, http = server.port_of("nats"), server.port_of("monitoring")
        assert server.ports["monitoring"] == [f"http://127.0.0.1:{http}"], kind
        assert {urlsplit(u).scheme for u in server.ports["nats"]} == {"nats"}, kind
        assert "127.0.0.1" in hosts(server.ports["nats"]), kind
        assert info_from(socket.AF_INET, "127.0.0.1", port)["port"] == port, kind
        varz = get_json(f"http://127.0.0.1:{http}/varz")
        assert varz["port"] == port, kind
        # The configured value, as the reference reports it (the port is the log's and
        # the ports file's).
        assert varz["http_port"] == -1, kind
        assert f"Starting http monitor on 127.0.0.1:{http}" in server.log(), kind
    # Both list the same addresses, in the same order (the host's interfaces).
    assert hosts(servers["tidings"].ports["nats"]) == hosts(servers["reference"].ports["nats"])
    for server in servers.values():
        stop_and_check_removed(server)


@pytest.mark.parametrize("how", ["flags", "http_port", "monitor_port"])
def test_a_random_monitor_port(how: str, tmp_path: Path, started: list[Launched]) -> None:
    """`-m -1` (with `--ports_file_dir`) and `http_port: -1`: the monitor listens on a free
    port, which the log and the ports file name."""
    for kind in KINDS:
        where = tmp_path / kind
        where.mkdir()
        if how == "flags":
            args = ["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "--ports_file_dir", str(where)]
        else:
            conf = where / "server.conf"
            conf.write_text(f'host: 127.0.0.1\nport: -1\n{how}: -1\nports_file_dir: "{where}"\n')
            args = ["-c", str(conf)]
        server = launch(kind, where, args)
        started.append(server)
        http = server.port_of("monitoring")
        assert server.ports["monitoring"] == [f"http://127.0.0.1:{http}"], kind
        assert get_json(f"http://127.0.0.1:{http}/varz")["port"] == server.port_of("nats")
        assert f"Starting http monitor on 127.0.0.1:{http}" in server.log(), kind
        stop_and_check_removed(server)


@pytest.mark.parametrize(("allow_non_tls", "client"), [(False, "tls"), (True, "nats")])
def test_the_ports_file_schemes_with_tls(allow_non_tls: bool, client: str, tmp_path: Path,
                                         started: list[Launched]) -> None:
    """tls:// for a client port that requires TLS (nats:// with allow_non_tls), https:// for
    -ms, tls:// for routes over TLS, wss:// for WebSocket over TLS: as the reference's."""
    certs = make_certs(tmp_path)
    tls = f'{{ cert_file: "{certs.server}", key_file: "{certs.server_key}" }}'
    conf = (f"host: 127.0.0.1\nport: -1\nhttps: -1\ntls {tls}\n"
            f"allow_non_tls: {str(allow_non_tls).lower()}\n"
            f'cluster {{ listen: "127.0.0.1:-1", name: c, tls {tls} }}\n'
            f'websocket {{ listen: "127.0.0.1:-1", tls {tls} }}\n')
    for kind in KINDS:
        server = launch_configured(kind, tmp_path, conf, started)
        schemes = {key: {urlsplit(url).scheme for url in urls}
                   for key, urls in server.ports.items()}
        assert schemes == {"nats": {client}, "monitoring": {"https"}, "cluster": {"tls"},
                           "websocket": {"wss"}}, kind
        stop_and_check_removed(server)


# -- IPv6: 0.0.0.0 is dual-stack ---------------------------------------------------------------
def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_wildcard_host_takes_ipv6_clients_too(tmp_path: Path,
                                                started: list[Launched]) -> None:
    """Host 0.0.0.0 (the default): the reference's Go listeners are dual-stack, so a client
    that resolves `localhost` to ::1 first is accepted, on every port: clients, monitoring,
    routes and WebSocket."""
    conf = ("port: -1\nhttp_port: -1\ncluster { listen: \"0.0.0.0:-1\", name: c }\n"
            "websocket { port: -1, no_tls: true }\n")
    for kind in KINDS:
        server = launch_configured(kind, tmp_path, conf, started)
        assert list(server.ports) == ["nats", "monitoring", "cluster", "websocket"], kind
        assert "::1" in hosts(server.ports["nats"]), (kind, server.ports)
        port = server.port_of("nats")
        for family, host in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.1")):
            assert info_from(family, host, port)["port"] == port, (kind, host)
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            varz = get_json(f"http://{shown}:{server.port_of('monitoring')}/varz")
            assert varz["port"] == port, (kind, host)
            with socket.create_connection((host, server.port_of("cluster")), timeout=10) as s:
                assert s.makefile("rb").readline().startswith(b"INFO "), (kind, host)
            socket.create_connection((host, server.port_of("websocket")), timeout=10).close()
        stop_and_check_removed(server)


# -- server_tags -------------------------------------------------------------------------------
@pytest.mark.parametrize(("tags", "want"), [
    ('["A", "b", " c ", "b", "", "B"]', ["a", "b", "c"]),
    ('"solo"', ["solo"]),
    ("[]", None),
])
def test_server_tags_in_varz(tags: str, want: list[str] | None, tmp_path: Path,
                             started: list[Launched]) -> None:
    """As the reference keeps them: lower case, trimmed, each once, none empty."""
    conf = f'host: 127.0.0.1\nport: -1\nhttp: "127.0.0.1:-1"\nserver_tags: {tags}\n'
    for kind in KINDS:
        server = launch_configured(kind, tmp_path, conf, started)
        varz = get_json(f"http://127.0.0.1:{server.port_of('monitoring')}/varz")
        assert varz.get("tags") == want, kind


def test_a_reload_moves_the_ports_file(tmp_path: Path, started: list[Launched]) -> None:
    """SIGHUP with another ports_file_dir: the file leaves the old directory for the new."""
    for kind in KINDS:
        server = launch_configured(kind, tmp_path, "host: 127.0.0.1\nport: -1\n", started)
        moved = tmp_path / f"{kind}-moved"
        moved.mkdir()
        conf = server.ports_path.parent / "server.conf"
        conf.write_text(f'host: 127.0.0.1\nport: -1\nports_file_dir: "{moved}"\n')
        server.proc.send_signal(signal.SIGHUP)
        target = moved / server.ports_path.name
        deadline = time.monotonic() + 30
        while not target.exists():
            assert time.monotonic() < deadline, (kind, server.log()[-2000:])
            time.sleep(0.02)
        assert json.loads(target.read_text()) == server.ports, kind
        assert not server.ports_path.exists(), kind
        stop_process(server.proc)
        assert not target.exists(), kind
