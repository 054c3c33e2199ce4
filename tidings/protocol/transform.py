"""Subject transforms: a source pattern's wildcards carried into a destination subject, as
nats-server maps an import's subjects, a stream's subjects and the `mappings` of a
configuration file or an account JWT (its server/subject_transform.go).

The destination names the source's `*` wildcards by position, `$1` or `{{wildcard(1)}}`; a
bare `*` in the destination takes the source's `*` in order (the older form of imports'
`to`, which tidings keeps); a final `>` takes what the source's `>` matched. A destination
token may also be one of the reference's functions of a source wildcard's token:
`{{partition(n,1,2...)}}` (FNV-1a 32 of the named tokens, concatenated, modulo n; with no
token named, of the whole subject), `{{splitfromleft(1,p)}}`, `{{splitfromright(1,p)}}`,
`{{slicefromleft(1,n)}}`, `{{slicefromright(1,n)}}`, `{{split(1,delimiter)}}`,
`{{left(1,n)}}`, `{{right(1,n)}}`, and `{{random(n)}}`. Function names are matched as the
reference matches them (the first letter and each word's first letter in either case,
blanks around), and their arguments parsed as it parses them: a malformed destination is a
TransformError with the reference's words (`validate_mapping` also checks the destination
as a whole, as the reference checks a mapping's).

A source without wildcards takes only `partition` (which then hashes the whole subject) and
`random`. A literal destination replaces the subject outright.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

_BLANK = r"[\t\n\f\r ]"  # Go's \s
_COMMA = re.compile(rf",{_BLANK}*")
_INT = re.compile(r"[+-]?[0-9]+")
_INT32 = 1 << 31
_INT64 = 1 << 63


def _function(name: str) -> re.Pattern[str]:
    """The reference's pattern of one function: `{{ name(args) }}`, anywhere in a token."""
    letters = "".join(f"[{c.lower()}{c.upper()}]" if c.isupper() or i == 0 else c
                      for i, c in enumerate(name))
    return re.compile(rf"{{{{{_BLANK}*{letters}{_BLANK}*\((.*)\){_BLANK}*}}}}")


WILDCARD, PARTITION, SPLIT_FROM_LEFT, SPLIT_FROM_RIGHT = "wildcard", "partition", "sfl", "sfr"
SLICE_FROM_LEFT, SLICE_FROM_RIGHT, SPLIT, LEFT, RIGHT, RANDOM = "slfl", "slfr", "split", \
    "left", "right", "random"
# In the order the reference tries them.
_FUNCTIONS: list[tuple[str, re.Pattern[str]]] = [
    (WILDCARD, _function("Wildcard")), (PARTITION, _function("Partition")),
    (SPLIT_FROM_LEFT, _function("SplitFromLeft")), (SPLIT_FROM_RIGHT, _function("SplitFromRight")),
    (SLICE_FROM_LEFT, _function("SliceFromLeft")), (SLICE_FROM_RIGHT, _function("SliceFromRight")),
    (RIGHT, _function("Right")), (LEFT, _function("Left")), (SPLIT, _function("Split")),
    (RANDOM, _function("Random")),
]
# The functions of a source wildcard's token and a number.
_INDEX_AND_INT = (SPLIT_FROM_LEFT, SPLIT_FROM_RIGHT, SLICE_FROM_LEFT, SLICE_FROM_RIGHT, RIGHT,
                  LEFT)

INVALID = "invalid mapping destination"
INVALID_TRANSFORM = f"{INVALID}: invalid transform"
OUT_OF_RANGE = f"{INVALID}: wildcard index out of range"
NOT_ENOUGH_ARGS = f"{INVALID}: not enough arguments passed to the function"
TOO_MANY_ARGS = f"{INVALID}: too many arguments passed to the function"
INVALID_ARG = f"{INVALID}: function argument is invalid or in the wrong format"
UNKNOWN_FUNCTION = f"{INVALID}: unknown function"
BAD_SUBJECT = "invalid subject"


class TransformError(ValueError):
    """A destination that does not fit its source (the reference's words)."""


def _in(error: str, token: str) -> TransformError:
    return TransformError(f"{error} in {token}" if token else error)


# -- parsing a destination token -----------------------------------------------------------
def _atoi(text: str, bits: int = 64) -> int | None:
    """Go's strconv.Atoi (bits 64) or ParseInt(text, 10, 32): None when it fails."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    bound = _INT64 if bits == 64 else _INT32
    return value if -bound <= value < bound else None


def _int32(value: int) -> int:
    """Go's int32(value): wrapped into 32 bits."""
    return (value + _INT32) % (1 << 32) - _INT32


class Placeholder:
    """What a destination token asks for: a function `kind` (None: a literal token), the
    source wildcards it names (1-based), a number and a string argument."""

    __slots__ = ("kind", "indexes", "number", "text")

    def __init__(self, kind: str, indexes: tuple[int, ...] = (), number: int = -1,
                 text: str = "") -> None:
        self.kind, self.indexes, self.number, self.text = kind, indexes, number, text


