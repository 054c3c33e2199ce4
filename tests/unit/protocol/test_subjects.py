"""Subject validation and wildcard matching tables (the seeds' examples and the reference's
rules), and the one matcher against a model on generated subjects and patterns."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.protocol.subjects import (
    has_wildcard,
    is_valid_literal_subject,
    is_valid_queue_name,
    is_valid_subject,
    is_valid_subscription,
    matcher,
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
    ("foo>", "foo>", True),  # `>` inside a token is an ordinary character
    ("foo>", "foo.bar", False),
    # Glob characters are ordinary characters.
    ("?", "a", False),
    ("[a]", "a", False),
    ("a?", "a?", True),
    # Empty tokens (invalid subjects, but the permission and limit lists may hold them): a `*`
    # matches an empty token too, and a `>` any one or more tokens, empty or not.
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
    ("*", "", True),
    (">", "", True),
    ("a.>", "a.", True),
    ("a.*", "a.", True),
    ("", "", True),
    ("", "a", False),
    # Only the first `>` counts: the match ends there, whatever follows in the pattern.
    ("a.>.b", "a.x", True),
    ("a.>.b", "a.x.y.z", True),
    ("a.>.b", "a", False),
    (">.a", "x.y", True),
    # A subject with wildcards (the permission check of a SUB): its `*` and `>` are plain
    # tokens, which only a wildcard of the pattern matches.
    ("foo.*", "foo.*", True),
    ("foo.>", "foo.*", True),
    ("foo.>", "foo.>", True),
    (">", "foo.>", True),
    ("foo.*", "foo.>", True),
    ("foo.bar", "foo.*", False),
    ("foo.*", "foo.*.bar", False),
    # Queue names matched against a permission's queue entry.
    ("workers", "workers", True),
    ("workers.*", "workers.v1", True),
    ("workers", "workers.v1", False),
    # Channel names against the streaming limits' and Spark's channel patterns.
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.x", False),
    ("orders.>", "orders.eu.x", True),
    ("orders", "orders.eu", False),
    ("caf\u00e9.*", "caf\u00e9.\u2603", True),
]


@pytest.mark.parametrize("pattern,subject,matches", MATCHES)
def test_matching(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(pattern, subject) is matches
    assert subject_matches(pattern.encode(), subject.encode()) is matches


def _model(pattern: str) -> re.Pattern[str]:
    """The matching rules as a regular expression, written from the module docstring: a `*`
    token is any one token, a `>` token any rest of one or more tokens (and ends the pattern)."""
    parts: list[str] = []
    for tok in pattern.split("."):
        if tok == ">":
            parts.append(".*")  # one or more tokens: any text after the separator
            break
        parts.append("[^.]*" if tok == "*" else re.escape(tok))
    return re.compile(r"\.".join(parts), re.DOTALL)


TOKENS = ["a", "b", "ab", "*", ">", "a*", ">b", "", "?", "[a]", " ", "\u00e9"]
names = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6).map(".".join)


@settings(max_examples=3000, deadline=None, database=None)
@given(pattern=names, subject=names)
def test_matching_follows_the_model(pattern: str, subject: str) -> None:
    want = _model(pattern).fullmatch(subject) is not None
    assert subject_matches(pattern, subject) is want
    assert subject_matches(pattern.encode(), subject.encode()) is want
    assert subject_matches(pattern, subject.encode()) is want
    assert subject_matches(pattern.encode(), subject) is want


@settings(max_examples=500, deadline=None, database=None)
@given(pattern=names)
def test_a_pattern_matches_itself(pattern: str) -> None:
    assert subject_matches(pattern, pattern)


@pytest.mark.parametrize(("subject", "pattern", "covered"), [
    ("a.b", "a.*", True), ("a.*", "a.>", True), ("a.>", "a.*", False), ("a.>", "a.>", True),
    ("a.*", "a.b", False), ("a.b.c", "a.>", True), ("a", "a.>", False), ("x.>", ">", True),
    ("*", "*", True), ("a.b", "a.b.c", False),
])
def test_is_subset_as_an_import_is_checked_against_an_export(subject: str, pattern: str,
                                                             covered: bool) -> None:
    from tidings.protocol.subjects import is_subset

    assert is_subset(subject, pattern) is covered


MATCHER_PATTERNS = [["a.b"], ["a.>"], ["a.*"], ["*.b.>"], [">"], ["a.b", "c.>"],
                    ["$KV.W.>"], ["a.*.c", "a.b"]]
MATCHER_SUBJECTS = ["a", "a.b", "a.b.c", "a.", "a.c", "b", "c.d", "c", "x.b.y", "x.b",
                    "$KV.W.k1", "$KV.W", "a.*", "a.>", "a.x.c"]


@pytest.mark.parametrize("patterns", MATCHER_PATTERNS)
def test_a_matcher_answers_as_subject_matches(patterns: list[str]) -> None:
    match = matcher(patterns)
    for subject in MATCHER_SUBJECTS:
        assert match(subject) == any(subject_matches(p, subject) for p in patterns), subject
