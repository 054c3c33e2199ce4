"""Receivers that did not ask for headers (CONNECT without `"headers":true`) get a message
published with headers as MSG with its payload alone, on every path a message takes: a
plain subscription, a queue group, a stream import (its subject renamed), a service import
and its response, a route to another server, a JetStream push consumer's delivery, a traced
message. The same bytes go to tidings and to the reference nats-server, and each receiver
must get the same bytes from both."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest

from tests.harness import Server, start_configured, start_reference, start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn, Timeout

KINDS = ["tidings", "reference"]
HEADERS = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
HDR = b"NATS/1.0\r\nA: bb\r\n\r\n"  # 19 bytes
TWO = b"NATS/1.0\r\nA: bb\r\nC: d\r\n\r\n"  # 25 bytes


def hpub(subject: bytes, payload: bytes, reply: bytes = b"", hdr: bytes = HDR) -> bytes:
    reply = reply + b" " if reply else b""
    return b"HPUB %b %b%d %d\r\n%b%b\r\n" % (subject, reply, len(hdr), len(hdr) + len(payload),
                                            hdr, payload)


PUBLISHES = b"".join([
    hpub(b"h.x", b"hello"),
    hpub(b"h.x", b"with a reply", b"r.1"),
    hpub(b"h.y", b"", hdr=TWO),
    b"HPUB h.x 0 5\r\nzero!\r\n",  # a header block of size 0: no headers at all
    b"PUB h.x 3\r\nabc\r\n",
])


def connected(port: int, connect: bytes) -> RawConn:
    conn = RawConn(port)
    conn.connect(connect)
    return conn


def plain(port: int, user: bytes = b"") -> RawConn:
    """A client without header support (as `user`, password the same, if given)."""
    login = b'"user":"%b","pass":"%b",' % (user, user) if user else b""
    return connected(port, CONNECT_PLAIN.replace(b"{", b"{" + login, 1))


def with_headers(port: int, user: bytes = b"") -> RawConn:
    login = b'"user":"%b","pass":"%b",' % (user, user) if user else b""
    return connected(port, HEADERS.replace(b"{", b"{" + login, 1))


def received(conn: RawConn, frames: int) -> bytes:
    """What `conn` got once `frames` MSG/HMSG frames (counted by their first line) came."""
    conn.read_until(lambda b: len(re.findall(rb"(?m)^H?MSG ", b)) >= frames)
    return conn.barrier()


def both(scenario: Callable[[str], bytes]) -> None:
    """`scenario` on tidings and on the reference: the same bytes received."""
    got = {kind: scenario(kind) for kind in KINDS}
    assert got["tidings"] == got["reference"]


def start(kind: str, **options: object) -> Server:
    if kind == "tidings":
        return start_tidings(extra_args=["--no_streaming"], **options)
    return start_reference(**options)


@pytest.fixture(scope="module")
def singles() -> Iterator[dict[str, Server]]:
    servers = {kind: start(kind) for kind in KINDS}
    yield servers
    for server in servers.values():
        server.stop()


def test_subscribers_without_headers_get_the_payload_alone(singles: dict[str, Server]) -> None:
    def scenario(kind: str) -> bytes:
        port = singles[kind].port
        with plain(port) as bare, plain(port) as member, with_headers(port) as full, \
                with_headers(port) as pub:
            bare.send(b"SUB h.> 1\r\n")
            member.send(b"SUB h.x q 2\r\n")
            full.send(b"SUB h.> 3\r\n")
            pub.send(b"SUB h.* 4\r\n")  # (its own messages come back with headers)
            for conn in (bare, member, full, pub):
                conn.barrier()
            pub.send(PUBLISHES)
            out = [pub.barrier(), bare.barrier(), member.barrier(), full.barrier()]
            return b"\n--\n".join(out)

    both(scenario)


def test_a_message_with_headers_crosses_a_route_to_subscribers_without() -> None:
    def scenario(kind: str) -> bytes:
        seed = start(kind, cluster=True)
        other = start(kind, cluster=True, routes=[f"nats://127.0.0.1:{seed.ports['route']}"])
        try:
            with with_headers(seed.port) as pub, plain(other.port) as bare, \
                    plain(other.port) as member:
                member.send(b"SUB h.> q 2\r\n")  # (the group's only member: over the route)
                member.barrier()
                bare.send(b"SUB h.> 1\r\nSUB probe 9\r\n")
                routed(pub, bare)
                pub.send(PUBLISHES)
                pub.barrier()
                return received(bare, 5) + b"\n--\n" + received(member, 5)
        finally:
            other.stop()
            seed.stop()

    both(scenario)


def routed(pub: RawConn, sub: RawConn) -> None:
    """Until a probe published on `pub`'s server reaches `sub` (subscribed to "probe" with
    sid 9) on the other server: the route carries `sub`'s interest."""
    for _ in range(300):
        pub.send(b"PUB probe 0\r\n\r\n")
        pub.barrier()
        try:
            sub.read_until(lambda b: b"MSG probe 9 0" in b, timeout=0.1)
            break
        except Timeout:
            continue
    else:
        raise AssertionError("no route carried the probe")
    sub.send(b"UNSUB 9\r\n")
    sub.barrier()


