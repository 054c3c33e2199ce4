"""The nats-server configuration format, read as the reference's conf/lex.go and
conf/parse.go read it: what it accepts is accepted, what it refuses is refused, with its words.

A key and its value are separated by `:`, `=` or blanks, and at the top level and in maps
also by newlines (`websocket` newline `{`); after `:` or `=` a top-level value must be on the
same line, a value in a map may be on the next. Items are ended by a newline, `,` or `;`
(a top-level one also by `}`), anything else after a value is refused (`cluster { } routes: []`
on one line). Maps `{ }` and arrays `[ ]` may span lines; an array takes `,` or newlines
between its values and one trailing `,`. `#` and `//` comments run to the line's end.

Values: double-quoted strings (escapes \\t \\n \\r \\" \\\\ \\xHH) and single-quoted ones
(raw), both may span lines; block strings `(` ... a `)` alone at a line's start; numbers with
the reference's size suffixes (`1k` = 1000, `1kb`/`1ki`/`1kib` = 1024, up to `e`), floats,
dates (`2006-01-02T15:04:05Z`), booleans (true/false, yes/no, on/off); anything else up to a
blank, newline, `,`, `;`, `]` or `}` is a string (so `[1]` is refused and `1x` is a string, as
in the reference). `include FILE` (relative to the including file, read on its own) and
`$name` variables, looked up in the maps being read, innermost first, then in the environment
(whose value is read as a value of this format); `$2a$...` is a bcrypt hash, not a variable.

Every map is a `Section` that remembers where each of its keys was written, so that a
consumer can report "FILE:LINE:COL: unknown field "x"" as the reference does. Errors are
`ConfigError` (a ValueError) and name the file, line and column.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from .units import SIZE_SUFFIXES

_QUOTED_STOP = re.compile(r'["\\]')
_NL = "\n\r"
_BLANK = " \t"
_SEPARATORS = "=:"
_STRING_END = "\n\r;,]} \t"  # what ends an unquoted string (and the end of the text)
_NUMBER_END = "\n\r};, \t"  # ... a number (not `]`: `[1]` reads "1]", as the reference)
_SUFFIXES = "kKmMgGtTpPeE"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_ESCAPE_HELP = ("Only the following escape characters are allowed: \\xXX, \\t, \\n, \\r, "
                '\\", \\\\.')
_BOOLEANS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_BCRYPT = "2a$"
MAX_INCLUDE_DEPTH = 10
_INT64 = 1 << 63


class ConfigError(ValueError):
    """A configuration file that cannot be read or used; the message says where."""


class Section(dict[str, Any]):
    """A map of the file, remembering where each key was written and which keys served as
    variables (the reference does not count those as unknown fields)."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file
        self.positions: dict[str, tuple[int, int]] = {}
        self.files: dict[str, str] = {}  # keys an include brought, and their file
        self.variables: set[str] = set()

    def where(self, key: str) -> str:
        """"FILE:LINE:COL" of `key`, numbered as the reference numbers them."""
        line, col = self.positions.get(key, (0, 0))
        return f"{self.files.get(key, self.file)}:{line}:{col}"

    def get_ci(self, name: str) -> tuple[str, Any] | None:
        """(key as written, value) for `name` in any case; the last one written wins."""
        found = None
        for key, value in self.items():
            if key.lower() == name.lower():
                found = (key, value)
        return found

    def take(self, other: Section) -> None:
        """The keys of an included file, with where they were written."""
        for key, value in other.items():
            self[key] = value
            self.positions[key] = other.positions.get(key, (0, 0))
            self.files[key] = other.files.get(key, other.file)


