"""JSON read as the reference's Go decoder (encoding/json) reads it into its structs, in its words.

The reference decodes requests into typed structs: a string where a number belongs, a number
too large for its field, an unknown enum value or (strictly) an unknown field is refused, and
tidings says what Go says. `decode` walks a parsed body against a schema of Go field types
(the structs themselves live beside their users: jetstream/schemas.py, sysaccount.py), returns
it with field names as the schema spells them (Go matches them without regard to case) and raises
GoJsonError with the words of the first fault in the document; `syntax_error` gives Go's
words for a body that is no JSON at all.

Numbers are judged by their literal (`1e3` is no integer to Go): parse the body with `loads`,
which keeps each non-integer's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

INT64 = (-(1 << 63), (1 << 63) - 1)


class GoJsonError(ValueError):
    """Go's words for a body its decoder refuses."""


class Literal(float):
    """A JSON number that is not an integer literal, with its text (Go quotes it)."""

    text: str

    def __new__(cls, text: str) -> Literal:
        value = super().__new__(cls, text)
        value.text = text
        return value


def loads(payload: bytes | str) -> Any:
    """json.loads, non-integer numbers kept with their text."""
    return json.loads(payload, parse_float=Literal)


# -- the types ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Int:
    name: str  # Go's: int64, int, int32, uint64, time.Duration
    low: int = INT64[0]
    high: int = INT64[1]


@dataclass(frozen=True)
class Scalar:
    name: str  # string or bool
    kind: type


@dataclass(frozen=True)
class Enum:
    """A type with its own UnmarshalJSON: the JSON text (null too) among `choices`, or
    `error` with the text (`{}`) refused."""

    choices: tuple[str, ...]
    error: str = 'can not unmarshal {quoted}'


@dataclass(frozen=True)
class Compression:
    """StoreCompression: a Go string first, then one of its names."""


@dataclass(frozen=True)
class Time:
    """*time.Time: an RFC 3339 string."""


@dataclass(frozen=True)
class List:
    item: Any


@dataclass(frozen=True)
class Map:
    value: Any


@dataclass(frozen=True)
class Struct:
    name: str  # Go's, as an error names it (server.StreamSource)
    fields: dict[str, Any] = field(default_factory=dict)


STRING = Scalar("string", str)
BOOL = Scalar("bool", bool)
INT = Int("int")
I64 = Int("int64")
I32 = Int("int32", -(1 << 31), (1 << 31) - 1)
U64 = Int("uint64", 0, (1 << 64) - 1)
DURATION = Int("time.Duration")
TIME = Time()
STRINGS = List(STRING)
METADATA = Map(STRING)


# -- the decoder ----------------------------------------------------------------------------------

def decode(body: Any, schema: Struct, strict: bool = True) -> Any:
    """`body` as `schema` takes it (field names as the schema spells them); GoJsonError
    with the words of the first fault. A body that is no object is refused as Go refuses
    it for the whole struct. Not `strict` (the reference's `jetstream { strict: false }`),
    unknown fields are left out instead of refused."""
    if not isinstance(body, dict):
        raise GoJsonError(f"json: cannot unmarshal {json_kind(body)} into Go value of type "
                          f"{schema.name}")
    return _value(body, schema, schema.name.rsplit(".", 1)[-1], strict)


