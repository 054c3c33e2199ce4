"""No secret in what a server shows: two tidings servers run with credentials everywhere
(users with passwords and an NKey, a token, route authorization, route URLs with passwords,
one to a server that is not there), at -DV, and are used as a user would (right and wrong
passwords and tokens, an NKey login, a route peer with a wrong password, a refused reload of
the cluster's credentials). Then every monitoring endpoint of both (the streaming ones too)
and both servers' whole logs are searched for each secret string: none may appear. What
must be there in its place is checked as well (`[REDACTED]`, `ruser:xxxxx@`), so that the
search cannot pass on a log that says nothing."""

from __future__ import annotations

import base64
import json
import os
import signal
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nkeys
import pytest

from tests.harness import Process, refused_port, start_server_process, wait_until
from tests.harness.rawnats import RawConn
from tidings.server.monitor import ENDPOINTS

pytestmark = pytest.mark.timeout(120)

ALICE_PW = "alicepw-SECRET-1"
ROUTE_PW = "routepw-SECRET-2"
TOKEN = "token-SECRET-3"
WRONG_PW = "wrongpw-SECRET-4"
WRONG_TOKEN = "wrongtoken-SECRET-5"
OTHER_PW = "otherpw-SECRET-6"  # in a CONNECT field named "password"
WRONG_ROUTE_PW = "wrongroute-SECRET-7"
NEW_ROUTE_PW = "newroutepw-SECRET-8"  # a reload that changes the cluster's credentials
NKEY_SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
NKEY = nkeys.from_seed(bytearray(NKEY_SEED))
STREAMING_PATHS = ("/streaming", "/streaming/serverz", "/streaming/storez",
                   "/streaming/clientsz?subs=1", "/streaming/channelsz?subs=1",
                   "/streaming/isFTActive")
QUERIES = {"connz": ("", "?auth=1&subs=detail", "?state=all&auth=1&subs=1"),
           "routez": ("", "?subs=1"), "subsz": ("", "?subs=1")}


@dataclass
class Node:
    """A tidings server at -DV whose log is kept, with its ports (read from its log)."""

    proc: Process
    conf: Path

    @property
    def port(self) -> int:
        return self.proc.ports["client"]

    @property
    def http(self) -> int:
        return self.proc.ports["http"]

    @property
    def route_port(self) -> int:
        return self.proc.ports["route"]

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=10) as r:
            return r.read().decode()

    def logged(self) -> str:
        return self.proc.text()


def start(tmp: Path, name: str, conf: str, *args: str, streaming: bool = True) -> Node:
    conf_path = tmp / f"{name}.conf"
    conf_path.write_text(conf)
    proc = start_server_process("tidings", "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-c",
                                str(conf_path), "-DV", *args, streaming=streaming)
    return Node(proc, conf_path)


def cluster_block(route_port: int | str, password: str, routes: list[str]) -> str:
    quoted = ", ".join(f'"{r}"' for r in routes)
    return (f"cluster {{\n  listen: 127.0.0.1:{route_port}\n  name: C\n"
            f'  authorization {{ user: ruser, password: "{password}" }}\n'
            f"  routes: [{quoted}]\n}}\n")


def a_conf(route_port: int | str, b_route: int, dead: int, route_pw: str) -> str:
    users = (f'authorization {{ users = [ {{user: alice, password: "{ALICE_PW}"}}, '
             f'{{nkey: {NKEY.public_key.decode()}}} ] }}\n')
    return users + cluster_block(route_port, route_pw, [
        f"nats://ruser:{ROUTE_PW}@127.0.0.1:{b_route}",
        f"nats://ruser:{ROUTE_PW}@127.0.0.1:{dead}",
    ])


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[Node, Node, int]]:
    """B: a token, route authorization, streaming on. A: users (a password and an NKey),
    route authorization, routes to B and to a port where nothing listens."""
    tmp = Path(tempfile.mkdtemp(prefix="tidings-secrets-"))
    with refused_port() as dead:  # nothing listens there while the module runs
        b = start(tmp, "b", f'authorization {{ token: "{TOKEN}" }}\n'
                  + cluster_block(-1, ROUTE_PW, []))
        try:
            a = start(tmp, "a", a_conf(-1, b.route_port, dead, ROUTE_PW), streaming=False)
        except BaseException:
            b.proc.stop()
            raise
        yield a, b, dead
        for node in (a, b):
            node.proc.stop()


def nkey_login(port: int) -> bytes:
    with RawConn(port) as c:
        sig = base64.urlsafe_b64encode(NKEY.sign(c.info["nonce"].encode())).rstrip(b"=")
        connect = {"verbose": False, "pedantic": False, "nkey": NKEY.public_key.decode(),
                   "sig": sig.decode()}
        c.send(b"CONNECT " + json.dumps(connect, separators=(",", ":")).encode() + b"\r\n")
        return c.barrier()


