"""A slow route: as in the reference, a route whose peer does not read is never closed for
its pending bytes (only a socket that takes nothing for the whole write deadline is); its
producers are stalled by the same flow control as a slow client's, and once the peer reads
again every message arrives, in order. Nobody else is held up meanwhile."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.harness import start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn
from tidings.protocol.parser import ServerOpParser

PEER_CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,'
                b'"name":"PEER1"}\r\n')
PEER_INFO = b'INFO {"server_id":"PEER1","version":"0.9.4","host":"127.0.0.1","port":1}\r\n'
COUNT = 20_000
SIZE = 1024


class Payloads:
    """Collects the first 8 bytes of each MSG payload (the message's index)."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def on_msg(self, subject: bytes, sid: bytes, reply: Any, hdr: Any, payload: bytes) -> None:
        assert (subject, sid) == (b"foo", b"RSID:1:1")
        self.seen.append(payload[:8])

    def on_ping(self) -> None: ...
    def on_pong(self) -> None: ...
    def on_info(self, info: object) -> None: ...
    def on_ok(self) -> None: ...
    def on_err(self, message: str) -> None:
        raise AssertionError(message)


def read_msgs(peer: RawConn, total: int, timeout: float) -> list[bytes]:
    got = Payloads()
    frames = ServerOpParser(got)
    deadline = time.monotonic() + timeout
    while len(got.seen) < total:
        assert peer.read_until(lambda b: b, deadline - time.monotonic()), "route closed"
        frames.feed(peer.take())
    return got.seen


def test_a_route_that_does_not_read_loses_nothing() -> None:
    server = start_tidings(extra_args=["--no_streaming"], cluster=True,
                           max_pending=256 * 1024, max_payload=64 * 1024)
    try:
        peer = RawConn(server.ports["route"], rcvbuf=4096, timeout=30)
        peer.send(PEER_CONNECT + PEER_INFO + b"SUB foo RSID:1:1\r\n")
        assert peer.barrier() == b""  # nothing else: the server has no subscriptions
        pub = RawConn(server.port)
        pub.connect(CONNECT_PLAIN)
        # The interest has arrived once a message on foo reaches the peer.
        pub.send(b"PUB foo 2\r\nhi\r\nPING\r\n")
        pub.expect(b"PONG\r\n")
        peer.count_msgs(1)

        frames = b"".join(b"PUB foo %d\r\n%s\r\n" % (SIZE, b"%08d" % i + b"x" * (SIZE - 8))
                          for i in range(COUNT))
        sent = threading.Thread(target=pub.send, args=(frames + b"PING\r\n",))
        sent.start()
        # While the route backs up, other clients are served.
        other = RawConn(server.port)
        other.connect(CONNECT_PLAIN)
        assert other.barrier() == b""
        # Now the peer reads: every message arrives, in order, on the same route.
        seen = read_msgs(peer, COUNT, timeout=60)
        sent.join(60)
        assert seen == [b"%08d" % i for i in range(COUNT)]
        pub.expect(b"PONG\r\n", timeout=30)
        assert not peer.is_closed()
    finally:
        server.stop()
