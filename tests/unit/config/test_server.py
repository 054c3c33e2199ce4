"""The core's keys (tidings.config.server and the blocks it reads with auth.py, tls.py and
websocket.py): every error of a configuration file names the file, line and column of the
key it is about, in whichever block."""

from __future__ import annotations

import argparse

import pytest

from tidings.config import ConfigError, parse
from tidings.config.flags import add_server_arguments, options_from_args
from tidings.config.server import ServerOptions, apply_server_config

ERRORS = [
    ("port: 4222\nbogus: 1\n", 'f.conf:2:1: unknown field "bogus"'),
    ("port: 4222\ngateway: {}\n", 'f.conf:2:1: "gateway": gateways are not supported'),
    ("max_payload: 1x\n", "f.conf:1:0: \"max_payload\": expected a size, got '1x'"),
    ("ping_interval: true\n", 'f.conf:1:0: "ping_interval": expected a duration, got True'),
    ("port: 70000\n", 'f.conf:1:0: "port": port 70000 out of range 0-65535'),
    ("cluster {\n  listen: 127.0.0.1:6222\n  bogus: 1\n}\n", 'f.conf:3:3: unknown field "bogus"'),
    ("cluster {\n  listen: 127.0.0.1:6222\n  pool_size: 3\n}\n",
     'f.conf:3:3: "pool_size" in cluster is not supported by tidings'),
    ("cluster {\n  port: 6222\n  authorization { user: a, token: t }\n}\n",
     "f.conf:3:19: Cannot have a user/pass and token"),
    ("cluster {\n  port: 6222\n  tls {\n    verify: 1\n  }\n}\n",
     "f.conf:4:5: error parsing tls config, expected 'verify' to be a boolean"),
    ("authorization {\n  users = [\n    {user: a, password: b, bogus: 1}\n  ]\n}\n",
     'f.conf:3:28: unknown field "bogus"'),
    ('authorization {\n  users = [\n    {user: a, permissions: {publish: {allow: ["a..b"]}}}\n'
     "  ]\n}\n", 'f.conf:3:39: subject "a..b" is not a valid subject'),
    ("authorization {\n  user: a\n  token: t\n}\n", "f.conf:2:3: Cannot have a user/pass and token"),
    ("authorization {\n  timeout: soon\n}\n",
     "f.conf:1:0: \"authorization\": invalid duration 'soon'"),
    ("websocket {\n  port: 8080\n  no_tls: true\n  bogus: 1\n}\n",
     'f.conf:4:3: unknown field "bogus"'),
    ("websocket {\n  port: 8080\n  handshake_timeout: true\n}\n",
     "f.conf:3:3: error parsing handshake timeout: unsupported type bool"),
    ("tls {\n  cert_file: a\n  bogus: 1\n}\n", 'f.conf:3:3: unknown field "bogus"'),
    # The reference's words, Python's type names.
    ('server_tags: [1, "a"]\n', 'f.conf:1:0: "server_tags": error parsing tags: unsupported '
     "type int where string is expected"),
    ("server_tags: true\n", 'f.conf:1:0: "server_tags": error parsing tags: unsupported type '
     "bool"),
    ("ports_file_dir: 1\n", 'f.conf:1:0: "ports_file_dir": expected a string, got 1'),
]


@pytest.mark.parametrize(("text", "error"), ERRORS)
def test_errors_say_where(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        apply_server_config(ServerOptions(), parse(text, "f.conf"))
    assert str(exc.value).startswith(error)


def test_the_keys_onto_the_options() -> None:
    text = ("listen: 127.0.0.1:4333\nmax_payload: 1MB\nmax_pending: 64k\nping_interval: \"2m\"\n"
            "debug: yes\nhttp: 8222\ncluster {\n  listen: 127.0.0.1:6222\n  name: C\n"
            '  authorization { user: "r u", password: "p@ss" }\n  routes: [nats://h:6222]\n}\n')
    options = apply_server_config(ServerOptions(), parse(text, "f.conf"))
    assert (options.host, options.port, options.max_payload, options.max_pending) == (
        "127.0.0.1", 4333, 1 << 20, 64_000)
    assert (options.ping_interval, options.debug, options.http_port) == (120.0, True, 8222)
    assert options.cluster == "nats://r%20u:p%40ss@127.0.0.1:6222"
    assert (options.cluster_name, options.routes) == ("C", ["nats://h:6222"])


@pytest.mark.parametrize(("text", "host", "port"), [
    ('http: "127.0.0.1:-1"\n', "127.0.0.1", -1),
    ("http: -1\n", "", -1),
    ("http_port: -1\n", "", -1),
    ("monitor_port: -1\n", "", -1),
    ("http: 8222\n", "", 8222),
])
def test_a_monitor_port_of_minus_one_is_any_free_port(text: str, host: str, port: int) -> None:
    """-1 stays -1 (on, any free port): 0 would be monitoring off."""
    options = apply_server_config(ServerOptions(), parse(text, "f.conf"))
    assert (options.http_host, options.http_port) == (host, port)
    if text.startswith("http"):
        secure = parse(text.replace("http", "https"), "f.conf")
        assert apply_server_config(ServerOptions(), secure).https_port == port


def test_ports_file_dir_and_server_tags() -> None:
    text = 'ports_file_dir: "/tmp/p"\nserver_tags: ["A", " b ", "", "a", "C"]\n'
    options = apply_server_config(ServerOptions(), parse(text, "f.conf"))
    assert (options.ports_file_dir, options.tags) == ("/tmp/p", ["a", "b", "c"])
    one = apply_server_config(ServerOptions(), parse('server_tags: "Solo"\n', "f.conf"))
    assert one.tags == ["solo"]


def test_the_flags_of_the_ports_file_and_a_random_monitor_port() -> None:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    options = options_from_args(parser.parse_args(["-m", "-1", "--ports_file_dir", "/tmp/p"]))
    assert (options.http_port, options.ports_file_dir) == (-1, "/tmp/p")
    assert parser.parse_args(["-ms", "-1"]).https_port == -1
