"""Units of the options: sizes, durations, booleans and ports, as the configuration file
reads them (`file_*`: from the value the parser gave) and as the command line reads them
(`flag_*`: argparse types, from the text of a flag), side by side. Every option of the core
and of streaming reads its unit with one of these; there is no other size or boolean parser.

Sizes
    File (nats-server conf/parse.go): an integer, with the lexer's suffixes, any case: `k`,
    `m`, `g`, `t`, `p`, `e` are powers of 1000, with `b`, `i` or `ib` (`kb`, `KiB`) powers of
    1024, so `1k` is 1000 and `1KB` 1024. tidings also takes that word as a string
    (`"64KB"`), where the reference takes only the bare word.
    Flags: the same grammar, the text read as the file reads a size (`flag_size`). That is
    what nats-streaming-server's --max_bytes does (server/conf.go, getBytes: conf.Parse of
    "bytes: VALUE"), so `-mb 1k` is 1000 there too. nats-server's --log_size_limit is a
    plain integer (Go's flag.Int64Var); tidings takes the size grammar there as well.
    The core's --max_payload, --max_control_line, --max_connections and --max_pending
    (tidings' own flags) take a plain integer above 0 (`flag_positive_int`).

Durations
    File (nats-server opts.go, parseDuration): a Go duration string (time.ParseDuration:
    "1h30m", "500ms", "1.5s") or an integer number of seconds (the reference's older form).
    tidings also takes a number of seconds as a float or a string ("2.5") and days ("2d",
    which the streaming limits have always taken here); the reference takes only strings
    for lame_duck_duration and the streaming limits.
    Flags: nats-streaming-server's duration flags (-ma, -mi, -hbi, -hbt) are Go's
    flag.DurationVar (time.ParseDuration); tidings reads them with the file's grammar
    (`flag_duration`), so seconds ("2.5") and days are taken too. The core's --ping_interval,
    --auth_timeout and --write_deadline (tidings' own; nats-server has no such flags) are a
    decimal number of seconds (`flag_seconds`).

Booleans
    File: the lexer's words true/false, yes/no, on/off (any case) are a boolean value; a key
    that wants a boolean takes only that (`file_bool`), as the reference's `v.(bool)`.
    Flags: Go's flag.BoolVar reads strconv.ParseBool's words (1/0, t/f, true/false); tidings
    takes those and the file's (yes/no, on/off), in any case (`flag_bool`). A boolean flag
    given alone is true (`--tls`), as in Go.

Ports
    File and flags alike: an integer from -1 to 65535; -1 is the reference's RANDOM_PORT and
    given as 0 (any free port). The file takes the lexer's integer (`file_port`), a flag its
    decimal text (`flag_port`). The monitor's ports (`http`, `http_port`, `https`, -m, -ms)
    are 0 when monitoring is off: there -1 stays -1, "on, at any free port", as the
    reference keeps it (`file_monitor_port`, `flag_monitor_port`; /varz shows the -1).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

# The lexer's size suffixes (conf/parse.go): a letter alone is a power of 1000, followed by
# b, i or ib a power of 1024.
SIZE_SUFFIXES: dict[str, int] = {"": 1}
for _power, _letter in enumerate("kmgtpe", start=1):
    SIZE_SUFFIXES[_letter] = 1000 ** _power
    for _tail in ("b", "i", "ib"):
        SIZE_SUFFIXES[_letter + _tail] = 1024 ** _power
_SIZE = re.compile(r"^(-?\d+)([a-zA-Z]*)$")

# Go's duration units, and days ("d").
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0, "d": 86400.0}

_TRUE = ("true", "t", "1", "yes", "on")
_FALSE = ("false", "f", "0", "no", "off")
_MAX_PORT = 65535


# -- sizes ----------------------------------------------------------------------------------
def file_size(value: Any) -> int:
    """Bytes of a size key: the integer the file's lexer read (`64k`, `1MB` included), or a
    string written as such a number ("64KB"). ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        got = size_word(value.strip())
        if got is not None:
            return got
    raise ValueError(f"expected a size, got {value!r}")


def size_word(word: str) -> int | None:
    """Bytes of digits and a size suffix ("-2", "64k", "1KiB"); None when `word` is not that."""
    m = _SIZE.match(word)
    if m is None or not m.group(1).lstrip("-").isascii():
        return None
    mult = SIZE_SUFFIXES.get(m.group(2).lower())
    return None if mult is None else int(m.group(1)) * mult


