"""A route peer written from the seed's text (seeds/cluster-protocol.txt) drives tidings' route
port with the seed's protocol: INFO and CONNECT, `SUB <subject> [queue] RSID|QRSID:<cid>:<sid>`,
`UNSUB`, `MSG <subject> <rsid> [reply] <size>`, PUB and PING/PONG. (tidings only: the reference
speaks the newer RS+/RMSG protocol, see test_route_port.py and the cluster tests.)

The peer joins in either handshake order: the seed's ("The connecting server also sends an
INFO message" as soon as it has dialled, and its CONNECT once it has the accepting server's
INFO) and the reference's (CONNECT, then INFO, after reading the server's INFO); on a route
port with and without cluster authorization. With authorization an INFO before CONNECT is
refused, as the reference refuses it (test_route_port.py compares the two servers)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.harness import Server, start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn

# As the seed's examples: a CONNECT without verbose acknowledgements, an INFO of its own.
SEED_CONNECT = {"verbose": False, "pedantic": False, "tls_required": False,
                "name": "KP19vTlB417XElnv8kKaC5"}
SEED_INFO = (b'INFO {"server_id":"KP19vTlB417XElnv8kKaC5","version":"0.9.4","go":"",'
             b'"host":"127.0.0.1","port":5222,"auth_required":false,"tls_required":false,'
             b'"tls_verify":false,"max_payload":1048576,"connect_urls":["10.9.9.9:4222"]}\r\n')
ROUTE_USER, ROUTE_PASS = "ruser", "s3cret"


@dataclass
class Seeded:
    """A tidings server with a route port, and how the peer joins it."""

    srv: Server
    route_port: int
    order: str  # "seed": INFO first; "reference": CONNECT first
    guarded: bool  # the route port wants credentials

    def join(self) -> RawConn:
        """Join as a route peer, in this handshake order, with credentials when needed."""
        connect = dict(SEED_CONNECT)
        if self.guarded:
            connect.update(user=ROUTE_USER, **{"pass": ROUTE_PASS})
        connect_line = b"CONNECT " + json.dumps(connect).encode() + b"\r\n"
        if self.order == "seed":
            peer = RawConn(self.route_port, read_info=False)
            peer.send(SEED_INFO)  # as soon as it has dialled, before reading anything
            peer.info_line = peer.read_line()
            assert peer.info_line.startswith(b"INFO "), peer.info_line
            peer.info = json.loads(peer.info_line[5:])
            peer.send(connect_line)
        else:
            peer = RawConn(self.route_port)
            peer.send(connect_line + SEED_INFO)
        assert peer.info["server_id"] and peer.info["port"] == self.route_port
        assert bool(peer.info.get("auth_required")) == self.guarded
        return peer


def start_seeded(guarded: bool) -> tuple[Server, int]:
    auth = f"{ROUTE_USER}:{ROUTE_PASS}@" if guarded else ""
    srv = start_tidings(extra_args=["--no_streaming"], cluster=f"nats://{auth}127.0.0.1:0")
    return srv, srv.ports["route"]


@pytest.fixture(params=[("seed", False), ("reference", False), ("reference", True)],
                ids=["seed-order", "reference-order", "reference-order-authorized"])
def server(request: pytest.FixtureRequest) -> Iterator[Seeded]:
    order, guarded = request.param
    srv, route_port = start_seeded(guarded)
    yield Seeded(srv, route_port, order, guarded)
    srv.stop()


def client(srv: Server) -> RawConn:
    c = RawConn(srv.port)
    c.connect(CONNECT_PLAIN)
    return c


def test_interest_and_messages_both_ways(server: Seeded) -> None:
    srv = server.srv
    alice = client(srv)
    cid = json.loads(alice.info_line[5:])["client_id"]
    alice.send(b"SUB local.foo 7\r\nSUB work g1 8\r\n")
    assert alice.barrier() == b""

    peer = server.join()
    # The server announces its clients' existing subscriptions, each with its own sid.
    want = {b"SUB local.foo RSID:%d:7\r\n" % cid, b"SUB work g1 QRSID:%d:8\r\n" % cid}
    assert peer.read_until(lambda b: all(w in b for w in want))
    peer.take()
    assert peer.barrier() == b""  # PING -> PONG, and nothing else pending

    # The peer subscribes; a client's publish comes to it as MSG with the peer's sid.
    peer.send(b"SUB foo RSID:1:1\r\nSUB bar g1 QRSID:1:2\r\n")
    peer.barrier()
    alice.send(b"PUB foo 5\r\nhello\r\nPUB foo INBOX.34 11\r\nKnock Knock\r\n")
    alice.barrier()
    peer.expect(b"MSG foo RSID:1:1 5\r\nhello\r\nMSG foo RSID:1:1 INBOX.34 11\r\nKnock Knock\r\n")
    alice.send(b"PUB bar 1\r\nx\r\n")
    alice.barrier()
    peer.expect(b"MSG bar QRSID:1:2 1\r\nx\r\n")

    # A MSG from the peer for one of our subscriptions, by its sid; its PUB for everyone.
    peer.send(b"MSG local.foo RSID:%d:7 5\r\nhello\r\nPUB local.foo 3\r\nhey\r\n" % cid)
    peer.barrier()
    assert alice.read_until(lambda b: b.count(b"MSG local.foo 7") == 2)
    assert alice.take() == b"MSG local.foo 7 5\r\nhello\r\nMSG local.foo 7 3\r\nhey\r\n"
    # For a queue subscription, exactly that member gets it.
    peer.send(b"MSG work QRSID:%d:8 2\r\nhi\r\n" % cid)
    peer.barrier()
    assert alice.read_until(lambda b: b"MSG work 8 2\r\nhi\r\n" in b)
    alice.take()

    # UNSUB: no more for that sid (the next message, on another subject, proves it).
    peer.send(b"UNSUB RSID:1:1\r\n")
    peer.barrier()
    alice.send(b"PUB foo 2\r\nno\r\nPUB bar 3\r\nyes\r\n")
    alice.barrier()
    peer.expect(b"MSG bar QRSID:1:2 3\r\nyes\r\n")
    alice.close()


def test_new_and_gone_subscriptions_are_announced(server: Seeded) -> None:
    srv = server.srv
    peer = server.join()
    assert peer.barrier() == b""
    bob = client(srv)
    cid = json.loads(bob.info_line[5:])["client_id"]
    bob.send(b"SUB news.* 1\r\nSUB jobs q 2\r\nUNSUB 1\r\n")
    bob.barrier()
    peer.expect(b"SUB news.* RSID:%d:1\r\nSUB jobs q QRSID:%d:2\r\nUNSUB RSID:%d:1\r\n"
                % (cid, cid, cid))
    bob.close()  # a client that goes takes its interest along
    peer.expect(b"UNSUB QRSID:%d:2\r\n" % cid)


def test_a_message_from_the_peer_is_never_sent_back(server: Seeded) -> None:
    """One hop: the peer's own interest in `echo` does not bring its message back."""
    srv = server.srv
    carol = client(srv)
    carol.send(b"SUB echo 1\r\n")
    carol.barrier()
    peer = server.join()
    peer.send(b"SUB echo RSID:1:1\r\n")
    peer.barrier()
    peer.send(b"MSG echo RSID:1:1 2\r\nhi\r\n")
    assert carol.read_until(lambda b: b"MSG echo 1 2\r\nhi\r\n" in b)
    # A client's message on the same subject does reach the peer, and nothing before it.
    carol.send(b"PUB echo 4\r\nmine\r\n")
    carol.barrier()
    got = peer.read_until(lambda b: b"mine" in b) and peer.take()
    assert got.endswith(b"MSG echo RSID:1:1 4\r\nmine\r\n")
    assert b"\r\nhi\r\n" not in got