def _value(value: Any, kind: Any, path: str, strict: bool) -> Any:
    if isinstance(kind, Enum):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":")) \
            if not isinstance(value, Literal) else value.text
        if text not in kind.choices:
            raise GoJsonError(kind.error.format(text=text, quoted=go_quote(text)))
        return value
    if value is None and not isinstance(kind, Compression):  # null leaves a Go value as it was
        return None
    if isinstance(kind, Int):
        if isinstance(value, int) and not isinstance(value, bool):
            if kind.low <= value <= kind.high:
                return value
            raise _mismatch(f"number {value}", kind.name, path)
        if isinstance(value, Literal):
            raise _mismatch(f"number {value.text}", kind.name, path)
        raise _mismatch(json_kind(value), kind.name, path)
    if isinstance(kind, Scalar):
        if isinstance(value, kind.kind) and (kind.kind is not int or not isinstance(value, bool)):
            return value
        raise _mismatch(json_kind(value), kind.name, path)
    if isinstance(kind, Compression):
        if value is None:
            raise GoJsonError("unknown compression algorithm")
        if not isinstance(value, str):
            raise GoJsonError(f"json: cannot unmarshal {json_kind(value)} into Go value of type "
                              "string")
        if value not in ("s2", "none"):
            raise GoJsonError("unknown compression algorithm")
        return value
    if isinstance(kind, Time):
        if not isinstance(value, str):
            raise _mismatch(json_kind(value), "time.Time", path)
        check_rfc3339(value)
        return value
    if isinstance(kind, List):
        if not isinstance(value, list):
            raise _mismatch(json_kind(value), _go_name(kind), path)
        return [_element(item, kind.item, f"{path}.{i}", strict)
                for i, item in enumerate(value)]
    if isinstance(kind, Map):
        if not isinstance(value, dict):
            raise _mismatch(json_kind(value), _go_name(kind), path)
        return {key: _element(item, kind.value, f"{path}.{key}", strict)
                for key, item in value.items()}
    if isinstance(kind, Struct):
        if not isinstance(value, dict):
            raise _mismatch(json_kind(value), kind.name, path)
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _field(kind, key)
            if name:  # (Go's errors name the field as the body spells it)
                out[name] = _value(item, kind.fields[name], f"{path}.{key}", strict)
            elif strict:
                raise GoJsonError(f'json: unknown field "{key}"')
        return out
    raise TypeError(f"no such schema type: {kind!r}")


def _element(value: Any, kind: Any, path: str, strict: bool) -> Any:
    """An item of a list or a map's value: a null in one is the item type's zero value
    (a list of strings gets "", of numbers 0; a pointer stays None)."""
    if value is None and isinstance(kind, Int | Scalar):
        return kind.kind() if isinstance(kind, Scalar) else 0
    return _value(value, kind, path, strict)


def _field(struct: Struct, key: str) -> str:
    """The field `key` names: exactly, else without regard to case as Go matches (its
    bytes.EqualFold); "" for none."""
    if key in struct.fields:
        return key
    folded = _fold(key)
    return next((name for name in struct.fields if _fold(name) == folded), "")


def _fold(name: str) -> str:
    """`name` folded letter by letter as Go folds it (unicode.SimpleFold: the long s is an
    s, the Kelvin sign a k; the sharp s stays one letter, not "ss")."""
    return "".join(f if len(f := c.casefold()) == 1 else c for c in name)


def _mismatch(what: str, type_name: str, path: str) -> GoJsonError:
    # Go names a struct's field "Go struct field S.f"; an item of a list it names bare.
    last = path.rsplit(".", 1)[-1]
    where = path if last.isdigit() else f"Go struct field {path}"
    return GoJsonError(f"json: cannot unmarshal {what} into {where} of type {type_name}")


def _go_name(kind: Any) -> str:
    if isinstance(kind, List):
        item = kind.item
        inner = item.name if isinstance(item, Int | Scalar) else _go_name(item)
        return f"[]{'*' if isinstance(item, Struct) else ''}{inner}"
    if isinstance(kind, Map):
        return f"map[string]{kind.value.name}"
    return str(getattr(kind, "name", kind))


def json_kind(value: Any) -> str:
    """What Go's errors call a JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def go_quote(text: str) -> str:
    """Go's %q of a string: double-quoted, with `"` and `\\` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- RFC 3339, as Go's time.Parse reports what it cannot read -------------------------------------

RFC3339 = "2006-01-02T15:04:05Z07:00"
_LAYOUT = (("2006", r"\d{4}"), ("-", "-"), ("01", r"\d{2}"), ("-", "-"), ("02", r"\d{2}"),
           ("T", "T"), ("15", r"\d{2}"), (":", ":"), ("04", r"\d{2}"), (":", ":"),
           ("05", r"\d{2}(\.\d+)?"), ("Z07:00", r"Z|[+-]\d{2}:\d{2}"))
_RANGES = ((2, 1, 12, "month"), (4, 1, 31, "day"), (6, 0, 23, "hour"), (8, 0, 59, "minute"),
           (10, 0, 59, "second"))


