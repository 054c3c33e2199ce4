"""Subject validation and wildcard matching tables (the seeds' examples and the reference's
rules)."""

from __future__ import annotations

import pytest

from tidings.protocol.subjects import (
    has_wildcard,
    is_valid_literal_subject,
    is_valid_queue_name,
    is_valid_subject,
    is_valid_subscription,
    subject_matches,
)

# subject: (is_valid_subject, is_valid_subscription, is_valid_literal_subject)
VALIDITY = {
    # The seed's valid subjects.
    "FOO": (True, True, True),
    "BAR": (True, True, True),
    "foo.bar": (True, True, True),
    "foo.BAR": (True, True, True),
    "FOO.BAR": (True, True, True),
    "FOO.BAR.BAZ": (True, True, True),
    # The seed's invalid ones.
    "FOO. BAR": (False, True, True),  # a blank token part: clients refuse; the server's
    "foo. .bar": (False, True, True),  # field splitting would never hand it over anyway
    "foo..bar": (False, False, False),
    # Wildcards.
    "foo.*.baz": (True, True, False),
    "foo.>": (True, True, False),
    ">": (True, True, False),
    "*": (True, True, False),
    "*.*": (True, True, False),
    "foo*.bar": (True, True, True),  # not a separate token: a literal character
    "f*o.b*r": (True, True, True),
    "foo>": (True, True, True),
    "foo.>.bar": (False, False, False),
    ">.foo": (False, False, False),
    # Empty tokens.
    "": (False, False, False),
    ".": (False, False, False),
    "foo.": (False, False, False),
    ".foo": (False, False, False),
    # White space other than the protocol's field separators.
    "a\fb": (False, True, True),
    "a.\f": (False, True, True),
    "a\tb": (False, True, True),
    # Any UTF-8.
    "caf\u00e9.\u2603": (True, True, True),
    "$SYS.>": (True, True, False),
    "_INBOX.abc.*": (True, True, False),
}


@pytest.mark.parametrize("subject", list(VALIDITY))
def test_validity(subject: str) -> None:
    valid, sub_ok, literal = VALIDITY[subject]
    assert is_valid_subject(subject) is valid
    assert is_valid_subject(subject.encode()) is valid
    assert is_valid_subscription(subject.encode()) is sub_ok
    assert is_valid_literal_subject(subject.encode()) is literal
    assert is_valid_literal_subject(subject) is literal


@pytest.mark.parametrize("queue,ok", [("q", True), ("workers.v1", True), ("", False),
                                      ("a b", False), ("a\tb", False)])
def test_queue_names(queue: str, ok: bool) -> None:
    assert is_valid_queue_name(queue) is ok


@pytest.mark.parametrize("subject,wild", [
    (b"foo", False), (b"foo.*", True), (b"foo.>", True), (b">", True), (b"*", True),
    (b"foo*.bar", False), (b"foo>", False), (b"a.*.c", True), (b"a.b>c.d", False),
])
def test_has_wildcard(subject: bytes, wild: bool) -> None:
    assert has_wildcard(subject) is wild


# (pattern, subject, matches)
MATCHES = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo", "foo.bar", False),
    ("foo.bar", "foo", False),
    ("foo.*", "foo.bar", True),
    ("foo.*", "foo", False),
    ("foo.*", "foo.bar.baz", False),
    ("foo.>", "foo.bar", True),
    ("foo.>", "foo.bar.baz.1", True),
    ("foo.>", "foo", False),  # the seed: matches foo.bar and foo.bar.baz.1 but not foo
    ("foo.*.quux", "foo.bar.quux", True),  # the seed's example
    ("foo.>", "foo.bar.quux", True),
    ("foo.*.quux", "foo.bar.baz", False),
    ("foo.>", "foo.bar.baz", True),
    (">", "anything.at.all", True),
    (">", "x", True),
    ("*", "x", True),
    ("*", "x.y", False),
    ("*.*", "x.y", True),
    ("*.>", "x", False),
    ("*.>", "x.y.z", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.b.d", False),
    ("FOO", "foo", False),  # case-sensitive
    ("foo*.bar", "foo*.bar", True),
    ("foo*.bar", "fooX.bar", False),
]


@pytest.mark.parametrize("pattern,subject,matches", MATCHES)
def test_matching(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(pattern, subject) is matches
    assert subject_matches(pattern.encode(), subject.encode()) is matches


# -- the copies elsewhere, compared with this module's matcher before they are removed --------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tidings.spark.planning import subject_matches as spark_matches  # noqa: E402
from tidings.streaming.stores.base import _matches as store_matches  # noqa: E402

TOKENS = ["a", "b", "ab", "*", ">", "a*", ">b", "", "?", "[a]", " "]
names = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=5).map(".".join)


@settings(max_examples=20000, deadline=None, database=None)
@given(pattern=names, subject=names)
def test_copies_agree(pattern: str, subject: str) -> None:
    new = subject_matches(pattern, subject)
    assert new is subject_matches(pattern.encode(), subject.encode())
    wild_chars = "*" in pattern or ">" in pattern
    assert store_matches(pattern, subject) is (new and wild_chars)
    ptoks = pattern.split(".")
    if "*" in ptoks or ptoks[-1] == ">":
        assert spark_matches(pattern, subject) is new
