"""The core server's command line: flags named as nats-server's, onto ServerOptions over
what a configuration file set (`options_from_args`). Their units are config/units.py's flag
grammars."""

from __future__ import annotations

import argparse
from dataclasses import replace

from .server import RouteURL, ServerOptions, check
from .units import (
    flag_bool,
    flag_monitor_port,
    flag_port,
    flag_positive_int,
    flag_seconds,
    flag_size,
)


def route_list(text: str) -> list[str]:
    """Comma-separated route URLs, for argparse; each must name a host and a port."""
    urls = [u.strip() for u in text.split(",") if u.strip()]
    for url in urls:
        try:
            RouteURL(url)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return urls


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags named as nats-server's. Their defaults are None: a flag given on the command line
    overrides the configuration file, which overrides ServerOptions' defaults."""
    d = ServerOptions()
    add = parser.add_argument
    add("-a", "--addr", "--net", dest="host", help=f"bind to host address (default {d.host})")
    add("-p", "--port", type=flag_port,
        help=f"port for clients; 0 or -1 picks a free port (default {d.port})")
    add("-n", "--name", "--server_name", dest="name", help="server name (default: the server id)")
    add("-m", "--http_port", type=flag_monitor_port,
        help="HTTP port for monitoring; -1 picks a free port")
    add("-ms", "--https_port", type=flag_monitor_port,
        help="HTTPS port for monitoring (with the client TLS certificate); -1 picks a free port")
    add("-c", "--config", default="", metavar="FILE", help="configuration file")
    add("-t", dest="test_config", action="store_true",
        help="test the configuration file and exit")
    add("-P", "--pid", dest="pid_file", metavar="FILE", help="file to store the PID in")
    add("--ports_file_dir", metavar="DIR",
        help="write the URLs of every listener to DIR/<executable>_<pid>.ports once ready")
    add("-sl", "--signal", default="", metavar="SIGNAL[=PID]",
        help="send a signal to a running server (ldm, stop, quit, term, reopen, reload); "
             "PID is a process id or a PID file (default: the -P file)")
    add("-v", "--version", action="store_true", help="show the version and exit")
    add("--client_advertise", metavar="HOST[:PORT]",
        help="client URL to advertise to clients and other servers")
    add("--max_payload", type=flag_positive_int,
        help=f"maximum message payload in bytes (default {d.max_payload})")
    add("--max_control_line", type=flag_positive_int,
        help=f"maximum control line in bytes (default {d.max_control_line})")
    add("--max_connections", type=flag_positive_int,
        help=f"maximum client connections (default {d.max_connections})")
    add("--max_pending", type=flag_positive_int,
        help=f"maximum bytes buffered for a client (default {d.max_pending})")
    add("--ping_interval", type=flag_seconds,
        help=f"seconds between server pings (default {d.ping_interval:g})")
    add("--ping_max", type=int, help=f"unanswered pings before closing (default {d.ping_max})")
    add("--auth_timeout", type=flag_seconds,
        help="seconds a client has to send CONNECT when auth is on")
    add("--write_deadline", type=flag_seconds,
        help="seconds a client may block writes before it is a slow consumer")
    add("--user", help="user required for connections")
    add("--pass", dest="password", help="password required")
    add("--auth", dest="token", help="token required")
    logging = parser.add_argument_group("logging")
    logging.add_argument("-l", "--log", "--log_file", dest="log_file", metavar="FILE",
                         help="file to redirect log output to")
    logging.add_argument("--log_size_limit", type=flag_size, metavar="SIZE",
                         help="start the log file anew past this size (default: never)")
    logging.add_argument("-T", "--logtime", nargs="?", const=True, type=flag_bool,
                         metavar="BOOL", help="timestamp log entries (default true)")
    logging.add_argument("-s", "--syslog", action="store_true",
                         help="log to syslog (refused: not supported)")
    logging.add_argument("-r", "--remote_syslog", metavar="ADDR",
                         help="remote syslog address (refused: not supported)")
    logging.add_argument("-D", "--debug", action="store_true", default=None,
                         help="debug logging")
    logging.add_argument("-V", "--trace", action="store_true", default=None,
                         help="trace the raw protocol (-DV: debug and trace)")
    logging.add_argument("-q", "--quiet", dest="no_log", action="store_true", default=None,
                         help="log only errors")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--cluster", "--cluster_listen", dest="cluster", metavar="URL",
                         help="listen for routes on URL, nats://[user:pass@]host:port")
    cluster.add_argument("--routes", type=route_list, metavar="URLS",
                         help="routes to solicit, comma separated: nats://host:port,...")
    cluster.add_argument("--cluster_name", help="cluster name")
    cluster.add_argument("--no_advertise", nargs="?", const=True, type=flag_bool,
                         metavar="BOOL",
                         help="do not advertise known cluster IPs to clients")
    cluster.add_argument("--cluster_advertise", metavar="HOST:PORT",
                         help="cluster URL to advertise to other servers")
    jetstream = parser.add_argument_group("JetStream")
    jetstream.add_argument("-js", "--jetstream", nargs="?", const=True, type=flag_bool,
                           metavar="BOOL", help="enable JetStream (-js=false: disable the "
                           "file's)")
    jetstream.add_argument("-sd", "--store_dir", metavar="DIR",
                           help="JetStream storage directory (the store is DIR/jetstream)")
    tls = parser.add_argument_group("TLS")
    tls.add_argument("--tls", nargs="?", const=True, type=flag_bool, metavar="BOOL",
                     help="enable TLS (--tls=false: disable the file's)")
    tls.add_argument("--tlscert", metavar="FILE", help="server certificate file")
    tls.add_argument("--tlskey", metavar="FILE", help="private key for the server certificate")
    tls.add_argument("--tlscacert", metavar="FILE", help="client certificate CA for verification")
    tls.add_argument("--tlsverify", nargs="?", const=True, type=flag_bool, metavar="BOOL",
                     help="enable TLS with client verification")


