"""The NATS/1.0 header block: parse and serialise round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.protocol.headers import HeaderError, Headers, status_headers

SEED_BLOCKS = [
    (b"NATS/1.0\r\nBar: Baz\r\n\r\n", [("Bar", "Baz")]),
    (b"NATS/1.0\r\nBREAKFAST: donut\r\nLUNCH: burger\r\n\r\n",
     [("BREAKFAST", "donut"), ("LUNCH", "burger")]),
    (b"NATS/1.0\r\nBREAKFAST: donut\r\nBREAKFAST: eggs\r\n\r\n",
     [("BREAKFAST", "donut"), ("BREAKFAST", "eggs")]),
    (b"NATS/1.0\r\nFoodGroup: vegetable\r\n\r\n", [("FoodGroup", "vegetable")]),
]


@pytest.mark.parametrize("block,items", SEED_BLOCKS)
def test_seed_blocks_round_trip(block: bytes, items: list[tuple[str, str]]) -> None:
    h = Headers.decode(block)
    assert h.items() == items
    assert h.status is None
    assert h.encode() == block
    assert len(block) == len(h.encode())


def test_multi_value_and_case_preserved() -> None:
    h = Headers()
    h.add("X-Trace", "a")
    h.add("x-trace", "b")
    h.add("X-Trace", "c")
    assert h.encode() == b"NATS/1.0\r\nX-Trace: a\r\nx-trace: b\r\nX-Trace: c\r\n\r\n"
    back = Headers.decode(h.encode())
    assert back == h
    assert back.get_all("X-Trace") == ["a", "c"]  # exact case first
    assert back.get_all("x-trace") == ["b"]
    assert back.get_all("X-TRACE") == ["a", "b", "c"]  # any case as a fallback
    assert back.get("X-TRACE") == "a"
    assert back.keys() == ["X-Trace", "x-trace"]


def test_mapping_constructor_with_lists() -> None:
    h = Headers({"A": ["1", "2"], "b": "3"})
    assert h.items() == [("A", "1"), ("A", "2"), ("b", "3")]
    assert h.to_dict() == {"A": "2", "b": "3"}
    assert "a" in h and "B" in h and "c" not in h
    h["A"] = "9"
    assert h.get_all("A") == ["9"]
    h.remove("b")
    assert h.items() == [("A", "9")]
    with pytest.raises(KeyError):
        h["missing"]


@pytest.mark.parametrize("block,status,description", [
    (b"NATS/1.0 503\r\n\r\n", 503, ""),
    (b"NATS/1.0 404 No Messages\r\n\r\n", 404, "No Messages"),
    (b"NATS/1.0 408 Request Timeout\r\n\r\n", 408, "Request Timeout"),
    (b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1016\r\n\r\n", 100, "Idle Heartbeat"),
])
def test_status_line(block: bytes, status: int, description: str) -> None:
    h = Headers.decode(block)
    assert h.status == status
    assert h.description == description
    assert h.encode() == block
    assert bool(h)


def test_status_headers() -> None:
    assert status_headers(503) == b"NATS/1.0 503\r\n\r\n"
    assert status_headers(404, "No Messages") == b"NATS/1.0 404 No Messages\r\n\r\n"


def test_no_responders_block_from_the_server() -> None:
    h = Headers.decode(b"NATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n")
    assert h.status == 503 and h.get("Nats-Subject") == "nobody"


def test_decode_without_terminating_blank_line_and_blanks_around_values() -> None:
    h = Headers.decode(b"NATS/1.0\r\nA:1\r\nB:   two words  ")
    assert h.items() == [("A", "1"), ("B", "two words")]


def test_folded_continuation_line() -> None:
    h = Headers.decode(b"NATS/1.0\r\nA: one\r\n two\r\n\r\n")
    assert h.items() == [("A", "one two")]


def test_value_may_contain_colon() -> None:
    h = Headers.decode(b"NATS/1.0\r\nUrl: nats://host:4222\r\n\r\n")
    assert h.get("Url") == "nats://host:4222"


@pytest.mark.parametrize("block", [
    b"HTTP/1.1 200 OK\r\n\r\n", b"NATS/1.0 5031\r\n\r\n", b"NATS/1.0 abc\r\n\r\n",
    b"NATS/1.0\r\nno colon\r\n\r\n", b"NATS/1.0\r\n: empty name\r\n\r\n",
])
def test_bad_blocks(block: bytes) -> None:
    with pytest.raises(HeaderError):
        Headers.decode(block)


@pytest.mark.parametrize("name,value", [("", "v"), ("a b", "v"), ("a:b", "v"), ("a", "x\r\ny")])
def test_bad_names_and_values(name: str, value: str) -> None:
    with pytest.raises(HeaderError):
        Headers().add(name, value)


_names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=":"),
    min_size=1, max_size=12,
)
_values = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF, blacklist_categories=["Cs"]),
    max_size=20,
).map(str.strip)


@settings(max_examples=200, deadline=None, database=None)
@given(items=st.lists(st.tuples(_names, _values), max_size=8),
       status=st.one_of(st.none(), st.integers(min_value=100, max_value=999)))
def test_round_trip_property(items: list[tuple[str, str]], status: int | None) -> None:
    h = Headers(items, status=status)
    back = Headers.decode(h.encode())
    assert back.items() == items
    assert back.status == status
    assert back.encode() == h.encode()
