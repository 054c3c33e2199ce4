"""Bad input on the route port gets the reference's answer and close, and disturbs nothing:
the same bytes are sent to tidings and to the reference nats-server and must get the same
reply. (What the reference does was read from its route.go/parser.go and observed.)"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.harness import Server, start_configured, start_reference, start_tidings, wait_until
from tests.harness.rawnats import CONNECT_PLAIN, RawConn, Timeout

ROUTE_CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"name":"NPEER","cluster":"X"}\r\n'
PEER_INFO = b'INFO {"server_id":"NPEER","version":"2.11.0","host":"127.0.0.1","port":1}\r\n'


class Node:
    def __init__(self, server: Server, route_port: int) -> None:
        self.server = server
        self.route_port = route_port


def start(kind: str, listen: str) -> tuple[Server, int]:
    options = {"cluster": listen.format(port=0), "cluster_name": "X"}  # 0: a port of its own
    if kind == "tidings":
        server = start_tidings(extra_args=["--no_streaming"], **options)
    else:
        server = start_reference(**options)
    return server, server.ports["route"]


@pytest.fixture(scope="module", params=["tidings", "reference"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    server, route_port = start(request.param, "nats://127.0.0.1:{port}")
    yield Node(server, route_port)
    server.stop()


@pytest.fixture(scope="module", params=["tidings", "reference"])
def guarded(request: pytest.FixtureRequest) -> Iterator[Node]:
    """A server whose route port wants credentials (--cluster nats://user:pass@...)."""
    server, route_port = start(request.param, "nats://ruser:rpass@127.0.0.1:{port}")
    yield Node(server, route_port)
    server.stop()


def still_serving(node: Node) -> None:
    with RawConn(node.server.port) as c:
        c.connect(CONNECT_PLAIN)
        c.send(b"SUB ok 1\r\nPUB ok 2\r\nhi\r\n")
        assert c.barrier() == b"MSG ok 1 2\r\nhi\r\n"


@pytest.mark.parametrize(("sent", "answer"), [
    (b"XYZ\r\n", b"-ERR 'Authorization Violation'\r\n"),
    (b"PING\r\n", b"-ERR 'Authorization Violation'\r\n"),
    (b"CXYZ\r\n", b"-ERR 'Unknown Protocol Operation'\r\n"),
    (b'CONNECT {"verbose":false,"pedantic":false,"lang":"python3","version":"2.0.0",'
     b'"protocol":1}\r\n', b"-ERR 'attempted to connect to route port'\r\n"),
    (b'CONNECT {"cluster":"Y"}\r\n',
     b"-ERR 'Rejecting connection, cluster name \"Y\" does not match \"X\"'\r\n"),
    # Argument errors close without a word.
    (ROUTE_CONNECT + PEER_INFO + b"RS+ $G foo q\r\n", b""),
    (ROUTE_CONNECT + PEER_INFO + b"RMSG $G foo x q 2\r\nhi\r\n", b""),
    (ROUTE_CONNECT + PEER_INFO + b"HMSG $G foo 20 10\r\n", b""),
    (ROUTE_CONNECT + PEER_INFO + b"RS+ $G " + b"a" * 70_000 + b"\r\n",
     b"-ERR 'maximum control line exceeded'\r\n"),
    (ROUTE_CONNECT + PEER_INFO + b"RMSG $G foo 2\r\nhello\r\n",
     b"-ERR 'Unknown Protocol Operation'\r\n"),
], ids=["garbage", "ping-first", "bad-op", "client-connect", "cluster-name", "rs+-no-weight",
        "rmsg-bad-indicator", "hmsg-sizes", "long-line", "rmsg-size"])
def test_bad_route_input_is_refused_and_closed(node: Node, sent: bytes, answer: bytes) -> None:
    with RawConn(node.route_port) as peer:
        assert peer.info["server_id"]
        peer.send(sent)
        got = peer.read_to_eof(timeout=10)
        # Before the answer a registered route may get the server's interest (the reference
        # has $SYS subscriptions) and a keep-alive PING.
        lines = [line for line in got.split(b"\r\n")
                 if line and line != b"PING" and not line.startswith((b"RS+ ", b"RS- "))]
        assert b"".join(line + b"\r\n" for line in lines) == answer
    still_serving(node)


@pytest.mark.parametrize("connect", [
    b'CONNECT {"cluster":"X","user":"ruser","pass":"wrong"}\r\n',
    b'CONNECT {"cluster":"X"}\r\n',
    # The seed's order (its INFO first) with the right credentials: with route authorization
    # the reference takes nothing but CONNECT first, and so does tidings (without it, tidings
    # takes the seed's order where the reference does not: test_seed_route_peer.py).
    PEER_INFO + b'CONNECT {"cluster":"X","user":"ruser","pass":"rpass","name":"NPEER"}\r\n',
], ids=["wrong-password", "no-credentials", "info-before-connect"])
def test_route_credentials_are_checked(guarded: Node, connect: bytes) -> None:
    with RawConn(guarded.route_port) as peer:
        assert peer.info.get("auth_required") is True
        peer.send(connect)
        assert peer.read_to_eof(timeout=10) == b"-ERR 'Authorization Violation'\r\n"
    still_serving(guarded)


def test_a_route_that_never_connects_times_out(guarded: Node) -> None:
    with RawConn(guarded.route_port) as peer:
        assert peer.read_to_eof(timeout=10) == b"-ERR 'Authentication Timeout'\r\n"
    still_serving(guarded)


def test_the_right_credentials_make_a_route(guarded: Node) -> None:
    with RawConn(guarded.route_port) as peer:
        peer.send(b'CONNECT {"cluster":"X","user":"ruser","pass":"rpass","name":"NPEER"}\r\n'
                  + PEER_INFO + b"RS+ $G routed.ok\r\n")
        peer.barrier()  # the server has taken our interest in
        with RawConn(guarded.server.port) as client:
            client.connect(CONNECT_PLAIN)
            client.send(b"PUB routed.ok 2\r\nhi\r\n")
            assert client.barrier() == b""
        assert peer.read_until(lambda b: b"RMSG $G routed.ok 2\r\nhi\r\n" in b)


# Characters that mean something in a URL, in a cluster authorization password.
ODD_PASSWORD = "p#ss/w@rd:%?"


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_a_password_with_url_characters(kind: str) -> None:
    """`cluster { authorization { password } }` with characters a URL gives meaning to: the
    server starts and takes a route that presents it (and refuses one that does not)."""
    conf = ("cluster {\n  listen: 127.0.0.1:-1\n  name: X\n"
            f'  authorization {{ user: ruser, password: "{ODD_PASSWORD}" }}\n}}\n')
    server = start_configured(kind, conf)
    route_port = server.ports["route"]
    node = Node(server, route_port)
    try:
        with RawConn(route_port) as peer:
            peer.send(b'CONNECT {"cluster":"X","user":"ruser","pass":"p#ss"}\r\n')
            assert peer.read_to_eof(timeout=10) == b"-ERR 'Authorization Violation'\r\n"
        connect = {"cluster": "X", "user": "ruser", "pass": ODD_PASSWORD, "name": "NPEER"}
        with RawConn(route_port) as peer:
            peer.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n"
                      + PEER_INFO + b"RS+ $G routed.ok\r\n")
            peer.barrier()
            with RawConn(server.port) as client:
                client.connect(CONNECT_PLAIN)
                client.send(b"PUB routed.ok 2\r\nhi\r\n")
                assert client.barrier() == b""
            assert peer.read_until(lambda b: b"RMSG $G routed.ok 2\r\nhi\r\n" in b)
        still_serving(node)
    finally:
        server.stop()


