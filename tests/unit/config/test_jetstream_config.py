"""JetStream's configuration (tidings.config.jetstream): the `jetstream` forms and keys onto
JetStreamOptions, the top-level store_dir, the -js/-sd flags over the file, the errors at
their place in the reference's words, what is refused by name, and what the server runs
with (store directory and maxima from the machine). tests/integration/config/
test_jetstream_config.py checks the same files against the reference binary."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from tidings.config import ConfigError, parse
from tidings.config import jetstream as J
from tidings.config.flags import add_server_arguments, options_from_args
from tidings.config.server import ServerOptions, apply_server_config, check


def options(text: str) -> ServerOptions:
    opts = apply_server_config(ServerOptions(), parse(text, "f.conf"))
    check(opts)
    return opts


def js_of(text: str) -> J.JetStreamOptions:
    js = options(text).jetstream
    assert js is not None
    return js


def error(text: str) -> str:
    with pytest.raises(ValueError) as exc:
        options(text)
    return str(exc.value)


def flags(*argv: str, base: ServerOptions | None = None) -> ServerOptions:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    return options_from_args(parser.parse_args(list(argv)), base)


# -- forms ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "enabled"), [
    ("true", True), ("false", False), ("enabled", True), ("Enable", True),
    ("DISABLED", False), ("disable", False), ("{}", True), ("{ enabled: false }", False),
    ("{ enable: true }", True),
])
def test_the_forms_of_the_key(value: str, enabled: bool) -> None:
    assert js_of(f"jetstream: {value}\n").enabled is enabled


def test_no_key_no_jetstream() -> None:
    assert options("port: 4222\n").jetstream is None


def test_every_key_of_the_block() -> None:
    js = js_of("""jetstream {
  store_dir: "/data/js"
  max_memory_store: 1G
  max_file_store: "2G"
  sync_interval: "30s"
  strict: false
  domain: hub
  unique_tag: " AZ "
  limits { max_ack_pending: 10, max_request_batch: 5, duplicate_window: "2m",
           batch { max_inflight_per_stream: 1, max_inflight_total: 2, max_msgs: 3,
                   timeout: "1.5s" } }
  max_buffered_size: 1M
  max_buffered_msgs: 10
  request_queue_limit: 5
  info_queue_limit: 6
  max_concurrent_io: 8
}
""")
    assert (js.enabled, js.store_dir, js.max_memory, js.max_file) == (
        True, "/data/js", 1_000_000_000, 2 << 30)
    assert (js.sync_interval, js.sync_always, js.strict) == (30.0, False, False)
    assert (js.domain, js.unique_tag) == ("hub", "az")
    assert js.limits == J.JetStreamLimits(
        max_request_batch=5, max_ack_pending=10, duplicate_window=120.0,
        max_batch_inflight_per_stream=1, max_batch_inflight_total=2, max_batch_size=3,
        max_batch_timeout=1.5)
    assert (js.max_buffered_size, js.max_buffered_msgs) == (1_000_000, 10)
    assert (js.request_queue_limit, js.info_queue_limit, js.max_concurrent_io) == (5, 6, 8)


def test_aliases() -> None:
    js = js_of('jetstream { store: /a, max_mem: 1K, max_file: "3K", sync: always }\n')
    assert (js.store_dir, js.max_memory, js.max_file) == ("/a", 1000, 3 << 10)
    assert (js.sync_interval, js.sync_always) == (J.DEFAULT_SYNC_INTERVAL, True)
    assert js_of("jetstream { storedir: /b, max_mem_store: 0 }\n").max_memory == 0
    assert js_of("jetstream { sync_interval: 5 }\n").sync_interval == 5.0  # seconds


def test_store_dir_at_the_top_level() -> None:
    js = js_of("store_dir: /a\n")
    assert (js.enabled, js.store_dir) == (False, "/a")
    js = js_of("storedir: /a\njetstream: enabled\n")
    assert (js.enabled, js.store_dir) == (True, "/a")
    js = js_of("jetstream { max_mem: 1K }\nstore_dir: /b\n")
    assert (js.enabled, js.store_dir, js.max_memory) == (True, "/b", 1000)


# -- units --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "size"), [
    (5, 5), (-1, -1), ("", 0), ("1K", 1024), ("2M", 2 << 20), ("3G", 3 << 30),
    ("1T", 1 << 40), ("-2K", -2048),
])
def test_storage_sizes(value: Any, size: int) -> None:
    assert J.storage_size(value) == size


@pytest.mark.parametrize(("value", "message"), [
    ("1X", "sizes defined as strings must end in K, M, G, T"),
    ("12", "sizes defined as strings must end in K, M, G, T"),
    ("1k", "sizes defined as strings must end in K, M, G, T"),
    ("xK", 'strconv.ParseInt: parsing "x": invalid syntax'),
    ("K", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("99999999999999999999K", 'strconv.ParseInt: parsing "99999999999999999999": value out '
                              "of range"),
    (1.5, "must be int64 or string"), (True, "must be int64 or string"),
])
def test_storage_size_errors(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(") + "$"):
        J.storage_size(value)


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("2m", 120.0), ("1h30m", 5400.0), ("1.5s", 1.5), (".5ms", 0.0005),
    ("1.s", 1.0), ("-1s", -1.0), ("+2h", 7200.0), ("3µs", 3e-6), ("10ns", 1e-8),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert J.go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("", 'time: invalid duration ""'), ("x", 'time: invalid duration "x"'),
    (".s", 'time: invalid duration ".s"'), ("5", 'time: missing unit in duration "5"'),
    ("5x", 'time: unknown unit "x" in duration "5x"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("5 s", 'time: unknown unit " s" in duration "5 s"'),
    ("3é", 'time: unknown unit "\\xc3\\xa9" in duration "3\\xc3\\xa9"'),
    ("9999999999h", 'time: invalid duration "9999999999h"'),
])
def test_go_duration_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        J.go_duration(text)
    assert str(exc.value) == message


# -- errors -----------------------------------------------------------------------------------
ERRORS = [
    ("jetstream: maybe\n", "f.conf:1:0: Expected 'enabled' or 'disabled' for string value, "
                           "got 'maybe'"),
    ("port: 1\n  jetstream: 5\n", "f.conf:2:3: Expected map, bool or string to define "
                                  "JetStream, got int64"),
    ("jetstream: [a, b]\n", "f.conf:1:0: Expected map, bool or string to define JetStream, "
                            "got []interface {}"),
    ("jetstream { strict: 5 }\n", "f.conf:1:12: Expected 'true' or 'false' for bool value, "
                                  "got '%!s(int64=5)'"),
    ('jetstream { strict: "yes" }\n', "f.conf:1:12: Expected 'true' or 'false' for bool "
                                      "value, got 'yes'"),
    ('jetstream { sync_interval: "5x" }\n', 'f.conf:1:12: error parsing sync_interval: time: '
                                            'unknown unit "x" in duration "5x"'),
    ('jetstream { Sync: "" }\n', 'f.conf:1:12: error parsing Sync: time: invalid duration ""'),
    ('jetstream { max_mem: "1X" }\n', "f.conf:1:12: max_mem_store sizes defined as strings "
                                      "must end in K, M, G, T"),
    ("jetstream { max_file: true }\n", "f.conf:1:12: max_file_store must be int64 or string"),
    ('jetstream { max_buffered_size: "1z" }\n', "f.conf:1:12: max_buffered_size sizes defined "
                                               "as strings must end in K, M, G, T"),
    ('jetstream { max_buffered_msgs: "x" }\n', 'f.conf:1:12: Expected a parseable size for '
                                               '"max_buffered_msgs", got x'),
    ("jetstream { request_queue_limit: 1.5 }\n", 'f.conf:1:12: Expected a parseable size for '
                                                 '"request_queue_limit", got 1.5'),
    ("jetstream { max_concurrent_io: 2 }\n", 'f.conf:1:12: Expected an absolute size for '
                                             '"max_concurrent_io" between 4 and 8192, got 2'),
    ("jetstream { foo: 1 }\n", 'f.conf:1:12: unknown field "foo"'),
    ("jetstream { limits: 5 }\n", "f.conf:1:12: Expected a map to define JetStreamLimits, got "
                                  "int64"),
    ("jetstream { limits: { foo: 1 } }\n", 'f.conf:1:22: unknown field "foo"'),
    ("jetstream { limits: { batch: 5 } }\n", "f.conf:1:22: Expected a map to define batch "
                                             "limits, got int64"),
    ("jetstream { limits: { batch: { foo: 1 } } }\n", 'f.conf:1:31: unknown field "foo"'),
    # The reference's error of a duration in the limits says nowhere.
    ('jetstream { limits: { duplicate_window: "x" } }\n', 'time: invalid duration "x"'),
    # A value of another type where the reference asserts one: its panic, at the top key.
    ("port: 1\n  jetstream {\n  domain: 5 }\n", "f.conf:2:3: interface conversion: "
                                                "interface {} is int64, not string"),
    ("jetstream { store_dir: 5 }\n", "f.conf:1:0: interface conversion: interface {} is "
                                     "int64, not string"),
    ('jetstream { enabled: "x" }\n', "f.conf:1:0: interface conversion: interface {} is "
                                     "string, not bool"),
    ("jetstream { limits: { max_ack_pending: x } }\n", "f.conf:1:0: interface conversion: "
                                                       "interface {} is string, not int64"),
    ("jetstream { limits: { duplicate_window: 5 } }\n", "f.conf:1:0: interface conversion: "
                                                        "interface {} is int64, not string"),
    ("jetstream { sync: 1.5 }\n", "f.conf:1:0: interface conversion: interface {} is "
                                  "float64, not int64"),
    ("store_dir: 5\n", "f.conf:1:0: interface conversion: interface {} is int64, not string"),
    ("store_dir: /a\njetstream { store_dir: /b }\n", "f.conf:2:13: Duplicate 'store_dir' "
                                                     "configuration"),
    ("jetstream { store_dir: /b }\nstore_dir: /a\n", "f.conf:2:1: Duplicate 'store_dir' "
                                                     "configuration"),
    ("jetstream { store: /a, storedir: /b }\n", "f.conf:1:23: Duplicate 'store_dir' "
                                                "configuration"),
    # What the reference checks at start.
    ('jetstream { domain: "a.b" }\n', "invalid domain name: may not contain ., * or >"),
    ('jetstream { domain: "*" }\n', "invalid domain name: may not contain ., * or >"),
    ('jetstream { domain: "a b" }\n', 'invalid domain name: derived "$JS.a b.API.>" is not a '
                                      "valid subject"),
    ('jetstream { domain: ">", enabled: false }\n', 'invalid domain name: derived "$JS.>.API.>" '
                                                    "is not a valid subject"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors_in_the_reference_words_at_its_place(text: str, message: str) -> None:
    assert error(text) == message


@pytest.mark.parametrize("key", sorted(J.REFUSED))
def test_encryption_and_clustering_are_refused_by_name(key: str) -> None:
    message = error(f"jetstream {{ enabled: false, {key}: 1 }}\n")
    assert message.startswith(f'f.conf:1:28: "{key}": ')
    assert message.endswith(" is not supported by tidings yet")
    assert ("encryption" in message) == (key in ("key", "ek", "encryption_key", "prev_key",
                                                 "prev_ek", "prev_encryption_key", "cipher",
                                                 "tpm"))


def test_other_refusals_by_name() -> None:
    assert error("jetstream { limits { max_ha_assets: 5 } }\n") == (
        'f.conf:1:21: "max_ha_assets": a limit of the replicated assets of clustered '
        "JetStream is not supported by tidings yet")
    assert error("default_js_domain: { A: hub }\n").startswith(
        'f.conf:1:0: "default_js_domain": JetStream domains for accounts without JetStream')


def test_variables_are_no_unknown_fields() -> None:
    js = js_of("jetstream { DIR: /x, store_dir: $DIR, limits { N: 5, max_ack_pending: $N } }\n")
    assert (js.store_dir, js.limits.max_ack_pending) == ("/x", 5)


# -- flags over the file ----------------------------------------------------------------------
def test_flags_without_a_file() -> None:
    assert flags().jetstream is None
    js = flags("-js").jetstream
    assert js is not None and (js.enabled, js.store_dir) == (True, "")
    js = flags("--jetstream", "--store_dir", "/s").jetstream
    assert js is not None and (js.enabled, js.store_dir) == (True, "/s")
    js = flags("-sd", "/s").jetstream  # a directory alone does not turn it on
    assert js is not None and (js.enabled, js.store_dir) == (False, "/s")


def test_flags_over_the_file() -> None:
    file = options("jetstream { enabled: false, max_mem: 1K }\n")
    js = flags("-js", base=file).jetstream
    assert js is not None and (js.enabled, js.max_memory) == (True, 1000)
    on = options("jetstream: enabled\n")
    js = flags("-js=false", base=on).jetstream
    assert js is not None and not js.enabled
    js = flags("-sd", "/s", base=on).jetstream
    assert js is not None and (js.enabled, js.store_dir) == (True, "/s")


@pytest.mark.parametrize(("text", "where"), [
    ("store_dir: /f\n", "f.conf:1:0"), ("port: 1\njetstream {\n  store: /f\n}\n", "f.conf:3:3"),
])
def test_sd_with_a_file_that_sets_store_dir_is_a_duplicate(text: str, where: str) -> None:
    """As the reference, which reads its flags before the file."""
    with pytest.raises(ConfigError) as exc:
        flags("-sd", "/s", base=options(text))
    assert str(exc.value) == f"{where}: Duplicate 'store_dir' configuration"


# -- what the server runs with ----------------------------------------------------------------
def test_defaults_for_the_machine(tmp_path: Path) -> None:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    st = os.statvfs(tmp_path)
    mem, disk = J.defaults_for_machine(str(tmp_path / "not" / "yet"))
    assert mem == memory // 4 * 3
    # The free space may move between the two looks: the disk of tmp_path, 75% of it.
    assert abs(disk - st.f_bavail * st.f_bsize // 4 * 3) < st.f_blocks * st.f_bsize // 100
    assert not (tmp_path / "not").exists()  # looked at, not made


def test_when_the_machine_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: Any) -> Any:
        raise OSError("no")

    monkeypatch.setattr(os, "statvfs", fail)
    monkeypatch.setattr(os, "sysconf", fail)
    assert J.defaults_for_machine("/x") == (256 << 20, 1 << 40)


def test_the_store_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dynamic = js_of("jetstream: true\n").resolved
    assert dynamic.store_dir == str(tmp_path / "nats" / "jetstream")
    assert not dynamic.compress_ok and dynamic.max_memory > 0 and dynamic.max_storage > 0
    # Both maxima configured: the reference's other path (no "nats", compression on).
    fixed = js_of("jetstream { max_mem: 1K, max_file: 2K }\n").resolved
    assert (fixed.store_dir, fixed.compress_ok) == (str(tmp_path / "jetstream"), True)
    assert (fixed.max_memory, fixed.max_storage) == (1000, 2000)
    given = js_of("jetstream { store_dir: /d, max_mem: 0 }\n").resolved
    assert (given.store_dir, given.max_memory) == ("/d/jetstream", 0)  # 0 is kept
    assert given.max_storage > 0


def test_a_negative_maximum_is_the_machines() -> None:
    js = js_of("jetstream { store_dir: /d, max_mem: -1, max_file: 5K }\n").resolved
    assert js.max_memory == J.defaults_for_machine("/d")[0]
    assert (js.max_storage, js.store_dir) == (5000, "/d/jetstream")


def test_resolved_once() -> None:
    js = js_of("jetstream: true\n")
    assert js.resolved is js.resolved


def test_json_of_the_config_and_limits() -> None:
    js = js_of('jetstream { store_dir: /d, max_mem: 1K, max_file: 2K, sync: always, '
               'domain: hub, unique_tag: AZ, strict: false, limits { max_ack_pending: 7, '
               'duplicate_window: "1m" } }\n')
    assert list(js.resolved.as_json().items()) == [
        ("max_memory", 1000), ("max_storage", 2000), ("store_dir", "/d/jetstream"),
        ("sync_interval", 120_000_000_000), ("sync_always", True), ("domain", "hub"),
        ("compress_ok", True), ("unique_tag", "az")]
    assert js.limits.as_json() == {"max_ack_pending": 7, "max_duplicate_window": 60 * 10**9}
    assert J.JetStreamLimits().as_json() == {}


def test_one_api_level() -> None:
    """The level INFO and /varz announce is the one the streams' metadata says (2.11's)."""
    from tidings.jetstream.stream import API_LEVEL

    assert J.API_LEVEL == API_LEVEL == 1
