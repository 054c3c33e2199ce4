"""What the monitoring endpoints say of JetStream, with the reference's JSON: /jsz (its
JSInfo: the server's totals, each account's AccountDetail with its streams' StreamDetail and
their consumers' info as CONSUMER.INFO answers it), an account's JSZ (`$SYS.REQ.ACCOUNT.
<acc>.JSZ`), /varz's `jetstream.stats` (JetStreamStats), and /healthz's check of the store
(each account folder and stream folder of the store directory recovered, as a single
server's healthz walks them).

The HTTP monitor and the system account's requests ask through `JetStream.monitor(endpoint,
options)`, the options named as the reference's JSzOptions and HealthzOptions name them in
JSON; what they refuse raises server.endpoints.EndpointError with the reference's words.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.jetstream import API_LEVEL
from ..server.endpoints import EndpointError, health_failure
from ..server.gojson import go_time
from . import limits

if TYPE_CHECKING:
    from ..server.accounts import Account
    from .api import JetStream
    from .stream import Stream

DEFAULT_LIMIT = 1024  # accounts listed when no limit is given (Jsz's)
# An account's reservation when its limits are dynamic (-1): the reference writes the
# tier's -1 as an unsigned 64-bit number. tidings has no account limits yet.
UNLIMITED = 2**64 - 1
# The metadata the API's answers add to a stream's or consumer's configuration.
DYNAMIC_METADATA = ("_nats.ver", "_nats.level")


def answer(js: JetStream, endpoint: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JetStream part of a monitoring endpoint: "jsz", "account" (an account's JSZ),
    "stats" (/varz) or "healthz" (the store's check, after the server's own)."""
    return _ENDPOINTS[endpoint](js, options)


# -- numbers -------------------------------------------------------------------------------
def _accounts(js: JetStream) -> list[Account]:
    """The accounts with JetStream, by name (the reference's js.accounts)."""
    return sorted((a for a in js.server.accounts if not a.system and js.enabled_for(a)),
                  key=lambda a: a.name)


def stats(js: JetStream, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reference's JetStreamStats of the server (/varz's `jetstream.stats`, /jsz's
    first fields)."""
    every = [stream for streams in js.streams.values() for stream in streams.values()]
    memory, storage = limits.usage(every, "memory"), limits.usage(every, "file")
    return {"memory": memory, "storage": storage, "reserved_memory": 0,
            "reserved_storage": 0, "accounts": len(_accounts(js)), "ha_assets": 0,
            "api": {"level": API_LEVEL, "total": js.total, "errors": js.errors}}


def _api_of(js: JetStream, account: Account) -> dict[str, int]:
    """An account's API counts."""
    total, errs = js.api_counts.get(account, (0, 0))
    return {"level": 0, "total": total, "errors": errs}


# -- /jsz ----------------------------------------------------------------------------------
def jsz(js: JetStream, opts: dict[str, Any]) -> dict[str, Any]:
    """The reference's JSInfo: totals of every account and stream whatever the options;
    with `accounts` (implied by `streams`, itself by `consumer`, unless an `account` is
    named) each account's detail, paged by `offset` and `limit`; a named account's alone."""
    opts = _defaults(opts)
    accounts = _accounts(js)
    body: dict[str, Any] = {
        **stats(js), "server_id": js.server.server_id,
        "now": go_time(time.time_ns(), utc=True), "config": js.config.as_json(),
        "limits": js.server.options.jetstream.limits.as_json(),  # type: ignore[union-attr]
    }
    every = [s for a in accounts for s in js.streams.get(a, {}).values()]
    body["streams"] = len(every)
    if opts["raft"] and every:  # (one server: it leads every stream and consumer)
        body["streams_leader"] = len(every)
    body["consumers"] = sum(len(s.consumers) for s in every)
    if opts["raft"] and body["consumers"]:
        body["consumers_leader"] = body["consumers"]
    body["messages"] = sum(s.store.count for s in every)
    body["bytes"] = sum(s.store.bytes for s in every)
    chosen = _chosen(accounts, opts)
    if chosen:
        body["account_details"] = [_account_detail(js, a, opts) for a in chosen]
    body["total"] = len(accounts)
    return body


