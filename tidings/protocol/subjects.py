"""Subject validation, tokenizing and wildcard matching, with the reference server's rules.

A subject is one or more non-empty tokens separated by '.'. A token that is exactly `*` matches
any one token; a token that is exactly `>` matches one or more trailing tokens and must be last.
`*` or `>` inside a longer token is an ordinary character, as in nats-server.

`subject_matches` is the one wildcard matcher outside the server's subject index (whose trie
walks the same rules): permissions, /subsz's `test`, the streaming limits' channel patterns and
Spark's channelPattern all call it. It does not validate: on a subject that is not valid a `*`
also matches an empty token, and the first `>` token ends the match whatever follows it.
"""

from __future__ import annotations

from collections.abc import Callable

_WHITESPACE = frozenset(b" \t\r\n\f")


def is_valid_subject(subject: bytes | str) -> bool:
    """True for a subject usable in SUB: non-empty tokens, no white space, `>` only last."""
    if isinstance(subject, str):
        subject = subject.encode()
    if not subject:
        return False
    tokens = subject.split(b".")
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if not tok:
            return False
        if len(tok) == 1:
            if tok == b">" and i != last:
                return False
            if tok[0] in _WHITESPACE:
                return False
        elif not _WHITESPACE.isdisjoint(tok):
            return False
    return True


def is_valid_literal_subject(subject: bytes | str) -> bool:
    """The reference's check of a PUB subject under pedantic mode: no empty token and no
    wildcard token. White space is not looked at (the reference does not either)."""
    if isinstance(subject, str):
        subject = subject.encode()
    if not subject:
        return False
    for tok in subject.split(b"."):
        if not tok or tok == b"*" or tok == b">":
            return False
    return True


def is_valid_subscription(subject: bytes | str) -> bool:
    """The reference's check of a SUB subject (its subject index refuses the rest): no empty
    token and nothing after a `>` token. Other white space than the field separators (e.g.
    a form feed) is accepted there, unlike in is_valid_subject."""
    if isinstance(subject, str):
        subject = subject.encode()
    if not subject:
        return False
    tokens = subject.split(b".")
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if not tok or (tok == b">" and i != last):
            return False
    return True


def is_valid_queue_name(queue: bytes | str) -> bool:
    """A queue group name: non-empty, no white space."""
    if isinstance(queue, str):
        queue = queue.encode()
    return bool(queue) and _WHITESPACE.isdisjoint(queue)


def has_wildcard(subject: bytes) -> bool:
    """True when some token of `subject` is exactly `*` or `>`."""
    if b"*" not in subject and b">" not in subject:
        return False
    tokens = subject.split(b".")
    return b"*" in tokens or b">" in tokens


def subject_matches(pattern: bytes | str, subject: bytes | str) -> bool:
    """True when `subject` matches the (possibly wildcard) `pattern`. A `*` or `>` token of
    `subject` itself is an ordinary token, which only a wildcard of `pattern` matches (the
    permission check of a wildcard SUB relies on it)."""
    return _covered(pattern, subject, subset=False)


def matcher(patterns: list[str]) -> Callable[[str], bool]:
    """subject_matches against any of `patterns`, made once for many subjects: a literal
    pattern is an equality, one that ends in its only wildcard `>` a prefix."""
    tests: list[Callable[[str], bool]] = []
    for pattern in patterns:
        tokens = pattern.split(".")
        if "*" not in tokens and ">" not in tokens:
            tests.append(pattern.__eq__)
        elif tokens[-1] == ">" and "*" not in tokens and tokens.count(">") == 1:
            prefix = pattern[:-1]
            tests.append(lambda s, p=prefix: s.startswith(p))
        else:
            tests.append(lambda s, p=pattern: subject_matches(p, s))
    if len(tests) == 1:
        return tests[0]
    return lambda s: any(test(s) for test in tests)


def is_subset(subject: bytes | str, pattern: bytes | str) -> bool:
    """True when every subject that `subject` (itself possibly a pattern) matches is one
    that `pattern` matches too (an import's subject against an export's): as
    subject_matches, but a `>` of `subject` only under a `>` of `pattern`."""
    return _covered(pattern, subject, subset=True)


def _covered(pattern: bytes | str, subject: bytes | str, subset: bool) -> bool:
    if isinstance(pattern, str):
        pattern = pattern.encode()
    if isinstance(subject, str):
        subject = subject.encode()
    ptoks = pattern.split(b".")
    stoks = subject.split(b".")
    for i, ptok in enumerate(ptoks):
        if ptok == b">":
            return len(stoks) > i
        if i >= len(stoks) or (subset and stoks[i] == b">"):
            return False
        if ptok != b"*" and ptok != stoks[i]:
            return False
    return len(ptoks) == len(stoks)


def subjects_collide(a: str, b: str) -> bool:
    """Whether some subject matches both `a` and `b` (wildcards either side): "a.*" and
    "*.b" collide on "a.b"; "foo.*" and "foo.>" on "foo.x"."""
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right, strict=False):
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return len(left) == len(right)  # (else one of them runs out of tokens first)
