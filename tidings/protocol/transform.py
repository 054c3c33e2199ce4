"""Subject transforms: a source pattern's wildcards carried into a destination subject, as
nats-server maps an import's subjects (and, later, the `mappings` of a config file).

The destination names the source's wildcards by position, `$1` or `{{wildcard(1)}}`; a bare
`*` or `>` in the destination takes the source's wildcards of that kind in order (the older
form of stream imports' `to`). A literal destination replaces the subject outright.
"""

from __future__ import annotations

import re

_FUNCTION = re.compile(rb"^\{\{\s*wildcard\s*\(\s*(\d+)\s*\)\s*\}\}$", re.IGNORECASE)


class TransformError(ValueError):
    """A destination that does not fit its source."""


class Transform:
    """`apply(subject)`: `subject` (which matches `source`) as the destination says."""

    __slots__ = ("source", "dest", "_src", "_parts", "_rest")

    def __init__(self, source: bytes, dest: bytes) -> None:
        self.source, self.dest = source, dest
        self._src = source.split(b".")
        wildcards = [i for i, tok in enumerate(self._src) if tok in (b"*", b">")]
        stars = iter(i for i in wildcards if self._src[i] == b"*")
        # Each destination token: a literal (bytes) or the index of a source token to take.
        self._parts: list[bytes | int] = []
        self._rest = -1  # the source token `>` stands at, when the destination ends with it
        for tok in dest.split(b"."):
            if tok == b">":
                if self._src[-1] != b">":
                    raise TransformError(f"{dest!r}: no '>' in the source {source!r}")
                self._rest = len(self._src) - 1
                continue
            if tok == b"*":
                pos = next(stars, None)
                if pos is None:
                    raise TransformError(f"{dest!r}: more '*' than the source {source!r} has")
                self._parts.append(pos)
                continue
            n = _wildcard_number(tok)
            if n is None:
                self._parts.append(tok)
            elif not 1 <= n <= len(wildcards):
                raise TransformError(f"{dest!r}: no wildcard {n} in the source {source!r}")
            else:
                self._parts.append(wildcards[n - 1])

    def apply(self, subject: bytes) -> bytes:
        tokens = subject.split(b".")
        out = [tokens[p] if isinstance(p, int) else p for p in self._parts]
        if self._rest >= 0:
            out.extend(tokens[self._rest:])
        return b".".join(out)


def _wildcard_number(tok: bytes) -> int | None:
    if tok.startswith(b"$") and tok[1:].isdigit():
        return int(tok[1:])
    m = _FUNCTION.match(tok)
    return int(m.group(1)) if m else None


def prefixed(prefix: bytes) -> Transform:
    """The transform of a stream import with a `prefix`: the subject under the prefix."""
    return Transform(b">", prefix.rstrip(b".") + b".>")
