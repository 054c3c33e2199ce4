"""What each monitoring endpoint answers (/varz, /connz, /subsz, /routez, /accountz,
/accstatz, /healthz, /jsz: JetStream's parts asked of `server.jetstream`), produced once
from its options as the reference names them in JSON (ConnzOptions' `acc`, `auth`, `state`
...), for the HTTP monitor (monitor.py, which turns a query into those options) and for
the system account's requests (sysaccount.py, which decodes them from a request's body).
An endpoint that refuses its options raises EndpointError with the reference's words.

Counters are true: messages the parser's fast path skipped (nobody listened) count in
in_msgs/in_bytes, and connections that have closed still count in the server's totals (and
their account's, for /accstatz). Nothing here imports the HTTP server (aiohttp): a server
without `-m` does not load it.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..monitoring import DEFAULT_LIST_LIMIT, rfc3339, uptime
from ..protocol.subjects import is_valid_literal_subject, subject_matches
from ..redact import url_host
from .accounts import GLOBAL_ACCOUNT

if TYPE_CHECKING:
    from .accounts import Account, Accounts
    from .connection import Connection
    from .server import Server

_NS = 1_000_000_000

# ConnzOptions.state
OPEN, CLOSED, ALL = 0, 1, 2
_STATES = {"open": OPEN, "closed": CLOSED, "any": ALL, "all": ALL}


class EndpointError(Exception):
    """An endpoint refused its options; the text is the reference's."""


def _rtt(conn: Connection) -> str:
    rtt = conn.rtt
    if not rtt:
        return "0s"
    if rtt < 1e-3:
        return f"{rtt * 1e6:.0f}µs"
    if rtt < 1:
        return f"{rtt * 1e3:.3f}ms"
    return f"{rtt:.3f}s"


def _rss() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def subjects_collide(a: str, b: str) -> bool:
    """Whether some subject matches both `a` and `b` (wildcards allowed in each)."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True


def _msg_bytes(msgs: int, nbytes: int, split: bool) -> dict[str, Any]:
    """The reference's DataStats: messages and bytes (and, for an account, the parts that
    crossed gateways, routes and leaf nodes: none here)."""
    stats: dict[str, Any] = {"msgs": msgs, "bytes": nbytes}
    if split:
        zero = {"msgs": 0, "bytes": 0}
        stats.update(gateways=dict(zero), routes=dict(zero), leafs=dict(zero))
    return stats


def merge_sublist_stats(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several subject indexes' numbers as one (the reference's SublistStats.add)."""
    total = {"num_subscriptions": 0, "num_cache": 0, "num_inserts": 0, "num_removes": 0,
             "num_matches": 0, "cache_hit_rate": 0.0, "max_fanout": 0, "avg_fanout": 0.0}
    hits = fanout = 0.0
    for part in parts:
        for key in ("num_subscriptions", "num_cache", "num_inserts", "num_removes",
                    "num_matches"):
            total[key] += part[key]
        total["max_fanout"] = max(total["max_fanout"], part["max_fanout"])
        hits += part["cache_hit_rate"] * part["num_matches"]
        fanout += part["avg_fanout"] * part["num_cache"]
    if total["num_matches"]:
        total["cache_hit_rate"] = hits / total["num_matches"]
    if fanout and total["num_cache"]:
        total["avg_fanout"] = fanout / total["num_cache"]
    return total