def placeholder(token: str) -> Placeholder | None:
    """The function a destination token names (None for a literal token), as the
    reference's indexPlaceHolders reads it; TransformError for a malformed one."""
    if len(token) <= 1:
        return None
    if token[0] == "$":
        n = _atoi(token[1:])
        return None if n is None else Placeholder(WILDCARD, (n,))
    if not (len(token) > 4 and token.startswith("{{") and token.endswith("}}")):
        return None
    for kind, pattern in _FUNCTIONS:
        m = pattern.search(token)
        if m is not None:
            return _arguments(kind, _COMMA.split(m.group(1)), token)
    raise _in(UNKNOWN_FUNCTION, token)


def _arguments(kind: str, args: list[str], token: str) -> Placeholder:
    if kind == WILDCARD:
        if args == [""]:
            raise _in(NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise _in(TOO_MANY_ARGS, token)
        return Placeholder(WILDCARD, (_number(args[0], token),))
    if kind == PARTITION:
        n = _atoi(args[0].strip(" "))
        if n is None or n >= _INT32:
            raise _in(INVALID_ARG, token)
        indexes = tuple(_number(a, token) for a in args[1:])
        return Placeholder(PARTITION, indexes, _int32(n))
    if kind == RANDOM:
        if len(args) != 1:
            raise _in(NOT_ENOUGH_ARGS, token)
        n = _atoi(args[0].strip(" "))
        if n is None or n >= _INT32:
            raise _in(INVALID_ARG, token)
        return Placeholder(RANDOM, (), _int32(n))
    if len(args) < 2:
        raise _in(NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise _in(TOO_MANY_ARGS, token)
    index = _number(args[0], token)
    if kind == SPLIT:
        if " " in args[1] or "." in args[1]:
            raise _in(INVALID_ARG, token)
        return Placeholder(SPLIT, (index,), -1, args[1])
    number = _atoi(args[1].strip(" "), 32)
    if number is None:
        raise _in(INVALID_ARG, token)
    return Placeholder(kind, (index,), number)


def _number(text: str, token: str) -> int:
    n = _atoi(text.strip(" "))
    if n is None:
        raise _in(INVALID_ARG, token)
    return n


# -- the functions, applied ----------------------------------------------------------------
Part = Callable[[list[bytes]], bytes]


def fnv1a32(data: bytes) -> int:
    """The 32-bit FNV-1a hash (Go's hash/fnv New32a)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _partition(n: int, positions: tuple[int, ...]) -> Part:
    buckets = n & 0xFFFFFFFF  # Go's uint32(n)

    def part(tokens: list[bytes]) -> bytes:
        if not buckets:
            return b"0"
        key = b"".join([tokens[p] for p in positions]) if positions else b".".join(tokens)
        return b"%d" % (fnv1a32(key) % buckets)

    return part


def _random(n: int) -> Part:
    ceiling = abs(n)  # Go's % keeps the (non-negative) dividend's sign

    def part(tokens: list[bytes]) -> bytes:
        return b"%d" % (random.getrandbits(31) % ceiling) if ceiling else b"0"

    return part


def _split_at(token: bytes, at: int) -> bytes:
    return token[:at] + b"." + token[at:]


def _slice_from_left(token: bytes, size: int) -> bytes:
    return b".".join(token[i:i + size] for i in range(0, len(token), size))


def _slice_from_right(token: bytes, size: int) -> bytes:
    first = len(token) % size
    pieces = [token[:first]] if first else []
    pieces += [token[i:i + size] for i in range(first, len(token), size)]
    return b".".join(pieces)


def _split(token: bytes, delimiter: bytes) -> bytes:
    """The reference's split: the token's pieces between delimiters as tokens, the empty
    ones left out; a "." before a piece that follows an empty one, except the first (so
    "--b" gives ".b", as the reference's does)."""
    if delimiter:
        pieces = token.split(delimiter)
    else:  # Go splits at every UTF-8 sequence (an invalid byte on its own)
        text = token.decode("utf-8", "surrogateescape")
        pieces = [c.encode("utf-8", "surrogateescape") for c in text]
    out: list[bytes] = []
    last = len(pieces) - 1
    for j, piece in enumerate(pieces):
        if piece:
            out.append(piece)
        if j < last and pieces[j + 1] and (j or piece):
            out.append(b".")
    return b"".join(out)


def _of_token(kind: str, position: int, number: int, text: str) -> Part:
    """A function of one source token (all but partition and random)."""
    if kind == SPLIT:
        delimiter = text.encode("utf-8", "surrogateescape")
        return lambda tokens: _split(tokens[position], delimiter)

    def part(tokens: list[bytes]) -> bytes:
        token = tokens[position]
        if not 0 < number < len(token):
            return token  # too short to split or slice: as it is
        if kind == SPLIT_FROM_LEFT:
            return _split_at(token, number)
        if kind == SPLIT_FROM_RIGHT:
            return _split_at(token, len(token) - number)
        if kind == SLICE_FROM_LEFT:
            return _slice_from_left(token, number)
        if kind == SLICE_FROM_RIGHT:
            return _slice_from_right(token, number)
        if kind == LEFT:
            return token[:number]
        return token[len(token) - number:]

    return part


# -- the transform -------------------------------------------------------------------------
class Transform:
    """`apply(subject)`: `subject` (which matches `source`) as the destination says."""

    __slots__ = ("source", "dest", "_parts", "_rest", "_fixed")

    def __init__(self, source: bytes, dest: bytes) -> None:
        self.source, self.dest = source, dest
        src = source.split(b".")
        stars = [i for i, tok in enumerate(src) if tok == b"*"]
        wildcards = bool(stars) or src[-1] == b">"
        following = iter(stars)  # where each bare `*` of the destination takes its token
        # Each destination token: a literal (bytes), the index of a source token to take, or
        # a function of the source's tokens.
        self._parts: list[bytes | int | Part] = []
        self._rest = -1  # the source token `>` stands at, when the destination ends with it
        for tok in dest.split(b"."):
            if tok == b">":
                if src[-1] != b">":
                    raise TransformError(BAD_SUBJECT)
                self._rest = len(src) - 1
            elif tok == b"*":
                pos = next(following, None)
                if pos is None:
                    raise TransformError(BAD_SUBJECT)
                self._parts.append(pos)
            else:
                self._parts.append(_part(tok, stars, wildcards))
        # A destination of literal tokens only is the same subject every time.
        self._fixed = dest if all(type(p) is bytes for p in self._parts) and self._rest < 0 \
            else None

    def apply(self, subject: bytes) -> bytes:
        if self._fixed is not None:
            return self._fixed
        return self.apply_tokens(subject.split(b"."))

    def apply_tokens(self, tokens: list[bytes]) -> bytes:
        """apply() of a subject already split into its tokens."""
        if self._fixed is not None:
            return self._fixed
        out = [p if type(p) is bytes else tokens[p] if type(p) is int else p(tokens)
               for p in self._parts]
        if self._rest >= 0:
            out.extend(tokens[self._rest:])
        return b".".join(out)


def _part(tok: bytes, stars: list[int], wildcards: bool) -> bytes | int | Part:
    """One destination token of a transform whose source has `*` at `stars` (and a `>`,
    if `wildcards` and no stars)."""
    token = tok.decode("utf-8", "surrogateescape")
    found = placeholder(token)
    if found is None:
        return tok
    kind = found.kind
    if not wildcards:
        if kind == PARTITION:
            return _partition(found.number, ())
        if kind == RANDOM:
            return _random(found.number)
        raise _in(OUT_OF_RANGE, token)
    for index in found.indexes:
        if index > len(stars):
            raise TransformError(f"{OUT_OF_RANGE} in {token}: [{index}]")
    # The reference maps a wildcard number below 1 to the subject's first token.
    positions = tuple(stars[i - 1] if i >= 1 else 0 for i in found.indexes)
    if kind == WILDCARD:
        return positions[0]
    if kind == PARTITION:
        return _partition(found.number, positions)
    if kind == RANDOM:
        return _random(found.number)
    return _of_token(kind, positions[0], found.number, found.text)


def validate_mapping(source: str, dest: str) -> Transform:
    """The transform of a mapping from `source` (a valid subject) to `dest`, checked as the
    reference checks a subject mapping's destination (ValidateMapping, then
    NewSubjectTransform); TransformError with its words if it is not one."""
    after_fwc = False
    for token in dest.split("."):
        if not token or after_fwc:
            raise _in(INVALID_TRANSFORM, token)
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(p.search(token) for _, p in _FUNCTIONS):
                raise _in(UNKNOWN_FUNCTION, token)
            continue
        if token == ">":
            after_fwc = True
        elif any(c in token for c in "\t\n\f\r "):
            raise TransformError(INVALID_TRANSFORM)
    dtokens, stokens = dest.split("."), source.split(".")
    if "*" in dtokens or (stokens[-1] == ">") != (dtokens[-1] == ">"):
        raise TransformError(BAD_SUBJECT)
    return Transform(source.encode(), dest.encode())


def tokenized(subject: str) -> str:
    """`*` tokens as `$1`, `$2`, ... (the reference's transformTokenize)."""
    out, n = [], 0
    for token in subject.split("."):
        if token == "*":
            n += 1
            token = f"${n}"
        out.append(token)
    return ".".join(out)


def prefixed(prefix: bytes) -> Transform:
    """The transform of a stream import with a `prefix`: the subject under the prefix."""
    return Transform(b">", prefix.rstrip(b".") + b".>")
