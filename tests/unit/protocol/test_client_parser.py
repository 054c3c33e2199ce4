"""ClientOpParser (what the server reads): every example of the protocol seeds, split at every
byte and fed a byte at a time, case-insensitive operation names, runs of blanks, errors."""

from __future__ import annotations

from typing import Any

import pytest

from tidings.protocol.errors import (
    AUTHORIZATION_VIOLATION,
    INVALID_PUBLISH_SUBJECT,
    MAX_CONTROL_LINE_EXCEEDED,
    MAX_PAYLOAD_VIOLATION,
    UNKNOWN_PROTOCOL_OPERATION,
)

from .recorder import client_parser, feed_client, splits

# (wire bytes, operations) for every client example in client-protocol.txt.
SEED_EXAMPLES: list[tuple[bytes, list[tuple[Any, ...]]]] = [
    (
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"name":"","lang":"go",'
        b'"version":"1.2.2","protocol":1}\r\n',
        [("CONNECT", b'{"verbose":false,"pedantic":false,"tls_required":false,"name":"",'
                     b'"lang":"go","version":"1.2.2","protocol":1}')],
    ),
    (b"PUB FOO 11\r\nHello NATS!\r\n", [("PUB", b"FOO", None, b"Hello NATS!")]),
    (
        b"PUB FRONT.DOOR JOKE.22 11\r\nKnock Knock\r\n",
        [("PUB", b"FRONT.DOOR", b"JOKE.22", b"Knock Knock")],
    ),
    (b"PUB NOTIFY 0\r\n\r\n", [("PUB", b"NOTIFY", None, b"")]),
    (
        b"HPUB FOO 22 33\r\nNATS/1.0\r\nBar: Baz\r\n\r\nHello NATS!\r\n",
        [("HPUB", b"FOO", None, 22, b"NATS/1.0\r\nBar: Baz\r\n\r\nHello NATS!")],
    ),
    (
        b"HPUB FRONT.DOOR JOKE.22 45 56\r\nNATS/1.0\r\nBREAKFAST: donut\r\nLUNCH: burger\r\n\r\n"
        b"Knock Knock\r\n",
        [("HPUB", b"FRONT.DOOR", b"JOKE.22", 45,
          b"NATS/1.0\r\nBREAKFAST: donut\r\nLUNCH: burger\r\n\r\nKnock Knock")],
    ),
    (
        b"HPUB NOTIFY 22 22\r\nNATS/1.0\r\nBar: Baz\r\n\r\n\r\n",
        [("HPUB", b"NOTIFY", None, 22, b"NATS/1.0\r\nBar: Baz\r\n\r\n")],
    ),
    (
        b"HPUB MORNING.MENU 47 51\r\nNATS/1.0\r\nBREAKFAST: donut\r\nBREAKFAST: eggs\r\n\r\n"
        b"Yum!\r\n",
        [("HPUB", b"MORNING.MENU", None, 47,
          b"NATS/1.0\r\nBREAKFAST: donut\r\nBREAKFAST: eggs\r\n\r\nYum!")],
    ),
    (b"SUB FOO 1\r\n", [("SUB", b"FOO", None, b"1")]),
    (b"SUB BAR G1 44\r\n", [("SUB", b"BAR", b"G1", b"44")]),
    (b"UNSUB 1\r\n", [("UNSUB", b"1", -1)]),
    (b"UNSUB 1 5\r\n", [("UNSUB", b"1", 5)]),
    (b"PING\r\n", [("PING",)]),
    (b"PONG\r\n", [("PONG",)]),
    (b"sub foo 1\r\n", [("SUB", b"foo", None, b"1")]),  # "SUB foo 1" and "sub foo 1" agree
]
ALL_SEEDS = b"".join(data for data, _ in SEED_EXAMPLES)
ALL_OPS = [op for _, ops in SEED_EXAMPLES for op in ops]


@pytest.mark.parametrize("data,ops", SEED_EXAMPLES, ids=[d[:14].decode() for d, _ in
                                                          SEED_EXAMPLES])
def test_seed_example_split_everywhere(data: bytes, ops: list[tuple[Any, ...]]) -> None:
    for chunks in splits(data):
        assert feed_client(chunks) == (ops, None), chunks


