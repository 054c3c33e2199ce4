"""The nats-server configuration format, read as its conf/lex.go and conf/parse.go read it.

`key: value`, `key = value` or `key value`; maps `{ }` (also `key { }`), arrays `[ ]`; items
separated by newlines, commas or semicolons; `#` and `//` comments; double-quoted strings
(with escapes), single-quoted ones (raw) and unquoted ones (up to a blank, `,`, `;`, `}`, `]`
or `#`); integers with the reference's size suffixes (`1k` = 1000, `1kb`/`1ki`/`1kib` = 1024,
up to `e`), floats, booleans (true/false, yes/no, on/off); block strings `( ... )`;
`include FILE` (relative to the including file); `$name` variables, looked up in the maps
being read, innermost first, then in the environment.

Every map is a `Section` that remembers where each of its keys was written, so that a
consumer can report "FILE:LINE:COL: unknown field "x"" as the reference does. Errors are
`ConfigError` (a ValueError) and name the file, line and column.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_SIZES = {"": 1}
for _i, _letter in enumerate("kmgtpe", start=1):
    _SIZES[_letter] = 1000 ** _i
    for _suffix in ("b", "i", "ib"):
        _SIZES[_letter + _suffix] = 1024 ** _i
_INTEGER = re.compile(r"^(-?\d+)([a-zA-Z]*)$")
_FLOAT = re.compile(r"^-?(\d+\.\d*|\.\d+)([eE][-+]?\d+)?$")
_VARIABLE = re.compile(r"[A-Za-z0-9_]+")
_BARE_END = " \t\r\n,;}]#"
_KEY_END = " \t\r\n:={}[],;#"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\", "/": "/", "b": "\b",
            "f": "\f"}
MAX_INCLUDE_DEPTH = 10


class ConfigError(ValueError):
    """A configuration file that cannot be read or used; the message says where."""


class Section(dict[str, Any]):
    """A map of the file, remembering where each key was written and which keys served as
    variables (the reference does not count those as unknown fields)."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file
        self.positions: dict[str, tuple[int, int]] = {}
        self.variables: set[str] = set()

    def where(self, key: str) -> str:
        """"FILE:LINE:COL" of `key`, numbered as the reference numbers them."""
        line, col = self.positions.get(key, (0, 0))
        return f"{self.file}:{line}:{col}"

    def get_ci(self, name: str) -> tuple[str, Any] | None:
        """(key as written, value) for `name` in any case; the last one written wins."""
        found = None
        for key, value in self.items():
            if key.lower() == name.lower():
                found = (key, value)
        return found


def load(path: str | Path) -> Section:
    """Read a configuration file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"error opening config file: {exc.strerror}: {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return _Reader(text, str(path), [], 0).document()


def parse(text: str, filename: str = "<string>") -> Section:
    """Read configuration text (includes are relative to the current directory)."""
    return _Reader(text, filename, [], 0).document()


def parse_size(value: Any) -> int:
    """Bytes from an integer or a size string as the file format reads it ("1MB", "64k")."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        got = _integer(value.strip())
        if got is not None:
            return got
    raise ValueError(f"expected a size, got {value!r}")


# Go's units, and days ("d"), which the streaming server's limits have always taken here.
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from a Go duration string ("1h30m", "500ms", "2m") or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a duration, got {value!r}")
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {value!r}")
    return sign * total


def _integer(word: str) -> int | None:
    m = _INTEGER.match(word)
    if m is None:
        return None
    mult = _SIZES.get(m.group(2).lower())
    return None if mult is None else int(m.group(1)) * mult


def _scalar(word: str) -> Any:
    low = word.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    number = _integer(word)
    if number is not None:
        return number
    if _FLOAT.match(word):
        return float(word)
    return word


