"""Every client operation and every error of the core protocol, over raw sockets.

Each test runs against tidings and against the reference nats-server: the expectations are
the reference's behaviour, written down. A PING barrier (its PONG) tells when the server has
answered everything before it; when the server closes, the test reads to EOF.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import Server, wait_until
from tests.harness.rawnats import CONNECT_PLAIN, RawConn, info_of

from .conftest import ServerPair

QUIET = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
VERBOSE = b'CONNECT {"verbose":true,"pedantic":false,"headers":true}\r\n'
PEDANTIC = b'CONNECT {"verbose":false,"pedantic":true,"headers":true}\r\n'
HDR = b"NATS/1.0\r\nBar: Baz\r\n\r\n"
ERR_UNKNOWN = b"-ERR 'Unknown Protocol Operation'\r\n"
ERR_MAX_PAYLOAD = b"-ERR 'Maximum Payload Violation'\r\n"
ERR_CONTROL_LINE = b"-ERR 'maximum control line exceeded'\r\n"
ERR_AUTH = b"-ERR 'Authorization Violation'\r\n"

def connected(port: int, connect: bytes = QUIET, **kw: Any) -> RawConn:
    conn = RawConn(port, **kw)
    conn.connect(connect)
    return conn


# -- INFO, CONNECT, PING/PONG ----------------------------------------------------------------
def test_info_fields(port: int) -> None:
    with RawConn(port) as conn:
        assert conn.info_line.startswith(b"INFO {") and conn.info_line.endswith(b"} \r\n")
        info = conn.info
    for key, kind in [("server_id", str), ("server_name", str), ("version", str), ("go", str),
                      ("host", str), ("port", int), ("headers", bool), ("max_payload", int),
                      ("proto", int), ("client_id", int), ("client_ip", str)]:
        assert isinstance(info[key], kind), key
    assert info["port"] == port
    assert info["host"] == "127.0.0.1"
    assert info["client_ip"] == "127.0.0.1"
    assert info["headers"] is True
    assert info["proto"] == 1
    assert info["max_payload"] == 1024 * 1024
    assert "auth_required" not in info
    assert "connect_info" not in info
    assert len(info["server_id"]) == 56 and info["server_id"][0] == "N"


def test_client_ids_differ(port: int) -> None:
    with RawConn(port) as a, RawConn(port) as b:
        assert a.info["client_id"] != b.info["client_id"]
        assert a.info["server_id"] == b.info["server_id"]


def test_ping_before_connect(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(b"PING\r\n")
        conn.expect(b"PONG\r\n")


def test_second_info_after_first_pong_for_protocol_1(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        conn.expect(b"PONG\r\n")
        info = info_of(conn.read_line())
        assert info["connect_info"] is True
        assert info["remote_account"] == "$G"
        assert info["server_id"] == conn.info["server_id"]
        assert info["client_id"] == conn.info["client_id"]
        # Only after the first PONG.
        assert conn.barrier() == b""
        assert conn.barrier() == b""


def test_no_second_info_for_protocol_0(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"protocol":0}\r\n')
        assert conn.barrier() == b""
        assert conn.barrier() == b""


def test_pong_from_client_is_silent(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"PONG\r\n")
        assert conn.barrier() == b""


def test_server_pings_and_client_pongs(start: Callable[..., Server]) -> None:
    """PING/PONG the other way: the server pings an idle client; answering keeps it open."""
    server = start(ping_interval=0.2, ping_max=2)
    with connected(server.port) as conn:
        for _ in range(4):  # more rounds than ping_max: answered pings never go stale
            conn.expect(b"PING\r\n")
            conn.send(b"PONG\r\n")
        assert not conn.is_closed()


def test_first_ping_soon_after_connect(port: int) -> None:
    """With the default two-minute interval the server still pings a new client early (the
    reference measures the round trip about 2s after CONNECT), whatever the client sent."""
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        conn.expect(b"PONG\r\n")
        conn.expect(b"PING\r\n", timeout=10)
        conn.send(b"PONG\r\n")
        assert not conn.is_closed()


def test_stale_connection(start: Callable[..., Server]) -> None:
    server = start(ping_interval=0.2, ping_max=2)
    with connected(server.port) as conn:
        data = conn.read_to_eof()
    assert data == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"


def test_verbose_ok_after_every_well_formed_op(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(VERBOSE)
        conn.expect(b"+OK\r\n")
        conn.send(b"SUB foo 1\r\n")
        conn.expect(b"+OK\r\n")
        conn.send(b"PUB foo 2\r\nhi\r\n")
        conn.expect(b"+OK\r\nMSG foo 1 2\r\nhi\r\n")
        conn.send(b"HPUB foo 22 24\r\n" + HDR + b"hi\r\n")
        conn.expect(b"+OK\r\nHMSG foo 1 22 24\r\n" + HDR + b"hi\r\n")
        conn.send(b"UNSUB 1\r\n")
        conn.expect(b"+OK\r\n")
        conn.send(b"UNSUB 99\r\n")  # unknown sid: still well formed
        conn.expect(b"+OK\r\n")
        conn.send(b"PONG\r\n")  # PING and PONG get no +OK
        assert conn.barrier() == b""
        conn.send(b"SUB foo..bar 2\r\n")  # an error instead of +OK
        assert conn.barrier() == b"-ERR 'Invalid Subject'\r\n"


# -- publish and subscribe -------------------------------------------------------------------
def test_pub_sub_reply_and_wildcards(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"SUB foo.* 1\r\nSUB foo.> 2\r\nSUB foo.bar q 3\r\n")
        conn.send(b"PUB foo.bar r.1 5\r\nhello\r\n")
        got = conn.barrier()
        assert got.count(b"\r\nhello\r\n") == 3
        for sid in (b"1", b"2", b"3"):
            assert b"MSG foo.bar " + sid + b" r.1 5\r\nhello\r\n" in got
        conn.send(b"PUB foo.bar.baz 0\r\n\r\n")
        assert conn.barrier() == b"MSG foo.bar.baz 2 0\r\n\r\n"
        conn.send(b"PUB foo 0\r\n\r\n")
        assert conn.barrier() == b""


def test_messages_between_connections(port: int) -> None:
    with connected(port) as sub, connected(port) as pub:
        sub.send(b"SUB a.b 7\r\n")
        sub.barrier()
        pub.send(b"PUB a.b reply 3\r\nabc\r\n")
        pub.barrier()
        assert sub.barrier() == b"MSG a.b 7 reply 3\r\nabc\r\n"


def test_hpub_to_subscriber_without_headers_gets_payload_only(port: int) -> None:
    with connected(port, CONNECT_PLAIN) as plain, connected(port) as pub:
        plain.send(b"SUB h 1\r\n")
        plain.barrier()
        pub.send(b"SUB h 2\r\nHPUB h 22 27\r\n" + HDR + b"hello\r\n")
        assert pub.barrier() == b"HMSG h 2 22 27\r\n" + HDR + b"hello\r\n"
        assert plain.barrier() == b"MSG h 1 5\r\nhello\r\n"


def test_hpub_without_header_support_closes(port: int) -> None:
    with connected(port, CONNECT_PLAIN) as conn:
        conn.send(b"HPUB h 22 22\r\n" + HDR + b"\r\n")
        assert conn.read_to_eof() == b""


def test_queue_group_delivers_each_message_once(port: int) -> None:
    members = [connected(port) for _ in range(3)]
    try:
        for m in members:
            m.send(b"SUB work workers 1\r\n")
            m.barrier()
        with connected(port) as pub:
            pub.send(b"".join(b"PUB work 4\r\n%04d\r\n" % i for i in range(300)))
            pub.barrier()
        counts = [m.barrier().count(b"MSG work 1 4\r\n") for m in members]
        assert sum(counts) == 300
        assert all(c > 0 for c in counts)
    finally:
        for m in members:
            m.close()


def test_echo_false(port: int) -> None:
    no_echo = b'CONNECT {"verbose":false,"echo":false}\r\n'
    with connected(port, no_echo) as conn, connected(port) as other:
        conn.send(b"SUB e 1\r\nPUB e 4\r\nmine\r\n")
        assert conn.barrier() == b""
        other.send(b"PUB e 6\r\ntheirs\r\n")
        other.barrier()
        assert conn.barrier() == b"MSG e 1 6\r\ntheirs\r\n"


def test_no_responders_503(port: int) -> None:
    connect = b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n'
    with connected(port, connect) as conn:
        conn.send(b"SUB _INBOX.x 9\r\nPUB nobody.home _INBOX.x 2\r\nhi\r\n")
        hdr = b"NATS/1.0 503\r\nNats-Subject: nobody.home\r\n\r\n"
        assert conn.barrier() == b"HMSG _INBOX.x 9 %d %d\r\n%s\r\n" % (len(hdr), len(hdr), hdr)
        # With a responder there is no 503.
        conn.send(b"SUB svc 1\r\nPUB svc _INBOX.x 2\r\nhi\r\n")
        assert conn.barrier() == b"MSG svc 1 _INBOX.x 2\r\nhi\r\n"


def test_no_responders_requires_headers(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"no_responders":true}\r\n')
        assert conn.read_to_eof() == b"-ERR 'no responders requires headers support'\r\n"


def test_invalid_client_protocol(port: int) -> None:
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"protocol":2}\r\n')
        assert conn.read_to_eof() == b"-ERR 'invalid client protocol'\r\n"


# -- UNSUB -----------------------------------------------------------------------------------
def test_unsub(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"SUB u 1\r\nUNSUB 1\r\nPUB u 1\r\nx\r\n")
        assert conn.barrier() == b""


def test_unsub_max(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"SUB u 1\r\nUNSUB 1 3\r\n" + b"PUB u 1\r\nx\r\n" * 5)
        assert conn.barrier() == b"MSG u 1 1\r\nx\r\n" * 3
        conn.send(b"PUB u 1\r\nx\r\n")
        assert conn.barrier() == b""


def test_unsub_max_already_reached(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"SUB u 1\r\n" + b"PUB u 1\r\nx\r\n" * 3)
        assert conn.barrier() == b"MSG u 1 1\r\nx\r\n" * 3
        conn.send(b"UNSUB 1 2\r\nPUB u 1\r\ny\r\n")  # 3 delivered >= 2: removed at once
        assert conn.barrier() == b""
        conn.send(b"SUB v 2\r\nPUB v 1\r\nx\r\nUNSUB 2 2\r\n" + b"PUB v 1\r\ny\r\n" * 3)
        assert conn.barrier() == b"MSG v 2 1\r\nx\r\nMSG v 2 1\r\ny\r\n"


def test_unsub_unknown_sid_is_not_an_error(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"UNSUB 42\r\nUNSUB 42 5\r\n")
        assert conn.barrier() == b""


# -- errors that close the connection ---------------------------------------------------------
@pytest.mark.parametrize("line", [b"FOO\r\n", b"PUBX a 1\r\n", b"\r\n", b" PING\r\n",
                                  b"MSG a 1 1\r\nx\r\n", b"\x16\x03\x01\x00"])
def test_unknown_protocol_operation(port: int, line: bytes) -> None:
    with connected(port) as conn:
        conn.send(line)
        assert conn.read_to_eof() == ERR_UNKNOWN


@pytest.mark.parametrize("line", [b"PUB foo\r\n", b"PUB foo -1\r\n", b"PUB foo 99999999999\r\n",
                                  b"PUB a b c 1\r\n", b"SUB foo\r\n", b"SUB a b c d\r\n",
                                  b"UNSUB 1 2 3\r\n", b"HPUB foo 22 5\r\n", b"CONNECT {bad\r\n",
                                  b"-ERR 'x'\r\n"])
def test_parser_errors_close_without_a_word(port: int, line: bytes) -> None:
    """Malformed arguments: the reference closes the connection without an -ERR."""
    with connected(port) as conn:
        conn.send(line)
        assert conn.read_to_eof() == b""


def test_payload_not_followed_by_crlf(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"PUB foo 2\r\nhiXX\r\n")
        assert conn.read_to_eof() == ERR_UNKNOWN


@pytest.mark.parametrize("ending", [b"x\n", b"xy", b"x\r", b"x"])
def test_payload_end_refused_as_soon_as_it_is_wrong(port: int, ending: bytes) -> None:
    """The byte after the payload must be CR: a wrong one closes at once, with no need for
    more bytes; a right one (or none yet) waits for the rest."""
    with connected(port) as conn:
        conn.send(b"SUB foo 1\r\nPUB foo 1\r\n" + ending)
        if ending in (b"x\r", b"x"):
            conn.send(b"\n" if ending == b"x\r" else b"\r\n")
            assert conn.barrier() == b"MSG foo 1 1\r\nx\r\n"
        else:
            assert conn.read_to_eof() == ERR_UNKNOWN


@pytest.mark.parametrize("op", [b"PUB foo", b"PUB foo reply", b"HPUB foo 22"])
def test_max_payload_refused_from_control_line(port: int, op: bytes) -> None:
    """Only the control line is sent: the -ERR comes before any payload byte."""
    with connected(port) as conn:
        conn.send(op + b" 1048577\r\n")
        assert conn.read_to_eof() == ERR_MAX_PAYLOAD


def test_payload_of_exactly_max_payload(port: int) -> None:
    with connected(port) as conn:
        payload = bytes(range(256)) * 4096
        conn.send(b"SUB big 1\r\nPUB big %d\r\n%s\r\n" % (len(payload), payload))
        assert conn.barrier() == b"MSG big 1 %d\r\n%s\r\n" % (len(payload), payload)


def test_max_payload_small(kind: str, server_pairs: ServerPair) -> None:
    port = server_pairs.get(kind, "small").port  # max_payload 64
    with connected(port) as conn:
        assert conn.info["max_payload"] == 64
        conn.send(b"SUB s 1\r\nPUB s 64\r\n" + b"p" * 64 + b"\r\n")
        assert conn.barrier() == b"MSG s 1 64\r\n" + b"p" * 64 + b"\r\n"
        conn.send(b"PUB s 65\r\n")
        assert conn.read_to_eof() == ERR_MAX_PAYLOAD


def test_max_control_line(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"SUB " + b"s" * 5000 + b" 1\r\n")
        assert conn.read_to_eof() == ERR_CONTROL_LINE


def test_max_control_line_refused_before_the_line_ends(port: int) -> None:
    with connected(port) as conn:
        conn.send(b"PUB " + b"s" * 5000)  # no line end: the server does not wait for one
        assert conn.read_to_eof() == ERR_CONTROL_LINE


def test_max_control_line_small(kind: str, server_pairs: ServerPair) -> None:
    port = server_pairs.get(kind, "small").port  # max_control_line 96
    with connected(port) as conn:
        conn.send(b"SUB " + b"s" * 94 + b" 1\r\n")  # argument of exactly 96 bytes
        assert conn.barrier() == b""
        conn.send(b"SUB " + b"s" * 95 + b" 2\r\n")
        assert conn.read_to_eof() == ERR_CONTROL_LINE


# -- errors that leave the connection open -------------------------------------------------
@pytest.mark.parametrize("subject", [b"foo..bar", b"foo.", b".foo", b"foo.>.bar"])
def test_invalid_subject(port: int, subject: bytes) -> None:
    with connected(port) as conn:
        conn.send(b"SUB " + subject + b" 1\r\n")
        assert conn.barrier() == b"-ERR 'Invalid Subject'\r\n"
        conn.send(b"SUB ok 1\r\nPUB ok 1\r\nx\r\n")  # still open and usable, sid 1 is free
        assert conn.barrier() == b"MSG ok 1 1\r\nx\r\n"


@pytest.mark.parametrize("subject", [b"foo.*", b"foo.>", b"*", b"foo..bar"])
def test_invalid_publish_subject_under_pedantic(port: int, subject: bytes) -> None:
    with connected(port, PEDANTIC) as conn:
        conn.send(b"PUB " + subject + b" 1\r\nx\r\n")
        assert conn.barrier() == b"-ERR 'Invalid Publish Subject'\r\n"
    with connected(port) as conn:  # not pedantic: no error
        conn.send(b"PUB " + subject + b" 1\r\nx\r\n")
        assert conn.barrier() == b""


# -- limits and authorization ------------------------------------------------------------------
def test_max_connections(start: Callable[..., Server]) -> None:
    server = start(max_connections=2)
    with connected(server.port) as a, connected(server.port) as b:
        with RawConn(server.port, read_info=False) as c:
            data = c.read_to_eof()
        assert data.startswith(b"INFO ")
        assert data.endswith(b"\r\n-ERR 'maximum connections exceeded'\r\n")
        assert not a.is_closed() and not b.is_closed()
    # Closing them makes room again, once the server has seen the close (no protocol
    # message can tell when that is, so a refused attempt is retried).
    def let_in() -> bool:
        with RawConn(server.port) as d:
            return not d.is_closed()

    wait_until(let_in, 5, "room after two clients left", interval=0)


@pytest.fixture
def auth_port(kind: str, server_pairs: ServerPair) -> int:
    return server_pairs.get(kind, "auth").port  # user alice, password s3cret


def test_auth_required_in_info(auth_port: int) -> None:
    with RawConn(auth_port) as conn:
        assert conn.info["auth_required"] is True


@pytest.mark.parametrize("connect", [
    b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\n',
    b'CONNECT {"verbose":false,"user":"bob","pass":"s3cret"}\r\n',
    b'CONNECT {"verbose":false}\r\n',
    b'CONNECT {"verbose":false,"auth_token":"s3cret"}\r\n',
])
def test_authorization_violation(auth_port: int, connect: bytes) -> None:
    with RawConn(auth_port) as conn:
        conn.send(connect)
        assert conn.read_to_eof() == ERR_AUTH


@pytest.mark.parametrize("first", [b"PING\r\n", b"SUB a 1\r\n", b"PUB a 0\r\n\r\n"])
def test_operations_before_connect_need_auth(auth_port: int, first: bytes) -> None:
    with RawConn(auth_port) as conn:
        conn.send(first)
        assert conn.read_to_eof() == ERR_AUTH


def test_authorized(auth_port: int) -> None:
    with RawConn(auth_port) as conn:
        conn.send(b'CONNECT {"verbose":true,"user":"alice","pass":"s3cret"}\r\n')
        conn.expect(b"+OK\r\n")
        conn.send(b"SUB a 1\r\nPUB a 1\r\nx\r\n")
        assert conn.barrier() == b"+OK\r\n+OK\r\nMSG a 1 1\r\nx\r\n"


def test_token(kind: str, server_pairs: ServerPair) -> None:
    port = server_pairs.get(kind, "token").port
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"auth_token":"t0ken"}\r\n')
        assert conn.barrier() == b""
    with RawConn(port) as conn:
        conn.send(b'CONNECT {"verbose":false,"auth_token":"nope"}\r\n')
        assert conn.read_to_eof() == ERR_AUTH


def test_authentication_timeout(start: Callable[..., Server]) -> None:
    server = start(user="alice", password="s3cret", auth_timeout=0.5)
    with RawConn(server.port) as conn:
        assert conn.read_to_eof() == b"-ERR 'Authentication Timeout'\r\n"
    with RawConn(server.port) as conn:  # in time: no timeout
        conn.send(b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\n')
        assert conn.barrier() == b""
        assert not conn.is_closed()


def test_slow_consumer(start: Callable[..., Server]) -> None:
    """A subscriber that never reads is closed once the server holds more than max_pending
    bytes for it; the publisher and other clients carry on."""
    # The reference wants max_payload <= max_pending.
    server = start(max_pending=256 * 1024, max_payload=64 * 1024, write_deadline=0.5)
    sub = RawConn(server.port, rcvbuf=4096)
    try:
        sub.connect(QUIET)
        sub.send(b"SUB flood 1\r\n")
        sub.barrier()
        with connected(server.port) as watcher, connected(server.port) as pub:
            watcher.send(b"SUB flood 2\r\n")
            watcher.barrier()
            batch = b"PUB flood 1000\r\n" + b"x" * 1000 + b"\r\n"
            sent = 0
            for _ in range(80):  # 80 batches of 200 messages: 16 MB in all
                pub.send(batch * 200)
                sent += 200
                pub.barrier()  # the publisher is never cut off
                # The watcher keeps up (it is no slow consumer) and gets every message.
                assert watcher.count_msgs(sent) == sent
            received = sub.read_to_eof(timeout=10)  # the server has closed the subscriber
            assert received.count(b"MSG flood 1 1000\r\n") < sent
            # Everyone else is unaffected.
            pub.send(b"PUB flood 2\r\nok\r\n")
            pub.barrier()
            assert watcher.count_msgs(sent + 1) == sent + 1
    finally:
        sub.close()
    assert server.proc.poll() is None


def test_server_still_serves_after_errors(port: int) -> None:
    """None of the errors above disturbed the shared server."""
    with connected(port) as conn:
        conn.send(b"SUB z 1\r\nPUB z 2\r\nok\r\n")
        assert conn.barrier() == b"MSG z 1 2\r\nok\r\n"


def test_socket_closed_by_client_midway(port: int) -> None:
    """A client that vanishes in the middle of a frame does not disturb the server."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(QUIET + b"SUB q 1\r\nPUB q 100\r\npartial")
    s.close()
    with connected(port) as conn:
        conn.send(b"PUB q 1\r\nx\r\n")
        assert conn.barrier() == b""


@pytest.mark.parametrize("reply", [b"$JS.ACK.S.C.1.1.1.1.0", b"_R_.abc.def", b"_GR_.x.y"])
def test_a_reserved_reply_subject_is_refused(port: int, reply: bytes) -> None:
    """A client may not name a JetStream ack, a service import's or a gateway's reply as
    its reply (it could ack another's message): -ERR, and nothing is delivered."""
    with connected(port) as conn:
        conn.send(b"SUB foo 1\r\n")
        conn.send(b"PUB foo " + reply + b" 2\r\nhi\r\nHPUB foo " + reply
                  + b" 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB foo $JS.ACK 2\r\nok\r\n")
        got = conn.barrier()
        refused = b"-ERR 'Permissions Violation for Publish with Reply of \"%s\"'\r\n" % reply
        assert got == refused * 2 + b"MSG foo 1 $JS.ACK 2\r\nok\r\n"