def test_all_seed_examples_in_one_stream_split_everywhere() -> None:
    for chunks in splits(ALL_SEEDS):
        assert feed_client(chunks) == (ALL_OPS, None)


@pytest.mark.parametrize("verb", [b"PUB", b"pub", b"Pub", b"pUb"])
def test_pub_case_insensitive(verb: bytes) -> None:
    assert feed_client(verb + b" a 1\r\nx\r\n") == ([("PUB", b"a", None, b"x")], None)


@pytest.mark.parametrize("line,op", [
    (b"ping\r\n", ("PING",)),
    (b"PiNg\r\n", ("PING",)),
    (b"pong\r\n", ("PONG",)),
    (b"sUb a q 1\r\n", ("SUB", b"a", b"q", b"1")),
    (b"unsub 1\r\n", ("UNSUB", b"1", -1)),
    (b"UnSuB 1 2\r\n", ("UNSUB", b"1", 2)),
    (b"connect {}\r\n", ("CONNECT", b"{}")),
    (b"hpub a 12 12\r\nNATS/1.0\r\n\r\n\r\n", ("HPUB", b"a", None, 12, b"NATS/1.0\r\n\r\n")),
])
def test_other_ops_case_insensitive(line: bytes, op: tuple[Any, ...]) -> None:
    assert feed_client(line) == ([op], None)


@pytest.mark.parametrize("line,op", [
    (b"PUB\ta\t1\r\nx\r\n", ("PUB", b"a", None, b"x")),
    (b"PUB  \t a \t\t r  1 \t\r\nx\r\n", ("PUB", b"a", b"r", b"x")),
    (b"SUB\t\tfoo   bar\t 9\r\n", ("SUB", b"foo", b"bar", b"9")),
    (b"UNSUB \t 9 \t 3 \r\n", ("UNSUB", b"9", 3)),
    (b"HPUB \t a\t 12  13\r\nNATS/1.0\r\n\r\nx\r\n", ("HPUB", b"a", None, 12,
                                                     b"NATS/1.0\r\n\r\nx")),
    (b"CONNECT \t {}\r\n", ("CONNECT", b"{}")),
    (b"PING   \t\r\n", ("PING",)),
    (b"PING junk\r\n", ("PING",)),
])
def test_runs_of_spaces_and_tabs(line: bytes, op: tuple[Any, ...]) -> None:
    for chunks in splits(line):
        assert feed_client(chunks) == ([op], None)


def test_bare_lf_ends_a_line() -> None:
    data = b"SUB a 1\nPUB a 1\nx\r\nPING\n"
    for chunks in splits(data):
        assert feed_client(chunks) == (
            [("SUB", b"a", None, b"1"), ("PUB", b"a", None, b"x"), ("PING",)], None
        )


def test_payload_may_contain_crlf_and_any_byte() -> None:
    payload = b"\r\nPING\r\n\x00\xff"
    data = b"PUB a %d\r\n%s\r\n" % (len(payload), payload)
    for chunks in splits(data):
        assert feed_client(chunks) == ([("PUB", b"a", None, payload)], None)


def test_unsub_max_not_a_number() -> None:
    assert feed_client(b"UNSUB 1 x\r\n") == ([("UNSUB", b"1", -1)], None)


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [
    b"FOO\r\n", b"PUBX a 1\r\n", b"\r\n", b"\n", b" PING\r\n", b"MSG a 1 1\r\nx\r\n",
    b"PUB a 1\r\nxy\r\n", b"PUB a 1\r\nx\n", b"SUBX", b"UNSUBSCRIBE 1\r\n", b"\x00",
])
def test_unknown_protocol_operation(data: bytes) -> None:
    for chunks in splits(data):
        ops, err = feed_client(chunks)
        assert err is not None and err.err == UNKNOWN_PROTOCOL_OPERATION, chunks


