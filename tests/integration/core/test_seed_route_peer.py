"""A route peer written from the seed's text (seeds/cluster-protocol.txt) drives tidings' route
port with the seed's protocol: INFO and CONNECT, `SUB <subject> [queue] RSID|QRSID:<cid>:<sid>`,
`UNSUB`, `MSG <subject> <rsid> [reply] <size>`, PUB and PING/PONG. (tidings only: the reference
speaks the newer RS+/RMSG protocol, see test_route_port.py and the cluster tests.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.servers import RunningServer, free_port, start_tidings

from .rawnats import CONNECT_PLAIN, RawConn

# As the seed's examples: a CONNECT without verbose acknowledgements, an INFO of its own.
SEED_CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,'
                b'"name":"KP19vTlB417XElnv8kKaC5"}\r\n')
SEED_INFO = (b'INFO {"server_id":"KP19vTlB417XElnv8kKaC5","version":"0.9.4","go":"",'
             b'"host":"127.0.0.1","port":5222,"auth_required":false,"tls_required":false,'
             b'"tls_verify":false,"max_payload":1048576}\r\n')


@pytest.fixture
def server() -> Iterator[tuple[RunningServer, int]]:
    route_port = free_port()
    srv = start_tidings(extra_args=["--no_streaming", "--cluster",
                                    f"nats://127.0.0.1:{route_port}"])
    yield srv, route_port
    srv.stop()


def client(srv: RunningServer) -> RawConn:
    c = RawConn(srv.port)
    c.connect(CONNECT_PLAIN)
    return c


def join(route_port: int) -> RawConn:
    peer = RawConn(route_port)
    info = peer.info
    assert info["server_id"] and info["port"] == route_port
    peer.send(SEED_CONNECT + SEED_INFO)
    return peer


def test_interest_and_messages_both_ways(server: tuple[RunningServer, int]) -> None:
    srv, route_port = server
    alice = client(srv)
    cid = json.loads(alice.info_line[5:])["client_id"]
    alice.send(b"SUB local.foo 7\r\nSUB work g1 8\r\n")
    assert alice.barrier() == b""

    peer = join(route_port)
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


def test_new_and_gone_subscriptions_are_announced(server: tuple[RunningServer, int]) -> None:
    srv, route_port = server
    peer = join(route_port)
    assert peer.barrier() == b""
    bob = client(srv)
    cid = json.loads(bob.info_line[5:])["client_id"]
    bob.send(b"SUB news.* 1\r\nSUB jobs q 2\r\nUNSUB 1\r\n")
    bob.barrier()
    peer.expect(b"SUB news.* RSID:%d:1\r\nSUB jobs q QRSID:%d:2\r\nUNSUB RSID:%d:1\r\n"
                % (cid, cid, cid))
    bob.close()  # a client that goes takes its interest along
    peer.expect(b"UNSUB QRSID:%d:2\r\n" % cid)


def test_a_message_from_the_peer_is_never_sent_back(server: tuple[RunningServer, int]) -> None:
    """One hop: the peer's own interest in `echo` does not bring its message back."""
    srv, route_port = server
    carol = client(srv)
    carol.send(b"SUB echo 1\r\n")
    carol.barrier()
    peer = join(route_port)
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


def test_the_peers_publishes_with_headers(server: tuple[RunningServer, int]) -> None:
    srv, route_port = server
    dave = RawConn(srv.port)
    dave.connect(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
    dave.send(b"SUB h 1\r\n")
    dave.barrier()
    peer = join(route_port)
    peer.barrier()
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    peer.send(b"HPUB h %d %d\r\n%shi\r\n" % (len(hdr), len(hdr) + 2, hdr))
    peer.barrier()
    want = b"HMSG h 1 %d %d\r\n%shi\r\n" % (len(hdr), len(hdr) + 2, hdr)
    assert dave.read_until(lambda b: want in b)
