"""Mirrors and sources of an origin reached through an API prefix (`external: {api,
deliver}`), as the reference copies them: through a consumer on the origin.

The link asks, in its stream's own account (so that the account's imports apply: another
account's `$JS.API.>` imported under `api`, its deliver subjects under `deliver`), for a push
consumer on the origin: `<api>.CONSUMER.CREATE.<origin>[.<name>.<filter>]`, delivering to
`<deliver>.M.<token>` (a mirror) or `<deliver>.S.<token>` (a source) with flow control and
idle heartbeats. What the consumer delivers is copied as sourcing.py's local links copy: a
mirror keeps the origin's sequences (from each delivery's ack reply) and times, a source
adds its `Nats-Stream-Source` header. Flow control requests are answered, a heartbeat that
tells of deliveries it missed or a silence of HEALTH_CHECK seconds makes it ask for a new
consumer (the old one ends by its inactive threshold), no faster than RETRY_THRESHOLD apart
and backing off after failures, as the reference does.

A request the link publishes is the server's own: the domain's `$JS.<domain>.API` is a
mapping of what clients publish (api.py answers it for them), so the link's requests in
its own account are not answered there, as the reference does not answer them.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.headers import header_fields
from ..server.accounts import publish_internal, subscribe_internal, unsubscribe_internal
from ..server.gojson import go_time, parse_go_time
from . import errors
from .sourcing import (
    Link,
    StoreCopy,
    external_of,
    literal_subject,
    short_hash,
    without_headers,
)

if TYPE_CHECKING:
    from ..server.accounts import Account
    from ..server.server import Server
    from ..server.sublist import Subscription
    from .stream import Stream

log = logging.getLogger("tidings.jetstream")

NS = 1_000_000_000
HEARTBEAT = 1 * NS  # the consumer's idle heartbeat
HEALTH_CHECK = 10.0  # seconds of silence after which the consumer is taken for lost
CREATE_WAIT = 30.0  # seconds a consumer create may go unanswered
RETRY_THRESHOLD = 2.0  # seconds between two consumer creates, at least
RETRY_BACKOFF = 5.0  # seconds more per failure (times 2), up to RETRY_MAXIMUM
RETRY_MAXIMUM = 120.0
ACK_WAIT = 22 * 3600 * NS
CONTROL = b"NATS/1.0 100 "
DOWNGRADES = (10185, 10025)  # API level required, invalid JSON: ask again more plainly
MAX_INT64 = 2**63 - 1

Handler = Callable[[str, "bytes | None", "bytes | None", bytes], None]


class Wire:
    """The server as a link uses it: subscriptions and publishes in an account (its imports
    apply, as to what its clients publish), and timers. `publishing`: the account a link
    publishes in at the moment (api.py's domain subscription leaves those requests alone)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.publishing: Account | None = None

    def subscribe(self, account: Account, subject: str, handler: Handler) -> Subscription:
        """`handler(subject, reply, headers, payload)` for each message on `subject`, with the
        subject the message carries (a push consumer's delivery: the origin's subject)."""
        def carry(subj: bytes, reply: bytes | None, headers: bytes | None,
                  payload: bytes) -> None:
            handler(subj.decode(errors="replace"), reply, headers, payload)

        return subscribe_internal(self.server.accounts, account, subject.encode(), carry,
                                  carried=True)

    def unsubscribe(self, account: Account, sub: Subscription) -> None:
        unsubscribe_internal(self.server.accounts, account, sub)

    def publish(self, account: Account, subject: str, payload: bytes,
                headers: bytes | None = None, reply: str | None = None) -> None:
        before, self.publishing = self.publishing, account
        try:
            publish_internal(self.server, account, subject.encode(), payload, headers,
                             reply.encode() if reply else None)
        finally:
            self.publishing = before

    def later(self, delay: float, work: Callable[[], None]) -> Any:
        return self.server.loop.call_later(max(0.0, delay), work)

    def links(self, store_copy: StoreCopy) -> Callable[..., Link]:
        """The Copier's maker of external links (sourcing.Copier's `external`)."""
        def make(account: Account, target: Stream, spec: dict[str, Any],
                 mirror: bool) -> Link:
            link = ExternalLink(self, store_copy, account, target, spec, mirror)
            link.begin()
            return link

        return make


def ack_info(reply: bytes | None) -> tuple[str, int, int, int, int, int] | None:
    """(consumer, deliveries, stream seq, consumer seq, time, pending) of a delivery's ack
    reply (`$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ts>.<pending>`, or the form with
    a domain and an account hash before the stream); None for anything else."""
    if not reply:
        return None
    tokens = reply.decode(errors="replace").split(".")
    if tokens[:2] != ["$JS", "ACK"]:
        return None
    if len(tokens) == 9:
        at = 3
    elif len(tokens) >= 11:
        at = 5
    else:
        return None
    numbers = tokens[at + 1:at + 6]
    if not all(_number(n) for n in numbers):
        return None
    dc, sseq, dseq, ts, pending = (int(n) for n in numbers)
    return tokens[at], dc, sseq, dseq, ts, pending


def _number(token: str) -> bool:
    """Whether `token` is a number as the reference reads one (decimal digits, in int64)."""
    return token.isascii() and token.isdigit() and int(token) <= MAX_INT64


def _decoded(payload: bytes) -> dict[str, Any] | None:
    """A consumer create's answer, if it has the shape of one (its parts of the types the
    reference decodes them into)."""
    try:
        answer = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(answer, dict):
        return None
    kinds = {"error": dict, "config": dict, "delivered": dict, "name": str}
    if any(answer.get(key) is not None and not isinstance(answer[key], kind)
           for key, kind in kinds.items()):
        return None
    seq = _field(answer, "delivered", "stream_seq")
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
        return None
    return answer


def _field(answer: dict[str, Any], part: str, name: str) -> Any:
    """`answer[part][name]` if there is one (an answer's parts may be anything)."""
    inner = answer.get(part)
    return inner.get(name) if isinstance(inner, dict) else None


def _backoff(fails: int) -> float:
    return min(RETRY_BACKOFF * fails * 2, RETRY_MAXIMUM)


def _jitter() -> float:
    return 0.1 + random.random() * 0.1


class ExternalLink(Link):
    """A mirror or source of an origin reached through `external`'s API prefix: a consumer
    on it, asked for again when lost; what it delivers copied into `target`."""

    def __init__(self, wire: Wire, store_copy: StoreCopy, account: Account, target: Stream,
                 spec: dict[str, Any], mirror: bool) -> None:
        super().__init__(target, spec, mirror)
        self.account = account
        self.wire = wire
        self.store_copy = store_copy
        ext = external_of(spec) or {"api": "", "deliver": ""}
        self.api, self.deliver = ext["api"], ext["deliver"]
        self.sseq = 0  # the origin's sequence it last took
        self.dseq = 0  # the consumer's sequence it last took
        self.pending = 0  # what the consumer had left after its last delivery
        self.cname = ""  # the consumer whose deliveries it takes
        self.ident = ""  # the origin's identity, if its API told it
        self.last = 0  # monotonic ns of its last delivery or heartbeat (0: none yet)
        self.fails = 0
        self.requested = 0.0  # monotonic time of its last consumer create
        self.asking = False  # a consumer create is out
        self.stopped = False
        self.deliveries: Subscription | None = None
        self.answers: Subscription | None = None
        self.timer: Any = None  # the next retry, the create's deadline or the health check

    # -- its life ----------------------------------------------------------------------------
    def begin(self) -> None:
        """Where it starts (after what the target holds of it), and its first consumer: a
        mirror's at once, a source's after a moment (as the reference schedules them)."""
        self.sseq = self.target.store.last_seq if self.mirror else self._held()
        self._schedule(0.0 if self.mirror else _jitter(), self._request)

    def stop(self) -> None:
        self.stopped = True
        self._cancel()
        self._schedule(-1, None)

    def _schedule(self, delay: float, work: Callable[[], None] | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if work is not None and not self.stopped:
            self.timer = self.wire.later(delay, work)

    def _cancel(self) -> None:
        """No more deliveries or answers taken (the consumer left ends by its inactive
        threshold, as nobody listens to it any more)."""
        for sub in (self.deliveries, self.answers):
            if sub is not None:
                self.wire.unsubscribe(self.account, sub)
        self.deliveries = self.answers = None
        self.cname, self.dseq, self.asking = "", 0, False

    def _retry(self) -> None:
        """A new consumer, no sooner than RETRY_THRESHOLD after the last was asked for,
        later after failures."""
        self._cancel()
        if self.mirror:
            self.sseq = max(self.sseq, self.target.store.last_seq)
        wait = max(0.0, RETRY_THRESHOLD - (time.monotonic() - self.requested))
        self._schedule(wait + _backoff(self.fails) + _jitter(), self._request)

    def _health(self) -> None:
        """Silent for HEALTH_CHECK seconds (no delivery, no heartbeat): lost."""
        if time.monotonic_ns() - self.last > HEALTH_CHECK * NS:
            self._retry()
        else:
            self._schedule(HEALTH_CHECK, self._health)

    # -- asking for a consumer -------------------------------------------------------------------
    def _request(self, level: int | None = None, sourcing: bool = True) -> None:
        """Ask for a consumer on the origin (`level`: the API level asked for, the
        reference's 4 for a mirror and 5 for a source first; without `sourcing` when the
        origin's server knows no sourcing consumers)."""
        self._cancel()
        if self.stopped:
            return
        if level is None and sourcing:
            level = 4 if self.mirror else 5
        self.requested = time.monotonic()
        self.asking = True
        body = {"stream_name": self.origin_name, "config": self._config(sourcing)}
        config = body["config"]
        subject = f"{self.api}.CONSUMER.CREATE.{self.origin_name}"
        if config.get("filter_subject"):
            subject += f".{config['name']}.{config['filter_subject']}"
        subject = subject.replace("..", ".")
        reply = f"$JSC.R.{secrets.token_hex(6)}"
        headers = None
        if level is not None:
            lines = f"Nats-Required-Api-Level: {level}\r\n"
            if level >= 5:
                lines += f"Nats-Stream-Identity: {self.ident}\r\n"
            headers = f"NATS/1.0\r\n{lines}\r\n".encode()
        self.answers = self.wire.subscribe(
            self.account, reply, lambda _s, _r, h, p: self._answered(h, p, level, sourcing))
        self._schedule(CREATE_WAIT, self._unanswered)
        self.wire.publish(self.account, subject, json.dumps(body).encode(), headers, reply)

    def _config(self, sourcing: bool) -> dict[str, Any]:
        """The consumer asked for: where it starts, its filters, push with heartbeats and
        flow control, no acks, gone after HEALTH_CHECK seconds nobody listens."""
        kind = "M" if self.mirror else "S"
        token = secrets.token_hex(4)
        deliver = f"{self.deliver}.{kind}.{token}" if self.deliver else f"$JS.{kind}.{token}"
        own = f"{self.account.name} {self.target.name}" + ("" if self.mirror else self.iname)
        role = "mirror" if self.mirror else "src"
        metadata = {f"_nats.{role}.stream": self.target.name,
                    f"_nats.{role}.acc": self.account.name}
        if self.target.domain:
            metadata[f"_nats.{role}.domain"] = self.target.domain
        config: dict[str, Any] = {
            "name": f"JS_{'MIRROR' if self.mirror else 'SRC'}_{short_hash(own)}_{token}",
            "deliver_subject": deliver.replace("..", "."), **self._start(),
            "ack_policy": "none", "ack_wait": ACK_WAIT, "max_deliver": 1,
            "idle_heartbeat": HEARTBEAT, "flow_control": True, "direct": True,
            "inactive_threshold": int(HEALTH_CHECK * NS), "metadata": metadata}
        if sourcing:
            config["sourcing"] = True
        filters = [f for f, _ in self.filters]
        if len(filters) == 1:
            config["filter_subject"] = filters[0]
        elif filters:
            config["filter_subjects"] = filters
        return config

    def _start(self) -> dict[str, Any]:
        """Where the consumer starts: after what the target holds of the origin; the first
        time, where the configuration says (a source of a stream holding others' messages:
        after the target's last time, as the reference)."""
        spec, store = self.spec, self.target.store
        if self.mirror and store.last_seq:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": store.last_seq + 1}
        if not self.mirror and self.sseq:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": self.sseq + 1}
        if spec.get("opt_start_seq"):
            return {"deliver_policy": "by_start_sequence",
                    "opt_start_seq": int(spec["opt_start_seq"])}
        last_ts = store.last_ts if store.count else 0
        if spec.get("opt_start_time"):
            start = str(spec["opt_start_time"])
            if not self.mirror and last_ts and parse_go_time(start) < last_ts:
                start = go_time(last_ts, utc=True)
            return {"deliver_policy": "by_start_time", "opt_start_time": start}
        if not self.mirror and store.first_seq > 1 and last_ts:
            return {"deliver_policy": "by_start_time", "opt_start_time": go_time(last_ts, utc=True)}
        return {"deliver_policy": "all"}

    def _unanswered(self) -> None:
        log.warning("JetStream: stream %s > %s: no answer to its consumer create on %s",
                    self.account.name, self.target.name, self.api or "(no API prefix)")
        self.fails += 1
        self._retry()

    def _answered(self, headers: bytes | None, payload: bytes, level: int | None,
                  sourcing: bool) -> None:
        """The answer to its consumer create: the consumer, a refusal, or an answer no
        JetStream gives (passed over, as the reference passes over what it cannot decode:
        a mirror shows it as its error, and the create times out)."""
        if not self.asking:
            return
        answer = _decoded(payload)
        if answer is None:
            if self.mirror:
                self.error = {"code": 400, "err_code": 10025,  # (the reference's, unfilled)
                              "description": errors.INVALID_JSON.description}
            return
        self.asking = False
        error = answer.get("error")
        deliver = _field(answer, "config", "deliver_subject")
        if error is None and not (isinstance(deliver, str) and literal_subject(deliver)):
            failed = errors.MIRROR_CONSUMER_SETUP_FAILED if self.mirror else \
                errors.SOURCE_CONSUMER_SETUP_FAILED
            error = failed(err="invalid consumer create response").as_json()
        if error is not None:
            return self._refused(error, level, sourcing)
        if self.answers is not None:
            self.wire.unsubscribe(self.account, self.answers)
            self.answers = None
        self._take(answer, str(deliver), headers)

    def _refused(self, error: Any, level: int | None, sourcing: bool) -> None:
        """A consumer create refused: asked again more plainly where the origin's server
        does not know what was asked for, else again later."""
        code = error.get("err_code") if isinstance(error, dict) else None
        if sourcing and code in DOWNGRADES:
            if not self.mirror and level is not None and level > 4:
                return self._request(level - 1, True)
            return self._request(None, False)
        log.warning("JetStream: stream %s > %s: consumer create on %s refused: %s",
                    self.account.name, self.target.name, self.origin_name, error)
        self.error = error if isinstance(error, dict) else None
        self.fails += 1
        self._retry()

    def _take(self, answer: dict[str, Any], deliver: str, headers: bytes | None) -> None:
        """The consumer is there: its deliveries (on `deliver`) taken from now on."""
        self.error = None
        self.fails = 0
        delivered = _field(answer, "delivered", "stream_seq")
        delivered = delivered if isinstance(delivered, int) and 0 < delivered <= MAX_INT64 else 0
        if self.mirror:
            self.sseq = max(delivered, self.target.store.last_seq)
        else:
            self.sseq = max(self.sseq, delivered)
            if headers:
                self.ident = header_fields(headers).get("nats-stream-identity", self.ident)
        name = answer.get("name")
        self.cname = name if isinstance(name, str) else ""
        self.dseq = 0
        self.last = self.active = time.monotonic_ns()
        self._schedule(HEALTH_CHECK, self._health)
        self.deliveries = self.wire.subscribe(self.account, deliver, self._delivered)

    # -- what it is delivered -----------------------------------------------------------------------
    def _delivered(self, subject: str, reply: bytes | None, headers: bytes | None,
                   payload: bytes) -> None:
        if self.deliveries is None:
            return
        self.last = self.active = time.monotonic_ns()
        if not payload and headers and headers.startswith(CONTROL):
            return self._control(reply, headers)
        info = ack_info(reply)
        if info is None or info[0] != self.cname:
            return  # (an earlier consumer's)
        _, count, sseq, dseq, ts, pending = info
        before = self.sseq, self.dseq
        if count > 1 or not self._in_step(sseq, dseq):
            return
        self.pending = max(0, pending - 1)
        self.next_seq = sseq + 1
        if self.mirror:
            self._mirror(subject, headers, payload, sseq, ts)
        elif not self._source(subject, headers, payload, sseq):
            # (refused, a discard new target full: the consumer again from that message)
            self.sseq, self.dseq = before
            self._retry()

    def _in_step(self, sseq: int, dseq: int) -> bool:
        """Whether a delivery is the next one to copy (the reference's accounting): one
        seen already is passed over; one after a gap is taken when the consumer sequence
        shows nothing was missed (the origin deleted what is between), else the consumer
        is asked for again from where the link stands."""
        if sseq <= self.sseq:
            if dseq == self.dseq + 1:
                self.dseq = dseq
            return False
        if dseq == self.dseq + 1 or (self.mirror and sseq == self.sseq + 1):
            self.sseq, self.dseq = sseq, dseq
            return True
        if self.mirror or dseq > self.dseq:
            self._retry()
        return False

    def _control(self, reply: bytes | None, headers: bytes) -> None:
        """A flow control request (answered with where the link stands) or an idle
        heartbeat (which may tell of deliveries missed, or of a flow control request whose
        answer was lost)."""
        if reply:
            where = (f"NATS/1.0\r\nNats-Last-Consumer: {self.dseq}\r\n"
                     f"Nats-Last-Stream: {self.sseq}\r\n\r\n").encode()
            return self.wire.publish(self.account, reply.decode(errors="replace"), b"", where)
        fields = header_fields(headers)
        last = fields.get("nats-last-consumer", "")
        if _number(last) and int(last) > 0 and int(last) != self.dseq:
            return self._retry()
        stalled = fields.get("nats-consumer-stalled")
        if stalled and literal_subject(stalled):
            self.wire.publish(self.account, stalled, b"")

    def _mirror(self, subject: str, headers: bytes | None, payload: bytes, sseq: int,
                ts: int) -> None:
        if sseq <= self.target.store.last_seq:
            return  # (the target is past it already)
        copied = self.subject_for(subject) or subject
        self._store(copied, without_headers(headers, False), payload, {"ts": ts, "at_seq": sseq})

    def _source(self, subject: str, headers: bytes | None, payload: bytes, sseq: int) -> bool:
        copied = self.subject_for(subject) or subject
        headers = self.source_headers(headers, sseq, subject, self.ident)
        return self._store(copied, headers, payload, {})

    def _store(self, subject: str, headers: bytes | None, payload: bytes,
               how: dict[str, Any]) -> bool:
        self.copied = int(how.get("at_seq") or self.sseq)
        try:
            self.store_copy(self.account, self.target, subject, headers, payload, how)
        except errors.ApiError as exc:
            log.warning("JetStream: stream %s: message %d of %s not copied: %s",
                        self.target.name, self.sseq, self.origin_name, exc.description)
            return False
        return True

    # -- what its info says --------------------------------------------------------------------
    def lag(self) -> int:
        """What the consumer said it had left after its last delivery."""
        return self.pending
