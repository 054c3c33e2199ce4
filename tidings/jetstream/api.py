"""JetStream's `$JS.API.>` in each account: account info and the streams' requests
(create, info, update, delete, purge, names, list, message get and delete), answered with
the reference's JSON (its `type`, fields and errors), and the capture of the streams'
subjects (each publish stored and answered with a PubAck).

Everything runs in the server's own subscriptions (server/accounts.py's internal ones): a
request is answered in the read of the client that made it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from ..config.accounts import JetStreamLimits
from ..protocol.subjects import subject_matches
from ..server import godecode
from ..server.accounts import Account, publish_internal, subscribe_internal
from ..server.connection import Headerless, msg_frame
from ..server.gojson import parse_go_time
from . import errors, limits, schemas, sourcing
from .consumer import Consumer, ephemeral_name
from .consumer_config import check as check_consumer
from .consumer_config import check_change, check_on_stream, valid_group_name
from .consumer_config import normalize as normalize_consumer
from .errors import ApiError
from .external import Wire
from .sourcing import Copier
from .stream import (
    API_LEVEL,
    Stream,
    check_update,
    dumps,
    last_on,
    next_on,
    normalize,
    same_config,
    stored_message,
)
from .timers import EarliestTimer

if TYPE_CHECKING:
    from ..server.server import Server

log = logging.getLogger("tidings.jetstream")

API_PREFIX = "$JS.API."
# The reference's API subscriptions (after API_PREFIX): what none of them matches is
# dropped. (MSG.NEXT and DIRECT.GET are its consumers' and streams' own.)
API_SUBJECTS = (
    "INFO", "STREAM.CREATE.*", "STREAM.UPDATE.*", "STREAM.DELETE.*", "STREAM.PURGE.*",
    "STREAM.SNAPSHOT.*", "STREAM.RESTORE.*", "STREAM.PEER.REMOVE.*", "STREAM.PEER.EVACUATE.*",
    "STREAM.CANCEL_MOVE.*", "STREAM.LEADER.STEPDOWN.*", "STREAM.MSG.DELETE.*",
    "STREAM.MSG.GET.*", "STREAM.NAMES", "STREAM.LIST", "STREAM.INFO.*",
    "CONSUMER.LEADER.STEPDOWN.*.*", "CONSUMER.CREATE.*", "CONSUMER.CREATE.*.>",
    "CONSUMER.DURABLE.CREATE.*.*", "CONSUMER.DELETE.*.*", "CONSUMER.PAUSE.*.*",
    "CONSUMER.UNPIN.*.*", "CONSUMER.NAMES.*", "CONSUMER.LIST.*", "CONSUMER.INFO.*.*",
    "CONSUMER.MSG.NEXT.*.*", "DIRECT.GET.*", "DIRECT.GET.*.>",
)
NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECT_DETAILS_LIMIT = 100_000
AUDIT_SUBJECT = "$JS.EVENT.ADVISORY.API"
TICK = 0.1  # seconds between looks at pull requests' expiry and ack waits
COMPRESS_BUDGET = 0.003  # seconds a tick may spend compressing sealed blocks (all streams)
SAVE_EVERY = 10  # ticks between saves of durable consumers' positions (and at shutdown)

class JetStream:
    """JetStream of one server: the streams of each account, and their API."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.streams: dict[Account, dict[str, Stream]] = {}
        self.total = 0  # API requests answered (the server's; by account in api_counts)
        self.errors = 0
        self.api_counts: dict[Account, list[int]] = {}  # account -> [total, errors]
        self._auditing: tuple[Any, bytes, bytes | None, bytes] | None = None
        self._expiries: dict[Stream, EarliestTimer] = {}  # each stream's timer at its next expiry
        self._to_pump: dict[Consumer, None] = {}  # consumers acked this turn (pumped at flush)
        self._holding = False  # in a turn of _turn's: what is sent waits for its one flush
        self._open: dict[Stream, list[tuple[Account, bytes | None, dict[str, Any]]]] = {}
        self.wire = Wire(server)  # (external origins' links: external.py)
        self.copier = Copier(self._store_copy, self._soon, self.wire.links(self._store_copy))
        # Streams a restore is opening in a worker thread (snapshot.py): their names taken.
        self.restoring: set[tuple[Account, str]] = set()
        self.subs: list[tuple[Account, Any]] = []
        self._timer: Any = None
        self.config = server.options.jetstream.resolved  # type: ignore[union-attr]
        self._last_sync = 0.0
        self._ticks = 0

    def start(self) -> None:
        """Serve the accounts' `$JS.API`; OSError ("Can't start JetStream: ...") when the
        store directory cannot be made or written, as the reference refuses to start."""
        try:
            _prepare_store_dir(self.config.store_dir)
        except OSError as exc:
            raise OSError(f"Can't start JetStream: {exc}") from None
        self.server.accounts.watch(self._account_added)
        self.server.before_flush.append(self._commit)
        self._timer = self.server.loop.call_later(TICK, self._tick)
        self._last_sync = time.monotonic()

    def stop(self) -> None:
        self._commit()
        if self._commit in self.server.before_flush:
            self.server.before_flush.remove(self._commit)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for account, streams in self.streams.items():
            for stream in streams.values():
                self.copier.detach(account, stream)  # (an external link's timers end too)
                stream.close()

    def _stream_dir(self, account: Account, name: str) -> str:
        return os.path.join(self.config.store_dir, account.name, "streams", name)

    def _recover(self, account: Account) -> None:
        """The file streams a previous run left in the account's folder."""
        folder = os.path.join(self.config.store_dir, account.name, "streams")
        if not os.path.isdir(folder):
            return
        streams = self.streams.setdefault(account, {})
        for name in sorted(os.listdir(folder)):
            stream = Stream.load(os.path.join(folder, name), self.config.sync_always)
            if stream is None:
                log.warning("JetStream: stream folder %s has no readable configuration",
                            os.path.join(folder, name))
                continue
            streams[stream.name] = stream
            self._subscribe(account, stream)
            for state in stream.saved_consumers():
                config = state.get("config") or {}
                name = config.get("durable_name") or config.get("name")
                if not name:
                    continue
                consumer = self._new_consumer(account, stream, name, config)
                try:
                    consumer.restore(state)
                except (KeyError, TypeError, ValueError):
                    log.warning("JetStream: consumer %s > %s: state not readable, starting "
                                "over", stream.name, name)
                stream.consumers[name] = consumer
            log.info("  Restored %d messages for stream %s > %s", stream.store.count,
                     account.name, stream.name)

    def _turn(self, work: Callable[[], None]) -> None:
        """`work` on a turn of the loop no client's read began (a timer's): what it sends
        goes out with one flush at its end, as a read's does, not a write a message."""
        if self._holding or self.server.reader is not None:
            work()
            return
        self._holding = True
        try:
            work()
        finally:
            self._holding = False
            self.server.flush()

    def _tick(self) -> None:
        self._turn(self._ticked)

    def _ticked(self) -> None:
        """Expired pull requests, ack waits that passed, idle ephemeral consumers."""
        self._commit()  # (a batch no flush has ended yet)
        self._timer = self.server.loop.call_later(TICK, self._tick)
        self._ticks += 1
        sync = time.monotonic() - self._last_sync >= self.config.sync_interval
        if sync:
            self._last_sync = time.monotonic()
        compress_until = time.perf_counter() + COMPRESS_BUDGET
        for account, streams in self.streams.items():
            for stream in streams.values():
                if stream.directory:
                    stream.store.maintain(compress_until)
                if sync and stream.directory:
                    stream.store.sync()
                if stream.directory and self._ticks % SAVE_EVERY == 0:
                    stream.save_consumers(only_changed=True)
                expired = stream.expire()
                for consumer in list(stream.consumers.values()):
                    consumer.tick()
                    if expired:
                        consumer.pump()
                    if self._inactive(account, consumer):
                        del stream.consumers[consumer.name]
                        consumer.close()
                        self._action(account, stream, "delete", consumer.name)

    def _inactive(self, account: Account, consumer: Consumer) -> bool:
        """An ephemeral consumer nobody used (pulled from, or listens to) for its
        inactive threshold."""
        threshold = consumer.config.get("inactive_threshold")
        if consumer.durable or not threshold or consumer.waiting:
            return False
        target = consumer.config.get("deliver_subject")
        if target and account.listened(target):
            consumer.last_active = time.time_ns()
            return False
        last = max(consumer.last_active, consumer.created)
        return time.time_ns() - last > threshold

    def enabled_for(self, account: Account) -> bool:
        """JetStream is the global account's without accounts; with accounts, those whose
        configuration says `jetstream: enabled`."""
        accounts = self.server.accounts
        if account is accounts.global_account:
            return not accounts.configured
        return account.config is not None and account.config.jetstream

    def _account_added(self, account: Account) -> None:
        if account.system:
            return
        sub = subscribe_internal(self.server.accounts, account, b"$JS.API.>",
                                 lambda *a: self._audited(account, *a), routed=True,
                                 with_client=True)
        self.subs.append((account, sub))
        if self.config.domain:  # $JS.<domain>.API.> is $JS.API.> (from other domains)
            prefix = f"$JS.{self.config.domain}.API.".encode()

            def in_domain(pub: Any, subject: bytes, *rest: Any) -> bool | None:
                if pub is None and self.wire.publishing is account:
                    return False  # (a link's own request: the domain maps clients' ones)
                return self._audited(account, pub, b"$JS.API." + subject[len(prefix):], *rest)

            sub = subscribe_internal(self.server.accounts, account, prefix + b">", in_domain,
                                     routed=True, with_client=True)
            self.subs.append((account, sub))
        sub = subscribe_internal(self.server.accounts, account, b"$JS.FC.>",
                                 lambda *a: self._flow_control(account, *a), routed=True)
        self.subs.append((account, sub))
        sub = subscribe_internal(self.server.accounts, account, b"$JS.ACK.>",
                                 lambda *a: self._ack(account, *a), routed=True)
        self.subs.append((account, sub))
        if self.enabled_for(account):
            self._recover(account)

    # -- requests ------------------------------------------------------------------------------
    def _audited(self, account: Account, pub: Any, subject: bytes, reply: bytes | None,
                 headers: bytes | None, payload: bytes) -> bool | None:
        """A request, its answer audited on `$JS.EVENT.ADVISORY.API` when anyone listens."""
        self._auditing = (pub, subject, headers, payload)
        try:
            return self._request(account, subject, reply, headers, payload)
        finally:
            self._auditing = None

    def _audit(self, account: Account, response: bytes) -> None:
        """The reference's api_audit advisory of the request being answered."""
        from ..protocol.headers import header_fields
        from ..server.accounts import REQUEST_INFO
        from ..server.clientinfo import client_info
        from ..server.gojson import go_time
        from .consumer import new_id

        if self._auditing is None or not account.listened(AUDIT_SUBJECT):
            return
        pub, subject, headers, payload = self._auditing
        given = header_fields(headers).get(REQUEST_INFO.decode().lower()) if headers else None
        try:
            client = json.loads(given) if given else None
        except ValueError:
            client = None
        if client is None and pub is not None and not getattr(pub, "is_route", True):
            client = client_info(pub, True, where=True)
        event: dict[str, Any] = {
            "type": "io.nats.jetstream.advisory.v1.api_audit", "id": new_id(),
            "timestamp": go_time(time.time_ns(), utc=True), "server": self.server.name,
            "client": client, "subject": subject.decode(errors="replace")}
        if payload:
            event["request"] = payload.decode(errors="replace")
        event["response"] = response.decode(errors="replace")
        self._auditing = None  # (one answer per request)
        self.advise(account, AUDIT_SUBJECT, event)

    def _request(self, account: Account, subject: bytes, reply: bytes | None,
                 headers: bytes | None, payload: bytes) -> bool | None:
        """One `$JS.API` request; False where the reference has no subscription (a pull
        for no consumer, a direct get of a stream without allow_direct): the requester
        hears that nobody responded. A subject none of its API subscriptions takes is
        dropped unanswered, as the reference's dispatcher drops it (`$JS.API.$KV.a.b`, which
        a service import of `$JS.API.>` as `x.>` makes of a KV put to `x.$KV.a.b`:
        answered, it would beat the stream's PubAck)."""
        name = subject.decode(errors="replace")[len(API_PREFIX):]
        if not any(subject_matches(pattern, name) for pattern in API_SUBJECTS):
            return None
        if not reply:
            return
        tokens = name.split(".")
        kind = _type_of(tokens)
        if tokens[:2] == ["DIRECT", "GET"] and len(tokens) >= 3:
            return self._direct_get(account, tokens, headers, payload, reply)
        if tokens[:2] in (["STREAM", "SNAPSHOT"], ["STREAM", "RESTORE"]):
            from . import snapshot  # (snapshot.py: answered with their own response types)

            return snapshot.request(self, account, tokens, payload, reply)
        if not self.enabled_for(account):
            return self._reply(account, reply, kind, error=errors.NOT_ENABLED_FOR_ACCOUNT())
        if tokens[:3] == ["CONSUMER", "MSG", "NEXT"]:
            return self._next(account, tokens, payload, reply)
        if tokens[:2] == ["CONSUMER", "UNPIN"] and not payload.strip():
            return self._reply(account, reply, kind, error=errors.INVALID_JSON(
                err="unexpected end of JSON input"))  # (its body is required)
        try:
            body = godecode.loads_stream(payload) if payload.strip() else {}
        except godecode.GoJsonError as exc:
            return self._reply(account, reply, kind, error=errors.INVALID_JSON(err=str(exc)))
        streams = self.streams.setdefault(account, {})
        try:
            body = self._typed(tokens, body, payload)
            self._dispatch(account, streams, tokens, body, reply)
        except ApiError as exc:
            self._reply(account, reply, kind, error=exc)

    def _typed(self, tokens: list[str], body: Any, payload: bytes) -> Any:
        """The body as the reference's decoder reads it into the request's struct (its
        words, as INVALID_JSON, where it refuses it). A pause without a JSON object or array
        is a resume, not a body."""
        schema = schemas.REQUESTS.get(_operation(tokens)[0])
        if schema is None or not payload.strip():
            return body
        if tokens[:2] == ["CONSUMER", "PAUSE"] and not isinstance(body, dict | list):
            return body
        try:
            return godecode.decode(body, schema, self.config.strict)
        except godecode.GoJsonError as exc:
            raise errors.INVALID_JSON(err=str(exc)) from None

    def _dispatch(self, account: Account, streams: dict[str, Stream], tokens: list[str],
                  body: Any, reply: bytes) -> None:
        kind = _type_of(tokens)
        op, name = _operation(tokens)
        if op == "INFO" and len(tokens) == 1:
            return self._reply(account, reply, kind, **self._account_info(account, streams))
        if op.startswith("CONSUMER."):
            return self._consumer_request(account, streams, op, tokens, body, reply, kind)
        if op in ("STREAM.NAMES", "STREAM.LIST"):
            wanted = body.get("subject") if isinstance(body, dict) else None
            names = sorted(n for n, st in streams.items()
                           if not wanted or _overlap(st.config.get("subjects", []), [str(wanted)]))
        if op == "STREAM.NAMES":
            offset, page = _page(body, names, NAMES_LIMIT)
            return self._reply(account, reply, kind, total=len(names), offset=offset,
                               limit=NAMES_LIMIT, streams=page or None)
        if op == "STREAM.LIST":
            offset, page = _page(body, names, LIST_LIMIT)
            return self._reply(account, reply, kind, total=len(names), offset=offset,
                               limit=LIST_LIMIT, streams=[self._info(streams[n]) for n in page])
        if not name:
            raise errors.BAD_REQUEST()
        if op in ("STREAM.CREATE", "STREAM.UPDATE"):
            return self._create(account, streams, name, body, reply, kind,
                                update=op == "STREAM.UPDATE")
        stream = streams.get(name)
        if stream is None:
            raise errors.STREAM_NOT_FOUND()
        if op == "STREAM.INFO":
            return self._stream_info(account, stream, body, reply, kind)
        if op == "STREAM.DELETE":
            self._remove(account, streams, stream)
            self._reply(account, reply, kind, success=True)
            return self._action(account, stream, "delete")
        if op == "STREAM.PURGE":
            if stream.config.get("sealed"):
                raise errors.STREAM_SEALED()
            if stream.config.get("deny_purge"):
                raise errors.STREAM_PURGE_FAILED(err="stream purge not permitted")
            opts = body if isinstance(body, dict) else {}
            if opts.get("seq") and opts.get("keep"):
                raise errors.BAD_REQUEST()
            try:
                purged = stream.purge(opts.get("filter") or None, int(opts.get("seq") or 0),
                                      int(opts.get("keep") or 0))
            except OSError as exc:  # (a full disk: the reference's answer to a failed purge)
                raise errors.STREAM_GENERAL(err=str(exc)) from None
            return self._reply(account, reply, kind, success=True, purged=purged)
        if op == "STREAM.MSG.GET":
            return self._get(account, stream, body, reply, kind)
        if op == "STREAM.MSG.DELETE":
            if stream.config.get("sealed"):
                raise errors.STREAM_SEALED()
            if stream.config.get("deny_delete"):
                raise errors.STREAM_MSG_DELETE_FAILED(err="message delete not permitted")
            seq = body.get("seq") if isinstance(body, dict) else None
            try:
                removed = isinstance(seq, int) and stream.store.remove(seq)
            except OSError as exc:  # (a full disk)
                raise errors.STREAM_MSG_DELETE_FAILED(err=str(exc)) from None
            if not removed:
                raise errors.NO_MESSAGE_FOUND()
            return self._reply(account, reply, kind, success=True)
        raise errors.BAD_REQUEST()

    def _create(self, account: Account, streams: dict[str, Stream], name: str, body: Any,
                reply: bytes, kind: str, update: bool) -> None:
        config = normalize(body, name)
        sourcing.check(config, lambda other: streams[other].config if other in streams
                       else None)
        if not update and config.get("sealed"):
            raise errors.STREAM_INVALID_CONFIG(
                err="stream configuration for create can not be sealed")
        if not update and config.get("mirror_direct") and not config.get("mirror"):
            raise errors.STREAM_INVALID_CONFIG(
                err="stream has no mirror but does have mirror direct")
        if not update:
            everyone = [s for mine in self.streams.values() for s in mine.values()]
            limits.check_stream(self.limits(account), config, streams, everyone,
                                {"memory": self.config.max_memory,
                                 "file": self.config.max_storage},
                                creating=name not in streams)
        if (account, name) in self.restoring:
            raise errors.STREAM_NAME_EXIST()
        existing = streams.get(name)
        if existing is not None:
            if not update and not same_config(existing.config, config):
                raise errors.STREAM_NAME_EXIST()
            if update:
                check_update(existing.config, config)
                if config.get("sealed"):  # (what a sealed stream is, as the reference's)
                    config.update(max_age=0, discard="new", deny_delete=True, deny_purge=True,
                                  allow_rollup_hdrs=False)
                self._unsubscribe(account, existing)
                existing.reconfigure(config)
                existing.save_config()
                self._subscribe(account, existing)
                self._action(account, existing, "modify")
            return self._reply(account, reply, kind, **self._info(existing))
        if update:
            raise errors.STREAM_NOT_FOUND()
        for other in streams.values():
            if _overlap(other.config.get("subjects", []), config.get("subjects", [])):
                raise errors.STREAM_SUBJECT_OVERLAP()
        stream = streams[name] = Stream(config, self._stream_dir(account, name),
                                        self.config.sync_always)
        self._subscribe(account, stream)
        self._reply(account, reply, kind, **self._info(stream), did_create=True)
        self._action(account, stream, "create")

    def _info(self, stream: Stream, leader: bool = False) -> dict[str, Any]:
        """A stream's info as the API answers it: its config, created, state (and, in
        STREAM.INFO, the cluster with this server as its leader), and the time."""
        from ..server.gojson import go_time

        info = stream.info()
        if leader:
            info["cluster"] = {"leader": self.server.name}
            for key in ("mirror", "sources"):  # (after the cluster, as the reference's)
                if key in info:
                    info[key] = info.pop(key)
        info["ts"] = go_time(time.time_ns(), utc=True)
        return info

    def _stream_info(self, account: Account, stream: Stream, body: Any, reply: bytes,
                     kind: str) -> None:
        """STREAM.INFO, with the subjects' counts (`subjects_filter`, paged by `offset`)
        and the deleted sequences (`deleted_details`) when asked for."""
        opts = body if isinstance(body, dict) else {}
        info = self._info(stream, leader=True)
        total = offset = limit = 0
        if opts.get("subjects_filter") or opts.get("deleted_details"):
            counts = (stream.subject_counts(str(opts["subjects_filter"]))
                      if opts.get("subjects_filter") else {})
            if counts:
                total, limit = len(counts), SUBJECT_DETAILS_LIMIT
                offset = max(int(opts.get("offset") or 0), 0)
                if offset or total > limit:
                    names = sorted(counts)[offset:offset + limit]
                    counts = {name: counts[name] for name in names}
            info["state"] = stream.state(counts or None, bool(opts.get("deleted_details")))
        self._reply(account, reply, kind, total=total, offset=offset, limit=limit, **info)

    def _get(self, account: Account, stream: Stream, body: Any, reply: bytes,
             kind: str) -> None:
        """STREAM.MSG.GET as the reference answers it: by sequence, the last on a subject,
        the next on one from a sequence or a time, the first at or after a time; no
        batches (the direct get has them)."""
        if not isinstance(body, dict) or body.get("batch") or body.get("max_bytes"):
            raise errors.BAD_REQUEST()
        seq, last = int(body.get("seq") or 0), body.get("last_by_subj") or ""
        after, start = body.get("next_by_subj") or "", body.get("start_time")
        if ((seq and last) or not (seq or last or after or start) or (seq and start)
                or (start and last) or (last and after)):
            raise errors.BAD_REQUEST()
        store = stream.store
        if start:
            seq = store.first_at(parse_go_time(str(start)))
        if after:
            msg = next_on(store, str(after), seq)
        elif seq:
            msg = store.get(seq)
        else:
            msg = last_on(store, str(last))
        if msg is None:
            raise errors.NO_MESSAGE_FOUND()
        self._reply(account, reply, kind,
                    message=stored_message(msg, with_headers=not body.get("no_hdr")))

    # -- consumers -----------------------------------------------------------------------------
    def _consumer_request(self, account: Account, streams: dict[str, Stream], op: str,
                          tokens: list[str], body: Any, reply: bytes, kind: str) -> None:
        if op == "CONSUMER.UNPIN":
            return self._unpin(account, streams, tokens, body, reply, kind)
        at = 3 if op == "CONSUMER.DURABLE" else 2  # (CONSUMER.DURABLE.CREATE.<stream>...)
        stream = streams.get(tokens[at]) if len(tokens) > at else None
        if stream is None:
            raise errors.STREAM_NOT_FOUND()
        if op == "CONSUMER.NAMES":
            names = sorted(stream.consumers)
            offset, page = _page(body, names, NAMES_LIMIT)
            return self._reply(account, reply, kind, total=len(names), offset=offset,
                               limit=NAMES_LIMIT, consumers=page)
        if op == "CONSUMER.LIST":
            names = sorted(stream.consumers)
            offset, page = _page(body, names, LIST_LIMIT)
            return self._reply(account, reply, kind, total=len(names), offset=offset,
                               limit=LIST_LIMIT,
                               consumers=[self._consumer_info(stream.consumers[n]) for n in page])
        if op in ("CONSUMER.CREATE", "CONSUMER.DURABLE"):
            return self._create_consumer(account, stream, op, tokens, body, reply, kind)
        name = tokens[3] if len(tokens) > 3 else ""
        consumer = stream.consumers.get(name)
        if consumer is None:
            raise errors.CONSUMER_NOT_FOUND()
        if op == "CONSUMER.INFO":
            return self._reply(account, reply, kind, **self._consumer_info(consumer))
        if op == "CONSUMER.DELETE":
            del stream.consumers[name]
            consumer.close()
            self._action(account, stream, "delete", name)
            stream.forget_consumer(name)
            return self._reply(account, reply, kind, success=True)
        if op == "CONSUMER.PAUSE":
            until = body.get("pause_until") if isinstance(body, dict) else None
            consumer.pause(until if isinstance(until, str) else "")
            left = consumer.paused_for()
            if left:
                return self._reply(account, reply, kind, paused=True,
                                   pause_until=consumer.config["pause_until"],
                                   pause_remaining=left)
            return self._reply(account, reply, kind, paused=False,
                               pause_until="0001-01-01T00:00:00Z")
        raise errors.BAD_REQUEST()

    def _unpin(self, account: Account, streams: dict[str, Stream], tokens: list[str],
               body: Any, reply: bytes, kind: str) -> None:
        """CONSUMER.UNPIN.<stream>.<consumer> `{"group"}`: the group's pin released (checked
        in the reference's order: the body, the group's name, the stream, the consumer, the
        consumer's groups)."""
        group = body.get("group")  # (its type checked as the request's: schemas.py)
        if not group:
            raise errors.INVALID_JSON(err="consumer group not specified")
        if not valid_group_name(group):
            raise errors.CONSUMER_INVALID_GROUP_NAME()
        stream = streams.get(tokens[2]) if len(tokens) == 4 else None
        if stream is None:
            raise errors.STREAM_NOT_FOUND()
        consumer = stream.consumers.get(tokens[3])
        if consumer is None:
            raise errors.CONSUMER_NOT_FOUND()
        if group not in (consumer.config.get("priority_groups") or []):
            raise errors.CONSUMER_INVALID_PRIORITY_GROUP()
        self._reply(account, reply, kind)
        consumer.unpin(group)

    def _next(self, account: Account, tokens: list[str], payload: bytes, reply: bytes) -> bool:
        """CONSUMER.MSG.NEXT.<stream>.<consumer>: a pull request, its body the consumer's to
        read (for no consumer: not taken, as the reference has no subscription there)."""
        stream = self.streams.get(account, {}).get(tokens[3]) if len(tokens) == 5 else None
        consumer = stream.consumers.get(tokens[4]) if stream is not None else None
        if consumer is None:
            return False
        consumer.request(reply.decode(), payload)
        return True

    def _create_consumer(self, account: Account, stream: Stream, op: str, tokens: list[str],
                         body: Any, reply: bytes, kind: str) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("config"), dict):
            raise errors.CONSUMER_CONFIG_REQUIRED()
        raw = dict(body["config"])
        name = _consumer_name(op, tokens, raw)
        if body.get("stream_name") != stream.name:
            raise errors.STREAM_MISMATCH()
        if int(raw.get("num_replicas") or 0) > 1:
            raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
        if not name:
            name = ephemeral_name()
        existing = stream.consumers.get(name)
        if existing is not None and existing.config.get("pause_until"):
            raw["pause_until"] = existing.config["pause_until"]  # (an update keeps it)
        config = normalize_consumer(raw, stream=stream.config,
                                    pedantic=body.get("pedantic") is True)
        check_consumer(config, stream.config)
        if existing is not None:
            if body.get("action") == "create" and _consumer_key(existing.config) != \
                    _consumer_key(config):
                raise errors.CONSUMER_ALREADY_EXISTS()
            if existing.config != config:
                check_change(existing.config, config, existing.push_bound())
                existing.reconfigure(config)
                if existing.durable:
                    stream.save_consumer(existing)
            return self._reply(account, reply, kind, **self._consumer_info(existing))
        if body.get("action") == "update":
            raise errors.CONSUMER_DOES_NOT_EXIST()
        limits.check_consumer(self.limits(account), config, stream,
                              given_ack_pending=bool(raw.get("max_ack_pending")))
        check_on_stream(config, stream.config, [c.config for c in stream.consumers.values()])
        consumer = self._new_consumer(account, stream, name, config)
        # A durable is on disk before the answer, as the reference writes it.
        failed = stream.save_consumer(consumer) if consumer.durable else None
        if failed is not None:
            raise errors.CONSUMER_STORE_FAILED(err=str(failed))
        stream.consumers[name] = consumer
        self._reply(account, reply, kind, **self._consumer_info(consumer))
        self._action(account, stream, "create", name)
        consumer.pump()

    def _new_consumer(self, account: Account, stream: Stream, name: str,
                      config: dict[str, Any]) -> Consumer:
        """A consumer whose timers (its pull requests' expiry and heartbeats) run on the
        server's loop at the time they are due."""
        timer = EarliestTimer(self.server.loop, lambda: self._turn(consumer.on_timer))
        consumer = Consumer(stream, name, config, self._sender(account), account.listened,
                            timer.at,
                            self._advisor(account))
        consumer.soon = self._pump_soon
        return consumer

    def _pump_soon(self, consumer: Consumer) -> None:
        self._to_pump[consumer] = None
        if self.server.reader is None and not self._holding:  # (no flush is coming)
            self._turn(self._commit)

    def _advisor(self, account: Account) -> Any:
        """A consumer's advisories, published in its account when someone listens, with
        the domain (and, in the pinned ones, the account) where the reference puts them."""
        def advise(subject: str, event: dict[str, Any]) -> None:
            self.advise(account, subject, event,
                        with_account=event["type"].endswith("pinned"))

        return advise

    def advise(self, account: Account, subject: str, event: dict[str, Any],
               with_account: bool = False) -> None:
        """An advisory (`event`: type, id, timestamp, stream, ... in the reference's order)
        on `subject` of `account`, if anyone listens there."""
        if not account.listened(subject):
            return
        domain = self.config.domain
        if with_account:
            head = ("type", "id", "timestamp")
            body = {**{k: event[k] for k in head}, "account": account.name,
                    "stream": event["stream"], "consumer": event["consumer"]}
            if domain:
                body["domain"] = domain
            body.update((k, v) for k, v in event.items() if k not in body)
        else:
            body = {**event, **({"domain": domain} if domain else {})}
        publish_internal(self.server, account, subject.encode(), dumps(body))

    def _action(self, account: Account, stream: Stream, action: str,
                consumer: str = "") -> None:
        """A stream's or a consumer's action advisory (created, updated, deleted)."""
        from ..server.gojson import go_time
        from .consumer import new_id

        past = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action]
        event: dict[str, Any] = {
            "type": "io.nats.jetstream.advisory.v1." + (
                "consumer_action" if consumer else "stream_action"),
            "id": new_id(), "timestamp": go_time(time.time_ns(), utc=True),
            "stream": stream.name}
        if consumer:
            event["consumer"] = consumer
        event["action"] = action
        subject = (f"$JS.EVENT.ADVISORY.CONSUMER.{past}.{stream.name}.{consumer}" if consumer
                   else f"$JS.EVENT.ADVISORY.STREAM.{past}.{stream.name}")
        self.advise(account, subject, event)

    def _consumer_info(self, consumer: Consumer) -> dict[str, Any]:
        from ..server.gojson import go_time

        info = consumer.info()
        groups = info.pop("priority_groups", None)  # (after the time, as the reference's)
        info["ts"] = go_time(time.time_ns(), utc=True)
        if groups:
            info["priority_groups"] = groups
        return info

    def _sender(self, account: Account) -> Any:
        server = self.server

        def send(target: str, subject: str, reply: str | None, headers: bytes | None,
                 data: bytes) -> None:
            subj, rep = subject.encode(), reply.encode() if reply else None
            if headers:
                whole = headers + data
                frame = msg_frame(b"HMSG ", subj, rep, whole, len(headers))
                plain: Headerless | None = Headerless(subj, rep, whole, len(headers))
            else:
                frame, plain = msg_frame(b"MSG ", subj, rep, data), None
            server.route(None, target.encode(), rep, frame, plain, None, account)
            if server.reader is None and not self._holding:
                server.flush()

        return send

    def _flow_control(self, account: Account, subject: bytes, reply: bytes | None,
                      headers: bytes | None, payload: bytes) -> None:
        """A push subscriber's answer to a flow control request,
        `$JS.FC.<stream>.<consumer>.<id>`."""
        tokens = subject.decode(errors="replace").split(".")
        if len(tokens) != 5:
            return
        stream = self.streams.get(account, {}).get(tokens[2])
        consumer = stream.consumers.get(tokens[3]) if stream is not None else None
        if consumer is not None:
            consumer.flow_control_reply(subject.decode(errors="replace"))

    def _ack(self, account: Account, subject: bytes, reply: bytes | None,
             headers: bytes | None, payload: bytes) -> bool | None:
        """An ack on `$JS.ACK.<stream>.<consumer>....` (v1, or v2 with domain and account
        hash); not taken where the reference has no ack subscription (no such consumer, or
        one that takes no acks): an ack request hears no responders."""
        tokens = subject.decode(errors="replace").split(".")
        if len(tokens) == 9:
            stream_name, name, sseq = tokens[2], tokens[3], tokens[5]
        elif len(tokens) >= 12:
            stream_name, name, sseq = tokens[4], tokens[5], tokens[7]
        else:
            return False
        stream = self.streams.get(account, {}).get(stream_name)
        consumer = stream.consumers.get(name) if stream is not None else None
        if consumer is None or consumer.config["ack_policy"] == "none":
            return False
        if not sseq.isdigit():
            return None
        body = payload.strip()
        what = consumer.ack(int(sseq), body)
        if what == "ack" and reply and body.startswith(b"+NXT"):
            consumer.request(reply.decode(), body[4:])
        elif reply:
            publish_internal(self.server, account, reply, b"")  # (a double ack's answer)

    def _direct_get(self, account: Account, tokens: list[str], headers: bytes | None,
                    payload: bytes, reply: bytes) -> bool | None:
        """`$JS.API.DIRECT.GET.<stream>[.<subject>]` (direct.py; in columns, bulk.py, where
        the request asks so). A stream without allow_direct does not take it (the
        reference has no subscription there)."""
        from . import bulk, direct

        stream = self.streams.get(account, {}).get(tokens[2]) if self.enabled_for(account) \
            else None
        if stream is None or not stream.config.get("allow_direct"):
            return False  # (the reference has no subscription there: no responders)
        key = ".".join(tokens[3:]) if len(tokens) > 3 else None
        max_pending = self.server.options.max_pending
        if key is None and bulk.wanted(headers):
            req = bulk.request_of(payload)
            if req is not None:
                self._send_each(account, stream, reply, bulk.answer(
                    stream, req, max_pending, self.server.options.max_payload))
                return True
        for status, data in direct.answer(stream, key, payload, max_pending):
            publish_internal(self.server, account, reply, data, status or None)
        return True

    def _send_each(self, account: Account, stream: Stream, reply: bytes,
                   replies: Iterator[tuple[bytes, bytes]]) -> None:
        """`replies` to `reply`, one a turn of the loop (the first now), while `stream`
        lasts."""
        def send() -> None:
            if self.streams.get(account, {}).get(stream.name) is not stream:
                return  # (deleted meanwhile: the requester times out, as on a lost reply)
            try:
                got = next(replies, None)
            except OSError as exc:  # (the store could not be read: the requester times out)
                log.error("JetStream: stream %s > %s: direct get: %s", account.name,
                          stream.name, exc)
                return
            if got is None:
                return
            publish_internal(self.server, account, reply, got[1], got[0] or None)
            self._soon(send)

        send()

    def _remove(self, account: Account, streams: dict[str, Stream], stream: Stream) -> None:
        self._unsubscribe(account, stream)
        del streams[stream.name]
        handle = self._expiries.pop(stream, None)
        if handle is not None:
            handle.cancel()
        for consumer in stream.consumers.values():
            consumer.close()
        stream.destroy()

    # -- capture ------------------------------------------------------------------------------
    def _subscribe(self, account: Account, stream: Stream) -> None:
        server = self.server
        stream.domain = self.config.domain
        stream.republished = lambda subject, headers, data: publish_internal(
            server, account, subject.encode(), data, headers)
        for subject in stream.config.get("subjects", []):
            stream.subs.append(subscribe_internal(
                self.server.accounts, account, subject.encode(),
                partial(self._capture, account, stream)))
        streams = self.streams.get(account, {})
        self.copier.attach(account, stream, streams)
        self.copier.origin_added(account, stream)

    def _unsubscribe(self, account: Account, stream: Stream) -> None:
        from ..server.accounts import unsubscribe_internal

        for sub in stream.subs:
            unsubscribe_internal(self.server.accounts, account, sub)
        stream.subs.clear()
        stream.stored = None
        self.copier.detach(account, stream)
        self.copier.origin_removed(account, stream)

    def _batch(self, stream: Stream) -> list[Any] | None:
        """The group commit a file stream's stores this turn go into (begun with the first);
        None for a memory stream."""
        if not stream.directory:
            return None
        batch = self._open.get(stream)
        if batch is None:
            stream.store.begin()
            batch = self._open[stream] = []
        return batch

    def _store_copy(self, account: Account, stream: Stream, subject: str,
                    headers: bytes | None, data: bytes, how: dict[str, Any]) -> None:
        """A message another stream's link copies into `stream` (sourcing.py), stored as a
        publish is, without an acknowledgement."""
        _, batch = self._store(account, stream, subject, headers, data,
                               len(subject) + len(headers or b"") + len(data), how)
        if batch is None:
            for consumer in list(stream.consumers.values()):
                consumer.pump()

    def _store(self, account: Account, stream: Stream, subject: str, headers: bytes | None,
               data: bytes, size: int, how: dict[str, Any] | None = None
               ) -> tuple[dict[str, Any], list[Any] | None]:
        """A message stored in `stream` within the account's limits (ApiError when refused):
        its PubAck, and the group commit it went into (None for a memory stream)."""
        batch = self._batch(stream)  # a file stream: written, then acknowledged, at flush
        limits.check_publish(self.limits(account), self.streams[account].values(),
                             stream.config["storage"], size)
        ack = stream.publish(subject, headers, data) if how is None else \
            stream.publish(subject, headers, data, **how)
        if stream.ttls or stream.config["max_age"]:
            self._arm_expiry(stream)
        return ack, batch

    def _soon(self, work: Any) -> None:
        """`work` on a later turn of the loop, what it stored flushed after it."""
        self.server.loop.call_soon(self._turn, work)

    def _capture(self, account: Account, stream: Stream, subject: bytes, reply: bytes | None,
                 headers: bytes | None, payload: bytes) -> None:
        try:
            ack, batch = self._store(account, stream, subject.decode(errors="replace"), headers,
                                     payload, len(subject) + len(headers or b"") + len(payload))
        except ApiError as exc:
            if reply:
                body = {"error": exc.as_json(), "stream": stream.name, "seq": 0}
                publish_internal(self.server, account, reply, dumps(body))
            return
        answer = reply if reply and not stream.config.get("no_ack") else None
        if batch is not None:
            batch.append((account, answer, ack))
            return
        if answer:
            publish_internal(self.server, account, answer, dumps(ack))
        for consumer in list(stream.consumers.values()):
            consumer.pump()

    def _arm_expiry(self, stream: Stream) -> None:
        """A timer at the stream's next expiry (a TTL, max_age), earlier ones kept."""
        due = stream.next_expiry()
        if not due:
            return
        loop = self.server.loop
        timer = self._expiries.get(stream)
        if timer is None:
            timer = self._expiries[stream] = EarliestTimer(
                loop, lambda: self._turn(lambda: self._expired(stream)))
        timer.at(loop.time() + max(0.0, (due - time.time_ns()) / 1e9))

    def _expired(self, stream: Stream) -> None:
        if stream.expire():
            for consumer in list(stream.consumers.values()):
                consumer.pump()
        due = stream.next_expiry()
        if due and due > time.time_ns():  # (one already due waits for the tick)
            self._arm_expiry(stream)

    def _commit(self) -> None:
        """The file streams' group commit (before each flush of the server): what this turn
        stored is written (fsynced with sync_interval: always), then acknowledged (refused
        if the write failed) and offered to the consumers."""
        if self._to_pump:
            consumers, self._to_pump = self._to_pump, {}
            for consumer in consumers:
                consumer.pump()
        if not self._open:
            return
        batches, self._open = self._open, {}
        server = self.server
        for stream, batch in batches.items():
            lost, why = stream.commit()
            prefix = b'{"stream":' + dumps(stream.name) + b',"seq":'
            for account, reply, ack in batch:
                if reply is None:
                    continue
                if lost and ack["seq"] in lost and not ack.get("duplicate"):
                    failed = errors.STREAM_STORE_FAILED(err=why)
                    ack = {"error": failed.as_json(), "stream": stream.name, "seq": 0}
                body = prefix + b"%d}" % ack["seq"] if len(ack) == 2 else dumps(ack)
                publish_internal(server, account, reply, body, flush=False)
            for consumer in list(stream.consumers.values()):
                consumer.pump()

    # -- answers ------------------------------------------------------------------------------
    def limits(self, account: Account) -> JetStreamLimits:
        """The account's JetStream limits (its `jetstream { }` map; none without one)."""
        config = account.config
        return config.jetstream_limits if config is not None else limits.NO_LIMITS

    def _account_info(self, account: Account, streams: dict[str, Stream]) -> dict[str, Any]:
        total, errs = self.api_counts.get(account, (0, 0))
        own = self.limits(account)
        usage: dict[str, Any] = {
            "memory": limits.usage(streams.values(), "memory"),
            "storage": limits.usage(streams.values(), "file"),
            "reserved_memory": limits.reserved(streams.values(), "memory"),
            "reserved_storage": limits.reserved(streams.values(), "file"),
            "streams": len(streams),
            "consumers": sum(len(s.consumers) for s in streams.values())}
        info: dict[str, Any] = {**usage, "limits": own.as_json() if not own.tier else
                                limits.ZERO_LIMITS}
        if self.config.domain:
            info["domain"] = self.config.domain
        info["api"] = {"level": API_LEVEL, "total": total, "errors": errs}
        if own.tier:  # an operator's tiered limits: the tier's own usage and limits
            info["tiers"] = {own.tier: {**usage, "limits": own.as_json()}}
        return info

    def _reply(self, account: Account, reply: bytes, kind: str, error: ApiError | None = None,
               **fields: Any) -> None:
        body: dict[str, Any] = {"type": kind}
        counts = self.api_counts.setdefault(account, [0, 0])
        self.total += 1
        counts[0] += 1
        if error is not None:
            self.errors += 1
            counts[1] += 1
            body["error"] = error.as_json()
            if kind.endswith("stream_info_response"):
                body.update(total=0, offset=0, limit=0)
        body.update(fields)
        response = dumps(body)
        publish_internal(self.server, account, reply, response)
        if self._auditing is not None:
            self._audit(account, response)

    def monitor(self, endpoint: str, options: dict[str, Any]) -> dict[str, Any]:
        """What a monitoring endpoint says of JetStream (/jsz, an account's JSZ, /varz's
        stats, /healthz's store check): monitor.py."""
        from . import monitor

        return monitor.answer(self, endpoint, options)