class Endpoints:
    """What each endpoint answers, from its options (a dict of the reference's JSON names);
    shared by the HTTP monitor and the system account's requests."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.requests: dict[str, int] = {}  # HTTP requests by path (/varz http_req_stats)
        self._cpu = (time.monotonic(), time.process_time())
        # Messages and bytes of each account's connections that have closed:
        # name -> [in_msgs, in_bytes, out_msgs, out_bytes] (/accstatz).
        self.gone: dict[str, list[int]] = {}
        self.created: dict[str, float] = {}  # when each account was made (update_time)
        server.accounts.watch(lambda account: self.created.setdefault(account.name, time.time()))

    # -- what several endpoints use -------------------------------------------------------
    def clients(self, account: Account | None = None) -> list[Any]:
        """The clients connected now (not the process's own), of `account` if given."""
        s = self.server
        return [c for cid, c in s.clients.items() if cid not in s.internal
                and (account is None or c.account is account)]

    def retire(self, client: Any) -> None:
        """A client of an account is gone: keep its counts in the account's."""
        in_msgs, in_bytes = client.published()
        tally = self.gone.setdefault(client.account.name, [0, 0, 0, 0])
        tally[0] += in_msgs
        tally[1] += in_bytes
        tally[2] += client.out_msgs
        tally[3] += client.out_payload

    def account_counts(self, account: Account, clients: Iterable[Any]) -> list[int]:
        """[in_msgs, in_bytes, out_msgs, out_bytes] of an account's clients, past and now."""
        counts = list(self.gone.get(account.name, (0, 0, 0, 0)))
        for c in clients:
            in_msgs, in_bytes = c.published()
            counts[0] += in_msgs
            counts[1] += in_bytes
            counts[2] += c.out_msgs
            counts[3] += c.out_payload
        return counts

    def account_stat(self, account: Account, clients: list[Any] | None = None) -> dict[str, Any]:
        """The reference's AccountStat of `account` (its clients: given, or looked up)."""
        if clients is None:
            clients = self.clients(account)
        in_msgs, in_bytes, out_msgs, out_bytes = self.account_counts(account, clients)
        return {
            "acc": account.name, "name": account.name, "conns": len(clients), "leafnodes": 0,
            "total_conns": len(clients), "num_subscriptions": account.sublist.count,
            "sent": _msg_bytes(out_msgs, out_bytes, True),
            "received": _msg_bytes(in_msgs, in_bytes, True), "slow_consumers": 0,
        }

    def sublist_stats(self, account: Account) -> dict[str, Any]:
        """One account's index numbers; its lookups are its clients' messages."""
        if account is self.server.accounts.global_account and not self.server.accounts.configured:
            routed = self.server.message_totals()["in_msgs"]
        else:
            routed = self.account_counts(account, self.clients(account))[0]
        return account.sublist.stats(routed)

    def num_subscriptions(self) -> int:
        return sum(account.sublist.count for account in self.server.accounts)

    def system_account(self) -> str:
        return self.server.accounts.system_account.name

    # -- /varz ----------------------------------------------------------------------------
    def cpu(self) -> float:
        mono, cpu = time.monotonic(), time.process_time()
        then_mono, then_cpu = self._cpu
        self._cpu = (mono, cpu)
        return round(100 * (cpu - then_cpu) / (mono - then_mono), 2) if mono > then_mono else 0

    def varz(self, opts: dict[str, Any]) -> dict[str, Any]:
        s = self.server
        o = s.options
        info = s.info_fields()
        totals = s.message_totals()
        now = time.time()
        cluster: dict[str, Any] = {}
        if s.cluster is not None:
            cluster = {"name": s.cluster.name, "addr": s.cluster.listen.host,
                       "cluster_port": s.cluster.port, "auth_timeout": o.auth_timeout,
                       # As the reference: host:port only (never a route's credentials).
                       **({"urls": [url_host(u) for u in o.routes]} if o.routes else {}),
                       "tls_timeout": o.cluster_tls.timeout if o.cluster_tls else 2}
        return {
            "server_id": s.server_id, "server_name": s.name, "version": info["version"],
            "proto": info["proto"], "go": info["go"], "host": o.host, "port": s.port,
            **{k: True for k in ("auth_required", "tls_required", "tls_verify") if info.get(k)},
            # The client URLs of the cluster (this server's first), as INFO gives them.
            **({"connect_urls": list(s.connect_urls)} if s.connect_urls else {}),
            "max_connections": o.max_connections, "ping_interval": int(o.ping_interval * _NS),
            "ping_max": o.ping_max, "http_host": o.http_host or o.host, "http_port": o.http_port,
            "http_base_path": "", "https_port": o.https_port, "auth_timeout": o.auth_timeout,
            "max_control_line": o.max_control_line, "max_payload": o.max_payload,
            "max_pending": o.max_pending, "cluster": cluster, "gateway": {}, "leaf": {},
            "mqtt": {}, "websocket": {}, "jetstream": self.jetstream_varz(),
            "tls_timeout": o.tls.timeout if o.tls else 2,
            "write_deadline": int(o.write_deadline * _NS), "start": rfc3339(s.started),
            "now": rfc3339(now), "uptime": uptime(now - s.started), "mem": _rss(),
            "cores": os.cpu_count() or 1, "gomaxprocs": os.cpu_count() or 1, "cpu": self.cpu(),
            "connections": len(self.clients()), "total_connections": s.total_connections,
            "routes": len(s.cluster.routes) if s.cluster is not None else 0, "remotes": 0,
            "leafnodes": 0, **totals, "slow_consumers": s.slow_consumers,
            "stale_connections": sum(s.stale.values()), "stalled_clients": s.stalls,
            "subscriptions": self.num_subscriptions(),
            "http_req_stats": dict(self.requests),
            "config_load_time": rfc3339(s.started),
            **({"tags": list(o.tags)} if o.tags else {}),
            "system_account": self.system_account(),
            "slow_consumer_stats": {"clients": s.slow_consumers, "routes": 0, "gateways": 0,
                                    "leafs": 0},
            "stale_connection_stats": {**s.stale, "gateways": 0, "leafs": 0},
        }

    def jetstream_varz(self) -> dict[str, Any]:
        """The reference's JetStream block of /varz when it is on: the configuration run
        with, the stats of an idle server (the global account has JetStream when no
        accounts are configured), the configured limits."""
        js = self.server.options.jetstream
        if js is None or not js.enabled:
            return {}
        if self.server.jetstream is not None:
            stats = self.server.jetstream.monitor("stats", {})
        else:
            from ..config.jetstream import API_LEVEL

            stats = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
                     "accounts": 0 if self.server.accounts.configured else 1, "ha_assets": 0,
                     "api": {"level": API_LEVEL, "total": 0, "errors": 0}}
        return {"config": js.resolved.as_json(), "stats": stats, "limits": js.limits.as_json()}

    # -- /jsz -----------------------------------------------------------------------------
    def jsz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The reference's JSInfo (jetstream/monitor.py's), or its answer with JetStream
        off."""
        if self.server.jetstream is not None:
            return dict(self.server.jetstream.monitor("jsz", opts))
        if opts.get("leader_only"):  # (no JetStream leader here)
            raise EndpointError("filtered response: not leader")
        return {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
                "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0},
                "server_id": self.server.server_id, "now": rfc3339(time.time()),
                "disabled": True, "config": {"max_memory": 0, "max_storage": 0},
                "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0}

    def jsz_account(self, name: str, opts: dict[str, Any]) -> dict[str, Any]:
        """An account's JetStream (the reference's AccountDetail), for
        `$SYS.REQ.ACCOUNT.<name>.JSZ`."""
        if self.server.jetstream is None:
            raise EndpointError("jetstream not enabled")
        return dict(self.server.jetstream.monitor("account", {**opts, "account": name}))

    # -- /connz ---------------------------------------------------------------------------
    def connz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The reference's Connz: open and/or closed clients (`state`), filtered by `cid`,
        `acc`, `user` and `filter_subject`, sorted, paged."""
        s = self.server
        sort = opts.get("sort") or "cid"
        if sort not in _SORTS and sort not in ("stop", "reason"):
            raise EndpointError(f"invalid sorting option: {sort}")
        state = opts.get("state", OPEN)
        if sort in ("stop", "reason") and state != CLOSED:
            raise EndpointError(f"sort by {sort} only valid on closed connections")
        offset = max(opts.get("offset", 0), 0)
        limit = opts.get("limit", 0)
        if limit <= 0:
            limit = DEFAULT_LIST_LIMIT
        cid = opts.get("cid", 0)
        if cid > 0:
            limit = 1
        acc = opts.get("acc", "")
        flt = opts.get("filter_subject", "")
        if flt and flt != ">" and not acc:
            raise EndpointError("filter by subject only valid with account filtering")
        now = time.time()
        body: dict[str, Any] = {"server_id": s.server_id, "now": rfc3339(now),
                                "num_connections": 0, "total": 0, "offset": offset,
                                "limit": limit, "connections": []}
        account = s.accounts.get(acc) if acc else None
        if acc and account is None:  # as the reference: nothing, not even its id
            return {**body, "server_id": "", "connections": None}
        items = self._connz_items(opts, state, account, now)
        items = self._connz_sorted(items, sort, now)
        page = items[min(offset, len(items)): min(offset, len(items)) + limit]
        auth = bool(opts.get("auth"))
        detail, subs = bool(opts.get("subscriptions_detail")), bool(opts.get("subscriptions"))
        out = [_connz_entry(item, auth, subs, detail) for _, item in page]
        return {**body, "num_connections": len(out), "total": len(items), "connections": out}

    def _connz_items(self, opts: dict[str, Any], state: int, account: Account | None,
                     now: float) -> list[tuple[Any, dict[str, Any]]]:
        """(connection or None, its item) of the open and closed clients asked for."""
        cid, user = opts.get("cid", 0), opts.get("user", "")
        flt = opts.get("filter_subject", "") if account is not None else ""
        items: list[tuple[Any, dict[str, Any]]] = []
        if state in (OPEN, ALL):
            for c in self.clients(account):
                if (cid and c.cid != cid) or (user and c.authorized_user() != user):
                    continue
                if flt and flt != ">" and not any(
                        subjects_collide(flt, sub.subject.decode(errors="replace"))
                        for sub in c.subs.values()):
                    continue
                items.append((c, client_item(c, now)))
        if state in (CLOSED, ALL) and not (cid and items):
            for item in self.server.closed_clients:
                if ((cid and item["cid"] != cid) or (account and item["account"] != account.name)
                        or (user and item.get("authorized_user", "") != user)):
                    continue
                items.append((None, item))
        return items

    @staticmethod
    def _connz_sorted(items: list[tuple[Any, dict[str, Any]]], sort: str,
                      now: float) -> list[tuple[Any, dict[str, Any]]]:
        if sort == "stop":
            return sorted(items, key=lambda x: x[1].get("stop", ""), reverse=True)
        if sort == "reason":
            return sorted(items, key=lambda x: x[1].get("reason", ""))
        reverse = sort not in ("cid", "start", "uptime")
        if all(conn is not None for conn, _ in items):
            key = _SORTS[sort]
            return sorted(items, key=lambda pair: key(pair[0], now), reverse=reverse)
        # Closed ones among them: by what the items say (the cid where they cannot say).
        item_key = _ITEM_SORTS.get(sort, lambda i: i["cid"])
        return sorted(items, key=lambda pair: item_key(pair[1]), reverse=reverse)

    # -- /routez --------------------------------------------------------------------------
    def routez(self, opts: dict[str, Any]) -> dict[str, Any]:
        s = self.server
        routes = []
        if s.cluster is not None:
            for r in s.cluster.routes.values():
                routes.append(_route_item(r, bool(opts.get("subscriptions")),
                                          bool(opts.get("subscriptions_detail"))))
        return {"server_id": s.server_id, "server_name": s.name, "now": rfc3339(time.time()),
                "num_routes": len(routes), "routes": routes}

    # -- /subsz ---------------------------------------------------------------------------
    def subsz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The index's numbers (SublistStats, of all accounts or of `account`); with
        `subscriptions` the clients' subscriptions, those matching `test` (a subject) only
        when given."""
        s = self.server
        offset = max(opts.get("offset", 0), 0)
        limit = opts.get("limit", 0)
        if limit <= 0:
            limit = DEFAULT_LIST_LIMIT
        test = opts.get("test", "")
        if test and not is_valid_literal_subject(test):
            raise EndpointError(
                f"invalid test subject, must be valid publish subject: {test}")
        filter_acc = opts.get("account", "")
        accounts = [a for a in s.accounts if not filter_acc or a.name == filter_acc]
        body: dict[str, Any] = {
            "server_id": s.server_id, "now": rfc3339(time.time()),
            **merge_sublist_stats(self.sublist_stats(a) for a in accounts),
            "total": 0, "offset": offset, "limit": limit,
        }
        if opts.get("subscriptions"):
            subs = [{"account": c.account.name, "account_tag": c.account.name,
                     **sub_detail(sub, c.cid)}
                    for c in s.clients.values() for sub in c.subs.values()
                    if c.account in accounts
                    and (not test or subject_matches(sub.subject, test.encode()))]
            body["total"] = len(subs)
            page = subs[offset : offset + limit]
            if page:
                body["subscriptions_list"] = page
        return body

    # -- /accountz, /accstatz --------------------------------------------------------------
    def accountz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The accounts' names, or `account`'s detail (AccountInfo)."""
        s = self.server
        body: dict[str, Any] = {"server_id": s.server_id, "now": rfc3339(time.time()),
                                "system_account": self.system_account()}
        name = opts.get("account", "")
        if not name:
            body["accounts"] = [account.name for account in s.accounts]
            return body
        body["account_detail"] = self.account_info(name)
        return body

    def account_info(self, name: str) -> dict[str, Any]:
        """The reference's AccountInfo of account `name` (its exports, its imports, the
        system account's own among them, and its index's numbers)."""
        s = self.server
        account = s.accounts.get(name)
        if account is None or not name:
            raise EndpointError(f"Account {name} does not exist")
        system = account is s.accounts.system_account
        clients = self.clients(account)
        js = s.jetstream
        info: dict[str, Any] = {
            "account_name": name,
            "update_time": rfc3339(self.created.get(name, s.started)),
            **({"is_system": True} if system else {}),
            "expired": False, "complete": True,
            "jetstream_enabled": js is not None and bool(js.enabled_for(account)),
            "leafnode_connections": 0, "client_connections": len(clients),
            "subscriptions": account.sublist.count,
        }
        exports = _exports(account)
        if system:
            exports += SYSTEM_EXPORTS
        if exports:
            info["exports"] = exports
        imports = _imports(account, s.accounts) + system_imports(account, s.accounts.system_account)
        if js is not None and not system:
            imports.append(jetstream_import(s.accounts.system_account))
        if imports:
            info["imports"] = imports
        info["name_tag"] = name
        info["sublist_stats"] = self.sublist_stats(account)
        return info

    def accstatz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The reference's AccountStatz: each account with connections (all with
        `include_unused`), or those named in `accounts`."""
        s = self.server
        names = opts.get("accounts") or []
        unused = bool(opts.get("include_unused"))
        if names:
            chosen = [a for a in (s.accounts.get(n) for n in names if n) if a is not None]
        else:
            chosen = list(s.accounts)
        stats = []
        for account in chosen:
            clients = self.clients(account)
            if unused or clients:
                stats.append(self.account_stat(account, clients))
        return {"server_id": s.server_id, "now": rfc3339(time.time()), "account_statz": stats}

    # -- /healthz -------------------------------------------------------------------------
    def healthz(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The reference's HealthStatus: the options' checks, then JetStream's (on when
        configured; `js-server-only` skips them, `js-enabled-only` stops at whether it
        runs, else the store's streams, jetstream/monitor.py)."""
        details = bool(opts.get("details"))
        for thing, within in (("stream", "account"), ("consumer", "stream")):
            if opts.get(thing) and not opts.get(within):
                return health_failure(f'"{within}" must not be empty when checking {thing} '
                                      "health", 400, details, status="error",
                                      type="BAD_REQUEST")
        configured = self.server.options.jetstream
        if opts.get("js-server-only") or configured is None or not configured.enabled:
            return {"status": "ok", "status_code": 200}
        if self.server.jetstream is None:
            return health_failure("JetStream not enabled (10076)", 503, details,
                                  type="JETSTREAM")
        if opts.get("js-enabled-only") or opts.get("js-enabled"):
            return {"status": "ok", "status_code": 200}
        return dict(self.server.jetstream.monitor("healthz", opts))


