"""Configuration reload (SIGHUP, --signal reload), as nats-server does it: the file is read
again (command-line flags still win), what cannot change while running (the listen address,
the cluster) refuses the whole reload with the reference's message, and the rest takes effect
without dropping connections. Clients that no longer authenticate are closed. Subject
mappings (top-level, and an account's) apply to the next message published."""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from ..protocol.errors import AUTHORIZATION_VIOLATION
from ..protocol.subjects import has_wildcard
from ..redact import redact_url
from . import flow
from .auth import Login, PasswordCheck

if TYPE_CHECKING:
    from ..config.server import ServerOptions
    from .client import ClientConnection
    from .server import Server

log = logging.getLogger("tidings.server")

# What a reload may not change, by field, with the reference's name for it.
FIXED = {"host": "Host", "port": "Port", "cluster": "Cluster", "http_port": "HTTP Port",
         "http_host": "HTTPHost", "https_port": "HTTPSPort", "allow_non_tls": "AllowNonTLS"}
# Fields that are not configuration (or are only the command line's).
IGNORED = {"no_log"}


def reload(server: Server, new: ServerOptions) -> list[str]:
    """Apply `new` to a running server; the names of what changed. ValueError when a field
    that cannot change did (nothing is applied then)."""
    old = server.options
    if new.port in (0, server.port):
        # Any port (0 or -1), or the one a start on any port got: the port it listens on,
        # as the reference keeps the resolved port for a RANDOM_PORT.
        new = replace(new, port=old.port)
    if new.jetstream == old.jetstream:
        new = replace(new, jetstream=old.jetstream)  # what it resolved at start, kept
    changed = [f.name for f in fields(new)
               if f.name not in IGNORED and getattr(old, f.name) != getattr(new, f.name)]
    for name in changed:
        if name in FIXED:
            was = server.port if name == "port" else getattr(old, name)
            raise ValueError(f"config reload not supported for {FIXED[name]}: "
                             f"old={_go(_shown_value(name, was))}, "
                             f"new={_go(_shown_value(name, getattr(new, name)))}")
        if name.startswith("cluster") or name in ("routes", "no_advertise"):
            raise ValueError(f"config reload not supported for cluster {name}")
        if name == "jetstream":
            raise ValueError("config reload not supported for JetStream by tidings yet "
                             "(restart to change it)")
    if "tls" in changed and (old.tls is None) != (new.tls is None):
        raise ValueError("config reload not supported for TLS on or off: the client port "
                         "keeps what it was started with (restart to change it)")
    if "websocket" in changed:
        _check_websocket(old, new)
    if (old.auth.system_account, old.operator) != (new.auth.system_account, new.operator):
        raise ValueError("config reload not supported for the system account or operator "
                         "mode (restart to change them)")
    tls_context = None
    if new.tls is not None:
        from .tls import server_context

        # Made anew on every reload: the files may hold a new certificate under the same
        # names. Before anything is applied, as it may fail.
        tls_context = server_context(new.tls)
    server.options = new
    server.build_info()
    for name in changed:
        log.info("Reloaded: %s", _shown(name, getattr(new, name)))
    if tls_context is not None:
        server.tls_context = tls_context
        for listener in server.listeners:
            listener.tls_changed(tls_context)  # new handshakes take the new certificate
    if {"max_payload", "max_control_line"} & set(changed):
        for client in server.clients.values():
            if client.internal:
                continue  # not bounded by the clients' limits (ClientConnection.make_internal)
            client.parser.max_payload = new.max_payload
            client.parser.max_control_line = new.max_control_line
    if "max_pending" in changed:
        mark = flow.congestion_mark(new.max_pending)
        for client in server.clients.values():
            if client.transport is not None:
                client.transport.set_write_buffer_limits(high=mark, low=mark)
    if "ports_file_dir" in changed:
        server.ports_file.moved()  # as the reference: the old file removed, the new written
    if "mappings" in changed:
        # The top-level mappings, the global account's (an account's own change with the
        # accounts, below). Where the reference keeps the old ones when the block is gone
        # from the file, tidings does as the file says.
        server.accounts.map_subjects(server.accounts.global_account)
    if {"user", "password", "token", "auth", "websocket", "tls"} & set(changed):
        if old.auth.accounts != new.auth.accounts:
            server.accounts.reconfigure(new.auth.accounts)
        server.set_auth()
        _recheck_clients(server)
    return changed


