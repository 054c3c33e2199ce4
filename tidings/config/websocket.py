"""The `websocket { }` block of a configuration file (also spelt `ws`), onto WebSocketOptions,
and the reference's validation of those options (server/websocket.go, opts.go).

Keys and their errors follow nats-server: a port of 0 (or none) leaves WebSocket off, -1
picks a free port; without `no_tls: true` the block needs `tls { }`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .auth import check_no_auth_user
from .parser import ConfigError, Section
from .tls import TLSOptions, parse_tls_block
from .units import file_duration

if TYPE_CHECKING:
    from .server import ServerOptions


@dataclass
class WebSocketOptions:
    """A `websocket { }` block, as nats-server's keys."""

    host: str = "0.0.0.0"
    port: int = 0
    advertise: str = ""
    no_tls: bool = False
    tls: TLSOptions | None = None
    compression: bool = False
    same_origin: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    handshake_timeout: float = 2.0
    # Its own `authorization { user, password, token, timeout }` and no_auth_user, which
    # take the place of the server's for WebSocket clients when set.
    user: str = ""
    password: str = ""
    token: str = ""
    auth_timeout: float = 0.0
    no_auth_user: str = ""


# Keys of the reference's block that tidings does not have.
_UNSUPPORTED = ("jwt_cookie", "user_cookie", "pass_cookie", "token_cookie", "headers",
                "ping_interval")
_ORIGIN_KEYS = ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin",
                "origins", "origin")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _where(section: Any, key: str) -> str:
    return section.where(key) if isinstance(section, Section) else "?"


def _typed(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"expected {what}, got {value!r}")
    return value


def _host_port(text: Any) -> tuple[str, int]:
    text = str(text)
    host, sep, port = text.rpartition(":")
    if not sep or not port.lstrip("-").isdigit():
        raise ValueError(f"could not parse port {port if sep else text!r}")
    return host or "0.0.0.0", int(port)


def _handshake_timeout(value: Any) -> float:
    """An integer is seconds, a string a Go duration; anything else is refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return file_duration(value)
        except ValueError:
            raise ValueError(f'time: invalid duration "{value}"') from None
    kind = {bool: "bool", float: "float64"}.get(type(value), type(value).__name__)
    raise ValueError(f"error parsing handshake timeout: unsupported type {kind}")


def _tls_block(value: Any) -> TLSOptions:
    """`tls { }`, read as the client listener's is."""
    return parse_tls_block(value)


def _authorization(ws: WebSocketOptions, value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError("expected a map")
    for key, item in value.items():
        name = key.lower()
        if name in ("user", "username"):
            ws.user = _typed(item, str, "a string")
        elif name in ("pass", "password"):
            ws.password = _typed(item, str, "a string")
        elif name == "token":
            ws.token = _typed(item, str, "a string")
        elif name == "timeout":
            # As the reference: a number of seconds; anything else is one second.
            ok = isinstance(item, int | float) and not isinstance(item, bool)
            ws.auth_timeout = float(item) if ok else 1.0
        elif key not in getattr(value, "variables", ()):
            raise ConfigError(f'{_where(value, key)}: unknown field "{key}"')


def parse_websocket(value: Any) -> WebSocketOptions | None:
    """The options of a `websocket { }` block; None when it leaves WebSocket off (port 0)."""
    if not isinstance(value, dict):
        kind = {int: "int64", str: "string", bool: "bool", list: "[]interface {}",
                float: "float64"}.get(type(value), type(value).__name__)
        raise ValueError(f"Expected websocket to be a map, got {kind}")
    ws = WebSocketOptions()
    for key, item in value.items():
        name = key.lower()
        try:
            if name == "listen":
                ws.host, ws.port = _host_port(item)
            elif name == "port":
                ws.port = _typed(item, int, "an integer")
            elif name in ("host", "net"):
                ws.host = _typed(item, str, "a string")
            elif name == "advertise":
                ws.advertise = _typed(item, str, "a string")
            elif name == "no_tls":
                ws.no_tls = _typed(item, bool, "a boolean")
            elif name == "tls":
                ws.tls = _tls_block(item)
            elif name == "same_origin":
                ws.same_origin = _typed(item, bool, "a boolean")
            elif name in _ORIGIN_KEYS:
                items = item if isinstance(item, list) else [item]
                ws.allowed_origins = [_typed(o, str, "a string") for o in items]
            elif name == "handshake_timeout":
                ws.handshake_timeout = _handshake_timeout(item)
            elif name in ("compress", "compression"):
                ws.compression = _typed(item, bool, "a boolean")
            elif name in ("authorization", "authentication"):
                _authorization(ws, item)
            elif name == "no_auth_user":
                ws.no_auth_user = _typed(item, str, "a string")
            elif name in _UNSUPPORTED:
                raise ValueError(f'"{key}" in websocket is not supported by tidings')
            elif key not in getattr(value, "variables", ()):
                raise ConfigError(f'{_where(value, key)}: unknown field "{key}"')
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{_where(value, key)}: {exc}") from None
    if ws.port == 0:
        return None
    return ws


def _origin_error(origin: str) -> str | None:
    """Why `origin` is no allowed origin, in the words of the reference (Go's url package)."""
    if not _SCHEME.match(origin) and not origin.startswith("/"):
        return f'unable to parse allowed origin: parse "{origin}": invalid URI for request'
    parts = urlsplit(origin)
    if parts.scheme.lower() not in ("http", "https"):
        return (f'unable to parse allowed origin "{origin}": allowed origins must be '
                "absolute URLs with http or https scheme")
    host = parts.netloc.rpartition("@")[2]
    if not host:
        return f'unable to parse allowed origin "{origin}": host is required'
    if not host.endswith("]") and ":" in host:
        port = host.rpartition(":")[2]
        if not port.isdigit() and port:
            return (f'unable to parse allowed origin: parse "{origin}": invalid port '
                    f'":{port}" after host')
    return None


def check_websocket(options: ServerOptions) -> None:
    """Raise ValueError as the reference's validateWebsocketOptions does."""
    ws = options.websocket
    if ws is None or ws.port == 0:
        return
    if ws.tls is None and not ws.no_tls:
        raise ValueError("websocket requires TLS configuration")
    for origin in ws.allowed_origins:
        why = _origin_error(origin)
        if why:
            raise ValueError(why)
    if ws.no_auth_user:
        check_no_auth_user(replace(options.auth, no_auth_user=ws.no_auth_user))
    if options.auth.users:
        if ws.user:
            raise ValueError("websocket authentication username not compatible with "
                             "presence of users/nkeys")
        if ws.token:
            raise ValueError("websocket authentication token not compatible with presence "
                             "of users/nkeys")