def check_rfc3339(text: str) -> None:
    """GoJsonError with time.Parse's words unless `text` is an RFC 3339 time."""
    rest, parts = text, []
    for element, pattern in _LAYOUT:
        found = re.match(pattern, rest)
        if found is None:
            raise GoJsonError(f'parsing time {go_quote(text)} as "{RFC3339}": cannot parse '
                              f'{go_quote(rest)} as "{element}"')
        parts.append(found.group(0))
        rest = rest[found.end():]
    if rest:
        raise GoJsonError(f"parsing time {go_quote(text)}: extra text: {go_quote(rest)}")
    for index, low, high, what in _RANGES:
        if not low <= int(float(parts[index])) <= high:
            raise GoJsonError(f"parsing time {go_quote(text)}: {what} out of range")




# -- syntax errors --------------------------------------------------------------------------------

def _go_char(c: str) -> str:
    if c == "'":
        return "'\\''"
    if c == '"':
        return "'\"'"
    return "'" + json.dumps(c)[1:-1] + "'"


def syntax_error(text: str, exc: json.JSONDecodeError) -> str:
    """Go's encoding/json error for the same syntax error."""
    pos = exc.pos
    rest = text[pos:].lstrip(" \t\r\n") if exc.msg.startswith("Expecting") else text[pos:]
    if not rest or exc.msg.startswith("Unterminated"):
        return "unexpected end of JSON input"
    literal = _literal_fault(rest) if exc.msg == "Expecting value" else None
    if literal is not None:
        return literal[1]
    char = _go_char(text[pos] if not exc.msg.startswith("Expecting") else rest[0])
    if exc.msg.startswith("Expecting property name"):
        where = "looking for beginning of object key string"
    elif exc.msg == "Expecting ':' delimiter":
        where = "after object key"
    elif exc.msg == "Expecting ',' delimiter":
        where = ("after array element" if _innermost(text, pos) == "["
                 else "after object key:value pair")
    elif exc.msg == "Extra data":
        where = "after top-level value"
    elif exc.msg.startswith("Invalid control character"):
        where = "in string literal"
    else:
        where = "looking for beginning of value"
    return f"invalid character {char} {where}"


_LITERALS = {"n": "null", "t": "true", "f": "false"}


def _literal_fault(rest: str) -> tuple[int, str] | None:
    """Where and how a value that starts as a literal (null, true, false) goes wrong, as
    Go's scanner says it; None if it does not start as one."""
    word = _LITERALS.get(rest[:1])
    if word is None:
        return None
    for i, (got, want) in enumerate(zip(rest, word, strict=False)):
        if got != want:
            return i, (f"invalid character {_go_char(got)} in literal {word} "
                       f"(expecting {_go_char(want)})")
    return len(rest), "unexpected end of JSON input"


def _innermost(text: str, pos: int) -> str:
    """The innermost bracket open at `pos` ("[" or "{")."""
    stack: list[str] = []
    in_string = escaped = False
    for c in text[:pos]:
        if in_string:
            escaped = not escaped and c == "\\"
            in_string = escaped or c != '"'
        elif c == '"':
            in_string = True
        elif c in "[{":
            stack.append(c)
        elif c in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def loads_stream(payload: bytes) -> Any:
    """A request body as a Go json.Decoder reads it into one struct: one JSON value after
    another, each object's fields over the last ones'. GoJsonError with the Decoder's words
    (`unexpected EOF` for a body cut short; a syntax error with its offset)."""
    text = payload.decode("utf-8", "replace")
    decoder = json.JSONDecoder(parse_float=Literal)
    value: Any = None
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos == end:
            return value
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            words = syntax_error(text, exc)
            if words == "unexpected end of JSON input":
                raise GoJsonError("unexpected EOF") from None
            offset = len(text[:_error_at(text, exc) + 1].encode())
            raise GoJsonError(f"{words} at offset {offset}") from None
        value = {**value, **item} if isinstance(value, dict) and isinstance(item, dict) \
            else item if value is None else value


def _error_at(text: str, exc: json.JSONDecodeError) -> int:
    """Where Go's scanner stops: the offending character (past the blanks Python's
    "Expecting" errors point before)."""
    pos = exc.pos
    if exc.msg.startswith("Expecting"):
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
    literal = _literal_fault(text[pos:]) if exc.msg == "Expecting value" else None
    return pos + literal[0] if literal is not None else pos
