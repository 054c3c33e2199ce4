"""The core server's options: ServerOptions (the reference nats-server's defaults), the keys
of a configuration file onto them, by the reference's names, and the checks of the whole
(`check`). The command line is config/flags.py's; the blocks of their own are auth.py's,
tls.py's and websocket.py's. (The file format itself is parser.py's.)

A key the reference does not know is refused as it refuses it (`unknown field "x"`); a key
the reference has and tidings does not (leafnodes, gateway, ...) is refused with a
message that names it, never ignored. JetStream's keys (`jetstream`, the top-level
`store_dir`) are config/jetstream.py's. Every alias the reference has is taken (`net` for
`host`, `monitor_port` for `http_port`, `max_conn`, `logfile`, `pidfile`, `ws`, ...).
A monitor port of -1 (`http: "127.0.0.1:-1"`) is any free port, as a client port of -1 is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from ..protocol.parser import MAX_CONTROL_LINE, MAX_PAYLOAD
from .auth import AuthOptions, check_no_auth_user, parse_authorization
from .parser import ConfigError, Section, load
from .units import file_bool, file_duration, file_monitor_port, file_port, file_size

# tls.py, websocket.py and accounts.py are imported where a block of theirs is read or
# checked: a server without TLS, WebSocket or accounts does not load them at start.
if TYPE_CHECKING:
    from .accounts import Mapping
    from .jetstream import JetStreamOptions
    from .operator import OperatorOptions
    from .tls import TLSOptions
    from .websocket import WebSocketOptions

# As the reference's MAX_PAYLOAD_MAX_SIZE.
MAX_PAYLOAD_LIMIT = 64 * 1024 * 1024


@dataclass
class ServerOptions:
    """What the core server runs with; the defaults are the reference nats-server's."""

    host: str = "0.0.0.0"
    port: int = 4222
    name: str = ""
    http_host: str = ""  # the monitor's address (`http: HOST:PORT`); "": the client host
    http_port: int = 0  # 0: no monitor; -1: on any free port (so is https_port)
    max_payload: int = MAX_PAYLOAD
    max_control_line: int = MAX_CONTROL_LINE
    max_connections: int = 64 * 1024
    max_pending: int = 64 * 1024 * 1024
    ping_interval: float = 120.0
    ping_max: int = 2
    auth_timeout: float = 2.0
    write_deadline: float = 10.0
    user: str = ""
    password: str = ""
    token: str = ""
    no_log: bool = False
    debug: bool = False
    trace: bool = False
    lame_duck_duration: float = 120.0  # lame duck mode: clients closed over this long
    lame_duck_grace_period: float = 10.0  # ... after waiting this long first
    logtime: bool = True
    log_file: str = ""
    log_size_limit: int = 0  # bytes; the log file is started anew past it (0: never)
    pid_file: str = ""
    # Where the ports file (`<exe>_<pid>.ports`, the URLs of every listener) is written once
    # the server is ready, as the reference's ports_file_dir; "": none.
    ports_file_dir: str = ""
    tags: list[str] = field(default_factory=list)  # server_tags (/varz tags)
    # Clustering, as nats-server's flags: the route listener URL, seed routes, the name.
    cluster: str = ""
    routes: list[str] = field(default_factory=list)
    cluster_name: str = ""
    no_advertise: bool = False
    cluster_advertise: str = ""
    client_advertise: str = ""  # host:port clients are told to use (INFO, connect_urls)
    # Security and transports (issue 12): users and permissions, TLS, WebSocket.
    auth: AuthOptions = field(default_factory=AuthOptions)
    tls: TLSOptions | None = None
    allow_non_tls: bool = False  # with tls: plain clients too, on the same port
    https_port: int = 0
    cluster_tls: TLSOptions | None = None
    operator: OperatorOptions | None = None  # operator mode (JWTs): config/operator.py
    websocket: WebSocketOptions | None = None
    # JetStream (config/jetstream.py): None when neither the file nor a flag mentions it;
    # on when `.enabled`.
    jetstream: JetStreamOptions | None = None
    # The global account's subject mappings (`mappings { }` at the top; an account's own
    # are its AccountConfig's).
    mappings: tuple[Mapping, ...] = ()

    @property
    def auth_required(self) -> bool:
        return bool(self.user or self.token or self.auth.configured
                    or (self.operator is not None and self.operator.claims))


