"""JetStream's configuration against the reference: `tidings server -t -c FILE` and
`nats-server -t -c FILE` take the same good files and refuse the same bad ones with the same
message at the same `file:line:col`; what the reference checks only at start (the domain)
tidings checks under -t already; what tidings does not build (encryption at rest,
clustered JetStream) is refused by name where the reference takes it. Started with `-js`,
both say so in INFO (same keys in the same order) and in /varz's jetstream block.

Where the reference's answer depends on Go's random map order, it is run a few times and
must give tidings' answer in one of them (reference_says)."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Process, Server, start_configured, tidings_command
from tests.harness.rawnats import RawConn

from .test_accounts_config import reference_says, taken_by_both
from .test_config_file import reference, tidings

pytestmark = pytest.mark.timeout(120)

GOOD = {
    "on": "jetstream: true",
    "off": "jetstream: false",
    "enabled": "jetstream: Enabled",
    "disable": "jetstream: disable",
    "block": "jetstream {}",
    "block off": "jetstream { enabled: false }",
    "top-level store_dir": "store_dir: /tmp/x\njetstream: enabled",
    "storedir": "storedir: /tmp/x",
    "every key": """jetstream {
  store_dir: "/tmp/js"
  max_memory_store: 1G
  max_file_store: "2G"
  sync_interval: "30s"
  strict: false
  domain: hub
  unique_tag: az
  limits { max_ack_pending: 10, max_request_batch: 5, duplicate_window: "2m",
           batch { max_inflight_per_stream: 1, max_inflight_total: 2, max_msgs: 3,
                   timeout: "1s" } }
  max_buffered_size: 1M
  max_buffered_msgs: 10
  request_queue_limit: 5
  info_queue_limit: 6
  max_concurrent_io: 8
}""",
    "aliases": 'jetstream { store: /tmp/a, max_mem: 1K, max_file: "3K", sync: always }',
    "empty size": 'jetstream { max_mem: "" }',
    "variables": "jetstream { D: /tmp/d, store_dir: $D }",
}


@pytest.mark.parametrize("text", GOOD.values(), ids=GOOD.keys())
def test_good_files_are_taken_by_both(tmp_path: Path, text: str) -> None:
    taken_by_both(tmp_path, text)


# (id, file, where both place the error ("" for nowhere), the message)
BAD = [
    ("bad word", "jetstream: maybe", "1:0",
     "Expected 'enabled' or 'disabled' for string value, got 'maybe'"),
    ("a number", "port: 4222\n   jetstream: 5", "2:4",
     "Expected map, bool or string to define JetStream, got int64"),
    ("strict a number", "jetstream { strict: 5 }", "1:12",
     "Expected 'true' or 'false' for bool value, got '%!s(int64=5)'"),
    ("strict a string", 'jetstream { strict: "yes" }', "1:12",
     "Expected 'true' or 'false' for bool value, got 'yes'"),
    ("sync unit", 'jetstream { sync_interval: "5x" }', "1:12",
     'error parsing sync_interval: time: unknown unit "x" in duration "5x"'),
    ("sync no unit", 'jetstream {\n  sync: "5"\n}', "2:3",
     'error parsing sync: time: missing unit in duration "5"'),
    ("max_mem suffix", 'jetstream { max_mem: "1X" }', "1:12",
     "max_mem_store sizes defined as strings must end in K, M, G, T"),
    ("max_mem lower case", 'jetstream { max_mem_store: "1k" }', "1:12",
     "max_mem_store sizes defined as strings must end in K, M, G, T"),
    ("max_file digits", 'jetstream { max_file_store: "xG" }', "1:12",
     'max_file_store strconv.ParseInt: parsing "x": invalid syntax'),
    ("max_file a boolean", "jetstream { max_file: true }", "1:12",
     "max_file_store must be int64 or string"),
    ("max_buffered_size", 'jetstream { max_buffered_size: "1z" }', "1:12",
     "max_buffered_size sizes defined as strings must end in K, M, G, T"),
    ("max_buffered_msgs", 'jetstream { max_buffered_msgs: "x" }', "1:12",
     'Expected a parseable size for "max_buffered_msgs", got x'),
    ("info_queue_limit", "jetstream { info_queue_limit: true }", "1:12",
     'Expected a parseable size for "info_queue_limit", got true'),
    ("max_concurrent_io", "jetstream { max_concurrent_io: 9000 }", "1:12",
     'Expected an absolute size for "max_concurrent_io" between 4 and 8192, got 9000'),
    ("unknown key", "jetstream { foo: 1 }", "1:12", 'unknown field "foo"'),
    ("limits not a map", "jetstream { limits: 5 }", "1:12",
     "Expected a map to define JetStreamLimits, got int64"),
    ("unknown limit", "jetstream { limits: { foo: 1 } }", "1:22", 'unknown field "foo"'),
    ("batch not a map", "jetstream { limits: { batch: [] } }", "1:22",
     "Expected a map to define batch limits, got []interface {}"),
    ("unknown batch key", "jetstream { limits: { batch: { foo: 1 } } }", "1:31",
     'unknown field "foo"'),
    ("duplicate window", 'jetstream { limits: { duplicate_window: "x" } }', "",
     'time: invalid duration "x"'),
    ("batch timeout", 'jetstream { limits: { batch: { timeout: "1" } } }', "",
     'time: missing unit in duration "1"'),
    ("domain a number", "port: 4222\n  jetstream {\n  domain: 5 }", "2:3",
     "interface conversion: interface {} is int64, not string"),
    ("store_dir a number", "jetstream { store_dir: 5 }", "1:0",
     "interface conversion: interface {} is int64, not string"),
    ("enabled a string", 'jetstream { enabled: "x" }', "1:0",
     "interface conversion: interface {} is string, not bool"),
    ("max_ack_pending a string", "jetstream { limits: { max_ack_pending: x } }", "1:0",
     "interface conversion: interface {} is string, not int64"),
    ("top-level store_dir a number", "port: 4222\nstore_dir: 5", "2:1",
     "interface conversion: interface {} is int64, not string"),
    ("store_dir twice", "store_dir: /a\njetstream { store_dir: /b }", "2:13",
     "Duplicate 'store_dir' configuration"),
    ("store_dir twice, the block first", "jetstream { store_dir: /b }\nstore_dir: /a", "2:1",
     "Duplicate 'store_dir' configuration"),
]


@pytest.mark.parametrize(("text", "where", "message"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_files_are_refused_by_both_alike(tmp_path: Path, text: str, where: str,
                                             message: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(text + "\n")
    line = f"{conf}:{where}: {message}" if where else message
    assert reference_says(conf, line, "-t"), reference("-t", "-c", str(conf)).stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(line), ours.stderr
    assert "Traceback" not in ours.stderr


@pytest.mark.parametrize(("text", "where"), [
    ("store_dir: /tmp/a", "1:0"), ("port: 4222\njetstream {\n  store: /tmp/a\n}", "3:3"),
])
def test_sd_with_a_file_that_sets_store_dir_is_refused_by_both(tmp_path: Path, text: str,
                                                               where: str) -> None:
    """The reference reads its flags before the file: the file's store_dir is a duplicate."""
    conf = tmp_path / "f.conf"
    conf.write_text(text + "\n")
    line = f"{conf}:{where}: Duplicate 'store_dir' configuration"
    ref = reference("-sd", "/tmp/b", "-t", "-c", str(conf))
    assert ref.returncode == 1 and line in ref.stderr, ref.stderr
    ours = tidings("-sd", "/tmp/b", "-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(line), ours.stderr


START = [
    ('jetstream { domain: "a.b" }', "invalid domain name: may not contain ., * or >"),
    ('jetstream { domain: "*", enabled: false }', "invalid domain name: may not contain ., * "
                                                  "or >"),
    ('jetstream { domain: "a b" }', 'invalid domain name: derived "$JS.a b.API.>" is not a '
                                    "valid subject"),
]


@pytest.mark.parametrize(("text", "message"), START)
def test_what_the_reference_checks_at_start_tidings_checks_under_t(tmp_path: Path, text: str,
                                                                  message: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"listen: 127.0.0.1:-1\nstore_dir: {tmp_path}\n{text}\n")
    assert reference("-t", "-c", str(conf)).returncode == 0
    started = reference("-c", str(conf))  # ends at once, before it listens
    assert started.returncode == 1 and message in started.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(message), ours.stderr


_ENCRYPTION = "JetStream encryption at rest"
_CLUSTERED = "clustered JetStream is not supported by tidings yet"
NOT_YET = [
    ('jetstream { key: "s3cret" }', "1:12", "key", _ENCRYPTION),
    ('jetstream { encryption_key: "s3cret" }', "1:12", "encryption_key", _ENCRYPTION),
    ('jetstream { prev_ek: "old" }', "1:12", "prev_ek", _ENCRYPTION),
    ("jetstream { cipher: aes }", "1:12", "cipher", _ENCRYPTION),
    ('jetstream {\n  tpm { keys_file: "/tmp/k" }\n}', "2:3", "tpm",
     f"{_ENCRYPTION} with a key sealed by a TPM"),
    ("jetstream { max_outstanding_catchup: 1M }", "1:12", "max_outstanding_catchup",
     _CLUSTERED),
    ("jetstream { meta_compact: 10 }", "1:12", "meta_compact", _CLUSTERED),
    ("jetstream { meta_compact_size: 1M }", "1:12", "meta_compact_size", _CLUSTERED),
    ("jetstream { meta_compact_sync: true }", "1:12", "meta_compact_sync", _CLUSTERED),
    ("jetstream { extension_hint: no_extend }", "1:12", "extension_hint", _CLUSTERED),
    ("jetstream { limits { max_ha_assets: 5 } }", "1:21", "max_ha_assets", _CLUSTERED),
    ("accounts: [A]\ndefault_js_domain: { A: hub }", "2:1", "default_js_domain",
     "(of leaf nodes) are not supported by tidings yet"),
]


@pytest.mark.parametrize(("text", "where", "key", "what"), NOT_YET,
                         ids=[n[2] for n in NOT_YET])
def test_what_tidings_does_not_build_is_refused_by_name(tmp_path: Path, text: str, where: str,
                                                        key: str, what: str) -> None:
    conf = tmp_path / "f.conf"
    conf.write_text(text + "\n")
    assert reference("-t", "-c", str(conf)).returncode == 0
    ours = tidings("-t", "-c", str(conf))
    said = ours.stderr.strip().splitlines()[-1]
    assert ours.returncode == 1 and f'{conf}:{where}: "{key}": ' in said, ours.stderr
    assert what in said and said.endswith("not supported by tidings yet"), said


# -- started ----------------------------------------------------------------------------------
REFERENCE_ONLY_INFO = {"git_commit", "xkey"}  # see test_differential.py


def started(kind: str, conf: str, args: list[str]) -> Server:
    return start_configured(kind, conf, extra_args=args, streaming=False)


def info_keys(server: Server) -> tuple[list[str], dict[str, Any]]:
    with RawConn(server.port) as conn:
        info = conn.info
    return [k for k in info if k not in REFERENCE_ONLY_INFO], info


def varz(server: Server) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['http']}/varz",
                                timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.parametrize(("conf", "args"), [
    ("", ["-js"]), ("", ["--jetstream"]), ("jetstream { domain: hub }", []),
    ("jetstream: disabled", ["--js"]),
], ids=["-js", "--jetstream", "domain", "flag over file"])
def test_info_says_jetstream_as_the_reference(tmp_path: Path, conf: str,
                                              args: list[str]) -> None:
    """INFO's keys in the reference's order: `jetstream` after max_payload, `domain` after
    the client's, `api_lvl` last; the level is tidings' (1: 2.11), the reference's its own."""
    seen = {}
    for kind in ("tidings", "reference"):
        server = started(kind, conf, [*args, "-sd", str(tmp_path / kind)])
        try:
            seen[kind] = info_keys(server)
        finally:
            server.stop()
    assert seen["tidings"][0] == seen["reference"][0]
    ours = seen["tidings"][1]
    assert ours["jetstream"] is True and ours["api_lvl"] == 1
    assert ours.get("domain") == seen["reference"][1].get("domain")


