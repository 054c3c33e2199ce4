"""The nats-server configuration format (tidings.config): every construct, the reference's
size suffixes and variables, errors that say where, and nothing but ConfigError for any text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.config import ConfigError, load, parse, parse_duration, parse_size

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
    ("text: (\n  line 1\n  line 2\n)\nx: 'raw\\n'\ny: \"tab\\tu\\u0041\"",
     {"text": "  line 1\n  line 2\n", "x": "raw\\n", "y": "tab\tuA"}),
    ('{"port": 4222, "a": [1, 2.5, true, off]}', {"port": 4222, "a": [1, 2.5, True, False]}),
    ("sizes: [1k, 1kb, 1Ki, 1KiB, 2m, 2mb, 1g, 1GB]",
     {"sizes": [1000, 1024, 1024, 1024, 2_000_000, 2 << 20, 10**9, 1 << 30]}),
    ("outer: 1\nm { inner: $outer, deep { v: $outer } }",
     {"outer": 1, "m": {"inner": 1, "deep": {"v": 1}}}),
    ("a: -5\nb: 1.5\nc: nats://u:p@h:1\nd: \"quoted # not a comment\"",
     {"a": -5, "b": 1.5, "c": "nats://u:p@h:1", "d": "quoted # not a comment"}),
]


@pytest.mark.parametrize(("text", "want"), CORPUS)
def test_valid_files(text: str, want: dict) -> None:
    assert parse(text) == want


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_TEST_PORT", "4444")
    assert parse("port: $TIDINGS_TEST_PORT") == {"port": 4444}


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "auth.conf").write_text("authorization { user: a, password: b }\n")
    (tmp_path / "main.conf").write_text("port: 1\ninclude ./auth.conf\nmax_payload: 2KB\n")
    assert load(tmp_path / "main.conf") == {
        "port": 1, "authorization": {"user": "a", "password": "b"}, "max_payload": 2048}


def test_positions_as_the_reference_numbers_them() -> None:
    conf = parse("port: 1\n  foo: 2\ncluster { listen: 1.2.3.4:5, bar: 3 }", "f.conf")
    assert conf.where("port") == "f.conf:1:0"
    assert conf.where("foo") == "f.conf:2:3"
    assert conf["cluster"].where("bar") == "f.conf:3:30"


@pytest.mark.parametrize(("text", "error"), [
    ("a {\n b: 1\n", "<string>:3:1: unexpected end of file processing map (missing '}')"),
    ("port: $NOPE_NOT_SET", "variable reference for 'NOPE_NOT_SET' on line 1 can not be found"),
    ('k: "abc', "<string>:1:3: unterminated quoted string"),
    ("arr: [1, 2", "missing ']'"),
    ("x:", 'key "x" has no value'),
    ("}", "expected a key"),
    ('x: "\\q"', "invalid escape character 'q'"),
    ("include 'no-such-file.conf'", "error parsing include file 'no-such-file.conf'"),
])
def test_malformed_files_say_where(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    assert error in str(exc.value)


def test_units() -> None:
    assert parse_duration("1h30m") == 5400.0 and parse_duration("500ms") == 0.5
    assert parse_duration(30) == 30.0 and parse_duration("2.5") == 2.5
    assert parse_size("64KB") == 65536 and parse_size(7) == 7 and parse_size("1k") == 1000
    for bad in ("2x", "", True):
        with pytest.raises(ValueError):
            parse_duration(bad)


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from(list("ab:= {}[]\"'#/$\n,;(1kM.-\\")), max_size=80))
def test_any_text_gives_a_map_or_config_error(text: str) -> None:
    try:
        assert isinstance(parse(text), dict)
    except ConfigError:
        pass
