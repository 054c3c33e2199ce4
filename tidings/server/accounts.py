"""Accounts: isolated subject spaces, and what crosses between them.

Every connection belongs to one account, and each account has its own subject index, so a
subject in account A is not the same subject in account B. Without accounts configured
there is one, the global account `$G`, and nothing here costs anything per message.

Only exports and imports cross, as in nats-server:
- a stream import puts a subscription in the exporting account on the imported subject;
  what it receives is published again in the importing account, under the import's prefix
  or `to` subject (the message's reply subject is kept);
- a service import puts a subscription in the importing account on the local subject; a
  request it receives is published in the exporting account on the exported subject, with
  its reply subject replaced by a fresh `_R_.<prefix>.<id>` of the exporting account that
  maps back to the requester's reply (once for a Singleton, until the response threshold
  has passed since the last response for a Stream or Chunked export).

Such subscriptions are ordinary subscriptions of the index whose client is a `Relay`; the
index keeps them apart from local ones (sublist.RemoteInterest.relays), so that the cluster
announces the interest they stand for and the routing path only looks at them when some
exist for the subject.

An account's subject mappings (its configuration's or JWT's; the global account's are the
options' top-level ones) are built here (mappings.py) and kept in `Account.mappings`, None
when it has none: its clients then publish through them (client.py), as do the requests a
service import carries into it.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.accounts import (
    AccountConfig,
    AccountLimits,
    ServiceExport,
    ServiceImport,
    StreamExport,
    StreamImport,
)
from ..protocol.subjects import is_subset
from ..protocol.transform import Transform, TransformError, prefixed
from .clientinfo import client_info
from .connection import Headerless, msg_frame
from .latency import Measure, sampled
from .sublist import Sublist, Subscription

if TYPE_CHECKING:
    from .connection import Connection, Frame
    from .mappings import SubjectMappings
    from .server import Server

log = logging.getLogger("tidings.server")

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# How many relays a message may cross (an import of an import ...): a cycle ends here.
MAX_RELAY_HOPS = 8
# Response maps checked for expiry per sweep (the threshold timer), at most.
SWEEP_BATCH = 10_000


def _random_token(n: int) -> str:
    return "".join(secrets.choice(_DIGITS) for _ in range(n))


class Account:
    """One account: its name, its subject index, its limits, what it exports."""

    __slots__ = ("name", "sublist", "limits", "exports", "connections", "reply_prefix",
                 "responses", "response_relay", "config", "system", "rmsg", "hmsg",
                 "name_tag", "mappings")

    def __init__(self, name: str, config: AccountConfig | None = None) -> None:
        self.name = name
        # How a route names a message of this account (route.py).
        self.rmsg = b"RMSG " + name.encode() + b" "
        self.hmsg = b"HMSG " + name.encode() + b" "
        self.config = config
        self.sublist = Sublist()
        self.limits: AccountLimits = config.limits if config is not None else AccountLimits()
        self.exports: list[StreamExport | ServiceExport] = list(config.exports) if config else []
        self.connections = 0  # its clients connected now (max_connections)
        self.name_tag = ""  # its JWT's name (operator mode)
        self.system = False
        # Service responses: the prefix of the reply subjects made here, and where each goes.
        self.reply_prefix = b""
        self.responses: dict[bytes, Response] = {}
        self.response_relay: Subscription | None = None
        # Its subject mappings (Accounts.map_subjects), None when it has none.
        self.mappings: SubjectMappings | None = None

    def __repr__(self) -> str:
        return f"Account({self.name!r})"

    def listened(self, subject: str, ignore: Subscription | None = None, depth: int = 0) -> bool:
        """Whether anyone (here, over a route, or an import) listens to `subject` here,
        `ignore` aside: through a stream import, a subscriber of the importing account."""
        key = subject.encode()
        plain, groups, remote = self.sublist.cache.get(key) or self.sublist.compute(key)
        if groups or any(sub is not ignore for sub in plain):
            return True
        if remote is None:
            return False
        if remote.plain or remote.groups:
            return True
        for sub in remote.relays:
            if sub is ignore:
                continue
            listens = sub.client.listens
            if listens is None or (depth < 4 and listens(subject, depth + 1)):
                return True
        return False

    def configure(self, config: AccountConfig | None) -> None:
        """Take `config`'s exports and limits (None: none of its own any more)."""
        self.config = config
        self.limits = config.limits if config is not None else AccountLimits()
        self.exports = list(config.exports) if config is not None else []

    def export_for(self, kind: type, subject: str, importer: str) -> Any:
        """The export of `kind` that lets account `importer` import `subject`, or None."""
        for export in self.exports:
            if isinstance(export, kind) and is_subset(subject, export.subject) and (
                    not export.accounts or importer in export.accounts):
                return export
        return None