# -- route URLs ----------------------------------------------------------------------------
class RouteURL:
    """A route URL: nats://[user:pass@]host:port (nats-route:// too). `text` holds its
    credentials: anything shown (logs, errors, monitoring) shows `redacted` or `hostport`."""

    def __init__(self, text: str) -> None:
        from ..redact import redact_url

        shown = redact_url(text)
        try:
            parts = urlsplit(text if "://" in text else "nats://" + text)
            port = parts.port
        except ValueError:
            raise ValueError(f"route URL {shown!r}: not a URL with a host and port") from None
        if parts.scheme not in ("nats", "nats-route", "route"):
            raise ValueError(f"route URL {shown!r}: unknown scheme {parts.scheme!r}")
        if not parts.hostname or port is None:
            raise ValueError(f"route URL {shown!r}: host and port required")
        self.text = text
        self.redacted = shown
        self.host = parts.hostname
        self.port = port
        # Percent-decoded, as Go's url.Parse gives them (credentials() encodes them).
        self.user = unquote(parts.username or "")
        self.password = unquote(parts.password or "")

    @property
    def hostport(self) -> str:
        return f"{self.host}:{self.port}"

    @staticmethod
    def with_credentials(user: str, password: str, hostport: str) -> str:
        """nats://user:password@hostport, any character of either percent-encoded."""
        if not user:
            return f"nats://{hostport}"
        return f"nats://{quote(user, safe='')}:{quote(password, safe='')}@{hostport}"


# -- the checks of the whole ------------------------------------------------------------------
def check(options: ServerOptions) -> None:
    """Raise ValueError for a combination of options the reference refuses."""
    if options.cluster:
        RouteURL(options.cluster)  # ValueError with the reason when unusable
    elif options.routes:
        raise ValueError("solicited routes require cluster capabilities, e.g. --cluster")
    if options.max_payload > MAX_PAYLOAD_LIMIT:
        raise ValueError(f"max_payload ({options.max_payload}) cannot exceed "
                         f"{MAX_PAYLOAD_LIMIT} bytes (64MB)")
    if options.max_payload <= 0:
        raise ValueError(f"max_payload ({options.max_payload}) must be above 0")
    if options.lame_duck_duration < 30:
        raise ValueError(f"invalid lame_duck_duration of {options.lame_duck_duration:g}s, "
                         "minimum is 30 seconds")
    check_no_auth_user(options.auth)
    operator = options.operator
    if operator is not None and operator.claims:
        from .operator import check_operator_mode

        options.auth.system_account = check_operator_mode(
            operator, options.auth.system_account, bool(options.auth.accounts),
            bool(options.auth.users))
    elif options.auth.system_account:
        from .accounts import check_system_account

        check_system_account(options.auth)
    if options.https_port and options.http_port:
        raise ValueError(f"can't specify both HTTP ({options.http_port}) and HTTPs "
                         f"({options.https_port}) ports")
    if options.https_port and options.tls is None:
        raise ValueError("Can't start monitoring: TLS cert and key required for HTTPS")
    if options.max_payload > options.max_pending:
        raise ValueError(f"max_payload ({options.max_payload}) cannot be higher than "
                         f"max_pending ({options.max_pending})")
    if options.websocket is not None:
        from .websocket import check_websocket

        check_websocket(options)
    if options.jetstream is not None:
        from .jetstream import check_jetstream

        check_jetstream(options.jetstream)


# -- not built yet --------------------------------------------------------------------------
# -- the configuration file ----------------------------------------------------------------
_JWT = "not supported by tidings in operator mode yet"
_NO_SYSTEM = "turning the system account off is not supported"
_SYSLOG = "logging to syslog is not supported"
_TRACE = "tracing options other than trace are not supported"

