"""The nats-server configuration format (tidings.config): every construct, the layouts the
reference's lexer accepts and refuses (tests/config_layouts.py), its size suffixes and
variables, errors that say where, and nothing but ConfigError for any text."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.config_layouts import ACCEPTED, REFUSED
from tidings.config import ConfigError, load, parse

CORPUS = [
    ("port: 4222\nhost = 127.0.0.1\nserver_name nats1 # comment\n// another\n"
     "max_payload: 1MB; max_pending: 64k, debug: yes",
     {"port": 4222, "host": "127.0.0.1", "server_name": "nats1", "max_payload": 1 << 20,
      "max_pending": 64_000, "debug": True}),
    ("listen: 127.0.0.1:4333\ncluster {\n  listen: 0.0.0.0:6222\n  routes: [\n"
     "    nats://a:6222\n    nats://b:6222, nats://c:6222\n  ]\n}",
     {"listen": "127.0.0.1:4333", "cluster": {
         "listen": "0.0.0.0:6222", "routes": ["nats://a:6222", "nats://b:6222",
                                              "nats://c:6222"]}}),
    ("P: s3\nauthorization { user: a, password: $P, timeout: 2.5 }",
     {"P": "s3", "authorization": {"user": "a", "password": "s3", "timeout": 2.5}}),
    ("text: (\n  line 1\n  line 2\n)\nx: 'raw\\n'\ny: \"tab\\tu\\x41\"",
     {"text": "\n  line 1\n  line 2\n", "x": "raw\\n", "y": "tab\tuA"}),
    ('{"port": 4222, "a": [1, 2.5, true, off]}', {"port": 4222, "a": [1, 2.5, True, False]}),
    # A number just before `]` is read as a string, as the reference reads it.
    ("sizes: [1k, 1kb, 1Ki, 1KiB, 2m, 2mb, 1g, 1GB, 1GB]",
     {"sizes": [1000, 1024, 1024, 1024, 2_000_000, 2 << 20, 10**9, 1 << 30, "1GB"]}),
    ("outer: 1\nm { inner: $outer, deep { v: $outer } }",
     {"outer": 1, "m": {"inner": 1, "deep": {"v": 1}}}),
    ("a: -5\nb: 1.5\nc: nats://u:p@h:1\nd: \"quoted # not a comment\"",
     {"a": -5, "b": 1.5, "c": "nats://u:p@h:1", "d": "quoted # not a comment"}),
    ("e: a#b\nf: 1.2.3.4:5\ng: 2020-01-02T03:04:05Z\nh:", {
        "e": "a#b", "f": "1.2.3.4:5", "h": "",
        "g": dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC)}),
]


@pytest.mark.parametrize(("text", "want"), CORPUS)
def test_valid_files(text: str, want: dict) -> None:
    assert parse(text) == want


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in ACCEPTED],
                         ids=[i for i, _, _ in ACCEPTED])
def test_layouts_the_reference_accepts(text: str, want: dict) -> None:
    """A `{` on the line after its key, values on the next line, every separator, comments
    between, maps and arrays across lines, trailing `,` and `;`."""
    assert parse(text) == want


@pytest.mark.parametrize(("text", "error"), [(t, e) for _, t, e in REFUSED],
                         ids=[i for i, _, _ in REFUSED])
def test_layouts_the_reference_refuses(text: str, error: str) -> None:
    """Refused with the reference's words, and where (`cluster { } routes: []` on a line)."""
    with pytest.raises(ConfigError) as exc:
        parse(text, "f.conf")
    assert str(exc.value) == f"f.conf:{error}"


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as a value of the format (as the reference reads it), cycles refused."""
    monkeypatch.setenv("TIDINGS_TEST_PORT", "4444")
    monkeypatch.setenv("TIDINGS_TEST_LIST", "[a, b, ]")
    monkeypatch.setenv("TIDINGS_TEST_INDIRECT", "$TIDINGS_TEST_PORT")
    assert parse("port: $TIDINGS_TEST_PORT\nl: $TIDINGS_TEST_LIST\ni: $TIDINGS_TEST_INDIRECT") == {
        "port": 4444, "l": ["a", "b"], "i": 4444}
    monkeypatch.setenv("TIDINGS_TEST_LOOP", "$TIDINGS_TEST_LOOP")
    with pytest.raises(ConfigError, match="variable reference cycle for 'TIDINGS_TEST_LOOP'"):
        parse("x: $TIDINGS_TEST_LOOP")


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "auth.conf").write_text("authorization { user: a, password: b }\n")
    (tmp_path / "main.conf").write_text("port: 1\ninclude ./auth.conf\nmax_payload: 2KB\n")
    assert load(tmp_path / "main.conf") == {
        "port": 1, "authorization": {"user": "a", "password": "b"}, "max_payload": 2048}


def test_an_included_file_is_read_on_its_own(tmp_path: Path) -> None:
    """Its keys say which file they are in; its variables do not see the including file's
    (the reference reads an include as a file of its own)."""
    (tmp_path / "inc.conf").write_text("\n  bogus: 1\n")
    conf = load_text(tmp_path, "port: 1\ninclude inc.conf\n")
    assert conf.where("bogus") == f"{tmp_path / 'inc.conf'}:2:3"
    assert conf.where("port") == f"{tmp_path / 'main.conf'}:1:0"
    (tmp_path / "inc.conf").write_text("x: $P\n")
    with pytest.raises(ConfigError, match="variable reference for 'P' on line 1 can not be"):
        load_text(tmp_path, "P: 1\ninclude inc.conf\n")


def load_text(where: Path, text: str) -> dict:
    (where / "main.conf").write_text(text)
    return load(where / "main.conf")


def test_positions_as_the_reference_numbers_them() -> None:
    conf = parse("port: 1\n  foo: 2\ncluster { listen: 1.2.3.4:5, bar: 3 }", "f.conf")
    assert conf.where("port") == "f.conf:1:0"
    assert conf.where("foo") == "f.conf:2:3"
    assert conf["cluster"].where("bar") == "f.conf:3:30"


@pytest.mark.parametrize(("text", "error"), [
    ("a {\n b: 1\n", "<string>:3:1: Unexpected EOF processing map."),
    ("port: $NOPE_NOT_SET", "variable reference for 'NOPE_NOT_SET' on line 1 can not be found"),
    ('k: "abc', "<string>:1:7: Unexpected EOF."),
    ("arr: [1, 2", 'Expected an array value terminator "," or an array terminator "]", but got '
                   "EOF instead."),
    ("x", "<string>:1:1: config is invalid"),
    (": x", "<string>:1:1: Unexpected key separator ':'"),
    ('x: "\\q"', "Invalid escape character 'q'"),
    ("x: 99999999999999999999", "integer '99999999999999999999' is out of the range"),
    ("x: 2020-01-01\n", "Expected 'T' in ISO8601 datetime, but found '\\n' instead."),
    ("x: 12-3", "All ISO8601 dates must be in full Zulu form."),
    ("x: 1.", "Floats must have a digit after the '.', but got EOF instead."),
    ("x: -a", "Expected a digit but got 'a'."),
    ("include 'no-such-file.conf'", "error parsing include file 'no-such-file.conf'"),
    ("include\n'a.conf'", "Expected include value but found new line"),
])
def test_malformed_files_say_where(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    assert error in str(exc.value)


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from(list("ab:= {}[]\"'#/$\n,;(1kM.-\\")), max_size=80))
def test_any_text_gives_a_map_or_config_error(text: str) -> None:
    try:
        assert isinstance(parse(text), dict)
    except ConfigError:
        pass