def flag_size(text: str) -> int:
    """A size flag, read as the file reads a size (`1k` 1000, `1KB` 1024)."""
    try:
        return file_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def flag_positive_int(text: str) -> int:
    """An integer above zero, without suffixes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return value


# -- durations ------------------------------------------------------------------------------
def file_duration(value: Any) -> float:
    """Seconds from a Go duration string ("1h30m", "500ms", "2d") or a number of seconds (an
    integer, a float, or a string of one). ValueError otherwise."""
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


def flag_duration(text: str) -> float:
    """A duration flag, read as the file reads a duration string ("1h30m", "2.5")."""
    try:
        return file_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def flag_seconds(text: str) -> float:
    """A number of seconds ("2", "0.5"), as the core's timing flags take it."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None


# -- booleans -------------------------------------------------------------------------------
def file_bool(value: Any) -> bool:
    """A boolean key: only the lexer's boolean (true/false, yes/no, on/off unquoted)."""
    if not isinstance(value, bool):
        raise ValueError(f"expected a boolean, got {value!r}")
    return value


def flag_bool(text: str) -> bool:
    """A boolean flag: true/false, t/f, 1/0, yes/no, on/off, in any case."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


# -- ports ----------------------------------------------------------------------------------
def file_port(value: Any) -> int:
    """A port key: an integer from -1 to 65535; -1 (any free port) is 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    if not -1 <= value <= _MAX_PORT:
        raise ValueError(f"port {value} out of range 0-65535")
    return max(value, 0)


def file_monitor_port(value: Any) -> int:
    """A monitor port key: -1 to 65535, where 0 is off and -1 any free port (kept as -1)."""
    port = file_port(value)
    return -1 if value == -1 else port


def flag_port(text: str) -> int:
    """A port flag: 0 to 65535, and -1 (the reference's "any free port") is 0."""
    return max(_flag_port(text), 0)


def flag_monitor_port(text: str) -> int:
    """A monitor port flag (-m, -ms): 0 is off, -1 any free port (kept as -1)."""
    return _flag_port(text)


def _flag_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not -1 <= port <= _MAX_PORT:
        raise argparse.ArgumentTypeError(f"invalid port {port} (0 to 65535; 0 or -1: any "
                                         "free port)")
    return port


# -- Go's duration strings and quoting ------------------------------------------------------
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
             "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"([0-9]*)(\.([0-9]*))?([^0-9.]*)")
_MAX_DURATION = (1 << 63) / 1e9


def go_duration(text: str) -> float:
    """Seconds of a Go duration string (time.ParseDuration), or ValueError in its words."""
    invalid = ValueError(f"time: invalid duration {go_quote(text)}")
    rest = text[1:] if text[:1] in ("-", "+") else text
    if rest == "0":
        return 0.0
    if not rest:
        raise invalid
    total = 0.0
    while rest:
        m = _GO_PART.match(rest)
        assert m is not None  # every part of the pattern may be empty
        whole, dot, frac, unit = m.group(1), m.group(2), m.group(3) or "", m.group(4)
        if not whole and not frac:
            raise invalid
        if not unit:
            raise ValueError(f"time: missing unit in duration {go_quote(text)}")
        if unit not in _GO_UNITS:
            raise ValueError(f"time: unknown unit {go_quote(unit)} in duration "
                             f"{go_quote(text)}")
        total += float(f"{whole or 0}.{frac or 0}" if dot else whole) * _GO_UNITS[unit]
        rest = rest[m.end():]
    if total > _MAX_DURATION:
        raise invalid
    return -total if text.startswith("-") else total


def go_quote(text: str | bytes) -> str:
    """A string as Go's time and strconv errors quote it: non-ASCII bytes as \\xHH."""
    raw = text.encode() if isinstance(text, str) else text
    out = []
    for byte in raw:
        ch = chr(byte)
        if byte >= 0x80 or byte < 0x20:
            out.append(f"\\x{byte:02x}")
        else:
            out.append("\\" + ch if ch in '"\\' else ch)
    return '"' + "".join(out) + '"'


def format_go_duration(ns: int) -> str:
    """Nanoseconds as Go's time.Duration prints them: "1.5ms", "1s", "1m30s", "2h0m0s"."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u < 1000:
        return f"{sign}{u}ns"
    if u < 10**6:
        return f"{sign}{_decimal(u, 1000)}µs"
    if u < 10**9:
        return f"{sign}{_decimal(u, 10**6)}ms"
    seconds = _decimal(u % (60 * 10**9), 10**9)
    minutes, hours = u // (60 * 10**9) % 60, u // (3600 * 10**9)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


def _decimal(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    return f"{whole}." + f"{frac:0{len(str(unit)) - 1}d}".rstrip("0")