# Keys of the reference that tidings does not have, and why: every other key of its
# processConfigFileLine, aliases included, so that none is called unknown.
UNSUPPORTED = {
    "default_js_domain": "JetStream domains for accounts without JetStream (of leaf nodes) "
                         "are not supported by tidings yet",
    "leafnodes": "leaf nodes are not supported",
    "leaf": "leaf nodes are not supported",
    "gateway": "gateways are not supported",
    "no_system_account": _NO_SYSTEM,
    "no_system": _NO_SYSTEM,
    "no_sys_acc": _NO_SYSTEM,
    **dict.fromkeys(("resolver_tls", "resolver_pinned_accounts", "default_sentinel"), _JWT),
    "mqtt": "MQTT is not supported",
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
        placed, handler = _PLACED_KEYS.get(name), _KEYS.get(name)
        if placed is None and handler is None:
            if key in conf.variables:
                continue  # defined to be used as $key, as the reference allows
            raise ConfigError(f'{conf.where(key)}: unknown field "{key}"')
        try:
            if placed is not None:
                placed(conf, key, changes)
            elif handler is not None:
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


def _host_port(text: Any, default_host: str = "0.0.0.0",
               port_of: Callable[[Any], int] = file_port) -> tuple[str, int]:
    text = str(text)
    host, sep, port = text.rpartition(":")
    if not sep or not port.lstrip("-").isdigit():
        raise ValueError(f"could not parse address string {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [::1]:4222
    return host or default_host, port_of(int(port))


def _listen(changes: dict[str, Any], value: Any) -> None:
    changes["host"], changes["port"] = _host_port(value)


def _monitor(port_field: str) -> Handler:
    """`http` / `https`: a port, or HOST:PORT, the address the monitor binds (as the
    reference: with no host, the client listener's)."""

    def handle(changes: dict[str, Any], value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            changes[port_field] = file_monitor_port(value)
            return
        host, changes[port_field] = _host_port(value, "", file_monitor_port)
        if host:
            changes["http_host"] = host

    return handle


def _tags(value: Any) -> list[str]:
    """server_tags: a string or a list of strings; kept as the reference keeps them (lower
    case, trimmed, each once, none empty)."""
    if isinstance(value, str):
        words = [value]
    elif isinstance(value, list):
        words = value
        for word in words:
            if not isinstance(word, str):
                raise ValueError(f"error parsing tags: unsupported type {type(word).__name__} "
                                 "where string is expected")
    else:
        raise ValueError(f"error parsing tags: unsupported type {type(value).__name__}")
    tags: list[str] = []
    for word in words:
        tag = word.strip().lower()
        if tag and tag not in tags:
            tags.append(tag)
    return tags


def _tls(changes: dict[str, Any], value: Any) -> None:
    from .tls import parse_tls_block

    changes["tls"] = parse_tls_block(value)


def _nested(section: Any, key: str, message: str) -> ConfigError:
    where = section.where(key) if isinstance(section, Section) else "?"
    return ConfigError(f"{where}: {message}")


def _authorization(conf: Section, key: str, changes: dict[str, Any]) -> None:
    parse_authorization(conf[key], changes, changes.setdefault("auth", AuthOptions()),
                        conf.where(key))


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
            from .tls import parse_tls_block

            changes["cluster_tls"] = parse_tls_block(item)
        elif name in ("compression", "pool_size", "accounts", "pinned_accounts",
                      "permissions", "connect_retries", "connect_backoff", "ping_interval",
                      "ping_max", "write_deadline", "write_timeout"):
            raise _nested(value, key, f'"{key}" in cluster is not supported by tidings')
        elif key not in getattr(value, "variables", ()):
            raise _nested(value, key, f'unknown field "{key}"')
    if port is None:
        raise ValueError("a listen address or port is required")
    changes["cluster"] = RouteURL.with_credentials(user, password, f"{host}:{port}")


def _accounts(conf: Section, key: str, changes: dict[str, Any]) -> None:
    from .accounts import parse_accounts

    parse_accounts(conf, key, changes, changes.setdefault("auth", AuthOptions()))


def _system_account(conf: Section, key: str, changes: dict[str, Any]) -> None:
    if not isinstance(conf[key], str):
        raise ConfigError(f"{conf.where(key)}: system account name must be a string")
    changes.setdefault("auth", AuthOptions()).system_account = conf[key]


def _operator_part(part: str) -> Handler:
    """A key of operator mode (config/operator.py), read into `changes["operator"]`."""
    def handle(changes: dict[str, Any], value: Any) -> None:
        from . import operator

        opts = changes.get("operator")
        if opts is None:
            opts = changes["operator"] = operator.OperatorOptions()
        if part == "operator":
            opts.jwts, opts.claims = operator.parse_operators(value)
        elif part == "resolver":
            opts.resolver = operator.parse_resolver(value)
        elif part == "preload":
            opts.preload = operator.parse_preload(value)
        else:
            opts.trusted_keys = operator.parse_trusted(value)

    return handle


def _websocket(changes: dict[str, Any], value: Any) -> None:
    from .websocket import parse_websocket

    changes["websocket"] = parse_websocket(value)


def _at_key(conf: Section, key: str, parse: Callable[[], Any]) -> Any:
    """parse(), its error of the whole value (or of a value of another type than the
    reference asserts) placed at the key, without naming it, as the reference does."""
    try:
        return parse()
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"{conf.where(key)}: {exc}") from None


def _mappings(conf: Section, key: str, changes: dict[str, Any]) -> None:
    """`mappings` (`maps`) at the top: the global account's subject mappings."""
    from .accounts import parse_mappings

    changes["mappings"] = parse_mappings(conf, key, conf[key])


def _jetstream(conf: Section, key: str, changes: dict[str, Any]) -> None:
    """`jetstream`, over what a `store_dir` before it set."""
    from .jetstream import parse_jetstream

    changes["jetstream"] = _at_key(
        conf, key, lambda: parse_jetstream(conf[key], changes.get("jetstream")))


def _store_dir(conf: Section, key: str, changes: dict[str, Any]) -> None:
    from .jetstream import parse_store_dir

    changes["jetstream"] = _at_key(
        conf, key, lambda: parse_store_dir(conf, key, changes.get("jetstream")))


# Keys whose handlers place some errors at the key itself, as the reference does (and
# take the map and the key for it).
_PLACED_KEYS: dict[str, Callable[[Section, str, dict[str, Any]], None]] = {
    "authorization": _authorization,
    "accounts": _accounts,
    "system_account": _system_account,
    "system": _system_account,
    "mappings": _mappings,
    "maps": _mappings,
    "jetstream": _jetstream,
    "store_dir": _store_dir,
    "storedir": _store_dir,
}

_KEYS: dict[str, Handler] = {
    "listen": _listen,
    "host": _to("host", _str),
    "net": _to("host", _str),
    "port": _to("port", file_port),
    "server_name": _to("name", _str),
    "client_advertise": _to("client_advertise", _str),
    "http": _monitor("http_port"),
    "http_port": _to("http_port", file_monitor_port),
    "https": _monitor("https_port"),
    "https_port": _to("https_port", file_monitor_port),
    "tls": _tls,
    "allow_non_tls": _to("allow_non_tls", file_bool),
    "monitor_port": _to("http_port", file_monitor_port),
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
    "ports_file_dir": _to("ports_file_dir", _str),
    "server_tags": _to("tags", _tags),
    # The streaming server's block is read by the streaming options (streaming/server).
    "streaming": lambda changes, value: None,
    "websocket": _websocket,
    "ws": _websocket,
    **dict.fromkeys(("operator", "operators", "roots", "root", "root_operators",
                     "root_operator"), _operator_part("operator")),
    **dict.fromkeys(("resolver", "account_resolver", "accounts_resolver"),
                    _operator_part("resolver")),
    "resolver_preload": _operator_part("preload"),
    "trusted": _operator_part("trusted"),
    "trusted_keys": _operator_part("trusted"),
}
