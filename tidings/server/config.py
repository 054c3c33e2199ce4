"""The core server's part of a nats-server configuration file: its keys, by the reference's
names, onto ServerOptions. (The file format itself is tidings.config's.)

A key the reference does not know is refused as it refuses it (`unknown field "x"`); a key
the reference has and tidings does not (jetstream, leafnodes, tls, ...) is refused with a
message that names it, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import ConfigError, Section, load, parse_duration, parse_size
from .auth_config import parse_authorization
from .auth_options import AuthOptions
from .options import ServerOptions, check
from .websocket_config import handle_websocket

# Keys of the reference that tidings does not have, and why.
UNSUPPORTED = {
    "jetstream": "JetStream is not supported (tidings has NATS Streaming)",
    "leafnodes": "leaf nodes are not supported",
    "leaf": "leaf nodes are not supported",
    "gateway": "gateways are not supported",
    "accounts": "accounts are not supported (tidings has the global account only)",
    "system_account": "accounts are not supported (tidings has the global account only)",
    "no_system_account": "accounts are not supported (tidings has the global account only)",
    "operator": "operator mode (JWT) is not supported",
    "operators": "operator mode (JWT) is not supported",
    "resolver": "operator mode (JWT) is not supported",
    "resolver_preload": "operator mode (JWT) is not supported",
    "trusted": "operator mode (JWT) is not supported",
    "trusted_keys": "operator mode (JWT) is not supported",
    "mqtt": "MQTT is not supported",
    "mappings": "subject mappings are not supported",
    "syslog": "logging to syslog is not supported",
    "remote_syslog": "logging to syslog is not supported",
    "ocsp": "OCSP stapling is not supported",
    "nkeys": "top-level nkeys are not supported: use authorization { users = [{nkey: ...}] }",
}


def load_server_config(path: str) -> tuple[ServerOptions, Section]:
    """ServerOptions from a configuration file, and the file's top level (for the other
    parts: `streaming {}`). ConfigError (a ValueError) says where a key is wrong."""
    conf = load(path)
    options = apply_server_config(ServerOptions(), conf)
    check(options)
    return options, conf


def apply_server_config(base: ServerOptions, conf: Section) -> ServerOptions:
    """`base` with the core keys of `conf` applied."""
    changes: dict[str, Any] = {}
    for key, value in conf.items():
        name = key.lower()
        if name in UNSUPPORTED:
            raise ConfigError(f'{conf.where(key)}: "{key}": {UNSUPPORTED[name]}')
        handler = _KEYS.get(name)
        if handler is None:
            if key in conf.variables:
                continue  # defined to be used as $key, as the reference allows
            raise ConfigError(f'{conf.where(key)}: unknown field "{key}"')
        try:
            handler(changes, value)
        except ConfigError:
            raise  # from a nested map: it says where already
        except (TypeError, ValueError) as exc:
            raise ConfigError(f'{conf.where(key)}: "{key}": {exc}') from None
    if changes.get("tls") is not None and "auth_timeout" not in changes:
        # As the reference: with TLS the default auth timeout is the TLS timeout and 1 s.
        changes["auth_timeout"] = changes["tls"].timeout + 1.0
    return replace(base, **changes)


# -- the keys ------------------------------------------------------------------------------
Handler = Callable[[dict[str, Any], Any], None]


def _to(field: str, convert: Callable[[Any], Any]) -> Handler:
    def handle(changes: dict[str, Any], value: Any) -> None:
        changes[field] = convert(value)

    return handle


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _size(value: Any) -> int:
    return parse_size(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected a boolean, got {value!r}")
    return value


def _port(value: Any) -> int:
    port = _int(value)
    if not -1 <= port <= 65535:
        raise ValueError(f"port {port} out of range 0-65535")
    return max(port, 0)


def _host_port(text: Any) -> tuple[str, int]:
    text = str(text)
    host, sep, port = text.rpartition(":")
    if not sep or not port.lstrip("-").isdigit():
        raise ValueError(f"could not parse address string {text!r}")
    return host or "0.0.0.0", _port(int(port))


def _listen(changes: dict[str, Any], value: Any) -> None:
    changes["host"], changes["port"] = _host_port(value)


def _http(changes: dict[str, Any], value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        changes["http_port"] = _port(value)
    else:
        _, changes["http_port"] = _host_port(value)


def _https(changes: dict[str, Any], value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        changes["https_port"] = _port(value)
    else:
        _, changes["https_port"] = _host_port(value)


def _tls(changes: dict[str, Any], value: Any) -> None:
    from .tls import parse_tls_block

    changes["tls"] = parse_tls_block(value)


def _nested(section: Any, key: str, message: str) -> ConfigError:
    where = section.where(key) if isinstance(section, Section) else "?"
    return ConfigError(f"{where}: {message}")


def _authorization(changes: dict[str, Any], value: Any) -> None:
    parse_authorization(value, changes, changes.setdefault("auth", AuthOptions()))


def _no_auth_user(changes: dict[str, Any], value: Any) -> None:
    changes.setdefault("auth", AuthOptions()).no_auth_user = _str(value)


def _cluster(changes: dict[str, Any], value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError("expected a map")
    host, port, user, password = "0.0.0.0", None, "", ""
    for key, item in value.items():
        name = key.lower()
        if name == "listen":
            host, port = _host_port(item)
        elif name in ("host", "net"):
            host = _str(item)
        elif name == "port":
            port = _port(item)
        elif name == "name":
            changes["cluster_name"] = _str(item)
        elif name == "routes":
            items = item if isinstance(item, list) else [item]
            changes["routes"] = [_str(r) for r in items]
        elif name == "no_advertise":
            changes["no_advertise"] = _bool(item)
        elif name in ("cluster_advertise", "advertise"):
            changes["cluster_advertise"] = _str(item)
        elif name == "authorization":
            route_auth, listed = {}, AuthOptions()
            parse_authorization(item, route_auth, listed)
            if listed.users:
                raise _nested(value, key, "Cluster authorization does not allow multiple users")
            if route_auth.get("token"):
                raise _nested(value, key, "Cluster authorization does not support tokens")
            user, password = route_auth.get("user", ""), route_auth.get("password", "")
        elif name == "tls":
            from .tls import parse_tls_block

            changes["cluster_tls"] = parse_tls_block(item)
        elif name in ("compression", "pool_size", "accounts", "pinned_accounts",
                      "permissions", "connect_retries", "connect_backoff"):
            raise _nested(value, key, f'"{key}" in cluster is not supported by tidings')
        else:
            raise _nested(value, key, f'unknown field "{key}"')
    if port is None:
        raise ValueError("a listen address or port is required")
    credentials = f"{user}:{password}@" if user else ""
    changes["cluster"] = f"nats://{credentials}{host}:{port}"


_KEYS: dict[str, Handler] = {
    "listen": _listen,
    "host": _to("host", _str),
    "net": _to("host", _str),
    "port": _to("port", _port),
    "server_name": _to("name", _str),
    "client_advertise": _to("client_advertise", _str),
    "http": _http,
    "http_port": _to("http_port", _port),
    "https": _https,
    "https_port": _to("https_port", _port),
    "tls": _tls,
    "allow_non_tls": _to("allow_non_tls", _bool),
    "monitor_port": _to("http_port", _port),
    "max_payload": _to("max_payload", _size),
    "max_control_line": _to("max_control_line", _size),
    "max_pending": _to("max_pending", _size),
    "max_connections": _to("max_connections", _int),
    "max_conn": _to("max_connections", _int),
    "ping_interval": _to("ping_interval", parse_duration),
    "ping_max": _to("ping_max", _int),
    "write_deadline": _to("write_deadline", parse_duration),
    "lame_duck_duration": _to("lame_duck_duration", parse_duration),
    "lame_duck_grace_period": _to("lame_duck_grace_period", parse_duration),
    "authorization": _authorization,
    "no_auth_user": _no_auth_user,
    "cluster": _cluster,
    "debug": _to("debug", _bool),
    "trace": _to("trace", _bool),
    "logtime": _to("logtime", _bool),
    "log_file": _to("log_file", _str),
    "logfile_size_limit": _to("log_size_limit", _size),
    "log_size_limit": _to("log_size_limit", _size),
    "pid_file": _to("pid_file", _str),
    # The streaming server's block is read by the streaming options (streaming/server).
    "streaming": lambda changes, value: None,
    "websocket": handle_websocket,
    "ws": handle_websocket,
}
