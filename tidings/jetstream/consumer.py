"""A JetStream consumer (its configuration: consumer_config.py): where it is in its stream, what waits for an acknowledgement, and deliveries: to pull requests
(`CONSUMER.MSG.NEXT`: batch, expires, no_wait, with the 404/408 status messages) or pushed
to a deliver subject. Acks (`+ACK`, `-NAK`, `+WPI`, `+NXT`, `+TERM`, ack all) arrive on the
reply subject of each delivery, `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
<consumer seq>.<time>.<pending>`; unacknowledged messages come again after `ack_wait`, at
most `max_deliver` times.

Sending is the caller's (`send(target, subject, reply, headers, data)`): the consumer only
decides what goes where.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..client.nuid import NUID
from ..protocol.subjects import matcher
from ..server.gojson import parse_go_time
from .consumer_config import DEFAULT_ACK_WAIT, DEFAULT_MAX_WAITING, NS
from .memstore import StoredMsg

Send = Callable[[str, str, "str | None", "bytes | None", bytes], None]
Advise = Callable[[str, "dict[str, Any]"], None]
ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER"
_nuid = NUID()


PUMP_BUDGET = 256 * 1024  # bytes one pump sends before it gives the loop back (and a flush)
FLOW_LIMIT = 32 * 1024 * 1024  # the reference's JsFlowControlMaxPending


class FlowControl:
    """A push consumer's flow control, as the reference's: bytes sent since the last
    answer; past half the window a request goes out (its reply subject), past the window
    deliveries stall until it is answered; each answer doubles the window up to 32 MB."""

    def __init__(self) -> None:
        self.window = FLOW_LIMIT // 16
        self.pending = 0
        self.waiting_for = ""  # the reply subject of the request out, if one is
        self.asked_at = 0  # pending bytes when it went out

    def stalled(self) -> bool:
        return self.pending > self.window

    def delivered(self, size: int) -> bool:
        """`size` bytes sent; whether a request should go out now."""
        self.pending += size
        return not self.waiting_for and self.pending > self.window // 2

    def request(self, prefix: str) -> str:
        self.waiting_for = prefix + secrets.token_hex(2)
        self.asked_at = self.pending
        return self.waiting_for

    def answered(self, subject: str) -> bool:
        if not self.waiting_for or subject != self.waiting_for:
            return False
        self.window = min(self.window * 2, FLOW_LIMIT)
        self.pending = max(0, self.pending - self.asked_at)
        self.waiting_for, self.asked_at = "", 0
        return True


class Pace:
    """Deliveries held back: replay `original` (as far apart as the messages were stored,
    until the consumer has caught up with the stream) and `rate_limit_bps` (a token
    bucket of bytes, as the reference's limiter)."""

    def __init__(self, replay: bool, bits_per_second: int) -> None:
        self.replay = replay
        self.rate = bits_per_second / 8  # bytes per second; 0: none
        self.tokens = self.rate
        self.filled_at = time.monotonic()
        self.last_ts = 0  # stored time of the last message replayed
        self.cleared = 0  # a sequence whose replay wait is over
        self.until = 0.0  # monotonic: nothing goes before

    @classmethod
    def of(cls, config: dict[str, Any]) -> Pace | None:
        replay = config.get("replay_policy") == "original"
        rate = int(config.get("rate_limit_bps") or 0)
        return cls(replay, rate) if replay or rate > 0 else None

    def holding(self, wake: Callable[[float], None]) -> bool:
        if self.until and time.monotonic() < self.until:
            wake(self.until)
            return True
        return False

    def caught_up(self) -> None:
        self.replay = False

    def wait(self, msg: StoredMsg, size: int, wake: Callable[[float], None]) -> bool:
        """Whether `msg` (of `size` bytes) must wait (the time is set and asked for)."""
        now = time.monotonic()
        delay = 0.0
        if self.replay and self.last_ts and msg.seq != self.cleared:
            delay = (msg.ts - self.last_ts) / 1e9
        if self.rate:
            self.tokens = min(max(self.rate, size),
                              self.tokens + (now - self.filled_at) * self.rate)
            self.filled_at = now
            if self.tokens < size:
                delay = max(delay, (size - self.tokens) / self.rate)
        if delay > 0.001:
            self.until, self.cleared = now + delay, msg.seq
            wake(self.until)
            return True
        if self.rate:
            self.tokens -= size
        self.last_ts = msg.ts
        return False


class Pending:
    """A delivered message waiting for its ack (slots: one is made per delivery)."""

    __slots__ = ("cseq", "ts", "deliveries")

    def __init__(self, cseq: int, ts: int, deliveries: int) -> None:
        self.cseq = cseq
        self.ts = ts  # when delivered (ns)
        self.deliveries = deliveries


@dataclass
class PriorityGroup:
    """A pull request's priority fields (the reference's PriorityGroup): its group, an
    overflow request's minimums, a pinned client's pin id, a prioritized request's
    priority (0 first, 9 last)."""

    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0


@dataclass
class NextRequest:
    """A CONSUMER.MSG.NEXT's body, read (`parse_next`)."""

    batch: int = 1
    expires: int = 0  # ns
    no_wait: bool = False
    max_bytes: int = 0
    heartbeat: int = 0  # ns
    priority: PriorityGroup | None = None  # (a JSON body has one, a number does not)


@dataclass
class PullRequest:
    """A waiting CONSUMER.MSG.NEXT (the reference's waitingRequest)."""

    reply: str
    batch: int  # messages it still takes
    expires: float  # monotonic deadline; 0: none
    no_wait: bool
    max_bytes: int  # bytes it still takes; 0: no limit
    heartbeat: float = 0.0  # seconds between idle heartbeats while it waits; 0: none
    next_heartbeat: float = 0.0  # monotonic
    delivered: int = 0
    priority_group: PriorityGroup | None = None

    @property
    def rank(self) -> int:
        """Its place among prioritized requests (those without a priority group last)."""
        return self.priority_group.priority if self.priority_group else _LAST

    @property
    def pin(self) -> str:
        return self.priority_group.id if self.priority_group else ""


_LAST = 2**31 - 1
# A pull request's JSON fields and their Go types (JSApiConsumerGetNextRequest's).
_NEXT_FIELDS = {"expires": "time.Duration", "batch": "int", "max_bytes": "int",
                "no_wait": "bool", "idle_heartbeat": "time.Duration", "group": "string",
                "min_pending": "int64", "min_ack_pending": "int64", "id": "string",
                "priority": "int"}


class BadRequest(ValueError):
    """A pull request the reference answers with `400 Bad Request - <reason>`."""


def _go_fits(value: Any, go_type: str) -> bool:
    if go_type == "string":
        return isinstance(value, str)
    if go_type == "bool":
        return isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _unmarshal_error(field: str, value: Any) -> str:
    """Go's words for a JSON value that does not fit a pull request's field."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and _NEXT_FIELDS[field] not in ("string", "bool"):
        kind = f"number {json.dumps(value)}"  # (Go names the number a number field refused)
    else:
        kind = {bool: "bool", str: "string", list: "array", dict: "object"}.get(
            type(value), "number")
    return (f"json: cannot unmarshal {kind} into Go struct field .{field} of type "
            f"{_NEXT_FIELDS[field]}")


def parse_next(payload: bytes) -> NextRequest:
    """A CONSUMER.MSG.NEXT's body: empty is one message, a number that many, or a JSON
    request (as nextReqFromMsg; BadRequest with Go's words when it does not read)."""
    body = payload.strip()
    if not body:
        return NextRequest()
    if body[:1] != b"{":
        return NextRequest(int(body)) if body.lstrip(b"+-").isdigit() else NextRequest()
    try:
        req = json.loads(body)
    except ValueError as exc:
        raise BadRequest(exc.msg.lower()) from None
    if not isinstance(req, dict):
        raise BadRequest("json: cannot unmarshal into Go value of type JSApiConsumerGetNextRequest")
    for field, value in req.items():
        if field in _NEXT_FIELDS and value is not None and \
                not _go_fits(value, _NEXT_FIELDS[field]):
            raise BadRequest(_unmarshal_error(field, value))
    expires, heartbeat = req.get("expires") or 0, req.get("idle_heartbeat") or 0
    if heartbeat > 0 and heartbeat * 2 > expires:
        raise BadRequest("heartbeat value too large")
    group = PriorityGroup(req.get("group") or "", req.get("min_pending") or 0,
                          req.get("min_ack_pending") or 0, req.get("id") or "",
                          req.get("priority") or 0)
    return NextRequest(req.get("batch") or 0, expires, bool(req.get("no_wait")),
                       req.get("max_bytes") or 0, heartbeat, group)


class Consumer:
    """One consumer of a stream; `pump()` delivers what it can."""

    def __init__(self, stream: Any, name: str, config: dict[str, Any], send: Send,
                 interest: Callable[[str], bool] = lambda subject: True,
                 wake: Callable[[float], None] = lambda when: None,
                 advise: Advise = lambda subject, event: None) -> None:
        self.stream = stream
        self.name = name
        self._ack_prefix = f"$JS.ACK.{stream.name}.{name}."  # each delivery's reply starts so
        self.config = config
        self._derive(config)
        self.send = send
        self.interest = interest  # whether anyone listens to a subject (a target, a reply)
        self.wake = wake  # the caller calls on_timer() at this monotonic time (or soon after)
        self.flow = FlowControl() if config.get("flow_control") and \
            config.get("deliver_subject") else None
        self.pace = Pace.of(config)
        self.soon: Callable[[Consumer], None] | None = None  # pump_soon's (the caller's)
        self._listening: PullRequest | None = None
        self.advise = advise  # an advisory to publish (the caller adds account and domain)
        self.pin_id = ""  # pinned_client: the pin of the client that gets the messages
        self.pinned_ts = 0  # when it was pinned (ns)
        self.pin_deadline = 0.0  # monotonic: unpinned then unless it pulls again
        self._from_initial = False
        self.created = time.time_ns()
        self.durable = bool(config.get("durable_name"))
        self._filter_by(config)
        self.cseq = 0  # consumer sequence of the last delivery
        self.dseq = 0  # stream sequence of the last delivery
        self.initial: deque[int] = deque()  # last_per_subject: those first, in order
        self.next_seq = self._start_seq()
        self._npc: int | None = None  # messages from next_seq on it takes (None: count again)
        self.pending: OrderedDict[int, Pending] = OrderedDict()  # stream seq -> Pending
        self.redeliver: deque[int] = deque()
        # Nothing delivered yet: "delivered" and the ack floor stand just before where it
        # starts, as the reference's do.
        begin = min(self.initial[0], self.next_seq) if self.initial else self.next_seq
        self.dseq = max(begin, stream.store.first_seq) - 1
        self.ack_floor = (0, self.dseq)  # (consumer seq, stream seq)
        self.redelivered = 0
        self.waiting: deque[PullRequest] = deque()
        self.last_active = 0
        self.last_sent = time.monotonic()  # a delivery or heartbeat (idle_heartbeat)
        self.saved: dict[str, Any] | None = None  # its last snapshot on disk

    # -- where it starts --------------------------------------------------------------------
    def _start_seq(self) -> int:
        store, cfg = self.stream.store, self.config
        policy = cfg["deliver_policy"]
        if policy == "new":
            return store.last_seq + 1
        if policy == "last":  # the last message it would deliver (of its filters)
            if not self.filters:
                return max(store.last_seq, store.first_seq)
            return max(self._last_per_subject(), default=store.last_seq + 1)
        if policy == "by_start_sequence":
            return max(int(cfg.get("opt_start_seq") or 1), store.first_seq)
        if policy == "last_per_subject":
            self.initial = deque(sorted(self._last_per_subject()))
            return store.last_seq + 1
        if policy == "by_start_time":
            return store.first_at(parse_go_time(str(cfg.get("opt_start_time") or "")))
        return store.first_seq

    def _last_per_subject(self) -> list[int]:
        """The sequence of the last message of each subject it takes."""
        store = self.stream.store
        lasts = (store.last_seq_for(subject) for subject in list(store.subjects)
                 if self.matches(subject))
        return [seq for seq in lasts if seq]

    # -- deliveries ------------------------------------------------------------------------
    def _filter_by(self, config: dict[str, Any]) -> None:
        """Its filters (filter_subject, or filter_subjects) and their matcher."""
        self.filters = ([config["filter_subject"]] if config.get("filter_subject")
                        else list(config.get("filter_subjects") or []))
        self._matches = matcher(self.filters)

    def matches(self, subject: str) -> bool:
        return not self.filters or self._matches(subject)

    def _next_message(self) -> StoredMsg | None:
        store = self.stream.store
        while self.redeliver:
            seq = self.redeliver.popleft()
            msg = store.get(seq)
            if msg is not None and seq in self.pending:
                return msg
        while self.initial:
            msg = store.get(self.initial.popleft())
            if msg is not None:
                self._from_initial = True
                return msg
        if self.filters:
            seqs: Any = store.matching(self.next_seq, self.matches)
        else:  # (every message: no subject to look at first)
            seqs = range(max(self.next_seq, store.first_seq), store.last_seq + 1)
        for seq in seqs:
            msg = store.get(seq)
            if msg is not None:
                self.next_seq = seq + 1
                if self._npc is not None:
                    self._npc -= 1
                return msg
        self.next_seq = max(self.next_seq, store.last_seq + 1)
        return None

    def _may_deliver(self) -> bool:
        limit = self._max_ack_pending
        return bool(self.redeliver) or not limit or len(self.pending) < limit

    def _unget(self, msg: StoredMsg) -> None:
        """Put back what _next_message gave (no pull request could take it)."""
        if msg.seq in self.pending:
            self.redeliver.appendleft(msg.seq)
        elif self._from_initial:
            self.initial.appendleft(msg.seq)
        else:
            self.next_seq = msg.seq
            if self._npc is not None:
                self._npc += 1

    def pump_soon(self) -> None:
        """Pump once the caller's turn ends (acks come in bunches: one pump for them)."""
        if self.soon is None:
            self.pump()
        else:
            self.soon(self)

    def pump(self) -> None:
        """Deliver what is there to whoever waits for it (pull) or to the deliver subject."""
        target = self.config.get("deliver_subject")
        self._expire_requests()
        if self.paused_for() > 0:
            return  # paused: nothing goes until pause_until (the next tick after)
        if target and not self.interest(target):
            return  # a push consumer delivers once someone listens
        end_of_stream = False
        self._listening = None  # the pull request whose requester was seen listening
        budget = PUMP_BUDGET  # bytes one call sends at most: the rest on the next turn
        flow = self.flow
        pace = self.pace
        now = time.time_ns()  # (one time for the deliveries of one call)
        sent = False
        while self._may_deliver() and (target or self.waiting):
            if budget <= 0:
                self.wake(0.0)  # (the next turn of the loop: no timer tick to wait for)
                break
            if flow is not None and flow.stalled():
                break  # until the subscriber answers the flow control request
            if pace is not None and pace.holding(self.wake):
                break
            self._from_initial = False
            msg = self._next_message()
            if msg is None:
                end_of_stream = True
                if pace is not None:
                    pace.caught_up()
                break
            ack, headers, data = self._delivery(msg)
            size = len(msg.subject) + len(ack) + len(headers or b"") + len(data)
            if pace is not None and pace.wait(msg, size, self.wake):
                self._unget(msg)
                break
            budget -= size
            if target:
                self._deliver(msg, target, ack, headers, data, now)
                sent = True
                if flow is not None and flow.delivered(size):
                    self._status(target, b"100 FlowControl Request", reply_to=flow.request(
                        f"$JS.FC.{self.stream.name}.{self.name}."))
                continue
            request = self._next_waiting(size)
            if request is None:
                self._unget(msg)
                break
            if self.config.get("priority_policy") == "pinned_client":
                headers = _with_header(headers, "Nats-Pin-Id", self.pin_id)
            self._deliver(msg, request.reply, ack, headers, data, now)
            sent = True
            self._pop(request)
        if sent:
            self.last_active = now
            self.last_sent = time.monotonic()
        if end_of_stream:
            self._end_no_waits()

    def _end_no_waits(self) -> None:
        """No_wait requests end where the stream does, or when a timer of the waiting
        requests fires (as the reference's, even when max_ack_pending held deliveries):
        404; one with expires that got nothing yet waits on for its first message."""
        for request in [r for r in self.waiting if r.no_wait and (not r.expires or r.delivered)]:
            self.waiting.remove(request)
            self._status(request.reply, b"404 No Messages")

    def _next_waiting(self, size: int) -> PullRequest | None:
        """The pull request that takes a message of `size` bytes, at the head of the queue:
        the first not expired (408), that its priority policy lets take it (a pinned
        client's: the pinned one, one with a stale pin told so with a 423; overflow: one
        whose minimums are reached), with room for it (one without is ended: 409) and whose
        requester still listens. The others it passed over go to the back."""
        now = time.monotonic()
        policy = self.config.get("priority_policy")
        need_pin = policy == "pinned_client" and not self.pin_id
        cycled = 0
        while self.waiting:
            request = self.waiting[0]
            if request.expires and request.expires <= now:
                self.waiting.popleft()
                self._status(request.reply, b"408 Request Timeout", _left(request))
                continue
            assigned = False
            if need_pin or self.pin_id:
                if need_pin and not request.pin:
                    self._assign_pin(request)
                    assigned = True
                elif request.pin and request.pin != self.pin_id:
                    self.waiting.popleft()
                    self._status(request.reply, b"423 Nats-Wrong-Pin-Id", _left(request))
                    continue
                elif not need_pin and not request.pin:  # (another client holds the pin)
                    cycled += 1
                    if self._passed_over(cycled):
                        return None
                    continue
            if policy == "overflow" and not self._overflows(request):
                cycled += 1
                if self._passed_over(cycled):
                    return None
                continue
            if request.max_bytes:
                if size > request.max_bytes:
                    self.waiting.popleft()
                    self._status(request.reply, b"409 Message Size Exceeds MaxBytes",
                                 _left(request))
                    if assigned:
                        self._unpin()
                    continue
                request.max_bytes -= size
                if request.max_bytes == 0:
                    request.batch = 1
            if request is not self._listening:  # (once per request in a pump)
                if not self.interest(request.reply):
                    self.waiting.popleft()  # (nobody to take it: dropped without a word)
                    continue
                self._listening = request
            return request
        return None

    def _passed_over(self, cycled: int) -> bool:
        """The head request may not take this message: to the back of the queue; True
        once every request was passed over."""
        self.waiting.rotate(-1)
        return cycled >= len(self.waiting)

    def _overflows(self, request: PullRequest) -> bool:
        """Whether an overflow consumer serves `request`: one without minimums always, one
        with them when the messages pending (this one counted) or the acks pending reach
        one of them."""
        group = request.priority_group
        if group is None or (group.min_pending <= 0 and group.min_ack_pending <= 0):
            return True
        return (0 < group.min_pending <= self.num_pending() + 1) or \
            (0 < group.min_ack_pending <= len(self.pending))

    def _pop(self, request: PullRequest) -> None:
        """`request` (the head) took a message: it leaves the queue when done, else goes
        behind the others (prioritized: behind the others of its priority)."""
        request.batch -= 1
        request.delivered += 1
        if request.batch <= 0:
            self.waiting.popleft()
            if request.max_bytes > 0:
                self._status(request.reply, b"409 Batch Completed", _left(request))
            return
        if request.heartbeat:
            request.next_heartbeat = time.monotonic() + request.heartbeat
        if len(self.waiting) > 1:
            self.waiting.popleft()
            self._enqueue(request)

    def _enqueue(self, request: PullRequest) -> None:
        """At the back of the queue; prioritized: behind those of its priority or before."""
        if self.config.get("priority_policy") != "prioritized":
            self.waiting.append(request)
            return
        at = next((i for i, other in enumerate(self.waiting) if other.rank > request.rank),
                  len(self.waiting))
        self.waiting.insert(at, request)

    # -- pinned client ---------------------------------------------------------------------
    def _assign_pin(self, request: PullRequest) -> None:
        """A new pin, the requester's (a request naming a group only)."""
        group = request.priority_group
        if group is None or not group.group:
            return
        self.pin_id = _nuid.next().decode()
        self.pinned_ts = time.time_ns()
        group.id = self.pin_id
        self._renew_pin()
        self._advise("PINNED", "consumer_group_pinned",
                     {"group": group.group, "pinned_id": self.pin_id})

    def _renew_pin(self) -> None:
        """The pin holds for priority_timeout from now (each pull of its client renews it)."""
        ttl = self.config.get("priority_timeout") or 0
        self.pin_deadline = time.monotonic() + ttl / NS
        self.wake(self.pin_deadline)

    def _unpin(self) -> None:
        self.pin_id, self.pinned_ts, self.pin_deadline = "", 0, 0.0

    def unpin(self, group: str, reason: str = "admin") -> None:
        """Release the pin (CONSUMER.UNPIN, or its timeout): the next puller gets a new one."""
        self._unpin()
        self._advise("UNPINNED", "consumer_group_unpinned", {"group": group, "reason": reason})
        self.pump()

    def _expire_pin(self) -> None:
        if self.pin_id and self.pin_deadline <= time.monotonic():
            self.unpin((self.config.get("priority_groups") or [""])[0], "timeout")

    def _advise(self, kind: str, event_type: str, fields: dict[str, Any]) -> None:
        from ..server.gojson import go_time

        self.advise(f"{ADVISORY}.{kind}.{self.stream.name}.{self.name}", {
            "type": f"io.nats.jetstream.advisory.v1.{event_type}",
            "id": new_id(), "timestamp": go_time(time.time_ns(), utc=True),
            "stream": self.stream.name, "consumer": self.name, **fields})

    def _delivery_advisory(self, kind: str, event_type: str, seq: int, entry: Pending,
                           **more: Any) -> None:
        self._advise(kind, event_type, {"consumer_seq": entry.cseq, "stream_seq": seq,
                                        "deliveries": entry.deliveries, **more})

    def paused_for(self) -> int:
        """Nanoseconds left of a pause (`pause_until`), 0 if not paused."""
        until = self.config.get("pause_until")
        if not until:
            return 0
        return max(0, parse_go_time(str(until)) - time.time_ns())

    def pause(self, until: str) -> None:
        """Pause until `until` (RFC 3339), or resume (a time passed, or none)."""
        from ..server.gojson import go_time

        ns = parse_go_time(until) if until else 0
        if ns > time.time_ns():
            self.config = {**self.config, "pause_until": go_time(ns, utc=True)}
        else:
            self.config = {k: v for k, v in self.config.items() if k != "pause_until"}
            self.pump()

    def _delivery(self, msg: StoredMsg) -> tuple[str, bytes | None, bytes]:
        """The ack reply, headers and payload a delivery of `msg` would carry."""
        entry = self.pending.get(msg.seq)
        if entry is not None:
            cseq, count = entry.cseq, entry.deliveries + 1
        else:
            cseq, count = self.cseq + 1, 1
        npc = self._npc
        pending = npc + len(self.initial) if npc is not None else self.num_pending()
        ack = f"{self._ack_prefix}{count}.{msg.seq}.{cseq}.{msg.ts}.{pending}"
        headers, data = msg.headers, msg.data
        if self._headers_only:
            size = f"Nats-Msg-Size: {len(data)}\r\n".encode()
            headers = (headers[:-2] if headers else b"NATS/1.0\r\n") + size + b"\r\n"
            data = b""
        return ack, headers, data

    def _deliver(self, msg: StoredMsg, target: str, ack: str, headers: bytes | None,
                 data: bytes, now: int) -> None:
        seq = msg.seq
        entry = self.pending.get(seq)
        if entry is not None:
            entry.deliveries += 1
            entry.ts = now
            self.redelivered += 1
        else:
            self.cseq += 1
            if not self._acked_at_once:
                self.pending[seq] = Pending(self.cseq, now, 1)
            else:
                self.ack_floor = (self.cseq, seq)
                if self.stream.removes_acked:
                    self.stream.acked(seq)
        if seq > self.dseq:
            self.dseq = seq
        self.send(target, msg.subject, ack, headers, data)

    def heartbeat(self) -> None:
        """Idle heartbeats: to each waiting pull request that asked for them, and a push
        consumer's when nothing was sent for `idle_heartbeat`."""
        now = time.monotonic()
        for request in self.waiting:
            if request.heartbeat and now >= request.next_heartbeat:
                request.next_heartbeat = now + request.heartbeat
                self._status(request.reply, b"100 Idle Heartbeat", self._last_headers())
        target = self.config.get("deliver_subject")
        every = self.config.get("idle_heartbeat")
        if not target or not every or now - self.last_sent < every / NS:
            return
        if not self.interest(target):
            return
        self.last_sent = now
        self._status(target, b"100 Idle Heartbeat", self._last_headers())

    def _last_headers(self) -> bytes:
        """Where it is, as an idle heartbeat says it: its last consumer sequence and the
        stream sequence it has looked at (and the flow control request it waits for)."""
        stalled = (f"Nats-Consumer-Stalled: {self.flow.waiting_for}\r\n"
                   if self.flow is not None and self.flow.waiting_for else "")
        return (f"Nats-Last-Consumer: {self.cseq}\r\n"
                f"Nats-Last-Stream: {max(0, self.next_seq - 1)}\r\n{stalled}").encode()

    def flow_control_reply(self, subject: str) -> None:
        """The subscriber answered a flow control request (`subject`): deliveries go on."""
        if self.flow is not None and self.flow.answered(subject):
            self.pump()

    def _status(self, reply: str, status: bytes, extra: bytes = b"",
                reply_to: str | None = None) -> None:
        self.send(reply, reply, reply_to,
                  b"NATS/1.0 " + status + b"\r\n" + extra + b"\r\n", b"")

    def num_pending(self) -> int:
        """Messages it would still deliver: the rest of a last-per-subject start, and
        from its next sequence on (counted once, then kept up to date as messages are
        stored, delivered and removed)."""
        if self._npc is None:
            self._npc = self._count_pending()
        return self._npc + len(self.initial)

    def _count_pending(self) -> int:
        store = self.stream.store
        start = max(self.next_seq, store.first_seq)
        if start > store.last_seq:
            return 0
        if not self.filters and start == store.first_seq:
            return int(store.count)
        if start == store.first_seq and len(store.subjects) < store.count:
            return sum(n for subject, n in store.subjects.items() if self.matches(subject))
        return sum(1 for _ in store.matching(start, self.matches))

    def stored(self, seq: int, subject: str) -> None:
        """The stream stored a message."""
        if self._npc is not None and seq >= self.next_seq and self.matches(subject):
            self._npc += 1

    def removed(self, seq: int, subject: str) -> None:
        """The stream removed a message (limits, expiry, a delete, a purge)."""
        if self._npc is not None and seq >= self.next_seq and self.matches(subject):
            self._npc -= 1

    def recount(self) -> None:
        """Count what is pending again when next asked (the stream was purged)."""
        self._npc = None

    # -- pull requests ---------------------------------------------------------------------
    def request(self, reply: str, payload: bytes) -> None:
        """A CONSUMER.MSG.NEXT: checked as the reference checks it (its 400/404/408/409
        answers), then waiting until fulfilled or expired."""
        cfg = self.config
        if cfg.get("deliver_subject"):
            return self._status(reply, b"409 Consumer is push based")
        try:
            next_request = parse_next(payload)
        except BadRequest as exc:
            return self._status(reply, f"400 Bad Request - {exc}".encode())
        batch, expires, no_wait, max_bytes, heartbeat = (
            next_request.batch, next_request.expires, next_request.no_wait,
            next_request.max_bytes, next_request.heartbeat)
        refusal = (self._request_limits(batch, expires, max_bytes)
                   or self._priority_refusal(next_request.priority))
        if refusal:
            return self._status(reply, refusal.encode())
        if len(self.waiting) >= cfg.get("max_waiting", DEFAULT_MAX_WAITING):
            self._expire_requests()
            if len(self.waiting) >= cfg.get("max_waiting", DEFAULT_MAX_WAITING):
                if not heartbeat:
                    self._status(reply, b"409 Exceeded MaxWaiting")
                return None
        self.last_active = time.time_ns()
        if no_wait:
            pending = self.num_pending() + len(self.redeliver)
            if not pending and not expires:
                return self._status(reply, b"404 No Messages")
            if pending and pending < sum(r.batch for r in self.waiting):
                return self._status(reply, b"408 Requests Pending")
        now = time.monotonic()
        request = PullRequest(reply, max(1, batch), now + expires / NS if expires else 0.0,
                              no_wait, max(0, max_bytes), heartbeat / NS,
                              now + heartbeat / NS, priority_group=next_request.priority)
        self._enqueue(request)
        # Served once this turn's requests are all queued (as the reference's consumer loop
        # takes them after they arrive): a prioritized request that came in the same read
        # goes first.
        self.pump_soon()
        if request in self.waiting:
            self.wake(self.next_deadline())
        return None

    def _request_limits(self, batch: int, expires: int, max_bytes: int) -> str:
        """The consumer's limits on a pull request (max_batch, max_expires, max_bytes)."""
        from ..config.units import format_go_duration

        cfg = self.config
        if cfg.get("max_batch", 0) > 0 and batch > cfg["max_batch"]:
            return f"409 Exceeded MaxRequestBatch of {cfg['max_batch']}"
        if expires and cfg.get("max_expires", 0) > 0 and expires > cfg["max_expires"]:
            return f"409 Exceeded MaxRequestExpires of {format_go_duration(cfg['max_expires'])}"
        if max_bytes > 0 and cfg.get("max_bytes", 0) > 0 and max_bytes > cfg["max_bytes"]:
            return f"409 Exceeded MaxRequestMaxBytes of {cfg['max_bytes']}"
        return ""

    def _priority_refusal(self, group: PriorityGroup | None) -> str:
        """A pull request's priority fields against the consumer's policy and groups (the
        reference's 400s, and a 423 for a pin that is not the current one); a pull of the
        pinned client renews its pin."""
        if group is None:
            return ""
        policy = self.config.get("priority_policy")
        if (group.min_pending or group.min_ack_pending) and policy != "overflow":
            return "400 Bad Request - Not a Overflow Priority consumer"
        if group.id and policy != "pinned_client":
            return "400 Bad Request - Not a Pinned Client Priority consumer"
        if not 0 <= group.priority <= 9:
            return "400 Bad Request - Priority must be between 0 and 9"
        if not policy:
            return ""
        if not group.group:
            return "400 Bad Request - Priority Group missing"
        if group.group not in (self.config.get("priority_groups") or []):
            return "400 Bad Request - Invalid Priority Group"
        if self.pin_id:
            if group.id == self.pin_id:
                self._renew_pin()
            elif group.id:
                return "423 Nats-Pin-Id mismatch"
        return ""

    def _expire_requests(self) -> None:
        now = time.monotonic()
        for request in [r for r in self.waiting if r.expires and r.expires <= now]:
            self.waiting.remove(request)
            self._status(request.reply, b"408 Request Timeout", _left(request))

    def next_deadline(self) -> float:
        """The earliest monotonic time a waiting request is due (its expiry or its next
        heartbeat), 0 if none."""
        times = [r.expires for r in self.waiting if r.expires]
        times += [r.next_heartbeat for r in self.waiting if r.heartbeat]
        if self.pin_id:
            times.append(self.pin_deadline)
        return min(times) if times else 0.0

    def on_timer(self) -> None:
        """What is due now: a pin's timeout, expired requests, heartbeats (then the next
        deadline asked)."""
        self._expire_pin()
        self.pump()
        self.heartbeat()
        self._end_no_waits()
        deadline = self.next_deadline()
        if deadline:
            self.wake(deadline)

    def close(self) -> None:
        """Deleted: each waiting request hears so (409 Consumer Deleted)."""
        self._unpin()
        while self.waiting:
            self._status(self.waiting.popleft().reply, b"409 Consumer Deleted")

    def tick(self) -> None:
        """Requests that expired, and messages whose ack wait passed (redelivered)."""
        if self.config.get("ack_wait"):
            now = time.time_ns()
            max_deliver = self.config.get("max_deliver", -1)
            for seq, entry in list(self.pending.items()):
                if entry.ts + self._wait_for(entry) <= now and seq not in self.redeliver:
                    if max_deliver > 0 and entry.deliveries >= max_deliver:
                        self._exceeded(seq, entry)
                        continue
                    entry.ts = now
                    self.redeliver.append(seq)
        self._expire_pin()
        self.pump()
        self.heartbeat()

    def _wait_for(self, entry: Pending) -> int:
        """How long (ns) a delivery waits for its ack: `ack_wait`, or with `backoff` the
        n-th delivery's entry of it (its last one after)."""
        backoff = self.config.get("backoff") or []
        if backoff:
            return int(backoff[min(entry.deliveries, len(backoff)) - 1])
        return int(self.config.get("ack_wait") or DEFAULT_ACK_WAIT)

    # -- acks ------------------------------------------------------------------------------
    def ack(self, stream_seq: int, body: bytes) -> str:
        """An ack on a delivery's reply subject (`body`: its payload, stripped); what it was
        ("ack", "nak", ...)."""
        if body == b"+ACK" or not body:  # (the common case first)
            return self._ack_to(stream_seq)
        if body.startswith(b"-NAK"):
            delay = _nak_delay(body[4:])
            entry = self.pending.get(stream_seq)
            if entry is not None:
                self._delivery_advisory("MSG_NAKED", "nak", stream_seq, entry)
            if entry is not None and delay > 0:
                # Again once `delay` has passed: as if delivered so long before that its
                # wait ends then.
                entry.ts = time.time_ns() - self._wait_for(entry) + delay
            elif entry is not None and stream_seq not in self.redeliver:
                self.redeliver.append(stream_seq)
            self.pump_soon()
            return "nak"
        if body.startswith(b"+WPI"):
            entry = self.pending.get(stream_seq)
            if entry is not None:
                entry.ts = time.time_ns()
            return "progress"
        if body.startswith(b"+TERM"):
            entry = self.pending.get(stream_seq)
            if entry is not None:
                reason = body[5:].strip().decode(errors="replace")
                self._delivery_advisory("MSG_TERMINATED", "terminated", stream_seq, entry,
                                        **({"reason": reason} if reason else {}))
            self._acked(stream_seq)
            self.pump_soon()
            return "term"
        if body.startswith(b"+NXT") or body.startswith(b"+ACK"):
            return self._ack_to(stream_seq)
        return "unknown"

    def _ack_to(self, stream_seq: int) -> str:
        """A positive ack: of `stream_seq`, and with ack policy all of all before it."""
        if self.config["ack_policy"] == "all":
            for seq in [s for s in self.pending if s <= stream_seq]:
                self._acked(seq)
        else:
            self._acked(stream_seq)
        self.pump_soon()
        return "ack"

    def _exceeded(self, seq: int, entry: Pending) -> None:
        """Delivered max_deliver times and not acked: no longer pending (the ack floor
        moves past it; the stream keeps it), said once in an advisory."""
        self._advise("MAX_DELIVERIES", "max_deliver",
                     {"stream_seq": seq, "deliveries": entry.deliveries})
        self._acked(seq, in_stream=False)

    def _acked(self, seq: int, in_stream: bool = True) -> None:
        entry = self.pending.pop(seq, None)
        if entry is None:
            return
        if not self.pending:
            self.ack_floor = (self.cseq, self.dseq)
        else:
            first_seq, first = next(iter(self.pending.items()))
            self.ack_floor = (first.cseq - 1, first_seq - 1)
        if in_stream:
            self.stream.acked(seq)

    def has_acked(self, seq: int, subject: str) -> bool:
        """Whether this consumer is done with message `seq` (delivered and acknowledged,
        or not one it delivers)."""
        if not self.matches(subject):
            return True
        return seq < self.next_seq and seq not in self.pending

    # -- its state on disk (a durable consumer of a file stream) ---------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Where it is: what was delivered, acknowledged, and still waits for an ack."""
        return {"config": self.config, "created": self.created,
                "delivered": [self.cseq, self.dseq], "next": self.next_seq,
                "ack_floor": list(self.ack_floor), "redelivered": self.redelivered,
                "pending": {str(seq): [p.cseq, p.deliveries] for seq, p in self.pending.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        """Back to a snapshot: what was pending is delivered again after its ack wait."""
        self.created = int(state.get("created") or self.created)
        self.cseq, self.dseq = (int(x) for x in state["delivered"])
        self.next_seq = int(state.get("next") or self.dseq + 1)
        self._npc = None
        self.ack_floor = (int(state["ack_floor"][0]), int(state["ack_floor"][1]))
        self.redelivered = int(state.get("redelivered") or 0)
        now = time.time_ns()
        for seq, (cseq, count) in sorted(((int(k), v) for k, v in state["pending"].items())):
            self.pending[seq] = Pending(int(cseq), now, int(count))

    def reconfigure(self, config: dict[str, Any]) -> None:
        """A new configuration (an update the reference allows): its filters, limits,
        metadata; where it is stays."""
        self.config = config
        self._derive(config)
        self._filter_by(config)
        self._npc = None
        self.pace = Pace.of(config)
        self.pump()

    def _derive(self, config: dict[str, Any]) -> None:
        """What each delivery looks at in its configuration, looked up once."""
        limit = config.get("max_ack_pending", -1)
        self._max_ack_pending = limit if limit and limit > 0 else 0
        self._acked_at_once = config["ack_policy"] == "none"
        self._headers_only = bool(config.get("headers_only"))

    def push_bound(self) -> bool:
        """A push consumer someone listens to (its deliver subject has a subscriber)."""
        target = self.config.get("deliver_subject")
        return bool(target) and self.interest(target)

    # -- what it says of itself ------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        from ..server.gojson import go_time

        delivered: dict[str, Any] = {"consumer_seq": self.cseq, "stream_seq": self.dseq}
        if self.last_active:
            delivered["last_active"] = go_time(self.last_active, utc=True)
        return {
            "stream_name": self.stream.name, "name": self.name,
            "created": go_time(self.created, utc=True), "config": self.config,
            "delivered": delivered,
            "ack_floor": {"consumer_seq": self.ack_floor[0], "stream_seq": self.ack_floor[1]},
            "num_ack_pending": len(self.pending),
            # (the reference's: pending messages delivered more than once)
            "num_redelivered": sum(1 for p in self.pending.values() if p.deliveries > 1),
            "num_waiting": len(self.waiting), "num_pending": self.num_pending(),
            **({"push_bound": True} if self.push_bound() else {}),
            **({"paused": True, "pause_remaining": left} if (left := self.paused_for()) else {}),
            **self._priority_state(),
        }

    def _priority_state(self) -> dict[str, Any]:
        """Consumer info's `priority_groups`: its first group, with the pin if any (the
        reference's PriorityGroupState, whose pinned_ts is never left out)."""
        from ..server.gojson import go_time

        groups = self.config.get("priority_groups") or []
        if not groups:
            return {}
        state: dict[str, Any] = {"group": groups[0]}
        if self.pin_id:
            state["pinned_client_id"] = self.pin_id
        state["pinned_ts"] = (go_time(self.pinned_ts, utc=True) if self.pinned_ts
                              else "0001-01-01T00:00:00Z")
        return {"priority_groups": [state]}


def _with_header(headers: bytes | None, name: str, value: str) -> bytes:
    """Headers with one more (as the reference's genHeader: at the end of them)."""
    head = headers[:-2] if headers and len(headers) > 2 else b"NATS/1.0\r\n"
    return head + f"{name}: {value}\r\n\r\n".encode()


def _left(request: PullRequest) -> bytes:
    """What a request still wanted, as the reference's status headers say it."""
    return (f"Nats-Pending-Messages: {request.batch}\r\n"
            f"Nats-Pending-Bytes: {request.max_bytes}\r\n").encode()


def _nak_delay(rest: bytes) -> int:
    """The delay (ns) of `-NAK {"delay": ns}`; 0 without one."""
    import json

    rest = rest.strip()
    if not rest:
        return 0
    try:
        body = json.loads(rest)
    except ValueError:
        return 0
    delay = body.get("delay") if isinstance(body, dict) else None
    return delay if isinstance(delay, int) and delay > 0 else 0


def new_id() -> str:
    """An advisory's id (a NUID, as the reference's)."""
    return str(_nuid.next().decode())


def ephemeral_name() -> str:
    """A name for an ephemeral consumer (8 characters, as the reference's)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(8))
