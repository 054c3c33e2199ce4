"""The system account's events and requests, as nats-server 2.x has them (its events.go).

Events, published in the system account for its users to subscribe to (each built only when
someone listens, and only when a client connects or disconnects: nothing per message):
- `$SYS.ACCOUNT.<acc>.CONNECT` / `.DISCONNECT` (client_connect / client_disconnect
  advisories) for each client connection (not the process's own: the embedded streaming
  server's), also a connection that never logged in (in `$G`);
- `$SYS.SERVER.<id>.CLIENT.AUTH.ERR` when a login fails;
- `$SYS.ACCOUNT.<acc>.SERVER.CONNS` and the older `$SYS.SERVER.ACCOUNT.<acc>.CONNS`
  (account_connections) when an account other than `$G` gains or loses a client, and every
  30 s while it has some;
- `$SYS.SERVER.<id>.STATSZ` after 250 ms, then at doubling intervals up to every 10 s (at
  most one a second), as the reference schedules it; on one server without routes only
  while someone listens;
- `$SYS.SERVER.<id>.SHUTDOWN` when the server stops.

Requests, answered as the reference answers them (its ServerAPIResponse: `server`, `data`,
`error`), with the same producers as the HTTP endpoints (monitor.Endpoints), the body of a
request giving the endpoint's options in JSON (`{"acc": "A"}` for CONNZ):
- `$SYS.REQ.SERVER.PING` and `$SYS.REQ.SERVER.PING.<X>` (every server) and
  `$SYS.REQ.SERVER.<id>.<X>` (this one) for X in IDZ, STATSZ, VARZ, CONNZ, SUBSZ, ROUTEZ,
  ACCOUNTZ, HEALTHZ, JSZ (JetStream's, or its answer with JetStream off), and, for what
  tidings does not have, as the reference answers with the feature off: GATEWAYZ, LEAFZ, RAFTZ;
- `$SYS.REQ.ACCOUNT.<acc>.<X>` for X in CONNZ, SUBSZ, INFO, STATZ, CONNS, LEAFZ, JSZ, and
  `$SYS.REQ.ACCOUNT.PING.STATZ`;
- from any account, as the reference imports them into each: `$SYS.REQ.SERVER.PING.CONNZ`
  and `$SYS.REQ.ACCOUNT.PING.CONNZ` (that account's connections),
  `$SYS.REQ.ACCOUNT.PING.STATZ` (its numbers) and `$SYS.REQ.USER.INFO` (who the requester
  is, its permissions: answered by the server it is connected to only).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..monitoring import rfc3339
from .accounts import (
    GLOBAL_ACCOUNT,
    Account,
    publish_internal,
    subscribe_internal,
    unsubscribe_internal,
)
from .clientinfo import client_info, go_time
from .endpoints import EndpointError, Endpoints, _rss
from .godecode import (
    BOOL,
    INT,
    STRING,
    STRINGS,
    U64,
    Int,
    Scalar,
    Struct,
    decode,
    loads,
    syntax_error,
)

if TYPE_CHECKING:
    from asyncio import TimerHandle

    from .client import ClientConnection
    from .server import Server
    from .sublist import Subscription

log = logging.getLogger("tidings.server")

CONNECT = "io.nats.server.advisory.v1.client_connect"
DISCONNECT = "io.nats.server.advisory.v1.client_disconnect"
ACCOUNT_CONNS = "io.nats.server.advisory.v1.account_connections"
# The STATSZ schedule (events.go): first after 250 ms, doubling up to statsHBInterval, at
# most one a second (statszRateLimit); an account's CONNS again every eventsHBInterval.
STATSZ_FIRST = 0.25
STATSZ_EVERY = 10.0
STATSZ_RATE = 1.0
CONNS_EVERY = 30.0
# A server we heard from (its STATSZ) counts in active_servers this long (orphMax).
# How long answers to an account's request sent on in the system account are carried back
# (the reference's streamed service exports' response threshold).
RESPONSE_THRESHOLD = 120.0
SERVER_FORGOTTEN = 5 * CONNS_EVERY

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# The structs a request's body fills, as the reference has them (events.go's
# <X>EventOptions: monitor.go's <X>Options and EventFilterOptions, embedded).
_FILTER = {"server_name": STRING, "cluster": STRING, "host": STRING, "exact_match": BOOL,
           "tags": STRINGS, "domain": STRING}
_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "connz": ("ConnzEventOptions", {
        "sort": Scalar("server.SortOpt", str), "auth": BOOL, "subscriptions": BOOL,
        "subscriptions_detail": BOOL, "offset": INT, "limit": INT, "cid": U64,
        "mqtt_client": STRING, "state": Int("server.ConnState"), "user": STRING,
        "acc": STRING, "filter_subject": STRING}),
    "subsz": ("SubszEventOptions", {"offset": INT, "limit": INT, "subscriptions": BOOL,
                                    "account": STRING, "test": STRING}),
    "routez": ("RoutezEventOptions", {"subscriptions": BOOL, "subscriptions_detail": BOOL}),
    "accountz": ("AccountzEventOptions", {"account": STRING}),
    "accstatz": ("AccountStatzEventOptions", {"accounts": STRINGS, "include_unused": BOOL}),
    "healthz": ("HealthzEventOptions", {
        "js-enabled": BOOL, "js-enabled-only": BOOL, "js-server-only": BOOL,
        "js-meta-only": BOOL, "account": STRING, "stream": STRING, "consumer": STRING,
        "details": BOOL}),
    "varz": ("VarzEventOptions", {}), "statsz": ("StatszEventOptions", {}),
    "info": ("AccInfoEventOptions", {}),
    "gatewayz": ("GatewayzEventOptions", {"name": STRING, "accounts": BOOL,
                                          "account_name": STRING, "subscriptions": BOOL,
                                          "subscriptions_detail": BOOL}),
    "leafz": ("LeafzEventOptions", {"subscriptions": BOOL, "account": STRING}),
    "jsz": ("JszEventOptions", {
        "account": STRING, "accounts": BOOL, "streams": BOOL, "consumer": BOOL,
        "direct_consumer": BOOL, "config": BOOL, "leader_only": BOOL, "offset": INT,
        "limit": INT, "raft": BOOL, "stream_leader_only": BOOL}),
    "raftz": ("RaftzEventOptions", {"account": STRING, "group": STRING}),
}
OPTIONS = {kind: Struct(f"server.{name}", {**fields, **_FILTER})
           for kind, (name, fields) in _OPTIONS.items()}


class Skip(Exception):
    """The request is not for this server (filtered, or nothing to say): no answer."""


def decode_options(kind: str, payload: bytes) -> dict[str, Any]:
    """A request's body as json.Unmarshal reads it into the reference's
    `<kind>EventOptions` (godecode: names matched as Go matches them, null and unknown
    names ignored). Raises ValueError with Go's words for what Go refuses."""
    if not payload:
        return {}
    text = payload.decode("utf-8", "replace")
    try:
        raw = loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(syntax_error(text, exc)) from None
    if raw is None:
        return {}
    body = decode(raw, OPTIONS[kind], strict=False)
    return {name: value for name, value in body.items() if value is not None}


