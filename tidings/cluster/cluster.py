"""The cluster: the route listener, routes we solicit (seed routes and those gossip tells us
of, reconnected with back-off), one route per remote server, local interest sent to every
route, messages forwarded once per route, and the cluster's client URLs for clients' INFO.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import random
import secrets
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.server import RouteURL
from ..oserrors import listen_error
from ..redact import redact_url
from ..server.accounts import Account
from ..server.binding import listener_urls, listening_socket
from ..server.connection import Connection, Frame, Headerless
from ..server.listeners import Listener
from ..server.server import local_ips
from ..server.sublist import RemoteInterest, Subscription
from .route import NATS, SEED, RouteConnection, encode_json, needs_accounts_dialect

if TYPE_CHECKING:
    from ..server.server import Server

log = logging.getLogger("tidings.cluster")

# Reconnecting a route: the first retry after a second (as the reference), then doubling up
# to RECONNECT_MAX. A route learnt from gossip is given up after IMPLICIT_ATTEMPTS failures.
RECONNECT_FIRST = 1.0
RECONNECT_MAX = 8.0
IMPLICIT_ATTEMPTS = 3
DIAL_TIMEOUT = 1.0  # as the reference's DEFAULT_ROUTE_DIAL
# The route protocol level we announce: accounts in RS+/RMSG (the reference's RouteProtoV2),
# not the distributed message tracing of level 3.
ROUTE_PROTO = 2


class Cluster(Listener):
    """Routes of one server: one more listener of the server, plugged in by node.py when
    clustering is on (started after the client port, released before the clients close)."""

    stops_before_clients = True

    def __init__(self, server: Server) -> None:
        self.server = server
        opts = server.options
        self.listen = RouteURL(opts.cluster)
        self.seeds = [RouteURL(u) for u in opts.routes]
        self.name = opts.cluster_name or _dynamic_name()
        self.dynamic = not opts.cluster_name
        self.auth_required = bool(self.listen.user)
        self.auth_timeout = opts.auth_timeout
        # cluster { tls {} }: every route is TLS from its first byte, both ends verified.
        self.tls = opts.cluster_tls
        self.tls_contexts: tuple[Any, Any] = (None, None)  # (accepting, soliciting)
        if self.tls is not None:
            from ..server.tls import route_contexts

            self.tls_contexts = route_contexts(self.tls)
            self.auth_timeout = self.tls.timeout + 1.0  # the reference's default with TLS
        self.routes: dict[str, RouteConnection] = {}  # by remote server id
        self.pending: set[RouteConnection] = set()  # connected, not registered yet
        self.port = self.listen.port
        self.local_counts: dict[tuple[bytes, bytes, bytes | None], int] = {}
        self.client_urls: dict[str, list[str]] = {}  # remote server id -> its client URLs
        self._listener: asyncio.AbstractServer | None = None
        self._bound: tuple[Any, ...] = ()  # the route listener's address
        self._tasks: set[asyncio.Task[None]] = set()
        self._soliciting: set[str] = set()  # host:port we are connecting to now
        self._qseq = 0
        self._flush_scheduled = False
        self._stopping = False
        self._seeds_reached: set[str] = set()  # seed routes registered at least once
        self._seeded = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._listen()
        except OSError as exc:
            raise listen_error("error listening on router", self.listen.host,
                               self.listen.port, exc) from exc
        server = self.server
        server.accounts.watch(self._watch_account)
        log.info("Cluster name is %s", self.name)
        log.info("Listening for route connections on %s:%d", self.listen.host, self.port)
        own = self._own_route_addresses()
        # Our own listen address in the list: the reference skips it too.
        self.seeds = [url for url in self.seeds if (url.host, url.port) not in own]
        for url in self.seeds:
            self._spawn(self._keep_route(url, implicit=False))
        if not self.seeds:
            self._seeded.set()

    async def _listen(self) -> None:
        sock = await listening_socket(self.listen.host, self.listen.port)
        self._bound = sock.getsockname()
        if self.tls is not None:
            from ..server.tls_session import Greeting, TLSListener

            async def greet(conn: socket.socket, peer: Any) -> Greeting:
                return Greeting(RouteConnection(self))

            self._listener = TLSListener(  # type: ignore[assignment]
                self.tls_contexts[0], self.tls.timeout, greet, kind="route"
            ).serve(sock)
        else:
            self._listener = await self.server.loop.create_server(
                lambda: RouteConnection(self), sock=sock)
        self.port = self._bound[1]

    def ports(self) -> dict[str, list[str]]:
        if self._listener is None:
            return {}
        return {"cluster": listener_urls("tls" if self.tls else "nats", self._bound)}

    async def seeded(self, timeout: float) -> bool:
        """Wait (at most `timeout`) until a route to every seed has been made once."""
        try:
            await asyncio.wait_for(self._seeded.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for route in [*self.routes.values(), *self.pending]:
            route.close_with_error(None)
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _own_route_addresses(self) -> set[tuple[str, int]]:
        hosts = {self.listen.host}
        if self.listen.host in ("0.0.0.0", "::", ""):
            hosts |= {"127.0.0.1", "localhost", "::1", *local_ips()}
        return {(h, self.port) for h in hosts}

    # -- soliciting ------------------------------------------------------------
    async def _keep_route(self, url: RouteURL, implicit: bool) -> None:
        """Connect to `url` and keep connecting while it matters (an explicit route for ever,
        with back-off; one learnt from gossip for a few attempts)."""
        loop = self.server.loop
        delay = RECONNECT_FIRST
        failures = 0
        self._soliciting.add(url.hostport)
        try:
            while not self._stopping:
                route = RouteConnection(self, url.text, implicit)
                tls: dict[str, Any] = {}
                if self.tls is not None:
                    tls = {"ssl": self.tls_contexts[1], "server_hostname": url.host,
                           "ssl_handshake_timeout": self.tls.timeout}
                try:
                    await asyncio.wait_for(
                        loop.create_connection(lambda r=route: r, url.host, url.port, **tls),  # type: ignore[misc]
                        DIAL_TIMEOUT + (self.tls.timeout if self.tls else 0),
                    )
                except ssl.SSLError as exc:
                    failures += 1
                    from ..server.tls_session import log_failure

                    log_failure(exc, url.hostport, "route")
                except (OSError, asyncio.TimeoutError) as exc:
                    failures += 1
                    log.debug("Error trying to connect to route %s: %s", url.redacted, exc)
                else:
                    await route.done
                    if route.to_self or self._stopping:
                        return
                    if route.registered:
                        failures, delay = 0, RECONNECT_FIRST
                    if route.duplicate:
                        # Another route to that server won: come back only once it is gone.
                        await self._route_closed(route.remote_id)
                        continue
                    failures += not route.registered
                if implicit and (failures >= IMPLICIT_ATTEMPTS or self._has_route_to(url)):
                    return
                await asyncio.sleep(delay * (0.9 + random.random() / 5))
                delay = min(delay * 2, RECONNECT_MAX)
        finally:
            self._soliciting.discard(url.hostport)

    async def _route_closed(self, remote_id: str) -> None:
        route = self.routes.get(remote_id)
        while route is not None and not self._stopping:
            await asyncio.shield(route.done)
            route = self.routes.get(remote_id)

    def discovered(self, info: dict[str, Any]) -> None:
        """Gossip: INFO about a server of the cluster we may not be connected to."""
        remote_id = info.get("server_id")
        if not isinstance(remote_id, str) or remote_id == self.server.server_id:
            return
        if remote_id in self.routes:
            return
        ip = info.get("ip")
        try:
            if isinstance(ip, str) and ip:
                url = RouteURL(ip.rstrip("/"))
            else:
                url = RouteURL(f"nats://{info.get('host')}:{info.get('port')}")
        except ValueError:
            log.debug("gossip with an unusable route address: %r", redact_url(str(ip)))
            return
        if url.hostport in self._soliciting or any(
            s.port == url.port and s.host == url.host for s in self.seeds
        ):
            return
        if info.get("auth_required") and self.listen.user:
            url = RouteURL(RouteURL.with_credentials(
                self.listen.user, self.listen.password, url.hostport))
        self._spawn(self._keep_route(url, implicit=True))

    # -- handshake -------------------------------------------------------------
    def connect_line(self, url_text: str) -> bytes:
        url = RouteURL(url_text)
        connect: dict[str, Any] = {"echo": True, "verbose": False, "pedantic": False}
        if url.user:
            connect["user"] = url.user
            connect["pass"] = url.password
        connect.update({
            "tls_required": self.tls is not None,
            "name": self.server.server_id,
            "headers": True,
            "cluster": self.name,
            "dynamic": self.dynamic,
        })
        return b"CONNECT " + encode_json(connect) + b"\r\n"

    def info_line(self) -> bytes:
        """Our route INFO, its keys in the reference's order (and a nonce, as it sends)."""
        server = self.server
        opts = server.options
        common = server.info_fields()
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.name,
            "version": common["version"],
            "proto": ROUTE_PROTO,
            "go": common["go"],
            "host": self.listen.host,
            "port": self.port,
            "headers": True,
        }
        if opts.cluster_advertise:
            host, _, port = opts.cluster_advertise.rpartition(":")
            info["host"] = host or opts.cluster_advertise
            if port.isdigit():
                info["port"] = int(port)
        if self.auth_required:
            info["auth_required"] = True
        if self.tls is not None:
            info["tls_required"] = info["tls_verify"] = True
        info["max_payload"] = opts.max_payload
        if opts.cluster_advertise:
            info["ip"] = f"nats-route://{opts.cluster_advertise}/"
        info["nonce"] = secrets.token_urlsafe(11)[:15]
        info["cluster"] = self.name
        if self.dynamic:
            info["cluster_dynamic"] = True
        if not opts.no_advertise:
            info["connect_urls"] = server.own_client_urls()
        info["tidings"] = common["go"]  # speaks the seed's dialect (route.py)
        if needs_accounts_dialect(server):
            info["tidings_accounts"] = True  # ... unless either side has accounts
        return b"INFO " + encode_json(info) + b" \r\n"

    def authenticate(self, connect: dict[str, Any]) -> bool:
        return _same(connect.get("user"), self.listen.user) and _same(
            connect.get("pass"), self.listen.password
        )

    def check_cluster_name(self, theirs: Any, their_dynamic: bool) -> str | None:
        """None if a peer named `theirs` may join; else the refusal to send. Without a
        configured name we take a configured one, or the greater of two dynamic ones. A peer
        that names no cluster (the seed's CONNECT has no such field) is let in, where the
        reference refuses it."""
        if not isinstance(theirs, str) or not theirs or theirs == self.name:
            return None
        if self.dynamic and (not their_dynamic or self.name < theirs):
            self.name = theirs
            self.dynamic = their_dynamic
            return None
        return f'Rejecting connection, cluster name "{theirs}" does not match "{self.name}"'

    def register(self, route: RouteConnection) -> None:
        """The peer's INFO arrived: make `route` the route to its server (or refuse it)."""
        server = self.server
        remote_id = route.remote_id
        self.pending.discard(route)
        if remote_id == server.server_id:
            route.to_self = True
            route.close_with_error(None, "route to self")
            return
        existing = self.routes.get(remote_id)
        if existing is not None and not existing.closed:
            if _keep_new(existing, route, server.server_id):
                existing.duplicate = True
                existing.close_with_error(None, "duplicate route")
                self._forget(existing)
            else:
                route.duplicate = True
                route.close_with_error(None, "duplicate route")
                return
        self.routes[remote_id] = route
        route.registered = True
        route.start_pings()
        if route.url and not route.implicit:
            self._seeds_reached.add(RouteURL(route.url).hostport)
            if len(self._seeds_reached) >= len(self.seeds):
                self._seeded.set()
        log.info("%s registered (%s dialect)", route.describe(), route.dialect)
        self._send_all_interest(route)
        if not (route.url and route.implicit):
            self._gossip(route)
        urls = route.info.get("connect_urls")
        if isinstance(urls, list) and not self.server.options.no_advertise:
            self.client_urls[remote_id] = [u for u in urls if isinstance(u, str)]
            server.client_urls_changed()

    def _gossip(self, route: RouteConnection) -> None:
        """Tell the other routes about the new server, so that they connect to it."""
        others = [r for r in self.routes.values() if r is not route and not r.closed]
        if not others:
            return
        info = dict(route.info)
        info.pop("nonce", None)
        if not info.get("ip"):
            info["ip"] = f"nats-route://{route.host}:{info.get('port')}/"
        line = b"INFO " + encode_json(info) + b"\r\n"
        for other in others:
            other.queue(line)
        self._flush_soon()

    def lame_duck(self) -> None:
        self.announce_lame_duck()

    def announce_lame_duck(self) -> None:
        """Tell the routes we are leaving: they drop our client URLs and tell their clients."""
        line = self.info_line()
        line = line[: line.rindex(b"}")] + b',"ldm":true} \r\n'
        for route in self.routes.values():
            route.queue(line)

    def remote_changed(self, route: RouteConnection, info: dict[str, Any]) -> None:
        if info.get("ldm"):
            if self.client_urls.pop(route.remote_id, None) is not None:
                self.server.client_urls_changed()
            return
        urls = info.get("connect_urls")
        if isinstance(urls, list) and not self.server.options.no_advertise:
            fresh = [u for u in urls if isinstance(u, str)]
            if self.client_urls.get(route.remote_id) != fresh:
                self.client_urls[route.remote_id] = fresh
                self.server.client_urls_changed()

    def route_gone(self, route: RouteConnection) -> None:
        self.pending.discard(route)
        if route.registered:
            self._forget(route)
            log.info("%s closed", route.describe())

    def _forget(self, route: RouteConnection) -> None:
        """Take a route's interest out of the index and its server off the lists."""
        if not route.registered:
            return
        route.registered = False
        if self.routes.get(route.remote_id) is route:
            del self.routes[route.remote_id]
            if self.client_urls.pop(route.remote_id, None) is not None:
                self.server.client_urls_changed()
        by_account: dict[Account, list[Subscription]] = {}
        for key, sub in route.subs.items():
            by_account.setdefault(route.account_of(key), []).append(sub)
            sub.closed = True
        route.subs.clear()
        for account, subs in by_account.items():
            self.server.drop_subs(subs, account)

    # -- local interest to the routes -----------------------------------------
    def _watch_account(self, account: Account) -> None:
        """Watch an account's subject index for the interest to announce."""
        def watcher(sub: Subscription, added: bool) -> None:
            self._local_interest(account, sub, added)

        account.sublist.watcher = watcher
        # What is there already: the relays of its imports (made with the account), and
        # the subscriptions of clients that came before the cluster's listener.
        server = self.server
        for where, sub in server.accounts.relays:
            if where is account and not sub.closed:
                watcher(sub, True)
        for client in server.clients.values():
            if client.account is account:
                for sub in client.subs.values():
                    if not sub.closed:
                        watcher(sub, True)

    def _local_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        """An account's subject index's watcher: a local subscription came or went."""
        if sub.client.is_route:
            return
        name = account.name.encode()
        key = (name, sub.subject, sub.queue)
        counts = self.local_counts
        n = counts.get(key, 0) + (1 if added else -1)
        if n > 0:
            counts[key] = n
        else:
            counts.pop(key, None)
            n = 0
        nats_line = None
        if sub.queue is not None or n == (1 if added else 0):
            nats_line = _interest_line(name, sub.subject, sub.queue, n)
        seed_line = None
        on_seed = account is self.server.accounts.global_account and not sub.client.is_relay
        for route in self.routes.values():
            if route.closed:
                continue
            if route.dialect == SEED:
                if not on_seed:
                    continue  # the seed's dialect has the global account only
                if seed_line is None:
                    seed_line = _seed_line(sub, added)
                route.queue(seed_line)
            elif nats_line is not None:
                route.queue(nats_line)
        self._flush_soon()

    def _send_all_interest(self, route: RouteConnection) -> None:
        lines: list[bytes] = []
        if route.dialect == NATS:
            for (account, subject, queue), n in self.local_counts.items():
                lines.append(_interest_line(account, subject, queue, n))
        else:
            global_account = self.server.accounts.global_account
            for client in list(self.server.clients.values()):
                if client.account is not global_account:
                    continue
                for sub in client.subs.values():
                    if not sub.closed:
                        lines.append(_seed_line(sub, True))
        if lines:
            route.queue(b"".join(lines))
        self._flush_soon()

    def local_sub(self, sid: bytes) -> Subscription | None:
        """Our subscription named by a seed sid, RSID:<cid>:<sid> or QRSID:<cid>:<sid>."""
        parts = sid.split(b":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        client = self.server.clients.get(int(parts[1]))
        if client is None:
            return None
        sub = client.subs.get(parts[2])
        return None if sub is None or sub.closed else sub

    def _flush_soon(self) -> None:
        if self.server.reader is not None or self._flush_scheduled:
            return  # the read being parsed flushes when it ends
        self._flush_scheduled = True
        self.server.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.server.flush()

    # -- messages --------------------------------------------------------------
    def forward(
        self,
        pub: Connection | None,
        subject: bytes,
        reply: bytes | None,
        frame: Frame,
        plain_frame: Headerless | None,
        remote: RemoteInterest,
        deliver: Callable[..., bool],
        account: Account,
    ) -> bool:
        """Send a local publish to the routes with interest, once per route, naming the
        queue groups whose pick fell on that route's server. A group with members here and
        elsewhere picks among all of them alike (a local pick is delivered with `deliver`),
        as the reference does. True if the message went anywhere."""
        if not remote.groups:
            sent = False
            for sub in remote.plain:
                route = sub.client
                if not route.closed:
                    route.send_msg(sub, None, subject, frame, plain_frame, reply, account)
                    sent = True
            return sent
        delivered = False
        targets: dict[RouteConnection, list[Any]] = {}
        for sub in remote.plain:
            if not sub.client.closed:
                targets[sub.client] = [sub, None]
        for members in remote.groups:
            n = len(members)
            self._qseq += 1
            start = self._qseq % n
            for k in range(n):
                member = members[(start + k) % n]
                client = member.client
                if not client.is_route:
                    if deliver(pub, member, frame, plain_frame):
                        delivered = True
                        break
                    continue
                if client.closed or member.closed:
                    continue
                target = targets.get(client)
                if target is None:
                    target = targets[client] = [None, None]
                if target[1] is None:
                    target[1] = []
                target[1].append(member)
                break
        for route, (plain_sub, queue_subs) in targets.items():
            route.send_msg(plain_sub, queue_subs, subject, frame, plain_frame, reply, account)
        return delivered or bool(targets)

    def _has_route_to(self, url: RouteURL) -> bool:
        return any(
            r.url and RouteURL(r.url).hostport == url.hostport for r in self.routes.values()
        )

    def client_urls_of_cluster(self) -> list[str]:
        urls: list[str] = []
        for remote in self.client_urls.values():
            for url in remote:
                if url not in urls:
                    urls.append(url)
        return urls


def _keep_new(existing: RouteConnection, new: RouteConnection, our_id: str) -> bool:
    """Of two routes between the same two servers, which one stays. The reference keeps the
    one it registered first, so with a reference peer we do too (should each side keep the
    other one, both close and the soliciting sides connect again). Two tidings servers
    keep the same one: the one solicited by the server with the smaller id."""
    def solicited_by(route: RouteConnection) -> str:
        return our_id if route.url else route.remote_id

    if new.dialect == NATS or bool(existing.url) == bool(new.url):
        return False  # the first one stays
    return solicited_by(new) == min(our_id, new.remote_id)


def _interest_line(account: bytes, subject: bytes, queue: bytes | None, n: int) -> bytes:
    if queue is None:
        return b"%s %b %b\r\n" % (b"RS+" if n else b"RS-", account, subject)
    if n:
        return b"RS+ %b %b %b %d\r\n" % (account, subject, queue, n)
    return b"RS- %b %b %b\r\n" % (account, subject, queue)


def _seed_line(sub: Subscription, added: bool) -> bytes:
    sid = b"%sRSID:%d:%b" % (b"Q" if sub.queue else b"", sub.client.cid, sub.sid)
    if not added:
        return b"UNSUB " + sid + b"\r\n"
    if sub.queue:
        return b"SUB %b %b %b\r\n" % (sub.subject, sub.queue, sid)
    return b"SUB %b %b\r\n" % (sub.subject, sid)


def _same(given: Any, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def _dynamic_name() -> str:
    return secrets.token_urlsafe(16).replace("-", "A").replace("_", "B")


