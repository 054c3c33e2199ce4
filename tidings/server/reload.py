"""Configuration reload (SIGHUP, --signal reload), as nats-server does it: the file is read
again (command-line flags still win), what cannot change while running (the listen address,
the cluster) refuses the whole reload with the reference's message, and the rest takes effect
without dropping connections. Clients that no longer authenticate are closed."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ..protocol.errors import AUTHORIZATION_VIOLATION
from . import flow

if TYPE_CHECKING:
    from .options import ServerOptions
    from .server import Server

log = logging.getLogger("tidings.server")

# What a reload may not change, by field, with the reference's name for it.
FIXED = {"host": "Host", "port": "Port", "cluster": "Cluster", "http_port": "HTTP Port"}
# Fields that are not configuration (or are only the command line's).
IGNORED = {"no_log"}


def reload(server: Server, new: ServerOptions) -> list[str]:
    """Apply `new` to a running server; the names of what changed. ValueError when a field
    that cannot change did (nothing is applied then)."""
    old = server.options
    changed = [f.name for f in fields(new)
               if f.name not in IGNORED and getattr(old, f.name) != getattr(new, f.name)]
    for name in changed:
        if name in FIXED:
            raise ValueError(f"config reload not supported for {FIXED[name]}: "
                             f"old={getattr(old, name)}, new={getattr(new, name)}")
        if name.startswith("cluster") or name in ("routes", "no_advertise"):
            raise ValueError(f"config reload not supported for cluster {name}")
    server.options = new
    server.build_info()
    for name in changed:
        value: Any = getattr(new, name)
        shown = "<hidden>" if name in ("password", "token") else value
        log.info("Reloaded: %s = %s", name, shown)
    if {"max_payload", "max_control_line"} & set(changed):
        for client in server.clients.values():
            client.parser.max_payload = new.max_payload
            client.parser.max_control_line = new.max_control_line
    if "max_pending" in changed:
        mark = flow.congestion_mark(new.max_pending)
        for client in server.clients.values():
            if client.transport is not None:
                client.transport.set_write_buffer_limits(high=mark, low=mark)
    if {"user", "password", "token"} & set(changed):
        _recheck_clients(server)
    return changed


def _recheck_clients(server: Server) -> None:
    """Close the clients whose CONNECT no longer authenticates, as the reference does."""
    for cid, client in list(server.clients.items()):
        if cid in server.internal or not client.connected:
            continue
        if server.options.auth_required and not server.authenticate(client.credentials):
            client.close_with_error(AUTHORIZATION_VIOLATION, "authorization changed on reload")
