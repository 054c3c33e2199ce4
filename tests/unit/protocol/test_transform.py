"""Subject transforms (protocol/transform.py): an import's `to` and prefix."""

from __future__ import annotations

import pytest

from tidings.protocol.transform import Transform, TransformError, prefixed


@pytest.mark.parametrize(("source", "dest", "subject", "out"), [
    ("a.>", "x.>", "a.b.c", "x.b.c"),
    ("a.*.c", "x.$1", "a.b.c", "x.b"),
    ("a.*.*", "x.{{wildcard(2)}}.{{ wildcard(1) }}", "a.b.c", "x.c.b"),
    ("a.*.*", "x.*.*", "a.b.c", "x.b.c"),
    ("a.b", "c.d", "a.b", "c.d"),
    ("a.*.>", "$1.x.>", "a.b.c.d", "b.x.c.d"),
])
def test_a_transform_carries_wildcards_by_position(source: str, dest: str, subject: str,
                                                   out: str) -> None:
    assert Transform(source.encode(), dest.encode()).apply(subject.encode()) == out.encode()


def test_a_prefix_goes_before_the_whole_subject() -> None:
    assert prefixed(b"from").apply(b"a.b") == b"from.a.b"
    assert prefixed(b"from.").apply(b"a") == b"from.a"


@pytest.mark.parametrize(("source", "dest"), [
    ("a.*", "x.>"), ("a.*", "x.*.*"), ("a.*", "x.$2"), ("a.b", "x.$1"),
])
def test_a_destination_the_source_cannot_fill_is_refused(source: str, dest: str) -> None:
    with pytest.raises(TransformError):
        Transform(source.encode(), dest.encode())
