"""The `websocket { }` block onto WebSocketOptions, the reference's validation of it, and the
close frame a WebSocket client gets for each reason it is closed (no sockets here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tidings.config import ConfigError, parse
from tidings.config.server import ServerOptions, apply_server_config
from tidings.config.websocket import WebSocketOptions, check_websocket, parse_websocket
from tidings.server.websocket import close_frame_for


def options(text: str) -> ServerOptions:
    return apply_server_config(ServerOptions(), parse(text, "t.conf"))


def test_every_key_and_its_aliases() -> None:
    opts = options(
        'ws { listen: "127.0.0.1:8080", advertise: "ws.example:443", no_tls: true,\n'
        '  compress: true, same_origin: true, origins: ["http://a.example"],\n'
        '  handshake_timeout: "500ms", no_auth_user: bob,\n'
        "  authentication { username: u, pass: p, token: t, timeout: 3 } }\n")
    assert opts.websocket == WebSocketOptions(
        host="127.0.0.1", port=8080, advertise="ws.example:443", no_tls=True,
        compression=True, same_origin=True, allowed_origins=["http://a.example"],
        handshake_timeout=0.5, user="u", password="p", token="t", auth_timeout=3.0,
        no_auth_user="bob")


def test_port_zero_leaves_websocket_off_and_minus_one_picks_a_port() -> None:
    assert options("websocket { no_tls: true }").websocket is None
    assert options("websocket { port: 0, no_tls: true }").websocket is None
    ws = options("websocket { port: -1, no_tls: true, allowed_origins: http://x.example }")
    assert ws.websocket is not None and ws.websocket.port == -1
    assert ws.websocket.allowed_origins == ["http://x.example"]
    assert ws.websocket.handshake_timeout == WebSocketOptions().handshake_timeout


def test_handshake_timeout_is_seconds_or_a_duration() -> None:
    assert parse_websocket({"port": 1, "handshake_timeout": 5}).handshake_timeout == 5.0
    with pytest.raises(ConfigError, match='time: invalid duration "abc"'):
        options('websocket { port: 1, handshake_timeout: "abc" }')
    with pytest.raises(ConfigError, match="unsupported type bool"):
        options("websocket { port: 1, handshake_timeout: true }")


@pytest.mark.parametrize(("text", "error"), [
    ("websocket: 5", "Expected websocket to be a map, got int64"),
    ("websocket { port: 1, bogus: 1 }", 't.conf:1:[0-9]+: unknown field "bogus"'),
    ("websocket { port: 1, authorization { user: a, foo: 1 } }", 'unknown field "foo"'),
    ("websocket { port: 1, jwt_cookie: jwt }", '"jwt_cookie" in websocket is not supported'),
    ('websocket { listen: "127.0.0.1:abc" }', 'could not parse port'),
])
def test_refused_blocks(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        options(text)


@pytest.mark.parametrize(("ws", "error"), [
    (WebSocketOptions(port=1), "websocket requires TLS configuration"),
    (WebSocketOptions(port=1, no_tls=True, allowed_origins=["foo"]),
     'unable to parse allowed origin: parse "foo": invalid URI for request'),
    (WebSocketOptions(port=1, no_tls=True, allowed_origins=["ftp://a.example"]),
     "allowed origins must be absolute URLs with http or https scheme"),
    (WebSocketOptions(port=1, no_tls=True, allowed_origins=["https://"]),
     'unable to parse allowed origin "https://": host is required'),
    (WebSocketOptions(port=1, no_tls=True, allowed_origins=["http://a.example:x1"]),
     'invalid port ":x1" after host'),
])
def test_validation_as_the_reference(ws: WebSocketOptions, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        check_websocket(replace(ServerOptions(), websocket=ws))


def test_valid_origins_pass() -> None:
    ws = WebSocketOptions(port=1, no_tls=True,
                          allowed_origins=["http://a.example", "https://b.example:8443",
                                           "http://[::1]:80"])
    check_websocket(replace(ServerOptions(), websocket=ws))


@pytest.mark.parametrize(("reason", "frame"), [
    ("Client Closed", (1000, b"Client Closed")),
    ("Slow Consumer (Pending Bytes)", (1008, b"Slow Consumer (Pending Bytes)")),
    ("Authentication Timeout", (1008, b"Authentication Timeout")),
    ("Parse Error", (1002, b"Parse Error")),
    ("Maximum Payload Exceeded", (1009, b"Maximum Message Payload Exceeded")),
    ("Stale Connection", (1001, b"Stale Connection")),
    ("Server Shutdown", (1001, b"Server Shutdown")),
    ("Something Else", (1011, b"Something Else")),
])
def test_close_frame_for_each_reason(reason: str, frame: tuple[int, bytes]) -> None:
    assert close_frame_for(reason) == frame


def test_a_long_reason_fits_a_control_frame() -> None:
    status, body = close_frame_for("x" * 300)
    assert status == 1011 and len(body) <= 123 and body.endswith(b"...")
