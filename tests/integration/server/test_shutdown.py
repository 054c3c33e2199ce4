"""SIGTERM (and SIGINT) shut the server down cleanly: what it had accepted for a subscriber is
still written out before the connection closes."""

from __future__ import annotations

import signal

import pytest

from tests.harness import start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn

N = 20_000
PAYLOAD = b"x" * 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_pending_bytes_are_flushed_on_shutdown(sig: signal.Signals) -> None:
    server = start_tidings(extra_args=["--no_streaming"])
    try:
        # A small receive buffer on a subscriber that does not read yet: most of the
        # 4 MB stays in the server's buffers when the signal comes.
        with RawConn(server.port, rcvbuf=4096) as sub, RawConn(server.port) as pub:
            sub.connect(CONNECT_PLAIN)
            sub.send(b"SUB flush.me 1\r\n")
            sub.barrier()
            pub.connect(CONNECT_PLAIN)
            pub.send(b"PUB flush.me %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD) * N)
            pub.barrier()  # the server has routed every message to the subscriber
            server.proc.send_signal(sig)
            assert sub.count_msgs(N, timeout=30) == N
            assert sub.is_closed(timeout=10)
        assert server.proc.wait(15) == 0
    finally:
        server.stop()