class Response:
    """Where a response to a request relayed by a service import goes."""

    __slots__ = ("dest", "reply", "singleton", "threshold", "last", "measure", "export")

    def __init__(self, dest: Account, reply: bytes, export: ServiceExport,
                 measure: Measure | None) -> None:
        self.dest = dest
        self.reply = reply
        self.export = export
        self.singleton = export.response_type == "Singleton"
        self.threshold = export.response_threshold
        self.last = time.monotonic()
        self.measure = measure  # a sampled request (latency tracking)


class Relay:
    """The client of a subscription that carries messages into another account: what the
    routing path calls (`carry`) instead of delivering to a connection."""

    is_route = False
    is_relay = True
    closed = False
    echo = True
    name = ""

    __slots__ = ("cid", "carry", "routed", "listens")

    def __init__(self, cid: int, carry: Callable[..., bool], routed: bool) -> None:
        self.cid = cid
        # listens(subject, depth) -> whether a message on subject would reach anyone there
        # (a stream import: its account's interest; others: always)
        self.listens: Callable[[str, int], bool] | None = None
        # carry(pub, subject, reply, frame, plain, hops) -> delivered anywhere
        self.carry = carry
        # Whether it carries messages that came over a route too: a stream import's and a
        # response's do; a service import's requests are relayed on the server they entered.
        self.routed = routed


def reframe(frame: Frame, plain: Headerless | None, subject: bytes, new_subject: bytes
            ) -> tuple[Frame, Headerless | None]:
    """A message's frames, routed by `subject`, for `new_subject`: the subject they carry
    renamed if it is the one they were routed by (a JetStream delivery, routed by its
    deliver subject, carries the message's stored subject, and keeps it)."""
    if plain is not None:
        plain = plain.renamed(subject, new_subject)
    head, tail, big, size = frame
    if not (head.endswith(subject) and head[len(head) - len(subject) - 1] == 32):
        return frame, plain
    return (head[: len(head) - len(subject)] + new_subject, tail, big, size), plain


def rereply(frame: Frame, reply: bytes | None, new_reply: bytes | None) -> Frame:
    """`frame` (whose tail starts with `reply` and a space, if any) with `new_reply`."""
    head, tail, big, size = frame
    if reply:
        tail = tail[len(reply) + 1:]
    if new_reply:
        tail = new_reply + b" " + tail
    return head, tail, big, size


REQUEST_INFO = b"Nats-Request-Info"


def request_frames(pub: Connection | None, subject: bytes, reply: bytes | None,
                   headers: bytes | None, payload: bytes, share: bool
                   ) -> tuple[Frame, Headerless | None]:
    """A request carried by a service import, on `subject` with `reply`, as the exporter
    gets it: with a `Nats-Request-Info` header naming the requester's account and its
    round trip time (all about it, with the server, when the import `share`s), as the
    reference adds it, unless an earlier import added one."""
    if pub is not None and not pub.is_route and (headers is None or REQUEST_INFO not in headers):
        info = client_info(pub, share, where=share)  # type: ignore[arg-type]
        line = REQUEST_INFO + b": " + json.dumps(info, separators=(",", ":")).encode()
        if headers is None:
            headers = b"NATS/1.0\r\n" + line + b"\r\n\r\n"
        else:
            headers = headers[:-2] + line + b"\r\n\r\n"
    if headers is None:
        return msg_frame(b"MSG ", subject, reply, payload), None
    data = headers + payload
    return (msg_frame(b"HMSG ", subject, reply, data, len(headers)),
            Headerless(subject, reply, data, len(headers)))