def health_failure(text: str, code: int = 503, details: bool = False, status: str = "unavailable",
                   errors: list[dict[str, Any]] | None = None, **where: str) -> dict[str, Any]:
    """A failed /healthz as the reference's HealthStatus: with `details` (or `errors`) the
    errors, each with its type and what it names (`where`: type, account, stream,
    consumer), else `status` and the error's text."""
    if details or errors:
        return {"status": "error", "status_code": code,
                "errors": errors or [{**where, "error": text}]}
    return {"status": status, "status_code": code, "error": text}


# -- items ---------------------------------------------------------------------------------
def client_item(c: Any, now: float, stop: float = 0.0, reason: str = "") -> dict[str, Any]:
    """One connection as /connz shows it (closed ones with when and why), with who it is
    (`authorized_user`, `account`) and its subscriptions in detail, which connz leaves out
    unless asked for (_connz_entry)."""
    in_msgs, in_bytes = c.published()
    transport = c.transport
    item: dict[str, Any] = {
        "cid": c.cid, "kind": "Client", "type": "websocket" if c.websocket else "nats",
        "ip": c.host, "port": c.port, "start": rfc3339(c.started),
        "last_activity": rfc3339(_last(c)),
    }
    if stop:
        item["stop"] = rfc3339(stop)
        item["reason"] = reason
    item.update({
        "rtt": _rtt(c), "uptime": uptime((stop or now) - c.started),
        "idle": uptime((stop or now) - _last(c)),
        "pending_bytes": transport.get_write_buffer_size() if transport and not stop else 0,
        "in_msgs": in_msgs, "out_msgs": c.out_msgs, "in_bytes": in_bytes,
        "out_bytes": c.out_payload, "subscriptions": len(c.subs),
    })
    for field in ("name", "lang", "version"):
        value = getattr(c, field, "")
        if value:
            item[field] = value
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is not None:
        item["tls_version"] = (ssl_object.version() or "").replace("TLSv", "")
        item["tls_cipher_suite"] = (ssl_object.cipher() or ("",))[0]
    user = c.authorized_user()
    if user:
        item["authorized_user"] = user  # shown with ?auth=1 only (connz)
    item["account"] = c.account.name  # (the same)
    # Each subscription in detail; connz shows them so (subs=detail), or their subjects.
    item["subscriptions_list"] = [sub_detail(sub, c.cid) for sub in c.subs.values()]
    return item


