"""The streaming server's start-up lines, as the reference's banner: its cluster id, where it
keeps its messages, and where it is monitored (or how to turn monitoring on).

Light to import: it is logged before the streaming server's modules load.
"""

from __future__ import annotations

import logging
import os
import re
import urllib.parse
from typing import Any

from .options import StreamingOptions

log = logging.getLogger("tidings.streaming")

MEMORY_NOTE = "lost when the server stops; keep it with --store file --dir DIR"
MONITORING_OFF = "off (enable with -m PORT)"
_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def hide_password(dsn: str) -> str:
    """A PostgreSQL DSN for the log: its password, in either form, replaced by ***."""
    if "://" not in dsn:
        return _PASSWORD.sub(r"\1***", dsn)  # host=... password=...
    url = urllib.parse.urlsplit(dsn)
    netloc = url.netloc
    if url.password is not None:
        netloc = netloc.replace(f":{url.password}@", ":***@", 1)
    pairs = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    query = urllib.parse.urlencode(
        [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*")
    return urllib.parse.urlunsplit(url._replace(netloc=netloc, query=query))


def store_text(opts: StreamingOptions) -> str:
    """Which store, and where: `FILE in /var/lib/stan`."""
    if opts.store == "memory":
        return f"MEMORY ({MEMORY_NOTE})"
    if opts.store == "file":
        return f"FILE in {os.path.abspath(opts.dir)}" if opts.dir else "FILE"
    if opts.store == "sql" and opts.sql_driver == "postgres":
        return f"SQL (postgres) at {hide_password(opts.sql_source)}"
    if opts.store == "sql":
        source = opts.sql_source or (os.path.join(opts.dir, "streaming.db") if opts.dir else "")
        return f"SQL (sqlite) in {os.path.abspath(source)}" if source else "SQL (sqlite)"
    return opts.store.upper()


def monitoring_url(scheme: str, host: str, port: int) -> str:
    """Where /streaming/serverz answers: a URL, or how to turn monitoring on (port 0); -1
    (any free port): the port is logged once it listens ("Starting http monitor on")."""
    if not port:
        return MONITORING_OFF
    if ":" in host:
        host = f"[{host}]"
    shown = "<any free port>" if port == -1 else port
    return f"{scheme}://{host}:{shown}/streaming/serverz"


def log_banner(opts: StreamingOptions, monitoring: str) -> None:
    """Log the banner; `monitoring` is what monitoring_url() gave."""
    log.info("Starting streaming server (cluster id %s)", opts.cluster_id)
    log.info("  Message store: %s", store_text(opts))
    if opts.ft_group:
        log.info("  FT group:      %s (standby until the group's active server stops)",
                 opts.ft_group)
    log.info("  Monitoring:    %s", monitoring)


def log_embedded_banner(opts: StreamingOptions, core: Any) -> None:
    """The banner of the streaming server embedded in `core` (a Server, listening): it is
    monitored on the core's -m (or -ms) port, the one it listens on (-1: the port picked)."""
    copts, monitor = core.options, core.monitor
    port = monitor.bound[1] if monitor is not None else 0
    scheme = "https" if copts.https_port and not copts.http_port else "http"
    log_banner(opts, monitoring_url(scheme, copts.http_host or copts.host, port))