def login(port: int, connect: dict[str, object]) -> bytes:
    """CONNECT then PING: b"" when let in, the -ERR otherwise."""
    with RawConn(port) as c:
        c.send(b"CONNECT " + json.dumps(connect, separators=(",", ":")).encode() + b"\r\nPING\r\n")
        got = c.read_until(lambda b: b.endswith((b"PONG\r\n", b"'\r\n")))
        assert got, c.buf
        return c.buf.replace(b"PONG\r\n", b"")


def use(a: Node, b: Node) -> None:
    """What a user does with them, each of it logged at -DV."""
    refused = b"-ERR 'Authorization Violation'\r\n"
    assert login(a.port, {"verbose": False, "user": "alice", "pass": ALICE_PW}) == b""
    assert login(a.port, {"verbose": False, "user": "alice", "pass": WRONG_PW}) == refused
    assert login(a.port, {"verbose": False, "user": "alice", "pass": ALICE_PW,
                          "password": OTHER_PW}) == b""
    assert nkey_login(a.port) == b""
    assert login(b.port, {"verbose": False, "auth_token": TOKEN}) == b""
    assert login(b.port, {"verbose": False, "auth_token": WRONG_TOKEN}) == refused
    # Traffic across the route, so that the subscription endpoints have something to list.
    with RawConn(b.port) as sub, RawConn(a.port) as pub:
        sub.connect(b'CONNECT {"verbose":false,"auth_token":"%s"}\r\n' % TOKEN.encode())
        sub.send(b"SUB across 1\r\n")
        sub.barrier()
        wait_until(lambda: '"across"' in a.get("/routez?subs=1"), 20, "B's interest reaches A")
        pub.connect(b'CONNECT {"verbose":false,"user":"alice","pass":"%s"}\r\n'
                    % ALICE_PW.encode())
        pub.send(b"PUB across 2\r\nhi\r\n")
        pub.barrier()
        assert sub.read_until(lambda got: b"MSG across 1 2\r\nhi\r\n" in got)
    # A route peer with the wrong password on B's route port.
    with RawConn(b.route_port) as peer:
        peer.send(b'CONNECT {"cluster":"C","user":"ruser","pass":"%s","name":"NPEER"}\r\n'
                  % WRONG_ROUTE_PW.encode())
        assert peer.read_to_eof(timeout=10) == refused


def reload_new_cluster_credentials(a: Node, b_route: int, dead: int) -> None:
    """A reload that would change the cluster's credentials: refused, and logged."""
    a.conf.write_text(a_conf(a.route_port, b_route, dead, NEW_ROUTE_PW))
    mark = a.proc.mark()
    a.proc.proc.send_signal(signal.SIGHUP)
    a.proc.wait_for("Failed to reload", 20, since=mark)


def test_no_secret_in_monitoring_or_logs(nodes: tuple[Node, Node, int]) -> None:
    a, b, dead = nodes
    for node in (a, b):
        wait_until(lambda node=node: json.loads(node.get("/routez"))["num_routes"] == 1, 20,
                   "the route between A and B")
    a.proc.wait_for("Error trying to connect to route", 20)  # A tries the route to nowhere
    use(a, b)
    shown = []
    for node in (a, b):
        for name in ENDPOINTS:
            shown += [node.get(f"/{name}{q}") for q in QUERIES.get(name, ("",))]
    shown += [b.get(path) for path in STREAMING_PATHS]
    reload_new_cluster_credentials(a, b.route_port, dead)
    for node in (a, b):
        node.proc.stop()
    logs = {"A": a.logged(), "B": b.logged()}
    secrets = (ALICE_PW, ROUTE_PW, TOKEN, WRONG_PW, WRONG_TOKEN, OTHER_PW, WRONG_ROUTE_PW,
               NEW_ROUTE_PW, NKEY_SEED.decode())
    for secret in secrets:
        for text in shown:
            assert secret not in text, (secret, text)
        for name, text in logs.items():
            lines = [line for line in text.splitlines() if secret in line]
            assert not lines, (name, secret, lines[:3])
    # In their place, what says that something was there.
    assert f"ruser:xxxxx@127.0.0.1:{dead}" in logs["A"]
    assert '"pass":"[REDACTED]"' in logs["A"] and '"password":"[REDACTED]"' in logs["A"]
    assert '"sig":"[REDACTED]"' in logs["A"]
    assert '"auth_token":"[REDACTED]"' in logs["B"]
    assert "Failed to reload server configuration" in logs["A"]
    assert any(f'"127.0.0.1:{dead}"' in text for text in shown)  # /varz cluster.urls