class EventIds:
    """Event ids shaped as the reference's (a NUID: 22 base62 characters)."""

    def __init__(self) -> None:
        self.prefix = "".join(secrets.choice(_B62) for _ in range(12))
        self.seq = secrets.randbelow(62 ** 9)

    def next(self) -> str:
        self.seq += 1
        n, digits = self.seq, []
        for _ in range(10):
            n, r = divmod(n, 62)
            digits.append(_B62[r])
        return self.prefix + "".join(reversed(digits))


def _data_stats(msgs: int, nbytes: int) -> dict[str, int]:
    return {"msgs": msgs, "bytes": nbytes}


Answer = Callable[[dict[str, Any]], Any]


class SystemAccount:
    """The system account's events and request handlers of one server (see the module
    docstring); `start` after the listeners, `stop` at shutdown."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.accounts = server.accounts
        self.system = server.accounts.system_account
        monitor = server.monitor
        self.endpoints = monitor.endpoints if monitor is not None else Endpoints(server)
        self.running = False
        self.seq = 0
        self.ids = EventIds()
        self.subs: list[tuple[Account, Subscription]] = []
        self.servers: dict[str, float] = {}  # other servers' ids -> when last heard
        self.members: dict[Account, set[ClientConnection]] = {}  # logged-in clients
        self._heartbeats: dict[Account, TimerHandle] = {}
        self._statsz_timer: TimerHandle | None = None
        self._statsz_interval = STATSZ_FIRST
        self._last_statsz = 0.0
        self._stats_sub: Subscription | None = None
        # Requests of other accounts sent on in the system account: our reply subject ->
        # (the requester's account, its reply subject, when).
        self._reply_prefix = ("_R_." + "".join(secrets.choice(_B62) for _ in range(8))
                              + ".").encode()
        self._pending: dict[bytes, tuple[Account, bytes, float]] = {}
        self._mapped = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.running = True
        sid = self.server.server_id
        for name, answer in self._server_requests().items():
            for subject in (f"$SYS.REQ.SERVER.PING.{name}", f"$SYS.REQ.SERVER.{sid}.{name}"):
                self._serve(self.system, subject, name, answer)
        self._serve(self.system, "$SYS.REQ.SERVER.PING", "STATSZ", _unused)
        for name in ("CONNZ", "SUBSZ", "INFO", "STATZ", "CONNS", "LEAFZ", "JSZ"):
            self._serve(self.system, f"$SYS.REQ.ACCOUNT.*.{name}", f"ACCOUNT.{name}",
                        self._account_request(name))
        self._serve(self.system, "$SYS.REQ.ACCOUNT.PING.STATZ", "ACCOUNT.PING.STATZ",
                    self._account_ping_statz)
        self._stats_sub = self._subscribe(self.system, "$SYS.SERVER.*.STATSZ",
                                          self._remote_statsz)
        self._subscribe(self.system, "$SYS.SERVER.*.SHUTDOWN", self._remote_shutdown)
        self._subscribe(self.system, self._reply_prefix.decode() + "*", self._relay_response)
        self.accounts.watch(self._account_added)
        if self.server.operator is not None:
            self.server.operator.serve(self)  # claims updates and lookups
        self._statsz_timer = self.server.loop.call_later(STATSZ_FIRST, self._statsz_tick)

    def stop(self) -> None:
        """Say that this server is going (SHUTDOWN), then nothing more."""
        if not self.running:
            return
        self._publish(f"$SYS.SERVER.{self.server.server_id}.SHUTDOWN", self.server_info())
        self.running = False
        if self._statsz_timer is not None:
            self._statsz_timer.cancel()
        for timer in self._heartbeats.values():
            timer.cancel()
        self._heartbeats.clear()
        for account, sub in self.subs:
            unsubscribe_internal(self.accounts, account, sub)
        self.subs.clear()

    def _subscribe(self, account: Account, subject: str, handler: Callable[..., None],
                   routed: bool = True, with_client: bool = False) -> Subscription:
        sub = subscribe_internal(self.accounts, account, subject.encode(), handler, routed,
                                 with_client=with_client)
        self.subs.append((account, sub))
        return sub

    def _account_added(self, account: Account) -> None:
        """What the reference imports into each account from the system account: an
        account's requests for its connections and numbers go on as the system account's
        `$SYS.REQ.ACCOUNT.<acc>.CONNZ|STATZ` (so that every server of a cluster answers,
        tidings or the reference), their answers come back to the requester; and a user
        asks the server it is connected to who it is."""
        if not self.running:
            return
        if account is not self.system:
            for local, remote in (("$SYS.REQ.ACCOUNT.PING.CONNZ", "CONNZ"),
                                  ("$SYS.REQ.SERVER.PING.CONNZ", "CONNZ"),
                                  ("$SYS.REQ.ACCOUNT.PING.STATZ", "STATZ")):
                target = f"$SYS.REQ.ACCOUNT.{account.name}.{remote}".encode()
                self._subscribe(account, local, self._importer(account, target), routed=False)
        self._subscribe(account, "$SYS.REQ.USER.INFO", self._user_info, routed=False,
                        with_client=True)

    def _importer(self, account: Account, target: bytes) -> Callable[..., None]:
        """A request of `account`, sent on as the system account's `target` with a reply
        subject of ours that maps back to the requester's (as a service import does)."""
        def carry(subject: bytes, reply: bytes | None, headers: bytes | None,
                  payload: bytes) -> None:
            if self.running and reply:
                mapped = self._map_reply(account, reply)
                publish_internal(self.server, self.system, target, payload, headers, mapped)

        return carry

    def _map_reply(self, account: Account, reply: bytes) -> bytes:
        now = time.monotonic()
        pending = self._pending
        while pending:  # (oldest first: forget those past the threshold)
            oldest = next(iter(pending))
            if now - pending[oldest][2] <= RESPONSE_THRESHOLD:
                break
            del pending[oldest]
        self._mapped += 1
        mapped = self._reply_prefix + str(self._mapped).encode()
        pending[mapped] = (account, reply, now)
        return mapped

    def _relay_response(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                        payload: bytes) -> None:
        """An answer to a request we sent on: to the requester, in its account."""
        entry = self._pending.get(subject)
        if entry is not None and self.running:
            account, to, _ = entry
            publish_internal(self.server, account, to, payload, headers)

    # -- publishing -------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """The reference's ServerInfo of each message (a sequence number each)."""
        s = self.server
        self.seq += 1
        info: dict[str, Any] = {"name": s.name, "host": s.options.host, "id": s.server_id}
        if s.cluster is not None:
            info["cluster"] = s.cluster.name
        info["ver"] = s.info_fields().get("version", "")
        if s.options.tags:
            info["tags"] = list(s.options.tags)
        # With JetStream: its flag, and the reference's capability flags (JetStream,
        # binary stream snapshots, NRG traffic in accounts: 7).
        js = s.jetstream is not None
        info.update(jetstream=js, flags=7 if js else 0, seq=self.seq, time=go_time(time.time()))
        return info

    def interested(self, subject: str, account: Account | None = None,
                   ignore: Subscription | None = None) -> bool:
        """Whether anyone (here or over a route) listens to `subject` in `account` (the
        system account), `ignore` aside."""
        return (account or self.system).listened(subject, ignore)

    def _publish(self, subject: str, body: Any, account: Account | None = None) -> None:
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        publish_internal(self.server, account or self.system, subject.encode(), payload)

    def _event(self, kind: str, when: float) -> dict[str, Any]:
        return {"type": kind, "id": self.ids.next(), "timestamp": go_time(when)}

    # -- client events ------------------------------------------------------------------------
    def connected(self, client: ClientConnection) -> None:
        """A client has logged in (CONNECT accepted), in its account now."""
        if not self.running or client.internal:
            return
        account = client.account
        self.members.setdefault(account, set()).add(client)
        self._conns_changed(account)
        subject = f"$SYS.ACCOUNT.{account.name}.CONNECT"
        if self.interested(subject):
            now = time.time()
            self._publish(subject, {**self._event(CONNECT, now), "server": self.server_info(),
                                    "client": self.client_info(client)})

    def disconnected(self, client: ClientConnection) -> None:
        """A client connection is gone (logged in or not)."""
        if client.internal:
            return
        self.endpoints.retire(client)
        members = self.members.get(client.account)
        was_member = members is not None and client in members
        if was_member:
            members.discard(client)  # type: ignore[union-attr]
        if not self.running:
            return
        now = time.time()
        reason = client.close_reason or "Client Closed"
        if reason == "Authentication Failure":
            subject = f"$SYS.SERVER.{self.server.server_id}.CLIENT.AUTH.ERR"
            if self.interested(subject):
                self._publish(subject, self._disconnect_event(client, now, reason))
        if was_member:
            self._conns_changed(client.account)
        subject = f"$SYS.ACCOUNT.{client.account.name}.DISCONNECT"
        if self.interested(subject):
            self._publish(subject, self._disconnect_event(client, now, reason))

    def _disconnect_event(self, client: ClientConnection, now: float,
                          reason: str) -> dict[str, Any]:
        in_msgs, in_bytes = client.published()
        return {**self._event(DISCONNECT, now), "server": self.server_info(),
                "client": self.client_info(client, now),
                "sent": _data_stats(in_msgs, in_bytes),
                "received": _data_stats(client.out_msgs, client.out_payload),
                "reason": reason}

    def client_info(self, c: ClientConnection, stop: float = 0.0) -> dict[str, Any]:
        """The reference's ClientInfo of a client (with `stop`: of one that is gone; its
        round trip only then)."""
        return client_info(c, rtt=bool(stop), stop=stop, event=True)

    # -- account connections (CONNS) ---------------------------------------------------------
    def _conns_changed(self, account: Account) -> None:
        if account.name == GLOBAL_ACCOUNT:
            return
        self._send_conns(account)

    def _send_conns(self, account: Account, *replies: str) -> None:
        """The account's connections now, on its CONNS subjects (or to `replies`); again
        in CONNS_EVERY seconds while it has some."""
        clients = list(self.members.get(account, ()))
        timer = self._heartbeats.pop(account, None)
        if timer is not None:
            timer.cancel()
        if clients and self.running:
            self._heartbeats[account] = self.server.loop.call_later(
                CONNS_EVERY, self._send_conns, account)
        subjects = replies or (f"$SYS.SERVER.ACCOUNT.{account.name}.CONNS",
                               f"$SYS.ACCOUNT.{account.name}.SERVER.CONNS")
        wanted = [subject for subject in subjects if self.interested(subject)]
        if not wanted:
            return
        event = {**self._event(ACCOUNT_CONNS, time.time()), "server": {},
                 **self.endpoints.account_stat(account, clients)}
        for subject in wanted:
            event["server"] = self.server_info()
            self._publish(subject, event)

    # -- STATSZ ---------------------------------------------------------------------------------
    def statsz(self) -> dict[str, Any]:
        """The reference's ServerStatsMsg."""
        s, e = self.server, self.endpoints
        totals = s.message_totals()
        clients = e.clients()
        cores = os.cpu_count() or 1
        stats: dict[str, Any] = {
            "start": go_time(s.started), "mem": _rss(), "cores": cores, "cpu": e.cpu(),
            "connections": len(clients), "total_connections": s.total_connections,
            "active_accounts": len({c.account for c in clients}),
            "subscriptions": e.num_subscriptions(),
            "sent": _data_stats(totals["out_msgs"], totals["out_bytes"]),
            "sent_to_clients": _data_stats(totals["out_client_msgs"],
                                           totals["out_client_bytes"]),
            "received": _data_stats(totals["in_msgs"], totals["in_bytes"]),
            "received_from_clients": _data_stats(totals["in_client_msgs"],
                                                 totals["in_client_bytes"]),
            "slow_consumers": s.slow_consumers,
        }
        if s.slow_consumers:
            stats["slow_consumer_stats"] = {"clients": s.slow_consumers, "routes": 0,
                                            "gateways": 0, "leafs": 0}
        stale = sum(s.stale.values())
        if stale:
            stats["stale_connections"] = stale
            stats["stale_connection_stats"] = {**s.stale, "gateways": 0, "leafs": 0}
        if s.stalls:
            stats["stalled_clients"] = s.stalls
        routes = self._route_stats()
        if routes:
            stats["routes"] = routes
        stats["active_servers"] = 1 + self._servers_heard()
        stats["gomaxprocs"] = cores
        return {"server": self.server_info(), "statsz": stats}

    def _route_stats(self) -> list[dict[str, Any]]:
        cluster = self.server.cluster
        if cluster is None:
            return []
        out = []
        for r in cluster.routes.values():
            in_msgs, in_bytes = r.published()
            item: dict[str, Any] = {"rid": r.cid}
            if r.remote_name:
                item["name"] = r.remote_name
            item.update(sent=_data_stats(r.out_msgs, r.out_payload),
                        received=_data_stats(in_msgs, in_bytes),
                        pending=r.transport.get_write_buffer_size() if r.transport else 0)
            out.append(item)
        return out

    def _servers_heard(self) -> int:
        now = time.monotonic()
        for sid, when in list(self.servers.items()):
            if now - when > SERVER_FORGOTTEN:
                del self.servers[sid]
        return len(self.servers)

    def _statsz_tick(self) -> None:
        self._statsz_interval = min(self._statsz_interval * 2, STATSZ_EVERY)
        self._statsz_timer = self.server.loop.call_later(self._statsz_interval,
                                                         self._statsz_tick)
        self._broadcast_statsz()

    def _broadcast_statsz(self) -> None:
        """STATSZ on this server's subject, at most once a second; alone (no routes), only
        when someone other than ourselves listens."""
        now = time.monotonic()
        if now - self._last_statsz < min(STATSZ_RATE, self._statsz_interval):
            return
        subject = f"$SYS.SERVER.{self.server.server_id}.STATSZ"
        if self.server.cluster is None and not self.interested(subject,
                                                               ignore=self._stats_sub):
            return
        self._last_statsz = now
        self._publish(subject, self.statsz())

    def _remote_statsz(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                       payload: bytes) -> None:
        try:
            sid = json.loads(payload)["server"]["id"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(sid, str) and sid != self.server.server_id:
            self.servers[sid] = time.monotonic()

    def _remote_shutdown(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                         payload: bytes) -> None:
        tokens = subject.split(b".")
        if len(tokens) == 4:
            self.servers.pop(tokens[2].decode(errors="replace"), None)

    # -- requests -----------------------------------------------------------------------------
    def _serve(self, account: Account, subject: str, name: str, answer: Answer) -> None:
        """Answer requests on `subject` in `account` with `answer(options)`, deferred to
        the next loop turn (never inside the requester's routing)."""
        loop = self.server.loop

        def handler(subj: bytes, reply: bytes | None, headers: bytes | None,
                    payload: bytes) -> None:
            # (STATSZ without a reply: broadcast it now.)
            if self.running and (reply or name == "STATSZ"):
                loop.call_soon(self._respond, account, name, answer, subj, reply, payload)

        self._subscribe(account, subject, handler)

    def _respond(self, account: Account, name: str, answer: Answer, subject: bytes,
                 reply: bytes | None, payload: bytes) -> None:
        if not self.running:
            return
        if name == "ACCOUNT.CONNS":
            if reply:
                self._conns_request(subject, payload, reply.decode(errors="replace"))
            return
        kind = name.rsplit(".", 1)[-1].lower()
        try:
            if name == "IDZ":
                body: Any = {"name": self.server.name, "host": self.server.options.host,
                             "id": self.server.server_id}
            elif name == "STATSZ":
                body = self._statsz_request(payload, reply is None)
            else:
                body = self._zreq(_KINDS.get(kind, kind), answer, subject, payload)
        except Skip:
            return
        if reply:
            self._publish(reply.decode(errors="replace"), body, account)

    def _statsz_request(self, payload: bytes, broadcast: bool) -> Any:
        """STATSZ to the requester, or (no reply) on this server's STATSZ subject."""
        try:
            opts = decode_options("statsz", payload)
        except ValueError as exc:
            if broadcast:
                raise Skip from None
            return {"server": self.server_info(), "error": {"code": 400,
                                                            "description": str(exc)}}
        if self._filtered(opts):
            raise Skip
        if broadcast:
            self._last_statsz = 0.0
            self._broadcast_statsz()
            raise Skip
        return self.statsz()

    def _zreq(self, kind: str, answer: Answer, subject: bytes, payload: bytes) -> Any:
        """The reference's zReq: the options from the body (400 if Go would not read
        them), filtered, then the answer (500 if the endpoint refuses)."""
        try:
            opts = decode_options(kind, payload)
        except ValueError as exc:
            return {"server": self.server_info(), "error": {"code": 400,
                                                            "description": str(exc)}}
        if self._filtered(opts):
            raise Skip
        opts["_subject"] = subject.decode(errors="replace")
        try:
            data = answer(opts)
        except EndpointError as exc:
            return {"server": self.server_info(), "data": None,
                    "error": {"code": 500, "description": str(exc)}}
        return {"server": self.server_info(), "data": data}

    def _filtered(self, opts: dict[str, Any]) -> bool:
        """The reference's filterRequest: whether the request is not for this server."""
        s = self.server
        mine = {"server_name": s.name, "host": s.options.host,
                "cluster": s.cluster.name if s.cluster is not None else ""}
        for key, value in mine.items():
            wanted = opts.get(key, "")
            if wanted and (value != wanted if opts.get("exact_match") else wanted not in value):
                return True
        tags = {t.lower() for t in s.options.tags}
        if any(t.lower() not in tags for t in opts.get("tags", [])):
            return True
        return bool(opts.get("domain"))  # (no JetStream domain here)

    def _server_requests(self) -> dict[str, Answer]:
        e = self.endpoints
        sid = self.server.server_id
        return {
            "IDZ": _unused, "STATSZ": _unused,
            "VARZ": e.varz, "CONNZ": e.connz, "SUBSZ": e.subsz, "ROUTEZ": e.routez,
            "ACCOUNTZ": e.accountz, "HEALTHZ": e.healthz,
            "GATEWAYZ": lambda o: {"server_id": sid, "now": _now(), "outbound_gateways": {},
                                   "inbound_gateways": {}},
            "LEAFZ": lambda o: _leafz(sid),
            "JSZ": self._jsz,
            "RAFTZ": lambda o: {},
        }

    def _jsz(self, opts: dict[str, Any]) -> Any:
        """JSZ; with JetStream off, `leader_only` is not answered (no leader here)."""
        if self.server.jetstream is None and opts.get("leader_only"):
            raise Skip
        return self.endpoints.jsz(opts)

    def _account_request(self, name: str) -> Answer:
        """`$SYS.REQ.ACCOUNT.<acc>.<name>` in the system account: for the subject's account."""
        def answer(opts: dict[str, Any]) -> Any:
            tokens = opts["_subject"].split(".")
            if len(tokens) != 5:
                raise EndpointError(f"subject {opts['_subject']!r} is malformed")
            return self._for_account(name, tokens[3], opts)

        return answer

    def _for_account(self, name: str, acc: str, opts: dict[str, Any]) -> Any:
        e = self.endpoints
        sid = self.server.server_id
        if name == "CONNZ":
            return e.connz({**opts, "acc": acc})
        if name == "SUBSZ":
            return e.subsz({**opts, "subscriptions": True, "account": acc})
        if name == "INFO":
            return e.account_info(acc)
        if name == "LEAFZ":
            return _leafz(sid)
        if name == "JSZ":
            return e.jsz_account(acc, opts)
        if name == "STATZ":
            if acc == "PING":
                raise Skip
            stz = e.accstatz({**opts, "accounts": [acc]})
            if not stz["account_statz"] and not opts.get("include_unused"):
                raise Skip
            return stz
        raise Skip  # (CONNS: see _conns_request)

    def _conns_request(self, subject: bytes, payload: bytes, reply: str) -> None:
        """CONNS: an account's connections here, if it has any, answered with an
        account_connections event (not an envelope); the body may name the account again."""
        tokens = subject.decode(errors="replace").split(".")
        if len(tokens) != 5:
            return
        acc = tokens[3]
        try:
            body = json.loads(payload) if payload else {}
        except ValueError:
            return
        if isinstance(body, dict) and body.get("acc", acc) != acc:
            return
        account = self.accounts.get(acc)
        if account is not None and self.members.get(account):
            self._send_conns(account, reply)

    def _account_ping_statz(self, opts: dict[str, Any]) -> Any:
        stz = self.endpoints.accstatz(opts)
        if not stz["account_statz"] and not opts.get("include_unused"):
            raise Skip
        return stz

    def _user_info(self, pub: Any, subject: bytes, reply: bytes | None,
                   headers: bytes | None, payload: bytes) -> None:
        """$SYS.REQ.USER.INFO: who the requester is (the reference's UserInfo)."""
        if not self.running or not reply or pub is None or pub.is_route:
            return
        account = pub.account
        data: dict[str, Any] = {"user": pub.authorized_user(), "account": account.name,
                                "account_name": account.name}
        permissions = _permissions(pub.rights)
        if permissions is not None:
            data["permissions"] = permissions
        if pub.login.expires:
            data["expires"] = int(max(pub.login.expires - time.time(), 0)) * 1_000_000_000
        body = {"server": self.server_info(), "data": data}
        self.server.loop.call_soon(self._publish_if_running, reply.decode(errors="replace"),
                                   body, account)

    def _publish_if_running(self, subject: str, body: Any, account: Account) -> None:
        if self.running:
            self._publish(subject, body, account)


# The option kinds of requests whose name is not their endpoint's.
_KINDS = {"statz": "accstatz"}


def _unused(opts: dict[str, Any]) -> Any:
    """(IDZ and STATSZ are answered by SystemAccount._respond itself.)"""
    return None


def _now() -> str:
    return rfc3339(time.time())


def _leafz(sid: str) -> dict[str, Any]:
    """LEAFZ as the reference answers it without leaf nodes."""
    return {"server_id": sid, "now": _now(), "leafnodes": 0, "leafs": []}


def _subjects(entries: Any) -> list[str] | None:
    if entries is None:
        return None
    return ([p.decode(errors="replace") for p in entries.plain]
            + [f"{s.decode(errors='replace')} {q.decode(errors='replace')}"
               for s, q in entries.queued])


def _permissions(rights: Any) -> dict[str, Any] | None:
    """A client's permissions as the reference's Permissions (None: it has none)."""
    if rights is None:
        return None
    out: dict[str, Any] = {}
    for direction, allow, deny in (("publish", rights.pub_allow, rights.pub_deny),
                                   ("subscribe", rights.sub_allow, rights.sub_deny)):
        side: dict[str, Any] = {}
        allowed, denied = _subjects(allow), _subjects(deny)
        if allowed:
            side["allow"] = allowed
        if denied:
            side["deny"] = denied
        out[direction] = side
    if rights.responses is not None:
        out["responses"] = {"max": rights.responses.max_msgs,
                            "ttl": int(rights.responses.expires * 1_000_000_000)}
    return out
