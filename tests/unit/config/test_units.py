"""The units of the options (tidings.config.units): each grammar, the file's and the command
line's, pinned by a table of inputs and what they give, or the error they raise."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from tidings.config import parse
from tidings.config.units import (
    file_bool,
    file_duration,
    file_monitor_port,
    file_port,
    file_size,
    flag_bool,
    flag_duration,
    flag_monitor_port,
    flag_port,
    flag_positive_int,
    flag_seconds,
    flag_size,
)

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# (input, bytes) for both grammars: a suffix letter alone is a power of 1000, with b, i or
# ib a power of 1024, any case (nats-server conf/parse.go; nats-streaming-server's
# --max_bytes reads its text with that parser).
SIZES = [
    ("0", 0), ("100", 100), ("-1", -1), ("007", 7),
    ("1k", 1000), ("1K", 1000), ("1kb", KiB), ("1KB", KiB), ("1Ki", KiB), ("1KiB", KiB),
    ("64k", 64_000), ("64KB", 64 * KiB), ("-1KB", -KiB),
    ("2m", 2_000_000), ("2mb", 2 * MiB), ("10MB", 10 * MiB), ("1MiB", MiB),
    ("1g", 10**9), ("2GiB", 2 * GiB), ("1t", 10**12), ("1TB", TiB),
    ("1p", 10**15), ("1PB", 1 << 50), ("1e", 10**18), ("1EiB", 1 << 60),
]
BAD_SIZES = ["", "k", "1.5", "1.5MB", "1 KB", "100b", "1x", "1kbb", "+5", "0x10", "MB1",
             "1k2", "١٢"]


@pytest.mark.parametrize(("text", "want"), SIZES)
def test_sizes_in_both_grammars(text: str, want: int) -> None:
    assert file_size(text) == want
    assert flag_size(text) == want


@pytest.mark.parametrize("text", [t for t, _ in SIZES])
def test_a_size_string_reads_as_the_lexer_reads_the_bare_word(text: str) -> None:
    assert file_size(parse(f"x: {text}")["x"]) == file_size(text)


@pytest.mark.parametrize("text", BAD_SIZES)
def test_sizes_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape("expected a size")):
        file_size(text)
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape("expected a size")):
        flag_size(text)


@pytest.mark.parametrize("value", [7, 1 << 40, -3])
def test_a_file_size_is_the_lexers_integer(value: int) -> None:
    assert file_size(value) == value


@pytest.mark.parametrize("value", [True, False, 1.5, None, [1], {"a": 1}])
def test_a_file_size_of_another_type_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("expected a size")):
        file_size(value)


@pytest.mark.parametrize(("text", "want"), [
    ("1", 1), ("65536", 65536), ("1_000", 1000), (" 2 ", 2),
])
def test_positive_integer_flags(text: str, want: int) -> None:
    assert flag_positive_int(text) == want


@pytest.mark.parametrize(("text", "error"), [
    ("0", "must be above 0, not 0"), ("-1", "must be above 0, not -1"),
    ("1MB", "invalid number '1MB'"), ("1.5", "invalid number '1.5'"), ("", "invalid number"),
])
def test_positive_integer_flags_refused(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(error)):
        flag_positive_int(text)


# Go durations (time.ParseDuration), and here also days and plain seconds.
DURATIONS = [
    ("1h30m", 5400.0), ("500ms", 0.5), ("1.5s", 1.5), ("2m", 120.0), ("1d", 86400.0),
    ("1h1m1s", 3661.0), ("250us", 250e-6), ("250µs", 250e-6), ("10ns", 10e-9),
    (".5s", 0.5), ("1.s", 1.0), ("-1.5h", -5400.0), ("+5s", 5.0), ("0", 0.0),
    ("2.5", 2.5), ("30", 30.0), (" 10s ", 10.0),
]
BAD_DURATIONS = ["", " ", "2x", "s", "1h 30m", "1hh", "h1", "-", "1.5.5s", "1S", "1H"]


@pytest.mark.parametrize(("text", "want"), DURATIONS)
def test_durations_in_both_grammars(text: str, want: float) -> None:
    assert file_duration(text) == pytest.approx(want)
    assert flag_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text", BAD_DURATIONS)
def test_durations_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape("duration")):
        file_duration(text)
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape("duration")):
        flag_duration(text)


@pytest.mark.parametrize(("value", "want"), [(30, 30.0), (2.5, 2.5), (0, 0.0)])
def test_a_file_duration_may_be_a_number_of_seconds(value: Any, want: float) -> None:
    assert file_duration(value) == want


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_a_file_duration_of_another_type_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("expected a duration")):
        file_duration(value)


@pytest.mark.parametrize(("text", "want"), [("2", 2.0), ("0.5", 0.5), ("1e3", 1000.0)])
def test_seconds_flags(text: str, want: float) -> None:
    assert flag_seconds(text) == want


@pytest.mark.parametrize("text", ["2m", "", "1h30m", "x"])
def test_seconds_flags_refused(text: str) -> None:
    error = f"invalid float value: {text!r}"
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(error)):
        flag_seconds(text)


@pytest.mark.parametrize(("value", "want"), [(True, True), (False, False)])
def test_file_booleans(value: bool, want: bool) -> None:
    assert file_bool(value) is want


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, None, "on"])
def test_file_booleans_are_only_the_lexers(value: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("expected a boolean")):
        file_bool(value)


@pytest.mark.parametrize("word", ["true", "yes", "on", "no", "off", "false", "TRUE", "On"])
def test_the_lexer_reads_its_boolean_words(word: str) -> None:
    assert file_bool(parse(f"x: {word}")["x"]) is (word.lower() in ("true", "yes", "on"))


FLAG_TRUE = ["true", "TRUE", "True", "tRuE", "t", "T", "1", "yes", "YES", "on", "On", " true "]
FLAG_FALSE = ["false", "FALSE", "False", "f", "F", "0", "no", "NO", "off", "Off"]


@pytest.mark.parametrize("text", FLAG_TRUE)
def test_flag_booleans_true(text: str) -> None:
    assert flag_bool(text) is True


@pytest.mark.parametrize("text", FLAG_FALSE)
def test_flag_booleans_false(text: str) -> None:
    assert flag_bool(text) is False


@pytest.mark.parametrize("text", ["", "maybe", "2", "-1", "y", "n", "tru", "enabled"])
def test_flag_booleans_refused(text: str) -> None:
    error = f"invalid boolean value {text!r}"
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(error)):
        flag_bool(text)


@pytest.mark.parametrize(("value", "want"), [
    (4222, 4222), (0, 0), (-1, 0), (65535, 65535), (1, 1),
])
def test_file_ports(value: int, want: int) -> None:
    assert file_port(value) == want


@pytest.mark.parametrize(("value", "error"), [
    (65536, "port 65536 out of range 0-65535"), (-2, "port -2 out of range 0-65535"),
    ("4222", "expected an integer, got '4222'"), (True, "expected an integer, got True"),
    (1.5, "expected an integer, got 1.5"),
])
def test_file_ports_refused(value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        file_port(value)


@pytest.mark.parametrize(("text", "want"), [
    ("4222", 4222), ("0", 0), ("-1", 0), ("65535", 65535),
])
def test_flag_ports(text: str, want: int) -> None:
    assert flag_port(text) == want


@pytest.mark.parametrize(("text", "error"), [
    ("65536", "invalid port 65536 (0 to 65535; 0 or -1: any free port)"),
    ("-2", "invalid port -2 "), ("abc", "invalid port 'abc'"), ("", "invalid port ''"),
    ("4222.0", "invalid port '4222.0'"),
])
def test_flag_ports_refused(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(error)):
        flag_port(text)


# The monitor's ports: 0 is off, so -1 ("any free port") stays -1 (the reference's
# RANDOM_PORT, shown as such in /varz), where a client port's -1 is 0.
@pytest.mark.parametrize(("value", "want"), [(8222, 8222), (0, 0), (-1, -1), (65535, 65535)])
def test_monitor_ports(value: int, want: int) -> None:
    assert file_monitor_port(value) == want
    assert flag_monitor_port(str(value)) == want


@pytest.mark.parametrize("value", [65536, -2])
def test_monitor_ports_refused(value: int) -> None:
    with pytest.raises(ValueError, match=f"port {value} out of range"):
        file_monitor_port(value)
    with pytest.raises(argparse.ArgumentTypeError, match=f"invalid port {value}"):
        flag_monitor_port(str(value))
