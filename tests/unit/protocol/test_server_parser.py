"""ServerOpParser (what a client reads): every server example of the protocol seeds, split at
every byte and fed a byte at a time."""

from __future__ import annotations

from typing import Any

import pytest

from .recorder import feed_server, splits

INFO_LINE = (
    b'INFO {"server_id":"Zk0GQ3JBSrg3oyxCRRlE09","version":"1.2.0","proto":1,"go":"go1.10.3",'
    b'"host":"0.0.0.0","port":4222,"max_payload":1048576,"client_id":2392}\r\n'
)
INFO = {"server_id": "Zk0GQ3JBSrg3oyxCRRlE09", "version": "1.2.0", "proto": 1,
        "go": "go1.10.3", "host": "0.0.0.0", "port": 4222, "max_payload": 1048576,
        "client_id": 2392}
FOOD = b"NATS/1.0\r\nFoodGroup: vegetable\r\n\r\n"  # 34 bytes

SEED_EXAMPLES: list[tuple[bytes, list[tuple[Any, ...]]]] = [
    (INFO_LINE, [("INFO", INFO)]),
    (INFO_LINE[:-2] + b" \r\n", [("INFO", INFO)]),  # the reference ends INFO with a blank
    (b"MSG FOO.BAR 9 11\r\nHello World\r\n",
     [("MSG", b"FOO.BAR", b"9", None, None, b"Hello World")]),
    (b"MSG FOO.BAR 9 GREETING.34 11\r\nHello World\r\n",
     [("MSG", b"FOO.BAR", b"9", b"GREETING.34", None, b"Hello World")]),
    (b"HMSG FOO.BAR 9 34 45\r\n" + FOOD + b"Hello World\r\n",
     [("MSG", b"FOO.BAR", b"9", None, FOOD, b"Hello World")]),
    (b"HMSG FOO.BAR 9 BAZ.69 34 45\r\n" + FOOD + b"Hello World\r\n",
     [("MSG", b"FOO.BAR", b"9", b"BAZ.69", FOOD, b"Hello World")]),
    (b"PING\r\n", [("PING",)]),
    (b"PONG\r\n", [("PONG",)]),
    (b"+OK\r\n", [("OK",)]),
    (b"-ERR 'Stale Connection'\r\n", [("-ERR", "Stale Connection")]),
    (b"-ERR 'Unknown Protocol Operation'\r\n", [("-ERR", "Unknown Protocol Operation")]),
    (b"MSG empty 1 0\r\n\r\n", [("MSG", b"empty", b"1", None, None, b"")]),
    (b"HMSG r 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n",
     [("MSG", b"r", b"1", None, b"NATS/1.0 503\r\n\r\n", b"")]),
]


@pytest.mark.parametrize("data,ops", SEED_EXAMPLES, ids=[d[:12].decode() for d, _ in
                                                          SEED_EXAMPLES])
def test_seed_example_split_everywhere(data: bytes, ops: list[tuple[Any, ...]]) -> None:
    for chunks in splits(data):
        assert feed_server(chunks) == (ops, None), chunks


def test_all_examples_in_one_stream() -> None:
    data = b"".join(d for d, _ in SEED_EXAMPLES)
    ops = [op for _, o in SEED_EXAMPLES for op in o]
    for chunks in splits(data):
        assert feed_server(chunks) == (ops, None)


def test_tabs_runs_and_lowercase() -> None:
    ops, err = feed_server(b"msg\tfoo  1 \t 2\r\nhi\r\nping\r\n")
    assert err is None
    assert ops == [("MSG", b"foo", b"1", None, None, b"hi"), ("PING",)]


@pytest.mark.parametrize("data", [
    b"FOO\r\n", b"MSG foo\r\n", b"MSG foo 1 x\r\n", b"MSG a 1 2\r\nhiXX\r\n",
    b"HMSG a 1 5 2\r\n", b"INFO {nope\r\n", b"SUB a 1\r\n",
])
def test_errors(data: bytes) -> None:
    ops, err = feed_server(data)
    assert err is not None
