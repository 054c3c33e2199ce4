"""The core server's part of a nats-server configuration file: its keys, by the reference's
names, onto ServerOptions. (The file format itself is tidings.config's.)

A key the reference does not know is refused as it refuses it (`unknown field "x"`); a key
the reference has and tidings does not (jetstream, leafnodes, ...) is refused with a
message that names it, never ignored. Every alias the reference has is taken (`net` for
`host`, `monitor_port` for `http_port`, `max_conn`, `logfile`, `pidfile`, `ws`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import ConfigError, Section, load
from ..config.auth import AuthOptions, parse_authorization
from ..config.tls import parse_tls_block
from ..config.units import file_bool, file_duration, file_port, file_size
from ..config.websocket import handle_websocket
from .options import ServerOptions, check

_JWT = "operator mode (JWT) is not supported"
_ACCOUNTS = "accounts are not supported (tidings has the global account only)"
_JETSTREAM = "JetStream is not supported (tidings has NATS Streaming)"
_SYSLOG = "logging to syslog is not supported"
_TRACE = "tracing options other than trace are not supported"

# Keys of the reference that tidings does not have, and why: every other key of its
# processConfigFileLine, aliases included, so that none is called unknown.
UNSUPPORTED = {
    "jetstream": _JETSTREAM,
    "store_dir": _JETSTREAM,
    "storedir": _JETSTREAM,
    "default_js_domain": _JETSTREAM,
    "leafnodes": "leaf nodes are not supported",
    "leaf": "leaf nodes are not supported",
    "gateway": "gateways are not supported",
    "accounts": _ACCOUNTS,
    "system_account": _ACCOUNTS,
    "system": _ACCOUNTS,
    "no_system_account": _ACCOUNTS,
    "no_system": _ACCOUNTS,
    "no_sys_acc": _ACCOUNTS,
    **dict.fromkeys(("operator", "operators", "roots", "root", "root_operators",
                     "root_operator", "resolver", "account_resolver", "accounts_resolver",
                     "resolver_tls", "resolver_preload", "resolver_pinned_accounts",
                     "trusted", "trusted_keys", "default_sentinel"), _JWT),
    "mqtt": "MQTT is not supported",
    "mappings": "subject mappings are not supported",
    "maps": "subject mappings are not supported",
    "syslog": _SYSLOG,
    "remote_syslog": _SYSLOG,
    "ocsp": "OCSP stapling is not supported",
    "ocsp_cache": "OCSP stapling is not supported",
    "nkeys": "top-level nkeys are not supported: use authorization { users = [{nkey: ...}] }",
    "trace_verbose": _TRACE,
    "trace_headers": _TRACE,
    "max_traced_msg_len": _TRACE,
    "logtime_utc": "log times in UTC are not supported",
    "logfile_max_num": "keeping a number of rotated log files is not supported",
    "log_max_num": "keeping a number of rotated log files is not supported",
    "disable_sublist_cache": "turning the subscription cache off is not supported",
    "no_sublist_cache": "turning the subscription cache off is not supported",
    "http_base_path": "a base path for the monitoring endpoints is not supported",
    "ports_file_dir": "a ports file is not supported",
    "prof_port": "the Go profiler is not supported",
    "prof_block_rate": "the Go profiler is not supported",
    "proxy_protocol": "the PROXY protocol is not supported",
    "proxies": "trusted proxies are not supported",
    "max_subscriptions": "a limit of subscriptions per connection is not supported",
    "max_subs": "a limit of subscriptions per connection is not supported",
    "max_sub_tokens": "a limit of subject tokens is not supported",
    "max_subscription_tokens": "a limit of subject tokens is not supported",
    "write_timeout": "write timeout policies are not supported (write_deadline is)",
    "no_header_support": "turning headers off is not supported",
    "connect_error_reports": "connect error report intervals are not supported",
    "reconnect_error_reports": "connect error report intervals are not supported",
    "server_tags": "server tags are not supported",
    "server_metadata": "server metadata is not supported",
    "feature_flags": "feature flags are not supported",
    "no_fast_producer_stall": "fast producer stalls are not supported",
    "max_closed_clients": "a limit of closed connections kept is not supported",
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


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _host_port(text: Any, default_host: str = "0.0.0.0") -> tuple[str, int]:
    text = str(text)
    host, sep, port = text.rpartition(":")
    if not sep or not port.lstrip("-").isdigit():
        raise ValueError(f"could not parse address string {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [::1]:4222
    return host or default_host, file_port(int(port))


def _listen(changes: dict[str, Any], value: Any) -> None:
    changes["host"], changes["port"] = _host_port(value)


def _monitor(port_field: str) -> Handler:
    """`http` / `https`: a port, or HOST:PORT, the address the monitor binds (as the
    reference: with no host, the client listener's)."""

    def handle(changes: dict[str, Any], value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            changes[port_field] = file_port(value)
            return
        host, changes[port_field] = _host_port(value, "")
        if host:
            changes["http_host"] = host

    return handle


def _tls(changes: dict[str, Any], value: Any) -> None:
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
            port = file_port(item)
        elif name == "name":
            changes["cluster_name"] = _str(item)
        elif name == "routes":
            items = item if isinstance(item, list) else [item]
            changes["routes"] = [_str(r) for r in items]
        elif name == "no_advertise":
            changes["no_advertise"] = file_bool(item)
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
            changes["cluster_tls"] = parse_tls_block(item)
        elif name in ("compression", "pool_size", "accounts", "pinned_accounts",
                      "permissions", "connect_retries", "connect_backoff", "ping_interval",
                      "ping_max", "write_deadline", "write_timeout"):
            raise _nested(value, key, f'"{key}" in cluster is not supported by tidings')
        elif key not in getattr(value, "variables", ()):
            raise _nested(value, key, f'unknown field "{key}"')
    if port is None:
        raise ValueError("a listen address or port is required")
    from ..cluster.cluster import RouteURL

    changes["cluster"] = RouteURL.with_credentials(user, password, f"{host}:{port}")


_KEYS: dict[str, Handler] = {
    "listen": _listen,
    "host": _to("host", _str),
    "net": _to("host", _str),
    "port": _to("port", file_port),
    "server_name": _to("name", _str),
    "client_advertise": _to("client_advertise", _str),
    "http": _monitor("http_port"),
    "http_port": _to("http_port", file_port),
    "https": _monitor("https_port"),
    "https_port": _to("https_port", file_port),
    "tls": _tls,
    "allow_non_tls": _to("allow_non_tls", file_bool),
    "monitor_port": _to("http_port", file_port),
    "max_payload": _to("max_payload", file_size),
    "max_control_line": _to("max_control_line", file_size),
    "max_pending": _to("max_pending", file_size),
    "max_connections": _to("max_connections", _int),
    "max_conn": _to("max_connections", _int),
    "ping_interval": _to("ping_interval", file_duration),
    "ping_max": _to("ping_max", _int),
    "write_deadline": _to("write_deadline", file_duration),
    "lame_duck_duration": _to("lame_duck_duration", file_duration),
    "lame_duck_grace_period": _to("lame_duck_grace_period", file_duration),
    "authorization": _authorization,
    "no_auth_user": _no_auth_user,
    "cluster": _cluster,
    "debug": _to("debug", file_bool),
    "trace": _to("trace", file_bool),
    "logtime": _to("logtime", file_bool),
    "log_file": _to("log_file", _str),
    "logfile": _to("log_file", _str),
    "logfile_size_limit": _to("log_size_limit", file_size),
    "log_size_limit": _to("log_size_limit", file_size),
    "pid_file": _to("pid_file", _str),
    "pidfile": _to("pid_file", _str),
    # The streaming server's block is read by the streaming options (streaming/server).
    "streaming": lambda changes, value: None,
    "websocket": handle_websocket,
    "ws": handle_websocket,
}