def _connz_entry(item: dict[str, Any], auth: bool, subs: bool, detail: bool) -> dict[str, Any]:
    """A connz entry from its item, in the reference's order: who it is only with `auth`
    (the account unless the global one, and its name tag), its subscriptions as asked."""
    out = {k: v for k, v in item.items()
           if k not in ("authorized_user", "account", "subscriptions_list")}
    account = item.get("account", GLOBAL_ACCOUNT)
    if auth:
        if item.get("authorized_user"):
            out["authorized_user"] = item["authorized_user"]
        if account != GLOBAL_ACCOUNT:
            out["account"] = account
    listed = item.get("subscriptions_list", [])
    if listed and detail:
        out["subscriptions_list_detail"] = listed
    elif listed and subs:
        out["subscriptions_list"] = [sub["subject"] for sub in listed]
    if auth:
        out["name_tag"] = account
    return out


def _route_item(r: Any, subs: bool, detail: bool) -> dict[str, Any]:
    in_msgs, in_bytes = r.published()
    now = time.time()
    item: dict[str, Any] = {
        "rid": r.cid, "remote_id": r.remote_id, "remote_name": r.remote_name,
        "did_solicit": bool(r.url), "is_configured": bool(r.url and not r.implicit),
        "ip": r.host, "port": r.port, "start": rfc3339(r.started),
        "last_activity": rfc3339(_last(r)), "rtt": _rtt(r),
        "uptime": uptime(now - r.started), "idle": uptime(now - _last(r)),
        "pending_size": r.transport.get_write_buffer_size() if r.transport else 0,
        "in_msgs": in_msgs, "out_msgs": r.out_msgs, "in_bytes": in_bytes,
        "out_bytes": r.out_payload, "subscriptions": len(r.subs),
    }
    if r.subs and detail:
        item["subscriptions_list_detail"] = [sub_detail(sub, r.cid) for sub in r.subs.values()]
    elif r.subs and subs:
        item["subscriptions_list"] = [sub.subject.decode(errors="replace")
                                      for sub in r.subs.values()]
    return item


