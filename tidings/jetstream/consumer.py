"""A JetStream consumer: its configuration (the reference's defaults and field order), where
it is in its stream, what waits for an acknowledgement, and deliveries: to pull requests
(`CONSUMER.MSG.NEXT`: batch, expires, no_wait, with the 404/408 status messages) or pushed
to a deliver subject. Acks (`+ACK`, `-NAK`, `+WPI`, `+NXT`, `+TERM`, ack all) arrive on the
reply subject of each delivery, `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
<consumer seq>.<time>.<pending>`; unacknowledged messages come again after `ack_wait`, at
most `max_deliver` times.

Sending is the caller's (`send(target, subject, reply, headers, data)`): the consumer only
decides what goes where.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.subjects import subject_matches
from . import errors
from .memstore import StoredMsg

NS = 10**9
DEFAULT_ACK_WAIT = 30 * NS
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_INACTIVE_THRESHOLD = 5 * NS

_FIELDS = (
    "durable_name", "name", "description", "deliver_policy", "opt_start_seq",
    "opt_start_time", "ack_policy", "ack_wait", "max_deliver", "backoff", "filter_subject",
    "filter_subjects", "replay_policy", "rate_limit_bps", "sample_freq", "max_waiting",
    "max_ack_pending", "flow_control", "headers_only", "max_batch", "max_expires",
    "max_bytes", "deliver_subject", "deliver_group", "idle_heartbeat", "inactive_threshold",
    "num_replicas", "mem_storage", "direct", "sourcing", "metadata", "pause_until",
)
_ALWAYS = ("deliver_policy", "ack_policy", "replay_policy", "num_replicas")
_CHOICES = {"deliver_policy": ("all", "last", "new", "by_start_sequence", "by_start_time",
                               "last_per_subject"),
            "ack_policy": ("none", "all", "explicit"),
            "replay_policy": ("instant", "original")}

Send = Callable[[str, str, "str | None", "bytes | None", bytes], None]


def normalize(raw: Any, durable: str = "") -> dict[str, Any]:
    """A consumer's configuration as the reference fills it in."""
    if not isinstance(raw, dict):
        raise errors.CONSUMER_CONFIG_REQUIRED()
    # (zeros and false are the reference's "not given": its fields are omitempty)
    cfg = {k: v for k, v in raw.items()
           if k in _FIELDS and v not in (None, "", [], {}, 0, False)}
    cfg.setdefault("deliver_policy", "all")
    cfg.setdefault("ack_policy", "none")  # (the reference's zero value)
    cfg.setdefault("replay_policy", "instant")
    for field, choices in _CHOICES.items():
        if cfg[field] not in choices:
            raise errors.CONSUMER_INVALID_POLICY(err=f"invalid {field} {cfg[field]!r}")
    if durable:
        cfg["durable_name"] = durable
    if cfg.get("durable_name") and not cfg.get("name"):
        cfg["name"] = cfg["durable_name"]
    if cfg["ack_policy"] != "none":
        cfg.setdefault("ack_wait", DEFAULT_ACK_WAIT)
        cfg.setdefault("max_ack_pending", DEFAULT_MAX_ACK_PENDING)
    cfg.setdefault("max_deliver", -1)
    if not cfg.get("deliver_subject"):
        cfg.setdefault("max_waiting", DEFAULT_MAX_WAITING)
    if not cfg.get("durable_name"):
        cfg.setdefault("inactive_threshold", DEFAULT_INACTIVE_THRESHOLD)
    cfg["num_replicas"] = int(raw.get("num_replicas") or 0)
    cfg["metadata"] = {**(raw.get("metadata") or {}), "_nats.level": "1",
                       "_nats.req.level": "0", "_nats.ver": "2.11.0"}
    return {k: cfg[k] for k in _FIELDS if k in cfg or k in _ALWAYS}


@dataclass
class Pending:
    """A delivered message waiting for its ack."""

    cseq: int
    ts: int  # when delivered (ns)
    deliveries: int