def _defaults(opts: dict[str, Any]) -> dict[str, Any]:
    """Jsz's defaults: `consumer` implies `streams`, which implies `accounts` unless an
    account is named; no limit is 1024, a negative offset 0."""
    out = {key: bool(opts.get(key)) for key in ("accounts", "streams", "consumer",
                                                "direct_consumer", "config", "raft")}
    out["account"] = opts.get("account") or ""
    out["offset"] = max(int(opts.get("offset") or 0), 0)
    out["limit"] = int(opts.get("limit") or 0) or DEFAULT_LIMIT
    if out["consumer"]:
        out["streams"] = True
    if out["streams"] and not out["account"]:
        out["accounts"] = True
    return out


def _chosen(accounts: list[Account], opts: dict[str, Any]) -> list[Account]:
    """The accounts whose detail is shown: the named one if it has JetStream, else with
    `accounts` a page of them (all when the limit is negative), else none."""
    named = [a for a in accounts if a.name == opts["account"]]
    if named:
        return named
    if not opts["accounts"]:
        return []
    if opts["limit"] < 0:
        return accounts
    return accounts[opts["offset"]:opts["offset"] + opts["limit"]]


def _account_detail(js: JetStream, account: Account, opts: dict[str, Any]) -> dict[str, Any]:
    """The reference's AccountDetail: its usage, its API counts, and with `streams` each
    stream's detail (with `consumer` its consumers' info; configurations with `config`)."""
    streams = js.streams.get(account, {})
    memory, storage = limits.usage(streams.values(), "memory"), limits.usage(streams.values(),
                                                                              "file")
    detail: dict[str, Any] = {
        "name": account.name, "id": account.name, "memory": memory, "storage": storage,
        "reserved_memory": UNLIMITED, "reserved_storage": UNLIMITED, "accounts": 0,
        "ha_assets": 0, "api": _api_of(js, account),
    }
    if opts["streams"] and streams:
        detail["stream_detail"] = [_stream_detail(js, streams[name], opts)
                                   for name in sorted(streams)]
    return detail


def _stream_detail(js: JetStream, stream: Stream, opts: dict[str, Any]) -> dict[str, Any]:
    """The reference's StreamDetail: STREAM.INFO's created, configuration and state, the
    (one-server) cluster, and the consumers' info as CONSUMER.INFO answers it."""
    info = stream.info(with_config=opts["config"])
    cluster: dict[str, Any] = {}
    if js.server.cluster is not None:
        cluster["name"] = js.server.cluster.name
    cluster["leader"] = js.server.name
    detail: dict[str, Any] = {"name": stream.name, "created": info["created"],
                              "cluster": cluster}
    if opts["config"]:
        detail["config"] = _stored(info["config"])
    detail["state"] = info["state"]
    if opts["consumer"] and stream.consumers:
        consumers = []
        for name in sorted(stream.consumers):
            consumer = js._consumer_info(stream.consumers[name])
            if opts["config"]:
                consumer["config"] = _stored(consumer["config"])
            else:
                consumer.pop("config", None)
            consumers.append(consumer)
        detail["consumer_detail"] = consumers
    return detail