def test_off_by_flag_over_the_file(tmp_path: Path) -> None:
    """-js=false turns the file's JetStream off, on both."""
    for kind in ("tidings", "reference"):
        server = started(kind, "jetstream: enabled", ["-js=false", "-sd", str(tmp_path)])
        try:
            keys, _ = info_keys(server)
        finally:
            server.stop()
        assert "jetstream" not in keys, kind


def test_varz_jetstream_block_as_the_reference(tmp_path: Path) -> None:
    """The configuration run with, the stats of an idle server, the limits: the same keys
    and values (the API level aside); the maxima from the machine are the same machine's."""
    blocks = {}
    for kind in ("tidings", "reference"):
        server = started(kind, "", ["-js", "-sd", str(tmp_path / kind), "-m", "-1"])
        try:
            blocks[kind] = varz(server)["jetstream"]
        finally:
            server.stop()
    ours, ref = blocks["tidings"], blocks["reference"]
    assert list(ours) == ["config", "stats", "limits"]
    assert list(ours["config"]) == list(ref["config"])
    assert ours["config"]["store_dir"] == str(tmp_path / "tidings" / "jetstream")
    assert ref["config"]["store_dir"] == str(tmp_path / "reference" / "jetstream")
    for key in ("max_memory", "sync_interval", "strict"):
        assert ours["config"][key] == ref["config"][key], key
    assert ours["config"]["max_storage"] > 0
    ours["stats"]["api"]["level"] = ref["stats"]["api"]["level"]
    assert ours["stats"] == ref["stats"]


