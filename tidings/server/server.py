"""The core server: listener, client registry, message routing, output flushing, lifecycle."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import secrets
import socket
import sys
import time
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..config.server import ServerOptions
from ..pipe import open_pipe
from ..protocol.errors import MAX_CONNECTIONS_EXCEEDED, TOO_MANY_ACCOUNT_CONNECTIONS
from ..turns import LoopTurns
from . import flow
from .accounts import MAX_RELAY_HOPS, Account, Accounts
from .auth import Authenticator, Bcrypt, granting, new_nonce
from .client import ClientConnection
from .connection import Connection, Frame, Headerless
from .listeners import ClientPort, Listener, MonitorPort
from .portsfile import PortsFile
from .sublist import Sublist, Subscription

if TYPE_CHECKING:
    from .monitor import Monitor
    from .msgtrace import MsgTrace
    from .operator import OperatorAuth
    from .sysaccount import SystemAccount
    from .websocket import WebSocketListener

log = logging.getLogger("tidings.server")

# The NATS protocol level we implement; clients gate features (headers, no responders) on it.
NATS_VERSION = "2.11.0"
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
# Subscriptions of a closed connection removed per loop turn (about 1 ms of work).
DROP_CHUNK = 1000
CLOSED_CLIENTS_KEPT = 10_000


def new_server_id() -> str:
    """An id shaped like the reference's: 'N' and 55 base32 characters."""
    return "N" + "".join(secrets.choice(_B32) for _ in range(55))