ACCOUNTS = """
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{stream: "ev.>"}, {service: "svc"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {stream: {account: A, subject: "ev.>"}, prefix: "imp"}
      {service: {account: A, subject: "svc"}, to: "ask"}
    ]
  }
}
"""


def test_imported_messages_reach_subscribers_without_headers() -> None:
    def scenario(kind: str) -> bytes:
        server = start_configured(kind, ACCOUNTS, streaming=False)
        try:
            with with_headers(server.port, b"a") as a, plain(server.port, b"a") as responder, \
                    with_headers(server.port, b"b") as b, plain(server.port, b"b") as bare:
                bare.send(b"SUB imp.ev.> 1\r\nSUB back 2\r\n")
                responder.send(b"SUB svc 3\r\n")
                bare.barrier()
                responder.barrier()
                a.send(hpub(b"ev.one", b"imported") + hpub(b"ev.two", b"", hdr=TWO))
                a.barrier()
                b.send(hpub(b"ask", b"a request", b"back"))
                b.barrier()
                request = received(responder, 1)
                reply = request.split(b" ")[3]  # (a reply of the server's making)
                a.send(hpub(reply, b"the answer"))
                a.barrier()
                out = received(bare, 3)
                return re.sub(rb"_R_\.\S+", b"_R_.*", request) + b"\n--\n" + out
        finally:
            server.stop()

    both(scenario)


def test_a_push_consumers_deliveries_reach_a_subscriber_without_headers(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    def scenario(kind: str) -> bytes:
        store = tmp_path_factory.mktemp(kind)
        args = ["-js", "-sd", str(store)]
        server = start_tidings(extra_args=[*args, "--no_streaming"]) if kind == "tidings" \
            else start_reference(extra_args=args)
        try:
            with with_headers(server.port) as api, plain(server.port) as bare:
                api.send(b"SUB _api 1\r\n")
                request(api, b"$JS.API.STREAM.CREATE.HL",
                        {"name": "HL", "subjects": ["hl.>"], "storage": "file"})
                api.send(hpub(b"hl.a", b"first") + hpub(b"hl.b", b"", hdr=TWO))
                api.barrier()
                bare.send(b"SUB deliver.hl 7\r\n")
                bare.barrier()
                request(api, b"$JS.API.CONSUMER.CREATE.HL",
                        {"stream_name": "HL", "config": {"deliver_subject": "deliver.hl",
                                                         "ack_policy": "none"}})
                return re.sub(rb"\$JS\.ACK\.\S+", b"$JS.ACK.*", received(bare, 2))
        finally:
            server.stop()

    both(scenario)


def request(conn: RawConn, subject: bytes, body: dict[str, object]) -> None:
    """A JetStream API request from `conn` (subscribed to "_api" with sid 1), its answer
    awaited and checked."""
    data = json.dumps(body).encode()
    conn.send(b"PUB %b _api %d\r\n%b\r\n" % (subject, len(data), data))
    conn.read_until(lambda b: b"MSG _api 1 " in b and b.endswith(b"}\r\n"))
    answer = conn.barrier()
    assert b'"error"' not in answer, answer


def test_a_traced_message_reaches_a_subscriber_without_headers(
        singles: dict[str, Server]) -> None:
    def scenario(kind: str) -> bytes:
        port = singles[kind].port
        traced = b"NATS/1.0\r\nNats-Trace-Dest: trace.here\r\n\r\n"
        with plain(port) as bare, with_headers(port) as pub:
            bare.send(b"SUB t.x 1\r\n")
            bare.barrier()
            pub.send(b"SUB trace.here 2\r\n" + hpub(b"t.x", b"traced", hdr=traced))
            assert received(pub, 1).startswith(b"MSG trace.here 2 ")
            return bare.barrier()

    both(scenario)
