"""Server options: defaults of the reference nats-server, and the command line that sets them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ..protocol.parser import MAX_CONTROL_LINE, MAX_PAYLOAD


@dataclass
class ServerOptions:
    host: str = "0.0.0.0"
    port: int = 4222
    name: str = ""
    http_port: int = 0
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
    # Clustering, as nats-server's flags: the route listener URL, seed routes, the name.
    cluster: str = ""
    routes: list[str] = field(default_factory=list)
    cluster_name: str = ""
    no_advertise: bool = False
    cluster_advertise: str = ""

    @property
    def auth_required(self) -> bool:
        return bool(self.user or self.token)


def port_number(text: str) -> int:
    """A TCP port for argparse: 0..65535, and -1 (the reference's "any free port") is 0."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not -1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port} (0 to 65535; 0 or -1: any free port)")
    return max(port, 0)


def route_list(text: str) -> list[str]:
    """Comma-separated route URLs, for argparse; each must name a host and a port."""
    from ..cluster.cluster import RouteURL

    urls = [u.strip() for u in text.split(",") if u.strip()]
    for url in urls:
        try:
            RouteURL(url)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return urls


def positive_int(text: str) -> int:
    """An integer above zero, for argparse."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return value


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags named as nats-server's."""
    d = ServerOptions()
    parser.add_argument("-a", "--addr", "--net", dest="host", default=d.host,
                        help="bind to host address (default %(default)s)")
    parser.add_argument("-p", "--port", type=port_number, default=d.port,
                        help="port for clients; 0 or -1 picks a free port (default %(default)s)")
    parser.add_argument("-n", "--name", "--server_name", dest="name", default=d.name,
                        help="server name (default: the server id)")
    parser.add_argument("-m", "--http_port", type=port_number, default=d.http_port,
                        help="HTTP port for monitoring (reserved)")
    parser.add_argument("--max_payload", type=positive_int, default=d.max_payload,
                        help="maximum message payload in bytes (default %(default)s)")
    parser.add_argument("--max_control_line", type=positive_int, default=d.max_control_line,
                        help="maximum control line in bytes (default %(default)s)")
    parser.add_argument("--max_connections", type=positive_int, default=d.max_connections,
                        help="maximum client connections (default %(default)s)")
    parser.add_argument("--max_pending", type=positive_int, default=d.max_pending,
                        help="maximum bytes buffered for a client (default %(default)s)")
    parser.add_argument("--ping_interval", type=float, default=d.ping_interval,
                        help="seconds between server pings (default %(default)s)")
    parser.add_argument("--ping_max", type=int, default=d.ping_max,
                        help="unanswered pings before closing (default %(default)s)")
    parser.add_argument("--auth_timeout", type=float, default=d.auth_timeout,
                        help="seconds a client has to send CONNECT when auth is on")
    parser.add_argument("--write_deadline", type=float, default=d.write_deadline,
                        help="seconds a client may block writes before it is a slow consumer")
    parser.add_argument("--user", default="", help="user required for connections")
    parser.add_argument("--pass", dest="password", default="", help="password required")
    parser.add_argument("--auth", dest="token", default="", help="token required")
    parser.add_argument("-l", "--log_file", default="", help="(accepted for compatibility)")
    parser.add_argument("-q", "--quiet", dest="no_log", action="store_true",
                        help="log only errors")
    parser.add_argument("-D", "--debug", action="store_true", help="debug logging")
    parser.add_argument("--cluster", "--cluster_listen", dest="cluster", default="",
                        metavar="URL",
                        help="listen for routes on URL, nats://[user:pass@]host:port")
    parser.add_argument("--routes", type=route_list, default=[], metavar="URLS",
                        help="routes to solicit, comma separated: nats://host:port,...")
    parser.add_argument("--cluster_name", default="", help="cluster name")
    parser.add_argument("--no_advertise", action="store_true",
                        help="do not advertise known cluster IPs to clients")
    parser.add_argument("--cluster_advertise", default="", metavar="HOST:PORT",
                        help="cluster URL to advertise to other servers")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Options from parsed flags; a combination the reference refuses raises ValueError."""
    fields = ServerOptions.__dataclass_fields__
    options = ServerOptions(**{k: v for k, v in vars(args).items() if k in fields})
    if options.cluster:
        from ..cluster.cluster import RouteURL

        RouteURL(options.cluster)  # ValueError with the reason when unusable
    elif options.routes:
        raise ValueError("solicited routes require cluster capabilities, e.g. --cluster")
    if options.max_payload > options.max_pending:
        raise ValueError(f"max_payload ({options.max_payload}) cannot be higher than "
                         f"max_pending ({options.max_pending})")
    return options
