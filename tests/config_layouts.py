"""Layouts of the nats-server configuration format, as the reference's lexer reads them: the
ones it accepts (with what they mean) and the ones it refuses (with where and its words).
Every file here uses real keys with valid values, so that `nats-server -t` and
`tidings server -t` judge the layout alone (tests/unit/config, tests/integration/config)."""

from __future__ import annotations

from typing import Any

WS = {"websocket": {"port": 8999, "no_tls": True}}

# (id, text, what it reads as)
ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    ("brace-on-next-line", "websocket\n{\n  port: 8999\n  no_tls: true\n}\n", WS),
    ("brace-after-blank-lines", "websocket\n\n\n{ port: 8999, no_tls: true }\n", WS),
    ("authorization-brace-on-next-line", "authorization\n{\n  user: a\n  password: b\n}\n",
     {"authorization": {"user": "a", "password": "b"}}),
    ("nested-brace-on-next-line",
     "authorization {\n  users = [\n    {user: a, password: b, permissions\n"
     "      { publish: foo }\n    }\n  ]\n}\n",
     {"authorization": {"users": [{"user": "a", "password": "b",
                                   "permissions": {"publish": "foo"}}]}}),
    ("value-on-next-line", "server_name\nnats-1\nport\n\n4333\n",
     {"server_name": "nats-1", "port": 4333}),
    ("separator-on-next-line", "port\n: 4333\nserver_name\n  = nats-1\n",
     {"port": 4333, "server_name": "nats-1"}),
    ("separators", "port = 4333\nserver_name:nats-1\nmax_payload 1MB\nmax_pending\t2MB\n"
     "debug=true\n",
     {"port": 4333, "server_name": "nats-1", "max_payload": 1 << 20,
      "max_pending": 2 << 20, "debug": True}),
    ("map-value-on-next-line", "cluster {\n  name:\n    c1\n  port\n    6222\n}\n",
     {"cluster": {"name": "c1", "port": 6222}}),
    ("comments-between", "# top\nport: 4333 # after a value\n// a line\n"
     "cluster { # after a brace\n  port: 6222 // after a value\n  # a line\n  name: c1\n}\n",
     {"port": 4333, "cluster": {"port": 6222, "name": "c1"}}),
    ("array-across-lines",
     "cluster {\n  port: 6222\n  routes: [\n    nats://a:6222, # one\n    nats://b:6222\n"
     "    // two\n    nats://c:6222,\n  ]\n}\n",
     {"cluster": {"port": 6222,
                  "routes": ["nats://a:6222", "nats://b:6222", "nats://c:6222"]}}),
    ("array-trailing-comma", "cluster { port: 6222, routes: [nats://a:6222, nats://b:6222,] }",
     {"cluster": {"port": 6222, "routes": ["nats://a:6222", "nats://b:6222"]}}),
    ("commas-and-semicolons", "port: 4333, server_name: a; max_payload: 1k;\n"
     "cluster { port: 6222; name: c1, }\n",
     {"port": 4333, "server_name": "a", "max_payload": 1000,
      "cluster": {"port": 6222, "name": "c1"}}),
    ("map-then-separator-then-key", "cluster { port: 6222 }, server_name: a\n"
     "websocket { port: 8999, no_tls: true }; port: 4333\n",
     {"cluster": {"port": 6222}, "server_name": "a", **WS, "port": 4333}),
    ("map-then-comment", "cluster { port: 6222 } # routes: [ ]\nserver_name: a\n",
     {"cluster": {"port": 6222}, "server_name": "a"}),
    ("json", '{\n  "port": 4333,\n  "server_name": "a",\n  "cluster": {"port": 6222}\n}\n',
     {"port": 4333, "server_name": "a", "cluster": {"port": 6222}}),
    ("quoted-keys", "\"server_name\": a\n'port' 4333\n", {"server_name": "a", "port": 4333}),
    ("multi-line-strings", "server_name: \"a\nb\"\nauthorization { user: 'c\nd', password: e }\n",
     {"server_name": "a\nb", "authorization": {"user": "c\nd", "password": "e"}}),
    ("escapes", 'server_name: "a\\tb\\x41\\"" \nauthorization { user: u\\x42, password: p }\n',
     {"server_name": 'a\tbA"', "authorization": {"user": "uB", "password": "p"}}),
    ("strings-that-start-with-digits", "server_name: 1k2\nauthorization { user: 5e7bcd, "
     "password: 2x }\n",
     {"server_name": "1k2", "authorization": {"user": "5e7bcd", "password": "2x"}}),
    ("unquoted-bcrypt-hash",
     "authorization {\n  user: a\n"
     "  password: $2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG\n}\n",
     {"authorization": {"user": "a", "password":
                        "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG"}}),
    ("variables", "NAME: nats-1\nserver_name: $NAME\ncluster { N = c1, name = $N, port: 6222 }\n",
     {"NAME": "nats-1", "server_name": "nats-1", "cluster": {"N": "c1", "name": "c1",
                                                            "port": 6222}}),
]