@pytest.mark.parametrize("data", [
    b"PUB a\r\n", b"PUB a -1\r\n", b"PUB a 1234567890\r\n", b"PUB a b c 1\r\n", b"PUB a +1\r\n",
    b"SUB a\r\n", b"SUB a b c d\r\n", b"UNSUB\t\r\n", b"UNSUB 1 2 3\r\n", b"HPUB a 5\r\n",
    b"HPUB a 5 4\r\n", b"HPUB a -1 4\r\n", b"INFO {bad\r\n", b"-ERR 'x'\r\n",
])
def test_malformed_arguments_close_without_a_message(data: bytes) -> None:
    for chunks in splits(data):
        ops, err = feed_client(chunks)
        assert ops == [] and err is not None and err.err is None, chunks


def test_hpub_needs_header_support() -> None:
    ops, err = feed_client(b"HPUB a 12 12\r\nNATS/1.0\r\n\r\n\r\n", headers=False)
    assert ops == [] and err is not None and err.err is None


@pytest.mark.parametrize("op", [b"PUB a", b"PUB a r", b"HPUB a 10", b"HPUB a r 10", b"pub a"])
def test_max_payload_refused_from_the_control_line(op: bytes) -> None:
    """The control line alone is enough: no payload byte needs to arrive."""
    ops, err = feed_client(op + b" 65\r\n", max_payload=64)
    assert err is not None and err.err == MAX_PAYLOAD_VIOLATION
    ok, err = feed_client(op + b" 64\r\n", max_payload=64)
    assert err is None  # exactly max_payload is fine (and waits for its payload)


def test_max_control_line_refused_while_arriving() -> None:
    parser, rec = client_parser(max_control_line=32)
    parser.feed(b"SUB " + b"a" * 30)  # 30 argument bytes so far: fine
    with pytest.raises(Exception) as info:
        parser.feed(b"b" * 5)  # 35 > 32 and still no line end
    assert getattr(info.value, "err", None) == MAX_CONTROL_LINE_EXCEEDED


@pytest.mark.parametrize("n,ok", [(32, True), (33, False)])
def test_max_control_line_boundary(n: int, ok: bool) -> None:
    arg = b"s" * (n - 2) + b" 1"  # SUB argument of exactly n bytes
    for chunks in splits(b"SUB " + arg + b"\r\n"):
        ops, err = feed_client(chunks, max_control_line=32)
        if ok:
            assert err is None and ops == [("SUB", b"s" * (n - 2), None, b"1")]
        else:
            assert err is not None and err.err == MAX_CONTROL_LINE_EXCEEDED


def test_ping_is_not_limited_by_the_control_line() -> None:
    assert feed_client(b"PING" + b"x" * 100 + b"\r\n", max_control_line=16) == ([("PING",)], None)


def test_awaiting_connect_refuses_other_operations_first() -> None:
    for data in (b"PING\r\n", b"SUB a 1\r\n", b"P"):
        ops, err = feed_client(data, awaiting_connect=True)
        assert err is not None and err.err == AUTHORIZATION_VIOLATION
    ops, err = feed_client(b"connect {}\r\n", awaiting_connect=True)
    assert ops == [("CONNECT", b"{}")] and err is None


def test_pedantic_publish_subject_is_a_soft_error() -> None:
    ops, err = feed_client(b"PUB a.* 1\r\nx\r\nPUB a 1\r\ny\r\n", pedantic=True)
    assert err is None
    assert ops == [("ERR", INVALID_PUBLISH_SUBJECT), ("PUB", b"a.*", None, b"x"),
                   ("PUB", b"a", None, b"y")]
    assert feed_client(b"PUB a.* 1\r\nx\r\n") == ([("PUB", b"a.*", None, b"x")], None)


def test_ops_before_an_error_are_reported() -> None:
    ops, err = feed_client(b"SUB a 1\r\nPING\r\nBOGUS\r\nPING\r\n")
    assert ops == [("SUB", b"a", None, b"1"), ("PING",)]
    assert err is not None and err.err == UNKNOWN_PROTOCOL_OPERATION


def test_buffered_counts_held_bytes() -> None:
    parser, rec = client_parser()
    parser.feed(b"PUB a 11\r\nhel")
    assert rec.ops == [] and parser.buffered > 0
    parser.feed(b"lo worl")
    parser.feed(b"d\r\n")
    assert rec.ops == [("PUB", b"a", None, b"hello world")]
    assert parser.buffered == 0
