"""What CONNECT may change in the parser: a handler that pauses it (a password still being
checked) gets nothing of what followed until it goes on, and a PUB handler set by CONNECT
takes every PUB after it, in the same read, however the bytes are split."""

from __future__ import annotations

from typing import Any

import pytest

from tidings.protocol.parser import ClientOpParser

from .recorder import ClientOps

AFTER = b"SUB a 1\r\nPUB a 1\r\nx\r\nPUB b 0\r\n\r\nPING\r\n"
DATA = b'CONNECT {"user":"u"}\r\n' + AFTER


class Pausing(ClientOps):
    """Pauses the parser at CONNECT; `parser` is set after both are made."""

    parser: ClientOpParser

    def on_connect(self, arg: bytes) -> None:
        super().on_connect(arg)
        self.parser.paused = True


class Checking(ClientOps):
    """At CONNECT, hands PUBs to a checking handler (as a client with permissions)."""

    parser: ClientOpParser

    def on_connect(self, arg: bytes) -> None:
        super().on_connect(arg)
        self.parser.route_pubs_to(self.checked_pub, skip_unrouted=False)

    def checked_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        self.ops.append(("CHECKED", subject))
        self.on_pub(subject, reply, payload)


def _split_everywhere() -> list[list[bytes]]:
    return [[DATA]] + [[DATA[:i], DATA[i:]] for i in range(1, len(DATA))]


def _made(kind: type[Any]) -> tuple[Any, ClientOpParser]:
    handler = kind()
    parser = ClientOpParser(handler)
    parser.awaiting_connect = True
    handler.parser = parser
    return handler, parser


@pytest.mark.parametrize("pieces", _split_everywhere())
def test_nothing_after_connect_is_parsed_while_paused(pieces: list[bytes]) -> None:
    handler, parser = _made(Pausing)
    for piece in pieces:
        parser.feed(piece)
    assert [op[0] for op in handler.ops] == ["CONNECT"]
    parser.paused = False
    parser.awaiting_connect = False
    parser.feed(b"")
    assert [op[0] for op in handler.ops] == ["CONNECT", "SUB", "PUB", "PUB", "PING"]


@pytest.mark.parametrize("pieces", _split_everywhere())
def test_a_pub_handler_set_at_connect_takes_the_rest_of_the_read(pieces: list[bytes]) -> None:
    handler, parser = _made(Checking)
    parser.awaiting_connect = False
    for piece in pieces:
        parser.feed(piece)
    assert [op[0] for op in handler.ops] == [
        "CONNECT", "SUB", "CHECKED", "PUB", "CHECKED", "PUB", "PING"]


def test_many_connects_in_one_read_are_parsed_without_recursion() -> None:
    handler, parser = _made(Checking)
    parser.awaiting_connect = False
    parser.feed(b"CONNECT {}\r\n" * 20_000 + b"PING\r\n")
    assert len(handler.ops) == 20_001 and handler.ops[-1] == ("PING",)