def sub_detail(sub: Any, cid: int) -> dict[str, Any]:
    """A subscription as the reference's SubDetail shows it (no account: connz, routez)."""
    detail: dict[str, Any] = {"subject": sub.subject.decode(errors="replace")}
    if sub.queue:
        detail["qgroup"] = sub.queue.decode(errors="replace")
    detail["sid"] = sub.sid.decode(errors="replace")
    detail["msgs"] = sub.delivered
    if sub.max:
        detail["max"] = sub.max
    detail["cid"] = cid
    return detail


# -- an account's exports and imports, as AccountInfo lists them ---------------------------
def _latency(latency: Any) -> dict[str, Any]:
    return {"sampling": "headers" if latency.sampling < 0 else latency.sampling,
            "results": latency.subject}


def _exports(account: Account) -> list[dict[str, Any]]:
    """Services first, then streams (the reference's order; each kind in file order)."""
    from ..config.accounts import ServiceExport

    out = []
    for kind in ("service", "stream"):
        for export in account.exports:
            if (kind == "service") != isinstance(export, ServiceExport):
                continue
            item: dict[str, Any] = {"subject": export.subject, "type": kind}
            if isinstance(export, ServiceExport):
                item["response_type"] = export.response_type
                if export.latency is not None:
                    item["service_latency"] = _latency(export.latency)
            if export.accounts:
                item["approved_accounts"] = list(export.accounts)
            out.append(item)
    return out