class Server:
    """A NATS server. `await start()`, then `await shutdown()` (or `serve_forever()`)."""

    def __init__(self, options: ServerOptions | None = None) -> None:
        self.options = options or ServerOptions()
        self.server_id = new_server_id()
        self.name = self.options.name or self.server_id
        self._cid = 0
        self.accounts = Accounts(self)
        self.clients: dict[int, ClientConnection] = {}
        self.internal: set[int] = set()  # cids of in-process clients (dial_internal)
        self.dirty: list[Connection] = []
        self.reader: Connection | None = None  # whose bytes are being parsed now
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.port = self.options.port
        self.slow_consumers = 0
        self.stale = {"clients": 0, "routes": 0}  # closed for unanswered pings (/varz)
        self.stalls = 0  # producers paused for their consumers (flow.py; /varz stalled_clients)
        self.total_connections = 0
        self.started = time.time()
        self.turns: LoopTurns = None  # type: ignore[assignment]  # set by start()
        self._qseq = 0
        self.trace_seq = 0  # sequence number of the trace events we sent (msgtrace.py)
        self.deliver = self._deliver  # bound once: route() runs per message
        # The cluster's routes (cluster.Cluster, plugged in by node.py; server/ does not
        # import cluster/), when clustered.
        self.cluster: Any = None
        self.jetstream: Any = None  # jetstream.api.JetStream, plugged in by node.py when on
        self.before_flush: list[Callable[[], None]] = []  # run first at each flush
        self.connect_urls: list[str] = []  # the cluster's client URLs, for clients' INFO
        self.lame_duck = False
        self.monitor: Monitor | None = None  # -m: the HTTP monitoring endpoints
        # The system account's events and requests (sysaccount.py), once started.
        self.events: SystemAccount | None = None
        self.ports_file = PortsFile(self)  # ports_file_dir (written once ready: node.py)
        self.tls_context: Any = None  # ssl.SSLContext of the client listener with TLS
        self.ws_listener: WebSocketListener | None = None  # `websocket { }` (websocket.py)
        self.client_kind: type[ClientConnection] = ClientConnection  # TCP and WebSocket
        # The last closed clients, for /connz?state=closed (as many as the reference keeps).
        self.closed_clients: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=CLOSED_CLIENTS_KEPT)
        self.monitor_routes: dict[str, Any] = {}  # more endpoints (embedded streaming's)
        # Message counters of connections that have closed, kept for /varz.
        self.gone = {"in_msgs": 0, "in_bytes": 0, "out_msgs": 0, "out_bytes": 0,
                     "in_client_msgs": 0, "in_client_bytes": 0, "out_client_msgs": 0,
                     "out_client_bytes": 0}
        self.listeners: list[Listener] = []  # started, in order (listeners.py)
        self.plugged: list[Listener] = []  # to start after the client port (plug)
        self._sweeper: asyncio.TimerHandle | None = None
        self._stopped = asyncio.Event()
        self._stopping = False  # shutdown has begun: no new in-process clients
        self._info: dict[str, Any] = {}
        self._all_gone: asyncio.Event | None = None  # set when shutdown has closed everyone
        # Clients with allow_responses connected now: only then are requests' deliveries
        # watched for reply subjects to grant (see route), so that others pay nothing.
        self.responders = 0
        # Operator mode (JWTs): made once, as its resolver and claims outlive reloads.
        self.operator: OperatorAuth | None = None
        if self.options.operator is not None and self.options.operator.claims:
            from .operator import OperatorAuth

            self.operator = OperatorAuth(self.accounts, self.options.operator)
        self.auth = Authenticator(self.options, self.accounts, self.operator)
        self.bcrypt = Bcrypt()

    @property
    def sublist(self) -> Sublist:
        """The global account's subject index (the only one without accounts)."""
        return self.accounts.global_account.sublist

    # -- lifecycle -----------------------------------------------------------
    async def start(self, announce: bool = True) -> None:
        """Listen (clients, then monitoring, routes, WebSocket); a listener that cannot
        start is an OSError naming it and its address. `announce`: log that the server is
        ready (else the caller does, once what it starts beside is up)."""
        log.info("Starting tidings server")
        log.info("  Version:  %s (tidings %s)", NATS_VERSION, __version__)
        log.debug("  Python:   %s", sys.version.split()[0])
        log.info("  Name:     %s", self.name)
        log.info("  ID:       %s", self.server_id)
        self.loop = asyncio.get_running_loop()
        self.turns = LoopTurns(self.loop)
        opts = self.options
        kind: type[ClientConnection] = ClientConnection
        if opts.trace:
            from .trace_log import TracedClientConnection, traced_deliver

            kind = TracedClientConnection
            self.deliver = traced_deliver(self)
        self.client_kind = kind
        if opts.tls is not None:  # (a certificate that cannot be read is not a port error)
            from .tls import server_context

            self.tls_context = server_context(opts.tls)
        # As the reference: the monitor first, so that it answers once clients are let in.
        listeners: list[Listener] = [MonitorPort(self)] if opts.http_port or opts.https_port else []
        listeners.append(ClientPort(self, kind))
        listeners += self.plugged
        if opts.websocket is not None:
            from .websocket import WebSocketListener

            self.ws_listener = WebSocketListener(self, opts.websocket)
            listeners.append(self.ws_listener)
        for listener in listeners:
            try:
                await listener.start()
            except BaseException:
                for started in reversed(self.listeners):
                    started.close()
                    await started.stop()
                raise
            self.listeners.append(listener)
            if isinstance(listener, ClientPort):
                self._log_client_port()
        from .sysaccount import SystemAccount

        self.events = SystemAccount(self)
        self.events.start()
        if opts.write_deadline > 0:
            self._sweeper = self.loop.call_later(1.0, self._sweep_writes)
        if announce:
            log.info("Server is ready")

    def plug(self, listener: Listener) -> None:
        """Add a listener to start after the client port (the cluster's, from node.py)."""
        self.plugged.append(listener)

    def _log_client_port(self) -> None:
        opts = self.options
        log.info("Listening for client connections on %s:%d", opts.host, self.port)
        if opts.tls is not None:
            tls = opts.tls
            first_only = tls.handshake_first and tls.handshake_first_fallback <= 0
            if opts.allow_non_tls and not first_only:
                log.info("TLS available for client connections")
            else:
                log.info("TLS required for client connections")
            if first_only:
                log.warning('Clients that are not using "TLS Handshake First" option will '
                            "fail to connect")

    def set_auth(self) -> None:
        """Build the users and permissions from the options again (on reload)."""
        self.auth = Authenticator(self.options, self.accounts, self.operator)

    def build_info(self) -> None:
        """The INFO fields every client gets, from the options (again after a reload)."""
        opts = self.options
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": NATS_VERSION,
            "proto": 1,
            "go": f"tidings {__version__} python {sys.version.split()[0]}",
            "host": self._advertised()[0],
            "port": self._advertised()[1],
            "headers": True,
        }
        # Keys in the reference's order: auth_required comes before max_payload.
        if opts.auth_required:
            info["auth_required"] = True
        if opts.tls is not None:
            # allow_non_tls: TLS offered, not required (a TLS-first INFO still requires it).
            if not opts.allow_non_tls:
                info["tls_required"] = True
            if opts.tls.verify or opts.tls.verify_and_map:
                info["tls_verify"] = True
            if opts.allow_non_tls:
                info["tls_available"] = True
        info["max_payload"] = opts.max_payload
        if opts.jetstream is not None and opts.jetstream.enabled:
            info["jetstream"] = True
        if self.lame_duck:
            info["ldm"] = True
        self._info = info

    async def shutdown(self, drain_timeout: float | None = None) -> None:
        """Stop accepting, flush what every client has pending, close every connection.

        Waits until the sockets have taken the pending bytes (at most `drain_timeout`,
        default the write deadline, else 10 s); what is still stuck then is dropped."""
        log.info("Initiating Shutdown...")
        self._stopping = True
        if self.events is not None:
            self.events.stop()  # (its SHUTDOWN event first; no events for those closed now)
        for listener in self.listeners:
            listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for listener in self.listeners:
            if listener.stops_before_clients:
                await listener.stop()
        self.bcrypt.close()
        self.flush()
        for client in list(self.clients.values()):
            client.close_reason = client.close_reason or "Server Shutdown"
            client.closed = True
            if client.transport is not None:
                client.transport.close()  # writes out its buffer first
        if self.clients:
            self._all_gone = asyncio.Event()
            wait = drain_timeout or self.options.write_deadline or 10.0
            try:
                await asyncio.wait_for(self._all_gone.wait(), wait)
            except asyncio.TimeoutError:
                for client in list(self.clients.values()):
                    client.abort()
        for listener in self.listeners:
            if not listener.stops_before_clients:
                await listener.stop()
        if self.jetstream is not None:
            self.jetstream.stop()  # its file stores synced and closed
        self._stopped.set()

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        asyncio.ensure_future(self.shutdown())

    def reload_with(self, read_options: Callable[[], ServerOptions]) -> None:
        """SIGHUP: read the configuration again and apply it (see reload.py)."""
        from .reload import reload

        log.info('Trapped "hangup" signal')
        try:
            reload(self, read_options())
        except (OSError, ValueError) as exc:
            log.error("Failed to reload server configuration: %s", exc)
            return
        self.flush()
        log.info("Reloaded server configuration")

    def enter_lame_duck(self) -> None:
        """SIGUSR2 (--signal ldm): stop accepting clients, tell clients and routes (INFO
        with "ldm": true, so that they go elsewhere), wait the grace period, close the
        clients a few at a time over the rest of lame_duck_duration, then stop."""
        if not self.lame_duck:
            self.lame_duck = True
            asyncio.ensure_future(self._lame_duck())

    async def _lame_duck(self) -> None:
        opts = self.options
        log.info("Entering lame duck mode, stop accepting new clients")
        self.build_info()
        for client in self.clients.values():
            if client.protocol >= 1 and client.first_pong_sent and not client.closed:
                client.queue(self.info_for(client))
        for listener in self.listeners:
            listener.lame_duck()  # no new clients; the routes are told we are leaving
        self.flush()
        clients = [c for cid, c in self.clients.items() if cid not in self.internal]
        if clients:
            grace = abs(opts.lame_duck_grace_period)
            await asyncio.sleep(grace)
            log.info("Closing existing clients")
            # As the reference: the rest of the duration shared out, at most a second
            # between two closings, several at a time when there are very many.
            span = opts.lame_duck_duration - grace
            if span <= 0:
                span = 1.0
            interval, batch = min(span / len(clients), 1.0), 1
            if interval < 0.001:
                interval, batch = 0.001, -(-len(clients) // int(span / 0.001))
            for i, client in enumerate(clients):
                client.close_with_error(None, "lame duck mode")
                if i < len(clients) - 1 and (i + 1) % batch == 0:
                    await asyncio.sleep(interval)
        await self.shutdown()

    # -- clients -------------------------------------------------------------
    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def info_fields(self) -> dict[str, Any]:
        """The server's INFO fields common to every client."""
        return self._info

    def _advertised(self) -> tuple[str, int]:
        """(host, port) for clients: --client_advertise (port 4222 if it has none), or
        where we listen."""
        advertise = self.options.client_advertise
        if not advertise:
            return self.options.host, self.port
        host, sep, port = advertise.rpartition(":")
        if sep and port.isdigit():
            return host, int(port)
        return advertise, 4222

    def own_client_urls(self) -> list[str]:
        """Where clients reach this server, as INFO connect_urls lists it ("host:port")."""
        if self.options.client_advertise:
            host, port = self._advertised()
            return [f"{host}:{port}"]
        host = self.options.host
        if host in ("0.0.0.0", "::", ""):
            hosts = sorted(ip for ip in local_ips() if not ip.startswith("127.") and ":" not in ip)
            hosts = hosts or ["127.0.0.1"]
        else:
            hosts = [host]
        return [f"{h}:{self.port}" for h in hosts]

    def client_urls_changed(self) -> None:
        """The cluster's client URLs changed: update INFO, and tell the clients that asked
        for it (protocol 1, after their first PONG) with an asynchronous INFO."""
        cluster = self.cluster
        if cluster is None or self.options.no_advertise:
            return
        urls = self.own_client_urls()
        for url in cluster.client_urls_of_cluster():
            if url not in urls:
                urls.append(url)
        if self.connect_urls == urls:
            return
        self.connect_urls = urls
        for client in self.clients.values():
            if client.protocol >= 1 and client.first_pong_sent and not client.closed:
                client.queue(self.info_for(client))
        self.loop.call_soon(self.flush)

    def info_for(self, client: ClientConnection, connect_info: bool = False,
                 tls_first: bool = False) -> bytes:
        """The INFO line for `client`; `tls_first`: the one sent over TLS at once, which
        says tls_required even when allow_non_tls only offers TLS."""
        info = dict(self._info)
        if tls_first and "tls_required" not in info:
            info = _with_key_before(info, "tls_required", ("tls_verify", "tls_available"))
        if client.websocket and "auth_required" not in info and self.auth.required_for(client):
            info = _with_auth_required(info)
        if client.internal:  # nothing is required of the process's own client
            for key in ("auth_required", "tls_required", "tls_verify", "tls_available"):
                info.pop(key, None)
            info["max_payload"] = client.parser.max_payload
        info["client_id"] = client.cid
        info["client_ip"] = client.host
        if self.auth.nonce_required and not client.internal:
            if not client.nonce:
                client.nonce = new_nonce()
            info["nonce"] = client.nonce
        js = self.options.jetstream
        if self.cluster is not None:
            info["cluster"] = self.cluster.name
        if js is not None and js.domain:
            info["domain"] = js.domain
        if self.cluster is not None and self.connect_urls and not client.internal:
            info["connect_urls"] = self.connect_urls
        if client.websocket and self.ws_listener is not None:
            self.ws_listener.adjust_info(info)
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = "$G"
        if js is not None and js.enabled:
            # The API level served, last as in the reference's INFO (which has it from
            # 2.12 on, JetStream or not; tidings says 2.11.0 and sends it with JetStream).
            from ..config.jetstream import API_LEVEL

            info["api_lvl"] = API_LEVEL
        # The reference ends INFO with a space before CRLF.
        return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b" \r\n"

    def full(self) -> bool:
        """Whether max_connections clients are connected already."""
        return len(self.clients) - len(self.internal) >= self.options.max_connections

    def register(self, client: ClientConnection) -> bool:
        if client.internal:
            self.internal.add(client.cid)
        elif self.full():
            client.close_with_error(MAX_CONNECTIONS_EXCEEDED, "max connections")
            return False
        else:
            self.total_connections += 1
        self.clients[client.cid] = client
        client.account.connections += 1
        return True

    def move_to_account(self, client: ClientConnection, account: Account) -> None:
        """Bind a client that has logged in (it has no subscriptions yet) to `account`;
        closes it when the account has all the connections its limits allow."""
        client.account.connections -= 1
        client.account = account
        account.connections += 1
        limit = account.limits.max_connections
        if limit >= 0 and not client.internal and account.connections > limit:
            client.close_with_error(TOO_MANY_ACCOUNT_CONNECTIONS, "account max connections")

    def dial_internal(self, protocol: asyncio.Protocol) -> asyncio.Transport:
        """Connect an in-process client (the embedded streaming server) to this server
        through a pipe: no socket, no TLS, no authentication, no permissions, not one of
        the clients' max_connections. Its identity is the process's own, so whatever a
        configuration demands of clients does not apply to it. Returns the client's end."""
        if self._stopping or self.loop is None:
            raise ConnectionRefusedError("tidings: the server is not running")
        conn = ClientConnection(self)  # never the -V traced kind: the process's own traffic
        conn.make_internal()
        near, _ = open_pipe(self.loop, protocol, conn)
        return near

    def retire(self, conn: Connection) -> None:
        """Keep a closing connection's message counts in the server's totals."""
        _add_counts(self.gone, conn)

    def message_totals(self) -> dict[str, int]:
        """in_msgs, in_bytes, out_msgs, out_bytes (and their client-only parts), as /varz:
        the clients' and the routes' traffic, not the process's own client's (an embedded
        streaming server's requests and replies are not messages a user sent)."""
        totals = dict(self.gone)
        routes = self.cluster.routes.values() if self.cluster is not None else ()
        internal = self.internal
        for conn in [*self.clients.values(), *routes]:
            if conn.cid not in internal or conn.is_route:
                _add_counts(totals, conn)
        return totals

    def unregister(self, client: ClientConnection) -> None:
        if self.clients.pop(client.cid, None) is None:
            return
        client.account.connections -= 1
        if client.cid not in self.internal:
            self.retire(client)
        # Kept for /connz?state=closed (HTTP, or the system account's CONNZ).
        if ((self.monitor is not None or self.accounts.configured)
                and client.cid not in self.internal):
            from .endpoints import client_item

            now = time.time()
            self.closed_clients.append(
                client_item(client, now, stop=now, reason=client.close_reason or "Client Closed")
            )
        self.internal.discard(client.cid)
        if client.replies is not None:
            self.responders -= 1
        if self._all_gone is not None and not self.clients:
            self._all_gone.set()
        subs = list(client.subs.values())
        client.subs.clear()
        for sub in subs:
            sub.closed = True  # delivery skips it from now on, wherever it still is
        self.drop_subs(subs, client.account)
        if self.events is not None:
            self.events.disconnected(client)

    def drop_subs(self, subs: list[Subscription], account: Account) -> None:
        """Take subscriptions of a closed connection (client or route) out of `account`'s
        index."""
        if subs:
            self._drop_subs(subs, 0, account.sublist)

    def _drop_subs(self, subs: list[Subscription], start: int, sublist: Sublist) -> None:
        """Take a closed connection's subscriptions out of the index, a chunk per loop turn:
        tens of thousands of them never hold up the other clients."""
        end = start + DROP_CHUNK
        sublist.remove_batch(subs[start:end])
        if end < len(subs):
            self.loop.call_soon(self._drop_subs, subs, end, sublist)

    # -- routing -------------------------------------------------------------
    def route(
        self,
        pub: ClientConnection | None,
        subject: bytes,
        reply: bytes | None,
        frame: Frame,
        plain_frame: Headerless | None,
        trace: MsgTrace | None = None,
        account: Account | None = None,
        forward: bool = True,
        hops: int = 0,
    ) -> bool:
        """Deliver one message to every matching subscription and one member per queue group
        of `account` (the publisher's unless given); True if it went anywhere.

        `plain_frame` is the message as MSG without headers, for receivers that did not
        announce header support, made only if one needs it (None exactly when `frame` has
        no headers; see connection.Headerless). A traced message is
        delivered through `trace`, which records each egress (see msgtrace.py). `pub` is
        None for the server's own messages (trace events). A message an import carried
        here (accounts.py) has crossed `hops` relays, and goes to the routes if `forward`.
        """
        deliver = self.deliver if trace is None else trace.deliver
        if reply and self.responders and (trace is None or not trace.only):
            deliver = granting(deliver, reply)
        if account is None:
            account = pub.account  # type: ignore[union-attr]
        sublist = account.sublist
        result = sublist.cache.get(subject) or sublist.compute(subject)
        plain, groups, remote = result
        delivered = False
        for sub in plain:
            if deliver(pub, sub, frame, plain_frame):
                delivered = True
        for group in groups:
            if self._deliver_one(pub, group, frame, plain_frame, deliver):
                delivered = True
        if remote is not None:
            if remote.relays and hops < MAX_RELAY_HOPS:
                for sub in remote.relays:
                    if sub.client.carry(pub, subject, reply, frame, plain_frame, hops + 1):
                        delivered = True
            if forward and self.cluster is not None and (remote.plain or remote.groups):
                # Other servers' interest: each route gets the message once (cluster/).
                if self.cluster.forward(pub, subject, reply, frame, plain_frame, remote,
                                        deliver, account):
                    delivered = True
        if not delivered and reply and not hops and pub is not None and pub.no_responders:
            pub.no_responders_reply(subject, reply)
        return delivered

    def route_from(
        self,
        route: Connection,
        subject: bytes,
        reply: bytes | None,
        frame: Frame,
        plain_frame: Headerless | None,
        queues: Container[bytes] = (),
        direct: Subscription | None = None,
        account: Account | None = None,
    ) -> None:
        """Deliver a message that came over a route in `account` (the global one unless
        given): to local subscribers only (one hop).

        Plain subscribers get it unless `direct` is given; of the queue groups only those
        named in `queues` get it (the sending server chose this server for them), or just
        `direct`, the queue subscription the sender picked (the seed's QRSID)."""
        deliver = self.deliver
        if reply and self.responders:
            deliver = granting(deliver, reply)
        if direct is not None:
            if deliver(route, direct, frame, plain_frame):
                return
            queues = (direct.queue,)  # gone meanwhile: another member of its group here
        sublist = (account or self.accounts.global_account).sublist
        result = sublist.cache.get(subject) or sublist.compute(subject)
        plain, groups, remote = result
        if direct is None:
            for sub in plain:
                deliver(route, sub, frame, plain_frame)
        if remote is not None and remote.relays and direct is None:
            for sub in remote.relays:
                if sub.client.routed:  # a service import's requests are relayed where made
                    sub.client.carry(route, subject, reply, frame, plain_frame, 1)
        if not queues:
            return
        for group in groups:
            if group[0].queue in queues:
                self._deliver_one(route, group, frame, plain_frame, deliver)
        if remote is not None:
            for members in remote.groups:
                if members[0].queue in queues:
                    # Our members only: a message crosses one route.
                    here = tuple(m for m in members if not m.client.is_route)
                    if here:
                        self._deliver_one(route, here, frame, plain_frame, deliver)

    def _deliver_one(
        self,
        pub: Connection | None,
        group: tuple[Subscription, ...],
        frame: Frame,
        plain_frame: Headerless | None,
        deliver: Callable[..., bool],
    ) -> bool:
        """Deliver to one member of a queue group, taking turns; False if none would."""
        n = len(group)
        self._qseq += 1
        start = self._qseq % n
        for k in range(n):
            if deliver(pub, group[(start + k) % n], frame, plain_frame):
                return True
        return False

    def _deliver(
        self, pub: Connection | None, sub: Subscription, frame: Frame,
        plain_frame: Headerless | None
    ) -> bool:
        client = sub.client
        if client.closed or sub.closed or (client is pub and not pub.echo):
            return False
        if plain_frame is not None and not client.headers:
            frame = plain_frame.frame()
        head, tail, big, size = frame
        out = client.out
        if not out:
            self.dirty.append(client)
        out.append(head + sub.sid_sp + tail)
        if big is not None:
            out.append(big)
            out.append(b"\r\n")
            client.out_vectored = True
        client.out_msgs += 1
        client.out_payload += size
        sub.delivered += 1
        if sub.max and sub.delivered >= sub.max:
            client.remove_sub(sub)
        return True

    def flush(self) -> None:
        """Write every connection's queued bytes with one write each (after what must be
        done first: a store's group commit, whose acknowledgements go in this flush)."""
        if self.before_flush:
            for hook in self.before_flush:
                try:
                    hook()
                except Exception:  # a defect in a hook must not reach the client being read
                    log.exception("before-flush hook %r failed", hook)
        dirty = self.dirty
        if not dirty:
            return
        self.dirty = []
        max_pending = self.options.max_pending
        reader = self.reader
        congested: list[Connection] = []
        deliveries = 0
        for client in dirty:
            out = client.out
            transport = client.transport
            if client.closed or transport is None:
                out.clear()
                continue
            if client.out_vectored:
                client.out_vectored = False
                client.out_bytes += sum(map(len, out))
                transport.writelines(out)
            else:
                data = out[0] if len(out) == 1 else b"".join(out)
                client.out_bytes += len(data)
                transport.write(data)
            if client.congested:
                if transport.get_write_buffer_size() > max_pending and client.past_max_pending():
                    pass  # closed as a slow consumer
                elif reader is not None and reader is not client:
                    congested.append(client)
                    deliveries += len(out)
            out.clear()
        if congested:
            if flow.stall(reader, congested, deliveries, self.loop):
                self.stalls += 1

    def _sweep_writes(self) -> None:
        """Close clients whose socket has not drained for longer than the write deadline."""
        now = time.monotonic()
        deadline = self.options.write_deadline
        conns: list[Connection] = list(self.clients.values())
        if self.cluster is not None:
            conns += self.cluster.routes.values()
        for client in conns:
            transport = client.transport
            if transport is None or client.closed:
                continue
            pending = transport.get_write_buffer_size()
            if pending == 0:
                client.stalled_since = 0.0
                continue
            drained = client.out_bytes - pending  # grows while the socket makes progress
            if drained != client.drain_mark or not client.stalled_since:
                client.drain_mark = drained
                client.stalled_since = now
            elif now - client.stalled_since > deadline:
                client.slow_consumer("write deadline exceeded")
        self._sweeper = self.loop.call_later(1.0, self._sweep_writes)


def local_ips() -> set[str]:
    """The addresses this host's name resolves to."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


def _add_counts(totals: dict[str, int], conn: Connection) -> None:
    """Add a connection's messages and bytes in and out (also as a client's) to `totals`."""
    in_msgs, in_bytes = conn.published()
    parts = ("", "client_") if not conn.is_route else ("",)
    for part in parts:
        totals[f"in_{part}msgs"] += in_msgs
        totals[f"in_{part}bytes"] += in_bytes
        totals[f"out_{part}msgs"] += conn.out_msgs
        totals[f"out_{part}bytes"] += conn.out_payload


def _with_auth_required(info: dict[str, Any]) -> dict[str, Any]:
    """`info` with auth_required, in the reference's place for it (before max_payload)."""
    return _with_key_before(info, "auth_required", ("tls_required", "tls_verify",
                                                     "tls_available"))


def _with_key_before(info: dict[str, Any], name: str, after: tuple[str, ...]) -> dict[str, Any]:
    """`info` with `name` set to True in the reference's place for it: before the first of
    `after` present, else before max_payload."""
    first = next((key for key in (*after, "max_payload") if key in info), "max_payload")
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key == first:
            out[name] = True
        out[key] = value
    return out


def install_uvloop() -> bool:
    """Use uvloop for new event loops when it is installed."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True