class Accounts:
    """The server's accounts by name, built from the options (`$G` always; the system
    account when configured), with the relays their imports need."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.by_name: dict[str, Account] = {}
        self.global_account = self._add(Account(GLOBAL_ACCOUNT))
        self.relays: list[tuple[Account, Subscription]] = []
        self.import_relays: list[tuple[Account, Subscription]] = []  # (not responses')
        self.hops = 0  # relays crossed by the message being routed now
        self.watchers: list[Callable[[Account], None]] = []
        # Finds an account the configuration does not list (operator mode: its JWT).
        self.lookup: Callable[[str], Account | None] | None = None
        self._sweeper: Any = None
        auth = server.options.auth
        configs: dict[str, AccountConfig] = getattr(auth, "accounts", None) or {}
        for name, config in configs.items():
            self._add(Account(name, config))
        # Accounts of the configuration (or operator mode): the routes then name them all.
        self.configured = bool(configs)
        # The system account: the one named, else `$SYS`, made if the configuration has
        # no such account (as the reference does unless no_system_account).
        name = getattr(auth, "system_account", "") or SYSTEM_ACCOUNT
        self.system_account = self.by_name.get(name) or self._add(Account(name))
        self.system_account.system = True
        for account in list(self.by_name.values()):
            self.map_subjects(account)
            if account.config is not None:
                for imp in account.config.imports:
                    self._import(account, imp)

    def _add(self, account: Account) -> Account:
        self.by_name[account.name] = account
        return account

    def get(self, name: str) -> Account | None:
        return self.by_name.get(name or GLOBAL_ACCOUNT)

    def find(self, name: str) -> Account | None:
        """The account `name`, also one not loaded yet that `lookup` can find."""
        account = self.by_name.get(name or GLOBAL_ACCOUNT)
        if account is None and self.lookup is not None:
            account = self.lookup(name)
        return account

    def add(self, account: Account) -> Account:
        """An account found after start (operator mode): watched, its imports wired."""
        self._add(account)
        self.map_subjects(account)
        self.configured = True
        for watcher in self.watchers:
            watcher(account)
        if account.config is not None:
            for imp in account.config.imports:
                self._import(account, imp)
        return account

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def watch(self, watcher: Callable[[Account], None]) -> None:
        """Call `watcher` with every account now (and each one added later)."""
        self.watchers.append(watcher)
        for account in self.by_name.values():
            watcher(account)

    # -- imports -----------------------------------------------------------------
    def _relay_sub(self, where: Account, subject: bytes, carry: Callable[..., bool],
                   routed: bool = True) -> Subscription:
        relay = Relay(self.server.next_cid(), carry, routed)
        sub = Subscription(relay, subject, None, b"relay")
        where.sublist.insert(sub)
        self.relays.append((where, sub))
        return sub

    def _import_sub(self, where: Account, subject: bytes, carry: Callable[..., bool],
                    routed: bool = True) -> Subscription:
        sub = self._relay_sub(where, subject, carry, routed)
        self.import_relays.append((where, sub))
        return sub

    def reconfigure(self, configs: dict[str, AccountConfig]) -> None:
        """A reload's accounts: new ones added, changed ones given their new exports and
        limits, every import wired again. An account no longer configured stays until its
        clients are gone (the reload closes them: their users are gone or moved)."""
        for name, config in configs.items():
            account = self.by_name.get(name)
            if account is None:
                account = Account(name, config)
                self._add(account)
                for watcher in self.watchers:
                    watcher(account)
            else:
                account.configure(config)
        for name, account in list(self.by_name.items()):
            if name not in configs and account.config is not None and not account.system:
                account.configure(None)
        for account in list(self.by_name.values()):
            self.map_subjects(account)
        self.configured = self.configured or bool(configs)
        self._rewire()

    def update(self, account: Account, config: AccountConfig) -> None:
        """An account's new configuration (operator mode: a newer JWT): its exports and
        limits now, and every import wired again (others' may import from it)."""
        account.configure(config)
        self.map_subjects(account)
        self._rewire()

    def map_subjects(self, account: Account) -> None:
        """Give `account` its subject mappings as configured now (the global account the
        options' top-level ones), and its clients the publishing path that goes through
        them, or the one that does not."""
        if account is self.global_account:
            configured = self.server.options.mappings
        else:
            configured = account.config.mappings if account.config is not None else ()
        before = account.mappings
        account.mappings = None
        if configured:
            from .mappings import build

            account.mappings = build(configured, self._cluster_name, account.name)
        if before is None and account.mappings is None:
            return
        for client in list(getattr(self.server, "clients", {}).values()):
            if client.account is account:
                client.bind_publishing()

    def _cluster_name(self) -> str:
        cluster = self.server.cluster
        return cluster.name if cluster is not None else ""

    def _rewire(self) -> None:
        for account, sub in self.import_relays:
            sub.closed = True
            account.sublist.remove(sub)
        gone = {id(sub) for _, sub in self.import_relays}
        self.relays = [(a, s) for a, s in self.relays if id(s) not in gone]
        self.import_relays = []
        for account in list(self.by_name.values()):
            if account.config is not None:
                for imp in account.config.imports:
                    self._import(account, imp)

    def _import(self, account: Account, imp: StreamImport | ServiceImport) -> None:
        source = self.find(imp.account)
        if source is None:
            log.warning("account %s: import from unknown account %s ignored", account.name,
                        imp.account)
            return
        try:
            if isinstance(imp, StreamImport):
                self._stream_import(account, source, imp)
            else:
                self._service_import(account, source, imp)
        except TransformError as exc:  # (the configuration's check refuses these first)
            log.warning("account %s: import of %r ignored: %s", account.name, imp.subject, exc)

    def _stream_import(self, account: Account, source: Account, imp: StreamImport) -> None:
        if source.export_for(StreamExport, imp.subject, account.name) is None:
            log.warning("account %s: stream import %r not authorized by %s", account.name,
                        imp.subject, source.name)
            return
        subject = imp.subject.encode()
        if imp.prefix:
            transform: Transform | None = prefixed(imp.prefix.encode())
        elif imp.to and imp.to != imp.subject:
            transform = Transform(subject, imp.to.encode())
        else:
            transform = None
        route = self.server.route

        def carry(pub: Connection | None, subj: bytes, reply: bytes | None, frame: Frame,
                  plain: Headerless | None, hops: int) -> bool:
            if transform is not None:
                new = transform.apply(subj)
                frame, plain = reframe(frame, plain, subj, new)
                subj = new
            # Not to the routes: each server carries the exporter's messages to its own
            # subscribers (the relay's interest in the exporting account brings them there).
            return route(pub, subj, reply, frame, plain, None, account, False, hops)

        def listens(subj: str, depth: int) -> bool:
            if transform is not None:
                subj = transform.apply(subj.encode()).decode()
            return account.listened(subj, depth=depth)

        self._import_sub(source, subject, carry).client.listens = listens

    def _service_import(self, account: Account, source: Account, imp: ServiceImport) -> None:
        export = source.export_for(ServiceExport, imp.subject, account.name)
        if export is None:
            log.warning("account %s: service import %r not authorized by %s", account.name,
                        imp.subject, source.name)
            return
        remote = imp.subject.encode()
        local = (imp.to or imp.subject).encode()
        transform = Transform(local, remote) if local != remote else None
        share = imp.share
        route = self.server.route

        def carry(pub: Connection | None, subj: bytes, reply: bytes | None, frame: Frame,
                  plain: Headerless | None, hops: int) -> bool:
            new = transform.apply(subj) if transform is not None else subj
            if source.mappings is not None:
                # As the reference: the exporting account's mappings apply to the request.
                mapped = source.mappings.select(new)
                if mapped is not None:
                    new = mapped
            headers, payload = frame_message(frame, plain)
            if reply:
                measure = None
                if export.response_type == "Singleton" and sampled(export.latency, headers):
                    measure = Measure(pub, share)
                reply = self._response_reply(source, account, reply, export, measure)
            frame, plain = request_frames(pub, new, reply, headers, payload, share)
            return route(pub, new, reply, frame, plain, None, source, True, hops)

        self._import_sub(account, local, carry, routed=False)

    # -- service responses ------------------------------------------------------------
    def _response_reply(self, source: Account, dest: Account, reply: bytes,
                        export: ServiceExport, measure: Measure | None) -> bytes:
        """A new reply subject of `source` whose responses go to `reply` in `dest`."""
        if not source.reply_prefix:
            source.reply_prefix = b"_R_." + _random_token(6).encode() + b"."
            source.response_relay = self._relay_sub(
                source, source.reply_prefix + b">", lambda *a: self._respond(source, *a))
        mapped = source.reply_prefix + _random_token(6).encode()
        source.responses[mapped] = Response(dest, reply, export, measure)
        if self._sweeper is None:
            self._sweeper = self.server.loop.call_later(1.0, self._sweep)
        return mapped

    def _respond(self, source: Account, pub: Connection | None, subj: bytes,
                 reply: bytes | None, frame: Frame, plain: Headerless | None,
                 hops: int) -> bool:
        response = source.responses.get(subj)
        if response is None:
            return False
        if response.singleton:
            del source.responses[subj]
        else:
            response.last = time.monotonic()
        if response.measure is not None and response.export.latency is not None:
            self._report_latency(source, response, pub)
        new = response.reply
        frame, plain = reframe(frame, plain, subj, new)
        return self.server.route(pub, new, reply, frame, plain, None, response.dest, True, hops)

    def _report_latency(self, source: Account, response: Response,
                        responder: Connection | None) -> None:
        """Publish a sampled request's latency metric in the exporting account."""
        measure, latency = response.measure, response.export.latency
        response.measure = None
        if measure is None or latency is None:
            return
        events = getattr(self.server, "events", None)
        event_id = events.ids.next() if events is not None else ""
        body = measure.metric(responder, event_id)
        publish_internal(self.server, source, latency.subject.encode(),
                         json.dumps(body, separators=(",", ":")).encode())

    def _sweep(self) -> None:
        """Forget responses whose threshold has passed (a requester that never got one)."""
        self._sweeper = None
        now = time.monotonic()
        left = 0
        for account in self.by_name.values():
            responses = account.responses
            if not responses:
                continue
            for reply, response in list(responses.items())[:SWEEP_BATCH]:
                if now - response.last > response.threshold:
                    del responses[reply]
            left += len(responses)
        if left:
            self._sweeper = self.server.loop.call_later(1.0, self._sweep)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


# -- the server's own subscriptions and messages ---------------------------------------------
# (a handler that returns False did not take the message: nobody responded, as far as a
# requester that asked for no-responders statuses is told)
Handler = Callable[[bytes, "bytes | None", "bytes | None", bytes], "bool | None"]


def frame_message(frame: Frame, plain: Headerless | None) -> tuple[bytes | None, bytes]:
    """(headers or None, payload) of a message as routing carries it: its parts, kept
    beside the frame, when it has headers; else the payload of its MSG frame."""
    if plain is not None:
        data, hdr_len = plain.data, plain.hdr_len
        return data[:hdr_len], data[hdr_len:]
    _, tail, big, _ = frame
    return None, big if big is not None else tail[tail.index(b"\r\n") + 2:-2]


def subscribe_internal(accounts: Accounts, account: Account, subject: bytes,
                       handler: Handler, routed: bool = True,
                       with_client: bool = False, carried: bool = False) -> Subscription:
    """A subscription of the server itself in `account`: `handler(subject, reply, headers,
    payload)` for each message (also one that came over a route, if `routed`); with
    `with_client`, `handler(publisher, subject, reply, headers, payload)` (the connection
    the message came from, None for the server's own). With `carried`, the subject is the
    one the message carries, not the one it was routed by (a push consumer's delivery
    carries its stored subject)."""
    def carry(pub: Connection | None, subj: bytes, reply: bytes | None, frame: Frame,
              plain: Headerless | None, hops: int) -> bool:
        if carried:
            head = frame[0]
            subj = head[head.index(b" ") + 1:]
        headers, payload = frame_message(frame, plain)
        try:
            if with_client:
                taken = handler(pub, subj, reply, headers, payload)  # type: ignore[call-arg]
            else:
                taken = handler(subj, reply, headers, payload)
        except Exception:  # a defect in a handler must not reach the publisher's read
            log.exception("internal subscription on %r failed", subj)
            return True
        return taken is not False

    return accounts._relay_sub(account, subject, carry, routed)


def unsubscribe_internal(accounts: Accounts, account: Account, sub: Subscription) -> None:
    sub.closed = True
    account.sublist.remove(sub)
    accounts.relays = [(a, s) for a, s in accounts.relays if s is not sub]


def publish_internal(server: Server, account: Account, subject: bytes, payload: bytes,
                     headers: bytes | None = None, reply: bytes | None = None,
                     flush: bool = True) -> bool:
    """Publish a message of the server's own in `account` (to the routes too); outside a
    client's read it is written at once unless `flush` is False (the caller flushes)."""
    if headers is None:
        frame = msg_frame(b"MSG ", subject, reply, payload)
        plain = None
    else:
        data = headers + payload
        frame = msg_frame(b"HMSG ", subject, reply, data, len(headers))
        plain = Headerless(subject, reply, data, len(headers))
    delivered = server.route(None, subject, reply, frame, plain, None, account)
    if flush and server.reader is None:
        server.flush()
    return delivered