def _imports(account: Account, accounts: Accounts) -> list[dict[str, Any]]:
    """Streams first, then services (the reference's order)."""
    from ..config.accounts import ServiceExport, StreamImport

    if account.config is None:
        return []
    streams, services = [], []
    for imp in account.config.imports:
        if isinstance(imp, StreamImport):
            streams.append({"subject": imp.subject, "account": imp.account,
                            "local_subject": imp.to or imp.subject, "type": "stream",
                            "invalid": False, "share": False, "tracking": False})
            continue
        local = imp.to or imp.subject
        item: dict[str, Any] = {"subject": imp.subject, "account": imp.account, "to": local,
                                "local_subject": local, "type": "service", "invalid": False,
                                "share": imp.share, "tracking": False}
        source = accounts.get(imp.account)
        export = source.export_for(ServiceExport, imp.subject, account.name) if source else None
        if export is not None and export.latency is not None:
            item["latency"] = _latency(export.latency)
        services.append(item)
    return streams + services


# What the system account exports to every account, as the reference lists them (its
# $SYS.DEBUG.SUBSCRIBERS, which tidings does not answer, left out).
SYSTEM_EXPORTS = [
    {"subject": "$SYS.REQ.ACCOUNT.*.CONNZ", "type": "service", "response_type": "Streamed"},
    {"subject": "$SYS.REQ.ACCOUNT.*.STATZ", "type": "service", "response_type": "Streamed"},
    {"subject": "$SYS.REQ.USER.*.INFO", "type": "service", "response_type": "Singleton"},
]