# Flags the reference has and tidings does not (yet): refused with their reason.
REFUSED_FLAGS = {
    "syslog": "logging to syslog is not supported",
    "remote_syslog": "logging to syslog is not supported",
}


def options_from_args(args: argparse.Namespace, base: ServerOptions | None = None) -> ServerOptions:
    """Options from `base` (the defaults, or what a configuration file set) and the flags
    given on the command line over it. A combination the reference refuses raises ValueError."""
    for name, why in REFUSED_FLAGS.items():
        if getattr(args, name, None):
            raise ValueError(f"--{name}: {why}")
    fields = ServerOptions.__dataclass_fields__
    given = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    given.pop("tls", None)  # --tls is a switch; the TLSOptions come from all the --tls* flags
    given.pop("jetstream", None)  # -js is a switch; the JetStreamOptions come from it and -sd
    base = base or ServerOptions()
    enable, store_dir = getattr(args, "jetstream", None), getattr(args, "store_dir", None)
    if enable is not None or store_dir:
        from .jetstream import jetstream_from_flags

        given["jetstream"] = jetstream_from_flags(base.jetstream, enable, store_dir)
    tls_flags = [getattr(args, f, None) for f in ("tlscert", "tlskey", "tlscacert", "tlsverify")]
    if getattr(args, "tls", None) is False:
        given["tls"] = None  # as the reference: -tls=false turns the file's TLS off
    elif getattr(args, "tls", None) or any(f is not None for f in tls_flags):
        from .tls import flag_options

        given["tls"] = flag_options(*tls_flags, base=base.tls)
        if base.tls is None and getattr(args, "auth_timeout", None) is None \
                and base.auth_timeout == ServerOptions.auth_timeout:
            # The reference's default auth timeout with TLS: the TLS timeout and a second.
            given["auth_timeout"] = given["tls"].timeout + 1.0
    options = replace(base, **given)
    check(options)
    return options