class _Reader:
    """One file being read; `scopes` are the maps of the including files (for variables)."""

    def __init__(self, text: str, file: str, scopes: list[Section], depth: int) -> None:
        self.text = text
        self.file = file
        self.pos = 0
        self.scopes = scopes
        self.depth = depth

    # -- positions and errors ------------------------------------------------------------
    def line_col(self, pos: int) -> tuple[int, int]:
        """As the reference counts: the column from the line's start on the first line, and
        from the newline before it on the others (so 0 there, 1 here, for a line's start)."""
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - max(self.text.rfind("\n", 0, pos), 0)

    def error(self, message: str, pos: int | None = None) -> ConfigError:
        line, col = self.line_col(self.pos if pos is None else pos)
        return ConfigError(f"{self.file}:{line}:{col}: {message}")

    # -- characters ----------------------------------------------------------------------
    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_blanks(self, newlines: bool = True, separators: bool = True) -> None:
        """Skip blanks and comments (and newlines and , ; when asked)."""
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r" or (newlines and c == "\n") or (separators and c in ",;"):
                self.pos += 1
            elif c == "#" or text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            else:
                return

    # -- structure -----------------------------------------------------------------------
    def document(self) -> Section:
        self.skip_blanks()
        if self.peek() == "{":  # a file may be one map in braces, as JSON is
            self.pos += 1
            return self.map("}")
        return self.map(None)

    def map(self, end: str | None, into: Section | None = None) -> Section:
        section = into if into is not None else Section(self.file)
        self.scopes.append(section)
        try:
            while True:
                self.skip_blanks()
                c = self.peek()
                if not c:
                    if end is not None:
                        raise self.error("unexpected end of file processing map (missing '}')")
                    return section
                if c == end:
                    self.pos += 1
                    return section
                self.item(section)
        finally:
            self.scopes.pop()

    def item(self, section: Section) -> None:
        start = self.pos
        key = self.key()
        if key == "include" and self.text[start] not in "\"'":
            self.include(section)
            return
        self.skip_blanks(newlines=False, separators=False)
        if self.peek() in (":", "="):
            self.pos += 1
            self.skip_blanks(newlines=False, separators=False)
        if not self.peek() or self.peek() in "\n,;}":
            raise self.error(f'key "{key}" has no value')
        value = self.value()
        section[key] = value
        section.positions[key] = self.line_col(start)

    def key(self) -> str:
        c = self.peek()
        if c in ('"', "'"):
            return self.string()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _KEY_END:
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected a key, found {c!r}")
        return self.text[start : self.pos]

    def value(self) -> Any:
        c = self.peek()
        if c == "{":
            self.pos += 1
            return self.map("}")
        if c == "[":
            self.pos += 1
            return self.array()
        if c in ('"', "'"):
            return self.string()
        if c == "(" and self.text[self.pos + 1 : self.pos + 2] in ("\n", "\r"):
            return self.block()
        if c == "$":
            return self.variable()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _BARE_END:
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected a value, found {c!r}")
        return _scalar(self.text[start : self.pos])

    def array(self) -> list[Any]:
        items: list[Any] = []
        while True:
            self.skip_blanks()
            c = self.peek()
            if not c:
                raise self.error("unexpected end of file processing array (missing ']')")
            if c == "]":
                self.pos += 1
                return items
            items.append(self.value())

    def string(self) -> str:
        quote = self.peek()
        start = self.pos
        self.pos += 1
        text, n = self.text, len(self.text)
        out: list[str] = []
        while self.pos < n:
            c = text[self.pos]
            if c == quote:
                self.pos += 1
                return "".join(out)
            if c == "\n":
                break
            if c == "\\" and quote == '"':
                esc = text[self.pos + 1 : self.pos + 2]
                if esc == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[self.pos + 2:self.pos + 6]):
                    out.append(chr(int(text[self.pos + 2 : self.pos + 6], 16)))
                    self.pos += 6
                    continue
                if esc not in _ESCAPES:
                    raise self.error(f"invalid escape character {esc!r}", self.pos)
                out.append(_ESCAPES[esc])
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1
        raise self.error("unterminated quoted string", start)

    def block(self) -> str:
        """( on its own, lines, then ) alone on a line: the lines between, as written."""
        start = self.pos
        end = re.compile(r"\n[ \t]*\)").search(self.text, self.pos)
        if end is None:
            raise self.error("unterminated block string", start)
        body = self.text[self.text.index("\n", self.pos) + 1 : end.start() + 1]
        self.pos = end.end()
        return body

    def variable(self) -> Any:
        start = self.pos
        m = _VARIABLE.match(self.text, self.pos + 1)
        if m is None:
            raise self.error("expected a variable name after '$'")
        self.pos = m.end()
        name = m.group(0)
        line, _ = self.line_col(start)
        for scope in reversed(self.scopes):
            if name in scope:
                scope.variables.add(name)
                return scope[name]
        if name in os.environ:
            return _scalar(os.environ[name])
        raise self.error(f"variable reference for '{name}' on line {line} can not be found",
                         start)

    def include(self, section: Section) -> None:
        self.skip_blanks(newlines=False, separators=False)
        start = self.pos
        name = self.string() if self.peek() in ("\"", "'") else str(self.value())
        if self.depth >= MAX_INCLUDE_DEPTH:
            raise self.error(f"too many nested includes at '{name}'", start)
        base = Path(self.file).parent if self.file != "<string>" else Path.cwd()
        path = base / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise self.error(f"error parsing include file '{name}', {reason}", start) from None
        reader = _Reader(text, str(path), self.scopes, self.depth + 1)
        reader.skip_blanks()
        reader.map(None, into=section)