def jetstream_import(system: Account) -> dict[str, Any]:
    """With JetStream on, every account but the system account imports its API from the
    system account, as the reference lists it (it serves the API there; tidings answers it
    in each account)."""
    return {"subject": "$JS.API.>", "account": system.name, "to": "$JS.API.>",
            "local_subject": "$JS.API.>", "type": "service", "invalid": False,
            "share": True, "tracking": False}


def system_imports(account: Account, system: Account) -> list[dict[str, Any]]:
    """The service imports the reference gives every account from the system account (and
    the system account from itself: its users' $SYS.REQ.USER.INFO)."""
    name, sys_name = account.name, system.name

    def imp(subject: str, local: str, share: bool = False) -> dict[str, Any]:
        return {"subject": subject, "account": sys_name, "to": local, "local_subject": local,
                "type": "service", "invalid": False, "share": share, "tracking": False}

    user_info = imp(f"$SYS.REQ.USER.{name}.INFO", "$SYS.REQ.USER.INFO", True)
    if account is system:
        return [user_info]
    connz = f"$SYS.REQ.ACCOUNT.{name}.CONNZ"
    return [imp(connz, "$SYS.REQ.ACCOUNT.PING.CONNZ"), imp(connz, "$SYS.REQ.SERVER.PING.CONNZ"),
            imp(f"$SYS.REQ.ACCOUNT.{name}.STATZ", "$SYS.REQ.ACCOUNT.PING.STATZ"), user_info]


def _last(conn: Connection) -> float:
    """Wall-clock time of the connection's last input."""
    return time.time() - (time.monotonic() - conn.last_in) if conn.last_in else conn.started


_SORTS: dict[str, Callable[[Any, float], Any]] = {
    "cid": lambda c, now: c.cid,
    "start": lambda c, now: c.started,
    "subs": lambda c, now: len(c.subs),
    "pending": lambda c, now: c.transport.get_write_buffer_size() if c.transport else 0,
    "msgs_to": lambda c, now: c.out_msgs,
    "msgs_from": lambda c, now: c.published()[0],
    "bytes_to": lambda c, now: c.out_payload,
    "bytes_from": lambda c, now: c.published()[1],
    "last": lambda c, now: _last(c),
    "idle": lambda c, now: now - _last(c),
    "uptime": lambda c, now: now - c.started,
    "rtt": lambda c, now: c.rtt,
}
# A closed connection's item sorted as its connection would be.
_ITEM_SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "subs": lambda i: i["subscriptions"], "pending": lambda i: i["pending_bytes"],
    "msgs_to": lambda i: i["out_msgs"], "msgs_from": lambda i: i["in_msgs"],
    "bytes_to": lambda i: i["out_bytes"], "bytes_from": lambda i: i["in_bytes"],
    "start": lambda i: i["start"], "last": lambda i: i["last_activity"],
}