def test_the_peers_publishes_with_headers(server: Seeded) -> None:
    srv = server.srv
    dave = RawConn(srv.port)
    dave.connect(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
    dave.send(b"SUB h 1\r\n")
    dave.barrier()
    peer = server.join()
    peer.barrier()
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    peer.send(b"HPUB h %d %d\r\n%shi\r\n" % (len(hdr), len(hdr) + 2, hdr))
    peer.barrier()
    want = b"HMSG h 1 %d %d\r\n%shi\r\n" % (len(hdr), len(hdr) + 2, hdr)
    assert dave.read_until(lambda b: want in b)


def test_the_peers_client_urls_are_taken_once_it_has_connected(server: Seeded) -> None:
    """What the peer's INFO tells (its connect_urls) is acted on once the route is made, in
    either order."""
    peer = server.join()
    peer.barrier()  # CONNECT and INFO both taken in
    with RawConn(server.srv.port) as late:
        assert "10.9.9.9:4222" in late.info.get("connect_urls", [])
    peer.close()


def test_an_info_before_connect_is_refused_when_routes_need_credentials() -> None:
    """With cluster authorization, the seed's order gets what the reference answers (the
    reference takes nothing but CONNECT first on an accepted route), and nothing in that
    INFO is acted on: its client URLs are not passed on."""
    srv, route_port = start_seeded(guarded=True)
    try:
        with RawConn(route_port, read_info=False) as peer:
            peer.send(SEED_INFO)
            assert peer.read_to_eof(timeout=10).endswith(b"-ERR 'Authorization Violation'\r\n")
        with RawConn(srv.port) as late:
            assert "10.9.9.9:4222" not in late.info.get("connect_urls", [])
            late.connect(CONNECT_PLAIN)
            assert late.barrier() == b""
    finally:
        srv.stop()
