"""One client must never freeze the server: the inputs that used to, against both servers.

Each test gives the server something that once blocked its event loop for seconds or grew
its memory without bound (a long line without LF, thousands of wildcard subscriptions, a
reverse unsubscribe, a consumer that stops reading, subjects thousands of tokens deep) and
checks that the server answers everyone as the reference does. The bounds on waiting are
generous failure limits for a stuck server, not performance claims.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.harness import Server, start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn

from .conftest import NO_STREAMING

MIB = 1024 * 1024


def connected(port: int, **kw: object) -> RawConn:
    conn = RawConn(port, **kw)  # type: ignore[arg-type]
    conn.connect(CONNECT_PLAIN)
    return conn


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("op", [b"PING", b"PONG", b"+OK"])
def test_line_without_lf_is_not_buffered(start: Callable[..., Server], op: bytes) -> None:
    """The rest of a PING/PONG/+OK line is skipped as it arrives: 32 MiB of it neither grow
    the server's memory nor slow anybody down, and the operation counts when LF comes."""
    server = start()
    before = peak_rss(server.pid)
    with connected(server.port) as conn, connected(server.port) as probe:
        conn.send(op + b" ")
        chunk = b"a" * MIB
        for _ in range(32):
            assert conn.send(chunk)
            assert probe.barrier() == b""
        conn.send(b"\r\n")
        if op == b"PING":
            assert conn.barrier(pongs=2) == b"PONG\r\n"
        else:
            assert conn.barrier() == b""
        grown = peak_rss(server.pid) - before
    assert grown < 12 * MIB, f"server peaked {grown // MIB} MiB higher"


def test_deep_subjects_are_matched(start: Callable[..., Server]) -> None:
    """A 1,500-token `*` subscription and an exact one both get a 1,500-token publish."""
    server = start()
    subject = b".".join([b"t"] * 1500)
    stars = b".".join([b"*"] * 1500)
    with connected(server.port) as sub, connected(server.port) as pub:
        sub.send(b"SUB " + stars + b" 1\r\nSUB " + subject + b" 2\r\n")
        sub.barrier()
        pub.send(b"PUB " + subject + b" 2\r\nhi\r\n")
        assert pub.barrier() == b""
        assert sub.count_msgs(2) == 2


def test_deep_json_from_client_leaves_no_traceback() -> None:
    """JSON nested 2,000 deep in a client's INFO or CONNECT closes that client quietly."""
    server = start_tidings(extra_args=NO_STREAMING)
    deep = b"[" * 2000 + b"]" * 2000
    try:
        for line in (b"INFO " + deep, b"CONNECT " + deep):
            with RawConn(server.port) as conn:
                conn.send(line + b"\r\n")
                assert conn.read_to_eof() == b""
        with connected(server.port) as probe:
            assert probe.barrier() == b""
        log = server.log()
    finally:
        server.stop()
    assert "Traceback" not in log, log


def fill_subject_cache(port: int, subjects: int) -> None:
    with connected(port) as pub:
        batch = b"".join(b"PUB fill.%d 0\r\n\r\n" % i for i in range(subjects))
        pub.send(batch)
        pub.barrier()


def test_many_wildcards_closing_with_a_full_cache(start: Callable[..., Server]) -> None:
    """A connection with 5,000 wildcard subscriptions closes after the server has seen
    60,000 subjects; the server goes on answering at once (it once froze for minutes)."""
    server = start()
    fill_subject_cache(server.port, 60_000)
    with connected(server.port) as probe:
        conn = connected(server.port)
        conn.send(b"".join(b"SUB w.%d.* %d\r\n" % (i, i) for i in range(5000)))
        conn.barrier()
        conn.send(b"".join(b"SUB fill.* x%d\r\nUNSUB x%d\r\n" % (i, i) for i in range(200)))
        conn.barrier()
        conn.close()
        assert probe.barrier() == b""
        # The cache is still right: a wildcard subscriber gets a subject seen before.
        probe.send(b"SUB fill.> 1\r\nPUB fill.7 1\r\nx\r\n")
        assert probe.barrier() == b"MSG fill.7 1 1\r\nx\r\n"


def test_reverse_unsubscribe_of_one_subject(start: Callable[..., Server]) -> None:
    """50,000 subscriptions on one subject removed last first (once quadratic)."""
    server = start()
    n = 50_000
    with connected(server.port) as conn:
        conn.send(b"".join(b"SUB same %d\r\n" % i for i in range(n)))
        conn.barrier()
        conn.send(b"".join(b"UNSUB %d\r\n" % i for i in range(n - 1, 0, -1)))
        conn.send(b"PUB same 1\r\nx\r\n")
        assert conn.barrier() == b"MSG same 0 1\r\nx\r\n"


def test_stuck_consumer_stalls_its_publisher_only_briefly(
    start: Callable[..., Server],
) -> None:
    """A subscriber that stops reading slows its publisher for a few milliseconds at a time,
    never for the write deadline: the publisher's PINGs are answered throughout, a healthy
    subscriber on the same subject gets everything, and the stuck one is closed as a slow
    consumer once it holds more than max_pending."""
    server = start(max_pending=2 * MIB, write_deadline=30)
    stuck = RawConn(server.port, rcvbuf=4096)
    try:
        stuck.connect(CONNECT_PLAIN)
        stuck.send(b"SUB flood 1\r\n")
        stuck.barrier()
        with connected(server.port) as healthy, connected(server.port, timeout=3) as pub:
            healthy.send(b"SUB flood 2\r\n")
            healthy.barrier()
            batch = (b"PUB flood 1024\r\n" + b"x" * 1024 + b"\r\n") * 256
            sent = 0
            for _ in range(64):  # 16 MiB in all, 256 KiB between barriers
                pub.send(batch)
                sent += 256
                pub.barrier()  # within 3 s (the write deadline is 30 s)
                assert healthy.count_msgs(sent, timeout=3) == sent
        assert stuck.read_to_eof(timeout=5).count(b"MSG flood 1 1024\r\n") < sent
    finally:
        stuck.close()
    assert os.path.exists(f"/proc/{server.pid}")


def test_everything_sent_before_a_close_is_delivered(start: Callable[..., Server]) -> None:
    """A large burst is worked through over several loop turns; a client that closes right
    after sending it still has every message delivered."""
    server = start()
    n = 50_000
    with connected(server.port) as sub:
        sub.send(b"SUB burst 1\r\n")
        sub.barrier()
        pub = connected(server.port)
        pub.send((b"PUB burst 100\r\n" + b"x" * 100 + b"\r\n") * n)
        pub.close()
        assert sub.count_msgs(n, timeout=20) == n