class Array(list[Any]):
    """An array of the file, remembering where each value was written, as the reference
    places them: a scalar at its first character (inside its quotes), a map or an array
    just past its closing `}` or `]`."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file
        self.positions: list[tuple[int, int]] = []

    def where(self, index: int) -> str:
        """"FILE:LINE:COL" of the value at `index`."""
        line, col = self.positions[index] if index < len(self.positions) else (0, 0)
        return f"{self.file}:{line}:{col}"


def load(path: str | Path) -> Section:
    """Read a configuration file."""
    return _load(Path(path), 0)


def parse(text: str, filename: str = "<string>") -> Section:
    """Read configuration text (includes are relative to the current directory)."""
    return _Reader(text, filename, 0, set()).document()


def _load(path: Path, depth: int) -> Section:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"error opening config file: {exc.strerror}: {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return _Reader(text, str(path), depth, set()).document()


def _space(c: str) -> bool:
    """Go's unicode.IsSpace (Python's isspace also takes the separators \\x1c-\\x1f)."""
    return c.isspace() and c not in "\x1c\x1d\x1e\x1f"


def _digit(c: str) -> bool:
    return c.isdecimal()


def _shown(c: str) -> str:
    """A character in an error, as the reference shows it."""
    if not c:
        return "EOF"
    return "'\\n'" if c == "\n" else f"'{c}'"


class _Reader:
    """One text being read: the top level, maps, arrays, values (each reader of a value
    leaves `pos` just after it); `scopes` are the maps open around the value being read."""

    def __init__(self, text: str, file: str, depth: int, env_seen: set[str]) -> None:
        self.text = text
        self.file = file
        self.pos = 0
        self.depth = depth
        self.scopes: list[Section] = []
        self.env_seen = env_seen  # environment variables being expanded (to stop cycles)

    # -- positions and errors ------------------------------------------------------------
    def line_col(self, pos: int) -> tuple[int, int]:
        """As the reference counts: the column from the line's start on the first line, and
        from the newline before it on the others (so 0 there, 1 here, for a line's start)."""
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - max(self.text.rfind("\n", 0, pos), 0)

    def error(self, message: str, end: int | None = None) -> ConfigError:
        """`end`: just past the character the error is about (the reference's position)."""
        line, col = self.line_col(min(self.pos + 1, len(self.text)) if end is None else end)
        return ConfigError(f"{self.file}:{line}:{col}: {message}")

    # -- characters ----------------------------------------------------------------------
    def at(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def skip_spaces(self) -> None:
        """Blanks and newlines (any Unicode space, as the reference's)."""
        while self.pos < len(self.text) and _space(self.text[self.pos]):
            self.pos += 1

    def skip_blanks(self) -> None:
        while self.at() in (" ", "\t"):
            self.pos += 1

    def comment(self) -> bool:
        """Skip a `#` or `//` comment up to (not over) the end of its line."""
        if not (self.at() == "#" or self.text.startswith("//", self.pos)):
            return False
        while self.pos < len(self.text) and self.text[self.pos] not in _NL:
            self.pos += 1
        return True

    # -- the top level -------------------------------------------------------------------
    def document(self) -> Section:
        """The top level: items, optionally inside `{ }` (a JSON-like file), up to the end
        of the text."""
        top = Section(self.file)
        self.scopes.append(top)
        braces, closed = 0, False  # `{` open around the top level; just after an inner `}`
        while True:
            if closed:
                closed, braces = self.after_inner_brace(braces)
                continue
            self.skip_spaces()
            c = self.at()
            if not c:
                return top
            if self.comment():
                continue
            if c == "{" or (c == "}" and braces):
                self.pos += 1
                braces += 1 if c == "{" else -1
                closed = c == "}" and braces > 0
            elif c == "/":
                raise self.error("Unexpected EOF.")
            elif not self.top_item(top):
                return top
            elif braces:
                closed, braces = self.block_value_end(braces)
            else:
                self.top_value_end()

    def after_inner_brace(self, braces: int) -> tuple[bool, int]:
        """After an inner `}` of a braced top level: blanks and newlines, then `,`, `;` or a
        comment (items follow), or `}`. (Whether still after an inner `}`, braces open.)"""
        while True:
            c = self.at()
            if self.comment():
                return False, braces
            if c in (",", ";"):
                self.pos += 1
                return False, braces
            if c == "}":
                self.pos += 1
                return braces > 1, braces - 1
            if not (c and (c == "/" or c in _BLANK + _NL)):
                raise self.error("Expected a block-level to end with a '}', but got "
                                 f"{_shown(c)} instead.")
            self.pos += 1

    def top_item(self, top: Section) -> bool:
        """One `key value` (or include) of the top level; False when the text ends after a
        lone `}` (the reference allows a file to end so, as JSON does)."""
        start = self.pos
        if self.pos + 1 == len(self.text) and self.at() in ("'", '"'):
            return False  # a quote that opens nothing ends the text, for the reference
        key, include = self.key(in_map=False)
        if include:
            self.include(top)
            return True
        self.skip_spaces()
        if not self.at():
            if key == "}":
                return False
            raise self.error("config is invalid", len(self.text))
        if self.at() in _SEPARATORS:
            self.pos += 1
        self.store(top, key, start, self.value())
        return True

    def top_value_end(self) -> None:
        """After a top-level value: blanks and a comment, then a newline, `,`, `;`, `}` or
        the end; anything else is refused (`cluster { } routes: []` on one line)."""
        while True:
            c = self.at()
            if self.comment():
                return
            if c in (" ", "\t", "/"):
                self.pos += 1
                continue
            if not c or c in "\n\r,;}":
                self.pos += 1
                return
            raise self.error("Expected a top-level value to end with a new line, comment or "
                             f"EOF, but got {_shown(c)} instead.")

    def block_value_end(self, braces: int) -> tuple[bool, int]:
        """After a value of a braced top level: as top_value_end, and `}` closes a brace.
        (Whether just after an inner `}`, braces still open.)"""
        while True:
            c = self.at()
            if self.comment():
                continue  # then a newline, as after a value
            if c in (" ", "\t", "/"):
                self.pos += 1
                continue
            if c and c in "\n\r,;":
                self.pos += 1
                return False, braces
            if c == "}":
                self.pos += 1
                return braces > 1, braces - 1
            raise self.error("Expected a block-level value to end with a new line, comment or "
                             f"EOF, but got {_shown(c)} instead.")

    # -- keys ----------------------------------------------------------------------------
    def key(self, in_map: bool) -> tuple[str, bool]:
        """(key, whether it is the `include` keyword); `pos` is at its first character."""
        c = self.at()
        if c and c in _SEPARATORS:
            raise self.error(f"Unexpected key separator '{c}'" + ("." if in_map else ""))
        if c in ("'", '"'):
            return self.quoted_key(in_map), False
        start = self.pos
        self.pos += 1  # the first character is the key's, whatever it is
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if _space(c):
                key = self.text[start : self.pos]
                return key, key.lower() == "include"
            if c in _SEPARATORS:
                break
            self.pos += 1
        else:
            if in_map:
                raise self.error("Unexpected EOF processing map key.", len(self.text))
        return self.text[start : self.pos], False

    def quoted_key(self, in_map: bool) -> str:
        quote = self.at()
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            if in_map:
                what = "double quoted map key" if quote == '"' else "quoted map key"
                raise self.error(f"Unexpected EOF processing {what}.", len(self.text))
            raise self.error("Unexpected EOF.", len(self.text))
        key = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return key

    def store(self, section: Section, key: str, start: int, value: Any) -> None:
        if self.text[start] in ("'", '"'):
            start += 1  # the reference places a quoted key at its first character
        section[key] = value
        section.positions[key] = self.line_col(start)
        section.files.pop(key, None)

    # -- values --------------------------------------------------------------------------
    def value(self) -> Any:
        """A value, after blanks (not newlines); at the end of the text, ""."""
        self.skip_blanks()
        c = self.at()
        if c == "[":
            self.pos += 1
            return self.array()
        if c == "{":
            self.pos += 1
            return self.map()
        if c == "'":
            return self.raw_string()
        if c == '"':
            return self.quoted_string()
        if c == "-":
            return self.negative()
        if c == "(":
            return self.block()
        if c and _digit(c):
            return self.number()
        if c == ".":
            raise self.error("Floats must start with a digit")
        if c and c in _NL:
            raise self.error("Expected value but found new line")
        return self.bare(self.pos)

    def map(self) -> Section:
        """A map, after its `{`: keys and values separated by `:`, `=` or blanks and
        newlines, ended by a newline, `,` or `;`; up to its `}`."""
        section = Section(self.file)
        self.scopes.append(section)
        try:
            while True:
                self.skip_spaces()
                c = self.at()
                if c == "}":
                    self.pos += 1
                    return section
                if self.comment():
                    continue
                if not c:
                    raise self.error("Unexpected EOF processing map.", len(self.text))
                if c == "]":
                    raise self.error("Unexpected array end ']' processing map.")
                if c == "/":
                    self.pos += 1  # the reference drops a lone / before a key
                if self.map_item(section):
                    return section
        finally:
            self.scopes.pop()

    def map_item(self, section: Section) -> bool:
        """One item of a map and what ends it; True when that is the map's `}`."""
        start = self.pos
        key, include = self.key(in_map=True)
        if include:
            self.include(section)
            return self.map_value_end()
        self.skip_spaces()
        if self.at() in _SEPARATORS and self.at():
            self.pos += 1
            self.skip_spaces()
        c = self.at()
        if c == ",":
            raise self.error('Unexpected map value terminator ",".')
        if c == "}":
            raise self.error(f'key "{key}" has no value', start)
        self.store(section, key, start, self.value())
        return self.map_value_end()

    def map_value_end(self) -> bool:
        """After a value of a map: blanks and a comment, then a newline, `,` or `;` (True:
        its `}`); anything else is refused (`{ a: 1 b: 2 }`)."""
        return self.value_end("\n\r,;/", "}", 'Expected a map value terminator "," or a map '
                              'terminator "}"')

    def value_end(self, separators: str, closer: str, expected: str) -> bool:
        """After a value of a map or an array: blanks and a comment, then one of
        `separators` (False) or `closer` (True); anything else is refused as `expected`."""
        while True:
            c = self.at()
            if self.comment():
                continue
            if c in (" ", "\t"):
                self.pos += 1
                continue
            if c and c in separators:
                self.pos += 1
                return False
            if c == closer:
                self.pos += 1
                return True
            raise self.error(f"{expected}, but got {_shown(c)} instead.")

    def array(self) -> Array:
        """An array, after its `[`: values separated by `,` or newlines (one trailing `,`
        allowed), up to its `]`."""
        items = Array(self.file)
        while True:
            self.skip_spaces()
            if self.comment():
                continue
            c = self.at()
            if c in (",", "/"):
                raise self.error("Unexpected array value terminator ','.")
            if c == "]":
                self.pos += 1
                return items
            start, first = self.pos, self.at()
            value = self.value()
            if first and first in "{[":
                items.positions.append(self.line_col(self.pos))
            else:
                quoted = bool(first) and first in "'\"$"  # placed inside its quotes
                items.positions.append(self.line_col(start + quoted))
            items.append(value)
            if self.array_value_end():
                return items

    def array_value_end(self) -> bool:
        """After a value of an array; True at its `]`."""
        return self.value_end("\n\r,/", "]", 'Expected an array value terminator "," or an '
                              'array terminator "]"')

    # -- strings -------------------------------------------------------------------------
    def raw_string(self) -> str:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self.error("Unexpected EOF.", len(self.text))
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def quoted_string(self) -> str:
        """A double-quoted string, which may span lines; `\\xHH` may give any byte."""
        self.pos += 1
        out = bytearray()
        while True:
            stop = _QUOTED_STOP.search(self.text, self.pos)
            if stop is None:
                raise self.error("Unexpected EOF.", len(self.text))
            out += self.text[self.pos : stop.start()].encode("utf-8")
            self.pos = stop.end()
            if stop.group() == '"':
                return out.decode("utf-8", errors="replace")
            out += self.escape()

    def escape(self) -> bytes:
        """The character(s) of an escape, after its backslash."""
        c = self.at()
        self.pos += bool(c)
        if c in _ESCAPES:
            return _ESCAPES[c].encode()
        if c != "x":
            raise self.error(f"Invalid escape character {_shown(c)}. {_ESCAPE_HELP}", self.pos)
        digits = ""
        for _ in range(2):
            d = self.at()
            self.pos += bool(d)
            if d and d in _NL:
                raise self.error("Expected two hexadecimal digits after '\\x', but hit end "
                                 "of line", self.pos)
            digits += d
        try:
            if len(digits) == 2:
                return bytes.fromhex(digits)
        except ValueError:
            pass
        raise self.error(f"Expected two hexadecimal digits after '\\x', but got '{digits}'",
                         self.pos)

    def bare(self, start: int) -> Any:
        """An unquoted string from `start` (escapes as in quoted strings): a boolean, a
        `$variable` or a string."""
        out, escaped = bytearray(), False
        while True:
            c = self.at()
            if not c or c in _STRING_END:
                break
            if c == "'":  # ends the string, and is taken with it (the reference's way)
                out += self.text[start : self.pos].encode("utf-8")
                self.pos += 1
                return out.decode("utf-8", errors="replace")
            if c == "\\":
                out += self.text[start : self.pos].encode("utf-8")
                self.pos += 1
                out += self.escape()
                start, escaped = self.pos, True
                continue
            self.pos += 1
        out += self.text[start : self.pos].encode("utf-8")
        word = out.decode("utf-8", errors="replace")
        if escaped:
            return word
        if word.lower() in _BOOLEANS:
            return _BOOLEANS[word.lower()]
        if word.startswith("$"):
            return self.variable(word[1:], self.pos - len(word))
        return word

    def block(self) -> str:
        """`(` to a `)` alone at the start of a line: the text between, as written."""
        start = self.pos + 1
        at = start
        while True:
            end = self.text.find("\n)", at)
            if end < 0:
                raise self.error("Unexpected EOF processing block.", len(self.text))
            after = end + 2
            if after == len(self.text) or self.text[after] == "\n":
                self.pos = after
                return self.text[start : end + 1]
            at = end + 1

    # -- numbers -------------------------------------------------------------------------
    def negative(self) -> Any:
        start = self.pos
        self.pos += 1
        c = self.at()
        if not (c and _digit(c)):
            self.pos += bool(c)
            if c == ".":
                raise self.error("Floats must start with a digit, not '.'.", self.pos)
            raise self.error(f"Expected a digit but got {_shown(c)}.", self.pos)
        self.digits()
        c = self.at()
        if c == ".":
            return self.fraction(start)
        if c and c in _SUFFIXES:
            return self.suffixed(start)
        return self.to_int(start)

    def number(self) -> Any:
        """Digits: an integer (with a size suffix), a float, an IP address (string), a
        date, or a string that starts with digits."""
        start = self.pos
        self.digits()
        c = self.at()
        if c == "-":
            self.pos += 1
            if self.pos - start != 5:
                raise self.error("All ISO8601 dates must be in full Zulu form.", self.pos)
            return self.date(start)
        if c == ".":
            return self.fraction(start)
        if c and c in _SUFFIXES:
            return self.suffixed(start)
        if not c or c in _NUMBER_END:
            return self.to_int(start)
        self.pos += 1  # taken as part of the string, whatever it is (`1]` is "1]")
        return self.bare(start)

    def digits(self) -> None:
        while self.at() and _digit(self.at()):
            self.pos += 1

    def fraction(self, start: int) -> Any:
        """After the digits before a `.`: a float, or an IP address (a string)."""
        self.pos += 1
        c = self.at()
        if not (c and _digit(c)):
            self.pos += bool(c)
            raise self.error(f"Floats must have a digit after the '.', but got {_shown(c)} "
                             "instead.", self.pos)
        self.digits()
        if self.at() == ".":
            while self.at() and (_digit(self.at()) or self.at() in ".:-"):
                self.pos += 1
            return self.text[start : self.pos]
        word = self.text[start : self.pos]
        try:
            return float(word)
        except (ValueError, OverflowError):
            raise self.error(f"expected float, but got '{word}'", self.pos) from None

    def suffixed(self, start: int) -> Any:
        """Digits and a size suffix (k, mb, GiB ...): an integer if the word ends there,
        otherwise (`1k2`, `5e7bcd`) a string, as nats-server 2.15 reads it."""
        self.pos += 1
        while self.at() in ("b", "B", "i", "I") and self.at():
            self.pos += 1
        c = self.at()
        if not c or c in _NUMBER_END:
            return self.to_int(start)
        return self.bare(start)

    def to_int(self, start: int) -> int:
        word = self.text[start : self.pos]
        m = re.match(r"-?\d*", word)
        digits = m.group(0) if m else ""
        suffix = word[len(digits):].lower()
        if not digits.lstrip("-").isascii() or suffix not in SIZE_SUFFIXES:
            raise self.error(f"expected integer, but got '{word}'", self.pos)
        number = int(digits)
        if not -_INT64 <= number < _INT64:
            raise self.error(f"integer '{word}' is out of the range", self.pos)
        return number * SIZE_SUFFIXES[suffix]

    def date(self, start: int) -> dt.datetime:
        """After `YYYY-`: the rest of a Zulu date, `2006-01-02T15:04:05Z`."""
        for want in "00-00T00:00:00Z":
            c = self.at()
            self.pos += bool(c)
            if want == "0" and not (c and _digit(c)):
                raise self.error(f"Expected digit in ISO8601 datetime, but found {_shown(c)} "
                                 "instead.", self.pos)
            if want != "0" and c != want:
                raise self.error(f"Expected '{want}' in ISO8601 datetime, but found "
                                 f"{_shown(c)} instead.", self.pos)
        word = self.text[start : self.pos]
        try:
            return dt.datetime.strptime(word, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        except ValueError:
            raise self.error(f"expected Zulu formatted DateTime, but got '{word}'",
                             self.pos) from None

    # -- variables and includes ----------------------------------------------------------
    def variable(self, name: str, start: int) -> Any:
        if name.startswith(_BCRYPT):
            return "$" + name
        line, _ = self.line_col(start)
        for scope in reversed(self.scopes):
            if name in scope:
                scope.variables.add(name)
                return scope[name]
        if name in self.env_seen:
            raise self.error(f"variable reference for '{name}' on line {line} could not be "
                             f"parsed: variable reference cycle for '{name}'", start + 1)
        if name not in os.environ:
            raise self.error(f"variable reference for '{name}' on line {line} can not be "
                             "found", start + 1)
        self.env_seen.add(name)
        try:
            return _Reader(f"pk={os.environ[name]}", f"${name}", self.depth,
                           self.env_seen).document().get("pk", "")
        except ConfigError as exc:
            raise self.error(f"variable reference for '{name}' on line {line} could not be "
                             f"parsed: {exc}", start + 1) from None
        finally:
            self.env_seen.discard(name)

    def include(self, section: Section) -> None:
        """`include FILE` (the keyword just read): the file's keys, read on their own (its
        variables do not see ours), into `section`."""
        start = self.pos
        self.skip_blanks()
        name = self.include_name()
        if self.depth >= MAX_INCLUDE_DEPTH:
            raise self.error(f"too many nested includes at '{name}'", start)
        base = Path(self.file).parent if self.file != "<string>" else Path.cwd()
        try:
            section.take(_load(base / name, self.depth + 1))
        except ConfigError as exc:
            raise self.error(f"error parsing include file '{name}', {exc}", start) from None

    def include_name(self) -> str:
        c = self.at()
        if c in ("'", '"'):
            end = self.text.find(c, self.pos + 1)
            if end < 0:
                what = "double quoted" if c == '"' else "quoted"
                raise self.error(f"Unexpected EOF in {what} include", len(self.text))
            name = self.text[self.pos + 1 : end]
            self.pos = end + 1
            return name
        refused = {"[": "start of an array", "{": "start of a map", "(": "start of a block",
                   "-": "start of a number", "\\": "escape sequence", "\n": "new line",
                   "\r": "new line"}
        if c in refused or (c and _digit(c)):
            found = refused.get(c, "start of a number")
            raise self.error(f"Expected include value but found {found}")
        start = self.pos
        while self.at() and self.at() not in "\n\r;} \t'":
            self.pos += 1
        name = self.text[start : self.pos]
        if self.at() == "'":
            self.pos += 1
        return name