def _prepare_store_dir(path: str) -> None:
    """The store directory made if missing, else checked to be a writable directory (the
    reference's words for each refusal)."""
    import stat
    import tempfile

    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        try:
            os.makedirs(path, mode=0o750, exist_ok=True)
        except OSError as exc:
            raise OSError(f"could not create storage directory - {exc}") from None
        return
    except OSError:
        mode = None
    if mode is None or not stat.S_ISDIR(mode):
        raise OSError("storage directory is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix="_test_", dir=path)
    except OSError:
        raise OSError("storage directory is not writable") from None
    os.close(fd)
    os.unlink(name)


def _operation(tokens: list[str]) -> tuple[str, str]:
    """(operation, stream name) of a request's subject tokens after `$JS.API.`:
    ("STREAM.INFO", "S") for STREAM.INFO.S, ("STREAM.MSG.GET", "S") for STREAM.MSG.GET.S."""
    if tokens[:2] == ["STREAM", "MSG"] and len(tokens) >= 3:
        return ".".join(tokens[:3]), tokens[3] if len(tokens) == 4 else ""
    if tokens and tokens[0] == "STREAM":
        return ".".join(tokens[:2]), tokens[2] if len(tokens) == 3 else ""
    if tokens and tokens[0] == "CONSUMER":
        return ".".join(tokens[:2]), tokens[2] if len(tokens) > 2 else ""
    return ".".join(tokens), ""


def _type_of(tokens: list[str]) -> str:
    """The response type of a request, as the reference names it."""
    names = {
        "INFO": "account_info_response", "STREAM.CREATE": "stream_create_response",
        "STREAM.UPDATE": "stream_update_response", "STREAM.INFO": "stream_info_response",
        "STREAM.DELETE": "stream_delete_response", "STREAM.PURGE": "stream_purge_response",
        "STREAM.NAMES": "stream_names_response", "STREAM.LIST": "stream_list_response",
        "STREAM.MSG": "stream_msg_get_response",
        "CONSUMER.CREATE": "consumer_create_response",
        "CONSUMER.DURABLE": "consumer_create_response",
        "CONSUMER.INFO": "consumer_info_response", "CONSUMER.DELETE": "consumer_delete_response",
        "CONSUMER.NAMES": "consumer_names_response", "CONSUMER.LIST": "consumer_list_response",
        "CONSUMER.PAUSE": "consumer_pause_response",
        "CONSUMER.UNPIN": "consumer_unpin_response",
    }
    key = (".".join(tokens[:2]) if tokens and tokens[0] in ("STREAM", "CONSUMER")
           else (tokens[0] if tokens else ""))
    if tokens[:3] == ["STREAM", "MSG", "DELETE"]:
        return "io.nats.jetstream.api.v1.stream_msg_delete_response"
    return "io.nats.jetstream.api.v1." + names.get(key, "api_response")


def _page(body: Any, names: list[str], limit: int) -> tuple[int, list[str]]:
    """The page a list request's `offset` asks for."""
    offset = body.get("offset") if isinstance(body, dict) else 0
    offset = offset if isinstance(offset, int) and offset > 0 else 0
    return offset, names[offset:offset + limit]


def _consumer_name(op: str, tokens: list[str], raw: dict[str, Any]) -> str:
    """The name a consumer create names, from its subject's form and its configuration,
    checked as the reference checks them (`raw` gets the name and a subject's filter);
    empty for an ephemeral consumer."""
    durable = raw.get("durable_name") or ""
    filtered = ""
    if op == "CONSUMER.DURABLE":  # CONSUMER.DURABLE.CREATE.<stream>.<durable>
        if len(tokens) != 5:
            raise errors.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT()
        name = tokens[4]
    elif len(tokens) >= 4:  # CONSUMER.CREATE.<stream>.<name>[.<filter>]
        name = tokens[3]
        filtered = ".".join(tokens[4:])
    else:  # CONSUMER.CREATE.<stream>: the legacy ephemeral form
        name = raw.get("name") or ""
    if name and ("/" in name or "\\" in name):
        raise errors.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS()
    if op == "CONSUMER.DURABLE":
        if not durable:
            raise errors.CONSUMER_DURABLE_NAME_NOT_SET()
        if durable != name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        raw["name"] = name
    elif len(tokens) >= 4:
        if durable and durable != name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        raw["name"] = name
    elif durable:
        raise errors.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME()
    if filtered and raw.get("filter_subjects"):
        raise errors.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED()
    if filtered and raw.get("filter_subject") != filtered:
        raise errors.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH()
    return name


def _consumer_key(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "metadata"}


def _overlap(a: list[str], b: list[str]) -> bool:
    from ..protocol.subjects import subjects_collide

    return any(subjects_collide(x, y) for x in a for y in b)
