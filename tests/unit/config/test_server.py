"""The core's keys (tidings.config.server and the blocks it reads with auth.py, tls.py and
websocket.py): every error of a configuration file names the file, line and column of the
key it is about, in whichever block."""

from __future__ import annotations

import pytest

from tidings.config import ConfigError, parse
from tidings.config.server import ServerOptions, apply_server_config

ERRORS = [
    ("port: 4222\nbogus: 1\n", 'f.conf:2:1: unknown field "bogus"'),
    ("port: 4222\njetstream: {}\n", 'f.conf:2:1: "jetstream": JetStream is not supported'),
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