def test_a_seed_route_url_with_an_encoded_password() -> None:
    """A route URL's user and password are percent-decoded, as the reference reads them:
    tidings reaches a reference server whose route password has URL characters in it."""
    conf = ("cluster {\n  listen: 127.0.0.1:-1\n  name: X\n"
            f'  authorization {{ user: ruser, password: "{ODD_PASSWORD}" }}\n}}\n')
    reference = start_configured("reference", conf)
    encoded = urllib.parse.quote(ODD_PASSWORD, safe="")
    ours = start_tidings(extra_args=["--no_streaming"], cluster=True, cluster_name="X", routes=[
        f"nats://ruser:{encoded}@127.0.0.1:{reference.ports['route']}"])
    try:
        with RawConn(reference.port) as sub, RawConn(ours.port) as pub:
            sub.connect(CONNECT_PLAIN)
            pub.connect(CONNECT_PLAIN)
            sub.send(b"SUB across 1\r\n")
            sub.barrier()
            # Probes until the route is up and carries sub's interest (as wait_interest).

            def crossed() -> bool:
                pub.send(b"PUB across 5\r\nprobe\r\n")
                pub.barrier()
                with contextlib.suppress(Timeout):
                    sub.read_until(lambda b: b"probe" in b, timeout=0.1)
                return b"probe" in sub.buf

            wait_until(crossed, 30, "a route to the reference", interval=0)
            assert sub.buf.startswith(b"MSG across 1 5\r\nprobe\r\n")
    finally:
        ours.stop()
        reference.stop()
