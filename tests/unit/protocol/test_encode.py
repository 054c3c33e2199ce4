"""Encoders: each produces exactly the seeds' example frames, and parses back."""

from __future__ import annotations

import pytest

from tidings.protocol import encode

from .recorder import feed_client, feed_server


@pytest.mark.parametrize("frame,expected", [
    (encode.pub(b"FOO", b"Hello NATS!"), b"PUB FOO 11\r\nHello NATS!\r\n"),
    (encode.pub(b"FRONT.DOOR", b"Knock Knock", reply=b"JOKE.22"),
     b"PUB FRONT.DOOR JOKE.22 11\r\nKnock Knock\r\n"),
    (encode.pub(b"NOTIFY", b""), b"PUB NOTIFY 0\r\n\r\n"),
    (encode.hpub(b"FOO", b"NATS/1.0\r\nBar: Baz\r\n\r\n", b"Hello NATS!"),
     b"HPUB FOO 22 33\r\nNATS/1.0\r\nBar: Baz\r\n\r\nHello NATS!\r\n"),
    (encode.hpub(b"FRONT.DOOR", b"NATS/1.0\r\nBREAKFAST: donut\r\nLUNCH: burger\r\n\r\n",
                 b"Knock Knock", reply=b"JOKE.22"),
     b"HPUB FRONT.DOOR JOKE.22 45 56\r\nNATS/1.0\r\nBREAKFAST: donut\r\nLUNCH: burger\r\n\r\n"
     b"Knock Knock\r\n"),
    (encode.hpub(b"NOTIFY", b"NATS/1.0\r\nBar: Baz\r\n\r\n", b""),
     b"HPUB NOTIFY 22 22\r\nNATS/1.0\r\nBar: Baz\r\n\r\n\r\n"),
    (encode.sub(b"FOO", b"1"), b"SUB FOO 1\r\n"),
    (encode.sub(b"BAR", b"44", queue=b"G1"), b"SUB BAR G1 44\r\n"),
    (encode.unsub(b"1"), b"UNSUB 1\r\n"),
    (encode.unsub(b"1", 5), b"UNSUB 1 5\r\n"),
    (encode.PING, b"PING\r\n"),
    (encode.PONG, b"PONG\r\n"),
    (encode.OK, b"+OK\r\n"),
    (encode.err("Stale Connection"), b"-ERR 'Stale Connection'\r\n"),
    (encode.msg(b"FOO.BAR", b"9", b"Hello World"), b"MSG FOO.BAR 9 11\r\nHello World\r\n"),
    (encode.msg(b"FOO.BAR", b"9", b"Hello World", reply=b"GREETING.34"),
     b"MSG FOO.BAR 9 GREETING.34 11\r\nHello World\r\n"),
    (encode.hmsg(b"FOO.BAR", b"9", b"NATS/1.0\r\nFoodGroup: vegetable\r\n\r\n", b"Hello World"),
     b"HMSG FOO.BAR 9 34 45\r\nNATS/1.0\r\nFoodGroup: vegetable\r\n\r\nHello World\r\n"),
    (encode.hmsg(b"FOO.BAR", b"9", b"NATS/1.0\r\nFoodGroup: vegetable\r\n\r\n", b"Hello World",
                 reply=b"BAZ.69"),
     b"HMSG FOO.BAR 9 BAZ.69 34 45\r\nNATS/1.0\r\nFoodGroup: vegetable\r\n\r\nHello World\r\n"),
])
def test_seed_frames(frame: bytes, expected: bytes) -> None:
    assert frame == expected


def test_connect_and_info_are_compact_json() -> None:
    assert encode.connect({"verbose": False, "protocol": 1}) == (
        b'CONNECT {"verbose":false,"protocol":1}\r\n'
    )
    assert encode.info({"server_id": "x", "proto": 1}) == b'INFO {"server_id":"x","proto":1}\r\n'


def test_client_frames_parse_back() -> None:
    frames = (
        encode.connect({"verbose": False})
        + encode.sub(b"a", b"1", queue=b"q")
        + encode.pub(b"a", b"\r\n\x00", reply=b"r")
        + encode.hpub(b"a", b"NATS/1.0\r\n\r\n", b"p")
        + encode.unsub(b"1", 3)
        + encode.PING
    )
    ops, err = feed_client(frames)
    assert err is None
    assert ops == [
        ("CONNECT", b'{"verbose":false}'),
        ("SUB", b"a", b"q", b"1"),
        ("PUB", b"a", b"r", b"\r\n\x00"),
        ("HPUB", b"a", None, 12, b"NATS/1.0\r\n\r\np"),
        ("UNSUB", b"1", 3),
        ("PING",),
    ]


def test_server_frames_parse_back() -> None:
    frames = (
        encode.info({"proto": 1})
        + encode.msg(b"a", b"1", b"x", reply=b"r")
        + encode.hmsg(b"a", b"2", b"NATS/1.0 503\r\n\r\n", b"")
        + encode.OK
        + encode.err("Invalid Subject")
        + encode.PONG
    )
    ops, err = feed_server(frames)
    assert err is None
    assert ops == [
        ("INFO", {"proto": 1}),
        ("MSG", b"a", b"1", b"r", None, b"x"),
        ("MSG", b"a", b"2", None, b"NATS/1.0 503\r\n\r\n", b""),
        ("OK",),
        ("-ERR", "Invalid Subject"),
        ("PONG",),
    ]