def _go(value: Any) -> str:
    """A value as the reference prints it in its messages (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _shown(name: str, value: Any) -> str:
    """A changed field for the log, never a secret: "authorization users" for the users (as
    the reference says), the websocket block without its credentials."""
    if name == "auth":
        return "authorization users"
    if name in ("password", "token"):
        return f"{name} = <hidden>"
    if name in ("websocket", "tags", "mappings"):
        return name
    return f"{name} = {_shown_value(name, value)}"


def _shown_value(name: str, value: Any) -> Any:
    """A field's value for a log line: URLs (the cluster's, the routes') without their
    credentials."""
    if name == "cluster":
        return redact_url(str(value))
    if name == "routes":
        return [redact_url(str(u)) for u in value]
    return value


def _check_websocket(old: ServerOptions, new: ServerOptions) -> None:
    """Only the websocket block's authorization may change on reload (its listener stays)."""
    before, after = old.websocket, new.websocket
    listener = ("host", "port", "no_tls", "tls", "compression", "same_origin",
                "allowed_origins", "handshake_timeout", "advertise")
    if (before is None) != (after is None) or (
            before is not None and after is not None
            and any(getattr(before, f) != getattr(after, f) for f in listener)):
        raise ValueError("config reload not supported for websocket listener options "
                         "(only its authorization; restart to change the rest)")


def _recheck_clients(server: Server) -> None:
    """As the reference: close the clients whose CONNECT no longer authenticates, give the
    others their user's rights as they are now, and drop the subscriptions those no longer
    allow."""
    for cid, client in list(server.clients.items()):
        if cid in server.internal or not client.connected or client.closed:
            continue
        if client.login.listed and not server.auth.knows(client.login):
            # As the reference: a user no longer there has "moved account" and is closed
            # without a word, to come back as whoever it can.
            client.close_reason = "Client Closed"
            client.close_with_error(None, "user removed on reload")
            continue
        verdict = server.auth.check(client, client.credentials)
        if isinstance(verdict, PasswordCheck):
            login = verdict.login
            server.bcrypt.check(verdict.hashed, verdict.password,
                                lambda ok, c=client, lg=login: _regrant(c, lg if ok else None))
        else:
            _regrant(client, verdict)


def _regrant(client: ClientConnection, login: Login | None) -> None:
    if client.closed:
        return
    if login is None:
        client.close_with_error(AUTHORIZATION_VIOLATION, "authorization changed on reload")
        return
    if login.rights is client.rights and login == client.login:
        return
    if (login.account or client.server.accounts.global_account) is not client.account:
        # As the reference: a user now in another account is closed, to come back there.
        client.close_reason = "Client Closed"
        client.close_with_error(None, "user moved account on reload")
        return
    client.grant(login)
    sublist = client.account.sublist
    rights = client.rights
    for sub in list(client.subs.values()):
        if rights is not None and rights.limits_subscribe and not rights.may_subscribe(
                sub.subject, sub.queue):
            client.remove_sub(sub)
            client.subscription_removed(sub)
            continue
        guard = rights.may_receive if (rights is not None and rights.limits_subscribe
                                       and has_wildcard(sub.subject)) else None
        if guard is not sub.guard:
            sublist.remove(sub)  # again with the new guard: its cached results change
            sub.guard = guard
            sublist.insert(sub)
    client.server.flush()