def test_varz_of_a_configured_jetstream(tmp_path: Path) -> None:
    conf = (f'jetstream {{ store_dir: "{tmp_path}", max_mem: 1G, max_file: "2G", '
            'sync: always, domain: hub, unique_tag: " AZ ", strict: false, '
            'limits { max_ack_pending: 100, duplicate_window: "1m", max_request_batch: 9 } }')
    blocks = {}
    for kind in ("tidings", "reference"):
        server = started(kind, conf, ["-m", "-1"])
        try:
            blocks[kind] = varz(server)["jetstream"]
        finally:
            server.stop()
    ours, ref = blocks["tidings"], blocks["reference"]
    assert list(ours["config"].items()) == list(ref["config"].items())
    # The reference 2.15 adds its default_max_consumers; 2.11 (which tidings says it is)
    # shows only what was configured.
    assert ours["limits"] == {k: v for k, v in ref["limits"].items()
                              if k != "default_max_consumers"}


def test_a_reload_keeps_jetstream_as_started(tmp_path: Path) -> None:
    """A reload that leaves `jetstream` as it was applies the rest (and keeps what the store
    was started with); one that changes it is refused, until JetStream can follow."""
    conf = tmp_path / "r.conf"
    store = tmp_path / "store"

    def write(js: str, payload: str) -> None:
        conf.write_text(f"listen: 127.0.0.1:-1\nmax_payload: {payload}\n"
                        f'jetstream {{ store_dir: "{store}", {js} }}\n')

    def hup_says(text: str) -> None:
        since = proc.mark()
        proc.proc.send_signal(signal.SIGHUP)
        proc.wait_for(re.escape(text), 20, since=since)

    write("max_mem: 1M", "1MB")
    proc = Process(tidings_command("server", "--no_streaming", "-c", str(conf)), kind="tidings")
    try:
        proc.wait_for("Server is ready", 20)
        port = proc.ports["client"]
        write("max_mem: 1M", "1KB")
        hup_says("Reloaded server configuration")
        with RawConn(port) as conn:
            assert (conn.info["max_payload"], conn.info["jetstream"]) == (1024, True)
        write("max_mem: 2M", "1KB")
        hup_says("config reload not supported for JetStream by tidings yet")
        write("enabled: false", "1KB")
        hup_says("config reload not supported for JetStream by tidings yet")
        with RawConn(port) as conn:
            assert conn.info["jetstream"] is True
        assert proc.stop() == 0
    finally:
        proc.kill()