def _stored(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as stored: without the metadata the API's answers add (the
    server's version and API level), as the reference's /jsz shows it."""
    metadata = {k: v for k, v in (config.get("metadata") or {}).items()
                if k not in DYNAMIC_METADATA}
    out = {k: v for k, v in config.items() if k != "metadata"}
    if metadata:
        out["metadata"] = metadata
    return {k: out[k] for k in config if k in out}


def account_jsz(js: JetStream, opts: dict[str, Any]) -> dict[str, Any]:
    """`$SYS.REQ.ACCOUNT.<acc>.JSZ`: the account's detail (the reference's JszAccount,
    which takes `streams` and `consumer` as given: `consumer` alone shows no streams)."""
    name = opts.get("account") or ""
    account = js.server.accounts.get(name) if name else None
    if account is None:
        raise EndpointError(f'account "{name}" not found')
    accounts = _accounts(js)
    if account not in accounts:
        raise EndpointError(f'account "{name}" not jetstream enabled')
    shown = {key: bool(opts.get(key)) for key in ("streams", "consumer", "config")}
    return _account_detail(js, account, shown)


# -- /healthz ------------------------------------------------------------------------------
def healthz(js: JetStream, opts: dict[str, Any]) -> dict[str, Any]:
    """A single server's JetStream health: each account folder of the store directory is
    an account, each stream folder in it a stream that was recovered (a stream whose files
    could not be read is missing); the `account`, `stream` and `consumer` asked for found."""
    acc, stream, consumer = (opts.get(k) or "" for k in ("account", "stream", "consumer"))
    details = bool(opts.get("details"))
    errors: list[dict[str, Any]] = []
    found = {"account": False, "stream": False, "consumer": False}
    for folder in _folders(js.config.store_dir):
        if acc and folder != acc:
            continue
        found["account"] = bool(acc)
        account = js.server.accounts.find(folder)
        if account is None:
            text = f"JetStream account '{folder}' could not be resolved"
            if not details:
                return health_failure(text)
            errors.append({"type": "ACCOUNT", "account": folder, "error": text})
            continue
        failed = _check_streams(js, account, opts, found, errors)
        if failed is not None:
            return failed
        if found["account"]:
            break
    missing = _missing(acc, stream, consumer, found, details)
    if missing is not None:
        return missing
    if errors:
        return health_failure("", errors=errors)
    return {"status": "ok", "status_code": 200}


def _check_streams(js: JetStream, account: Account, opts: dict[str, Any],
                   found: dict[str, bool], errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The stream folders of one account's folder; a failure (without `details`)."""
    wanted, consumer = opts.get("stream") or "", opts.get("consumer") or ""
    streams = js.streams.get(account, {})
    for folder in _folders(os.path.join(js.config.store_dir, account.name, "streams")):
        if wanted and folder != wanted:
            continue
        found["stream"] = bool(wanted)
        stream = streams.get(folder)
        if stream is None:
            text = f"JetStream stream '{account.name} > {folder}' could not be recovered"
            if not opts.get("details"):
                return health_failure(text)
            errors.append({"type": "STREAM", "account": account.name, "stream": folder,
                           "error": text})
            continue
        if found["stream"]:
            found["consumer"] = bool(consumer) and consumer in stream.consumers
            break
    return None


def _missing(acc: str, stream: str, consumer: str, found: dict[str, bool],
             details: bool) -> dict[str, Any] | None:
    """404 for the account, stream or consumer asked for and not found."""
    if acc and not found["account"]:
        return health_failure(f'JetStream account "{acc}" not found', 404, details,
                              type="ACCOUNT", account=acc)
    if stream and not found["stream"]:
        return health_failure(f'JetStream stream "{stream}" not found on account "{acc}"',
                              404, details, type="STREAM", account=acc, stream=stream)
    if consumer and not found["consumer"]:
        return health_failure(f'JetStream consumer "{consumer}" not found for stream '
                              f'"{stream}" on account "{acc}"', 404, details,
                              type="CONSUMER", account=acc, stream=stream, consumer=consumer)
    return None


def _folders(path: str) -> list[str]:
    """The names in a folder, as Go's os.ReadDir gives them (sorted; none if unreadable)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


_ENDPOINTS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "jsz": jsz, "account": account_jsz, "stats": stats, "healthz": healthz,
}