# (id, text, "LINE:COL: the reference's words")
REFUSED: list[tuple[str, str, str]] = [
    ("map-then-key-on-one-line", "cluster { port: 6222 } routes: [nats://a:1]\n",
     "1:24: Expected a top-level value to end with a new line, comment or EOF, but got 'r' "
     "instead."),
    ("value-then-key-on-one-line", "port 4333 server_name: a\n",
     "1:11: Expected a top-level value to end with a new line, comment or EOF, but got 's' "
     "instead."),
    ("map-items-without-separator", "cluster { port: 6222 name: a }\n",
     '1:22: Expected a map value terminator "," or a map terminator "}", but got \'n\' '
     "instead."),
    ("array-values-without-separator", "cluster {\n  port: 6222\n"
     "  routes: [nats://a:1 nats://b:2]\n}\n",
     '3:24: Expected an array value terminator "," or an array terminator "]", but got '
     "'n' instead."),
    ("array-leading-comma", "cluster { port: 6222, routes: [, nats://a:1] }\n",
     "1:32: Unexpected array value terminator ','."),
    ("array-double-comma", "cluster { port: 6222, routes: [nats://a:1,, nats://b:2] }\n",
     "1:43: Unexpected array value terminator ','."),
    ("array-semicolon", "cluster { port: 6222, routes: [nats://a:1; nats://b:2] }\n",
     '1:42: Expected an array value terminator "," or an array terminator "]", but got '
     "';' instead."),
    ("map-leading-comma", "cluster { port: , name: a }\n",
     '1:17: Unexpected map value terminator ",".'),
    ("top-value-on-next-line-after-separator", "port:\n4333\n",
     "2:1: Expected value but found new line"),
    ("comment-between-key-and-brace", "websocket # ws\n{ port: 8999, no_tls: true }\n",
     "1:13: Expected a top-level value to end with a new line, comment or EOF, but got 'w' "
     "instead."),
    ("key-without-value", "port: 4333\nserver_name", "2:12: config is invalid"),
    ("number-then-bracket", "cluster { port: 6222, routes: [1] }\n",
     '1:35: Expected an array value terminator "," or an array terminator "]", but got '
     "'}' instead."),
    ("quote-inside-unquoted-string", "server_name: a'b'\n",
     "1:16: Expected a top-level value to end with a new line, comment or EOF, but got 'b' "
     "instead."),
    ("unknown-escape", 'server_name: "a\\u0041"\n',
     "1:17: Invalid escape character 'u'. Only the following escape characters are allowed: "
     '\\xXX, \\t, \\n, \\r, \\", \\\\.'),
    ("indented-block-end", "server_name: (\nabc\n  )\n", "4:1: Unexpected EOF processing block."),
    ("unclosed-map", "cluster {\n  port: 6222\n", "3:1: Unexpected EOF processing map."),
    ("key-separator-first", "= 4333\n", "1:1: Unexpected key separator '='"),
]