@dataclass
class PullRequest:
    reply: str
    batch: int
    expires: float  # monotonic deadline; 0: none
    no_wait: bool
    max_bytes: int
    heartbeat: float = 0.0  # seconds between idle heartbeats while it waits; 0: none
    last_sent: float = 0.0  # monotonic


class Consumer:
    """One consumer of a stream; `pump()` delivers what it can."""

    def __init__(self, stream: Any, name: str, config: dict[str, Any], send: Send,
                 interest: Callable[[str], bool] = lambda subject: True) -> None:
        self.stream = stream
        self.name = name
        self.config = config
        self.send = send
        self.interest = interest  # whether anyone listens to a subject (push: its target)
        self.created = time.time_ns()
        self.durable = bool(config.get("durable_name"))
        self.filters = ([config["filter_subject"]] if config.get("filter_subject")
                        else list(config.get("filter_subjects") or []))
        self.cseq = 0  # consumer sequence of the last delivery
        self.dseq = 0  # stream sequence of the last delivery
        self.initial: deque[int] = deque()  # last_per_subject: those first, in order
        self.next_seq = self._start_seq()
        self.pending: OrderedDict[int, Pending] = OrderedDict()  # stream seq -> Pending
        self.redeliver: deque[int] = deque()
        self.ack_floor = (0, 0)  # (consumer seq, stream seq)
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
        if policy == "last":
            return max(store.last_seq, store.first_seq)
        if policy == "by_start_sequence":
            return max(int(cfg.get("opt_start_seq") or 1), store.first_seq)
        if policy == "last_per_subject":
            lasts = (store.last_for(subject) for subject in list(store.subjects)
                     if self.matches(subject))
            self.initial = deque(sorted(m.seq for m in lasts if m is not None))
            return store.last_seq + 1
        if policy == "by_start_time":
            return self._seq_at(_parse_time(str(cfg.get("opt_start_time") or "")))
        return store.first_seq

    def _seq_at(self, ns: int) -> int:
        """The first sequence stored at or after `ns` (after the last if none)."""
        store = self.stream.store
        for seq in range(store.first_seq, store.last_seq + 1):
            msg = store.get(seq)
            if msg is not None and msg.ts >= ns:
                return seq
        return store.last_seq + 1

    # -- deliveries ------------------------------------------------------------------------
    def matches(self, subject: str) -> bool:
        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

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
                return msg
        for seq in store.matching(self.next_seq, self.matches):
            msg = store.get(seq)
            if msg is not None:
                self.next_seq = seq + 1
                return msg
        self.next_seq = max(self.next_seq, store.last_seq + 1)
        return None

    def _may_deliver(self) -> bool:
        limit = self.config.get("max_ack_pending", -1)
        return self.redeliver or not (limit and limit > 0 and len(self.pending) >= limit)

    def pump(self) -> None:
        """Deliver what is there to whoever waits for it (pull) or to the deliver subject."""
        target = self.config.get("deliver_subject")
        self._expire_requests()
        if self.paused_for() > 0:
            return  # paused: nothing goes until pause_until (the next tick after)
        if target and not self.interest(target):
            return  # a push consumer delivers once someone listens
        sent = 0
        while self._may_deliver():
            request = None
            if not target:
                if not self.waiting:
                    return
                request = self.waiting[0]
            msg = self._next_message()
            if msg is None:
                break
            self._deliver(msg, request.reply if request else target)
            sent += 1
            if request is not None:
                request.batch -= 1
                if request.batch <= 0:
                    self.waiting.popleft()
        if sent and target and self.config.get("flow_control"):
            # As the reference asks a push subscriber to show it keeps up (it answers on
            # the reply); tidings does not hold deliveries back for the answer.
            self.send(target, target, f"$JS.FC.{self.stream.name}.{self.name}."
                      f"{secrets.token_hex(4)}", b"NATS/1.0 100 FlowControl Request\r\n\r\n", b"")
        # A no_wait request that found nothing more: 404 (or 408 if it had some).
        while self.waiting and self.waiting[0].no_wait:
            request = self.waiting.popleft()
            self._status(request.reply, b"404 No Messages")

    def paused_for(self) -> int:
        """Nanoseconds left of a pause (`pause_until`), 0 if not paused."""
        until = self.config.get("pause_until")
        if not until:
            return 0
        return max(0, _parse_time(str(until)) - time.time_ns())

    def pause(self, until: str) -> None:
        """Pause until `until` (RFC 3339), or resume (a time passed, or none)."""
        from ..server.gojson import go_time

        ns = _parse_time(until) if until else 0
        if ns > time.time_ns():
            self.config = {**self.config, "pause_until": go_time(ns, utc=True)}
        else:
            self.config = {k: v for k, v in self.config.items() if k != "pause_until"}
            self.pump()

    def _deliver(self, msg: StoredMsg, target: str) -> None:
        cfg = self.config
        entry = self.pending.get(msg.seq)
        if entry is not None:
            entry.deliveries += 1
            entry.ts = time.time_ns()
            self.redelivered += 1
            cseq, count = entry.cseq, entry.deliveries
        else:
            self.cseq += 1
            cseq, count = self.cseq, 1
            if cfg["ack_policy"] != "none":
                self.pending[msg.seq] = Pending(cseq, time.time_ns(), 1)
            else:
                self.ack_floor = (cseq, msg.seq)
                self.stream.acked(msg.seq)
        self.dseq = max(self.dseq, msg.seq)
        self.last_active = time.time_ns()
        ack = (f"$JS.ACK.{self.stream.name}.{self.name}.{count}.{msg.seq}.{cseq}."
               f"{msg.ts}.{self.num_pending()}")
        headers = msg.headers
        data = msg.data
        if cfg.get("headers_only"):
            size = f"Nats-Msg-Size: {len(data)}\r\n".encode()
            headers = (headers[:-2] if headers else b"NATS/1.0\r\n") + size + b"\r\n"
            data = b""
        self.send(target, msg.subject, ack, headers, data)
        self.last_sent = time.monotonic()

    def heartbeat(self) -> None:
        """Idle heartbeats: to each waiting pull request that asked for them, and a push
        consumer's when nothing was sent for `idle_heartbeat`."""
        now = time.monotonic()
        for request in self.waiting:
            if request.heartbeat and now - request.last_sent >= request.heartbeat:
                request.last_sent = now
                self._status(request.reply, b"100 Idle Heartbeat")
        target = self.config.get("deliver_subject")
        every = self.config.get("idle_heartbeat")
        if not target or not every or time.monotonic() - self.last_sent < every / NS:
            return
        if not self.interest(target):
            return
        self.last_sent = time.monotonic()
        last = (f"Nats-Last-Consumer: {self.cseq}\r\nNats-Last-Stream: {self.dseq}\r\n")
        self._status(target, b"100 Idle Heartbeat", last.encode())

    def _status(self, reply: str, status: bytes, extra: bytes = b"") -> None:
        self.send(reply, reply, None, b"NATS/1.0 " + status + b"\r\n" + extra + b"\r\n", b"")

    def num_pending(self) -> int:
        """Messages it would still deliver: the rest of a last-per-subject start, and
        from its next sequence on."""
        store = self.stream.store
        start = max(self.next_seq, store.first_seq)
        if start > store.last_seq:
            return len(self.initial)
        if not self.filters and start == store.first_seq:
            return int(store.count) + len(self.initial)
        return len(self.initial) + sum(1 for _ in store.matching(start, self.matches))

    # -- pull requests ---------------------------------------------------------------------
    def request(self, reply: str, body: Any) -> None:
        """A CONSUMER.MSG.NEXT with its options (a number, a JSON object or nothing)."""
        batch, expires, no_wait, max_bytes, heartbeat = 1, 0, False, 0, 0
        if isinstance(body, int) and not isinstance(body, bool):
            batch = body
        elif isinstance(body, dict):
            batch = int(body.get("batch") or 1)
            expires = int(body.get("expires") or 0)
            no_wait = bool(body.get("no_wait"))
            max_bytes = int(body.get("max_bytes") or 0)
            heartbeat = int(body.get("idle_heartbeat") or 0)
        now = time.monotonic()
        deadline = now + expires / NS if expires else 0.0
        self.waiting.append(PullRequest(reply, max(1, batch), deadline, no_wait, max_bytes,
                                        heartbeat / NS, now))
        self.last_active = time.time_ns()
        self.pump()

    def _expire_requests(self) -> None:
        now = time.monotonic()
        kept: deque[PullRequest] = deque()
        for request in self.waiting:
            if request.expires and request.expires <= now:
                pending = f"Nats-Pending-Messages: {request.batch}\r\nNats-Pending-Bytes: 0\r\n"
                self._status(request.reply, b"408 Request Timeout", pending.encode())
            else:
                kept.append(request)
        self.waiting = kept

    def next_deadline(self) -> float:
        """The earliest monotonic time something is due (a request's expiry or an ack
        wait), 0 if none."""
        times = [r.expires for r in self.waiting if r.expires]
        wait = self.config.get("ack_wait")
        if wait and self.pending:
            oldest = next(iter(self.pending.values()))
            times.append(time.monotonic() + max(0.0, (oldest.ts + wait - time.time_ns()) / NS))
        return min(times) if times else 0.0

    def tick(self) -> None:
        """Requests that expired, and messages whose ack wait passed (redelivered)."""
        if self.config.get("ack_wait"):
            now = time.time_ns()
            max_deliver = self.config.get("max_deliver", -1)
            for seq, entry in list(self.pending.items()):
                if entry.ts + self._wait_for(entry) <= now and seq not in self.redeliver:
                    if max_deliver > 0 and entry.deliveries >= max_deliver:
                        continue
                    entry.ts = now
                    self.redeliver.append(seq)
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
    def ack(self, stream_seq: int, payload: bytes) -> str:
        """An ack on a delivery's reply subject; what it was ("ack", "nak", ...)."""
        body = payload.strip()
        if body.startswith(b"-NAK"):
            delay = _nak_delay(body[4:])
            entry = self.pending.get(stream_seq)
            if entry is not None and delay > 0:
                # Again once `delay` has passed: as if delivered so long before that its
                # wait ends then.
                entry.ts = time.time_ns() - self._wait_for(entry) + delay
            elif entry is not None and stream_seq not in self.redeliver:
                self.redeliver.append(stream_seq)
            self.pump()
            return "nak"
        if body.startswith(b"+WPI"):
            entry = self.pending.get(stream_seq)
            if entry is not None:
                entry.ts = time.time_ns()
            return "progress"
        if body.startswith(b"+TERM"):
            self._acked(stream_seq)
            self.pump()
            return "term"
        if body in (b"", b"+ACK") or body.startswith(b"+NXT") or body.startswith(b"+ACK"):
            if self.config["ack_policy"] == "all":
                for seq in [s for s in self.pending if s <= stream_seq]:
                    self._acked(seq)
            else:
                self._acked(stream_seq)
            self.pump()
            return "ack"
        return "unknown"

    def _acked(self, seq: int) -> None:
        entry = self.pending.pop(seq, None)
        if entry is None:
            return
        if not self.pending:
            self.ack_floor = (self.cseq, self.dseq)
        else:
            first_seq, first = next(iter(self.pending.items()))
            self.ack_floor = (first.cseq - 1, first_seq - 1)
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
        self.ack_floor = (int(state["ack_floor"][0]), int(state["ack_floor"][1]))
        self.redelivered = int(state.get("redelivered") or 0)
        now = time.time_ns()
        for seq, (cseq, count) in sorted(((int(k), v) for k, v in state["pending"].items())):
            self.pending[seq] = Pending(int(cseq), now, int(count))

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
            **({"paused": True, "pause_remaining": left} if (left := self.paused_for()) else {}),
        }


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


def _parse_time(text: str) -> int:
    """An RFC 3339 time (nanoseconds kept) as nanoseconds since the epoch; 0 if unreadable."""
    from datetime import datetime

    if not text:
        return 0
    frac = 0
    main = text
    if "." in text:
        main, rest = text.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        frac = int((digits + "000000000")[:9])
        main += zone
    try:
        moment = datetime.fromisoformat(main.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(moment.timestamp()) * NS + frac


def ephemeral_name() -> str:
    """A name for an ephemeral consumer (8 characters, as the reference's)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(8))
