"""JetStream workloads for `tidings bench --js`, as `nats bench --js` has them.

Both talk NATS over one plain socket (no client library), so that the load generator costs
little CPU and the server is what gets measured; the JetStream API is plain requests on
`$JS.API.>` with JSON bodies:

- ``js-pub``: publish with acks: PUB frames with a reply inbox, at most ``window`` PubAcks
  outstanding (1: synchronous, each PubAck awaited before the next publish), until ``msgs``
  are acknowledged or ``duration`` has passed. Timed from the first publish to the last
  PubAck.
- ``js-sub``: consume with explicit acks. The stream is first filled with ``msgs`` messages
  (asynchronous publishes, not timed); then a durable consumer starting at the first of them
  delivers them: pulled (`CONSUMER.MSG.NEXT` for ``batch`` messages at a time, the next
  request once a batch has arrived) or pushed to a deliver subject (``push``). Each message
  is acknowledged (`+ACK`) as it arrives. Timed from the consumer's creation to the PONG
  after the last ack.

The stream (``stream``, capturing ``subject``) is created when it does not exist; with
``fresh`` it is created anew for the run and deleted after it. Consumers are deleted after
their run.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidings.bench.procstat import CpuWindow
from tidings.bench.results import ThroughputResult
from tidings.bench.settings import JetStreamSettings, ProgressFn, Settings, no_progress
from tidings.bench.wire import Conn, Endpoint, ProtocolError, make_payload, pub_frame

JS_WORKLOADS = ("js-pub", "js-sub")
API = "$JS.API."
NOT_FOUND = 10059  # stream not found
RECV_BYTES = 1 << 22
SID_API, SID_ACKS, SID_PULL, SID_PUSH = b"1", b"2", b"3", b"4"
EXPIRES_NS = 5_000_000_000  # a pull request's lifetime, should a batch come up short

# One delivery: (sid, reply, headers, payload); headers are b"" for a MSG frame.
Frame = tuple[bytes, bytes, bytes, bytes]


class JsError(ProtocolError):
    """The server refused a JetStream request, or JetStream does not answer."""


class JsConn(Conn):
    """A raw connection with the inboxes the workloads need, a MSG/HMSG frame reader and
    JSON requests to the JetStream API."""

    def __init__(self, endpoint: Endpoint, name: str, timeout: float) -> None:
        super().__init__(endpoint, name, timeout)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.timeout = timeout
        self.pongs = 0
        self.held: list[Frame] = []  # frames read while awaiting an API reply
        tag = os.urandom(6).hex()
        self.inbox = f"_INBOX.bench.{tag}"
        self.api_inbox = f"{self.inbox}.api".encode()
        self.ack_inbox = f"{self.inbox}.ack".encode()
        self.pull_inbox = f"{self.inbox}.pull".encode()
        self.push_inbox = f"{self.inbox}.push".encode()
        self.send(b"SUB %s %s\r\nSUB %s %s\r\nSUB %s %s\r\n" % (
            self.api_inbox, SID_API, self.ack_inbox, SID_ACKS, self.pull_inbox, SID_PULL))
        self.flush()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, wait: float) -> list[Frame]:
        """The frames that arrive within ``wait`` seconds (those already read at once)."""
        if self.held:
            frames, self.held = self.held, []
            return frames + self.frames()
        return self._receive(wait)

    def _receive(self, wait: float) -> list[Frame]:
        frames = self.frames()
        if frames:
            return frames
        r, _, _ = select.select([self.sock], [], [], wait)
        if not r:
            return []
        data = self.sock.recv(RECV_BYTES)
        if not data:
            raise ProtocolError("connection closed by the server")
        self.buf += data
        return self.frames()

    def frames(self) -> list[Frame]:
        """Complete MSG and HMSG frames in the buffer; PINGs answered, PONGs counted."""
        out: list[Frame] = []
        buf = self.buf
        pos, n = 0, len(buf)
        while pos < n:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            if line[:4] == b"MSG " or line[:5] == b"HMSG ":
                parts = line.split(b" ")
                hmsg = line[0] == 72  # "H"
                size = int(parts[-1])
                end = eol + 2 + size
                if end + 2 > n:
                    break
                hdr_len = int(parts[-2]) if hmsg else 0
                reply = parts[3] if len(parts) == (6 if hmsg else 5) else b""
                body = eol + 2 + hdr_len
                out.append((parts[2], reply, bytes(buf[eol + 2:body]), bytes(buf[body:end])))
                pos = end + 2
                continue
            pos = eol + 2
            if line == b"PING":
                self.send(b"PONG\r\n")
            elif line == b"PONG":
                self.pongs += 1
            elif line.startswith(b"-ERR"):
                raise ProtocolError(line.decode(errors="replace"))
        del buf[:pos]
        return out

    def barrier(self, on_frame: Callable[[Frame], None]) -> None:
        """PING/PONG: what was sent before has been read by the server; frames that arrive
        meanwhile go to ``on_frame``."""
        want = self.pongs + 1
        self.send(b"PING\r\n")
        deadline = time.monotonic() + self.timeout
        while self.pongs < want:
            for frame in self.read(0.05):
                on_frame(frame)
            if time.monotonic() > deadline:
                raise ProtocolError(f"no PONG for {self.timeout:.0f}s")

    def api(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One JetStream API request; its JSON response (an error response raises JsError,
        unless its code is NOT_FOUND, which is returned)."""
        payload = json.dumps(body).encode() if body is not None else b""
        subject = f"{API}{op}".encode()
        self.send(b"PUB %s %s %d\r\n%s\r\n" % (subject, self.api_inbox, len(payload), payload))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            frames = self._receive(0.05)
            for i, frame in enumerate(frames):
                if frame[0] == SID_API:
                    self.held += frames[i + 1:]
                    return _api_reply(op, frame)
                self.held.append(frame)  # a delivery, read by the next read()
        raise JsError(f"no reply to {API}{op} in {self.timeout:.0f}s")


def _api_reply(op: str, frame: Frame) -> dict[str, Any]:
    _, _, headers, data = frame
    if headers.startswith(b"NATS/1.0 503"):
        raise JsError(f"no responders on {API}{op}: is JetStream enabled?")
    reply: dict[str, Any] = json.loads(data)
    error = reply.get("error")
    if error and error.get("err_code") != NOT_FOUND:
        raise JsError(f"{op}: {error.get('description')} (err_code {error.get('err_code')})")
    return reply


# -- streams and consumers ---------------------------------------------------------------------

def prepare_stream(conn: JsConn, js: JetStreamSettings) -> None:
    """The stream exists and captures the subject (created anew with ``fresh``)."""
    info = conn.api(f"STREAM.INFO.{js.stream}")
    exists = "error" not in info
    if exists and js.fresh:
        conn.api(f"STREAM.DELETE.{js.stream}")
        exists = False
    if not exists:
        conn.api(f"STREAM.CREATE.{js.stream}", {"name": js.stream, "subjects": [js.subject],
                                                "storage": js.storage, "num_replicas": 1})
    elif js.subject not in info["config"].get("subjects", []):
        raise JsError(f"stream {js.stream} exists without the subject {js.subject}")


def create_consumer(conn: JsConn, js: JetStreamSettings, name: str, start_seq: int) -> None:
    config: dict[str, Any] = {"durable_name": name, "ack_policy": "explicit",
                              "deliver_policy": "by_start_sequence", "opt_start_seq": start_seq}
    if js.push:
        config["deliver_subject"] = conn.push_inbox.decode()
    conn.api(f"CONSUMER.DURABLE.CREATE.{js.stream}.{name}",
             {"stream_name": js.stream, "config": config})


# -- publishing --------------------------------------------------------------------------------

@dataclass
class Published:
    acked: int = 0
    errors: int = 0
    first_seq: int = 0
    first_error: str = ""


def publish(conn: JsConn, subject: str, size: int, msgs: int, window: int, duration: float,
            progress: ProgressFn = no_progress) -> Published:
    """Publish with PubAcks, at most ``window`` outstanding, until ``msgs`` are answered or
    ``duration`` (0: none) has passed; the answers of what was sent are awaited."""
    out = Published()

    def take(frames: list[Frame]) -> int:
        before = out.acked + out.errors
        _count_acks(out, frames)
        return out.acked + out.errors - before

    windowed(conn, [pub_frame(subject, make_payload(size), conn.ack_inbox.decode())], window,
             msgs, duration, take, lambda done, _: progress(done, out.acked),
             lambda sent: f"no PubAck for {conn.timeout:.0f}s ({out.acked} of {sent} "
                          "acknowledged)")
    return out


def windowed(conn: JsConn, frames: list[bytes], window: int, msgs: int, duration: float,
             take: Callable[[list[Frame]], int], progress: ProgressFn,
             stalled: Callable[[int], str]) -> int:
    """Send `frames` in turn (over again from the first), at most `window` unanswered,
    until `msgs` are answered or `duration` (0: none) has passed, the answers of what was
    sent awaited; `take(frames read)` counts the answers among them. JsError with
    `stalled(sent)` when nothing is answered for the connection's timeout. How many went."""
    sent = answered = 0
    start = moved = time.monotonic()
    wait = conn.timeout if window == 1 else 0.05
    while answered < msgs:
        now = time.monotonic()
        if duration and sent < msgs and now - start >= duration:
            msgs = sent
            continue
        room = min(window - (sent - answered), msgs - sent)
        if room > 0:
            conn.send(frames[0] * room if len(frames) == 1 else
                      b"".join(frames[(sent + i) % len(frames)] for i in range(room)))
            sent += room
        got = take(conn.read(wait))
        if got:
            answered += got
            moved = now
            progress(max(sent / msgs, (now - start) / duration if duration else 0.0), answered)
        elif now - moved > conn.timeout:
            raise JsError(stalled(sent))
    return sent


def _count_acks(out: Published, frames: list[Frame]) -> None:
    for sid, _, headers, data in frames:
        if sid != SID_ACKS:
            continue
        if headers.startswith(b"NATS/1.0 503"):
            raise JsError("no stream captures the subject (no responders)")
        if b'"error"' in data:
            out.errors += 1
            out.first_error = out.first_error or data.decode(errors="replace")
            continue
        out.acked += 1
        if out.first_seq == 0:
            out.first_seq = int(json.loads(data)["seq"])


# -- consuming ---------------------------------------------------------------------------------

class Acker:
    """Counts the deliveries of one subscription and acknowledges each (+ACK, no reply)."""

    def __init__(self, sid: bytes) -> None:
        self.sid = sid
        self.got = 0
        self.status = b""  # the last status message (a pull request that ended short)
        self.pending: list[bytes] = []

    def take(self, frames: list[Frame]) -> int:
        """Count and queue acks for the deliveries among ``frames``; how many there were."""
        before = self.got
        for sid, reply, headers, _ in frames:
            if sid != self.sid:
                continue
            if reply:
                self.got += 1
                self.pending.append(b"PUB %s 4\r\n+ACK\r\n" % reply)
            elif headers:
                self.status = headers.split(b"\r\n", 1)[0]
        return self.got - before

    def flush(self, conn: JsConn) -> None:
        if self.pending:
            conn.send(b"".join(self.pending))
            self.pending.clear()


def pull(conn: JsConn, js: JetStreamSettings, name: str, msgs: int, duration: float,
         progress: ProgressFn = no_progress) -> int:
    """Fetch ``js.batch`` at a time from the pull consumer ``name`` until ``msgs`` have
    arrived (or, after ``duration``, the batch under way); each acked. How many arrived."""
    acker = Acker(SID_PULL)
    next_subject = f"{API}CONSUMER.MSG.NEXT.{js.stream}.{name}".encode()
    start = time.monotonic()
    while acker.got < msgs and not (duration and time.monotonic() - start >= duration):
        want = min(js.batch, msgs - acker.got)
        body = b'{"batch":%d,"expires":%d}' % (want, EXPIRES_NS)
        conn.send(b"PUB %s %s %d\r\n%s\r\n" % (next_subject, conn.pull_inbox, len(body), body))
        _await(conn, acker, acker.got + want, lambda: bool(acker.status))
        if acker.status:
            raise JsError(f"pull request ended after {acker.got} of {msgs}: "
                          f"{acker.status.decode(errors='replace')}")
        progress(max(acker.got / msgs, (time.monotonic() - start) / duration if duration
                     else 0.0), acker.got)
    conn.barrier(lambda frame: None)
    return acker.got


def push(conn: JsConn, msgs: int, duration: float, progress: ProgressFn = no_progress) -> int:
    """Receive and ack the deliveries to the push inbox until ``msgs`` (or ``duration``)."""
    acker = Acker(SID_PUSH)
    start = time.monotonic()
    deadline = start + duration if duration else 0.0

    def report() -> bool:
        now = time.monotonic()
        progress(max(acker.got / msgs, (now - start) / duration if duration else 0.0),
                 acker.got)
        return bool(deadline and now >= deadline)

    _await(conn, acker, msgs, report)
    conn.barrier(lambda frame: None)
    return acker.got


def _await(conn: JsConn, acker: Acker, target: int, stop: Callable[[], bool]) -> None:
    """Read and ack until ``acker`` has counted ``target`` or ``stop()`` says so."""
    moved = time.monotonic()
    while acker.got < target:
        frames = conn.read(0.05)
        if acker.take(frames):
            moved = time.monotonic()
        acker.flush(conn)
        if stop():
            return
        if time.monotonic() - moved > conn.timeout:
            raise JsError(f"no message for {conn.timeout:.0f}s ({acker.got} delivered)")


# -- the workloads -----------------------------------------------------------------------------

def run_jetstream(workload: str, size: int, settings: Settings,
                  progress: ProgressFn = no_progress) -> ThroughputResult:
    """``js-pub`` or ``js-sub`` (see the module's docstring) against settings.endpoint."""
    if workload not in JS_WORKLOADS:
        raise ValueError(f"not a JetStream workload: {workload}")
    js = settings.jetstream
    conn = JsConn(settings.endpoint, f"tidings-bench-{workload}", settings.timeout)
    result = ThroughputResult(workload, size, 0 if workload == "js-pub" else 1, 0, 0, 0.0)
    try:
        prepare_stream(conn, js)
        if workload == "js-pub":
            _run_pub(conn, js, size, settings, progress, result)
        else:
            _run_sub(conn, js, size, settings, progress, result)
        if js.fresh:
            conn.api(f"STREAM.DELETE.{js.stream}")
    finally:
        conn.close()
    return result


def _run_pub(conn: JsConn, js: JetStreamSettings, size: int, settings: Settings,
             progress: ProgressFn, result: ThroughputResult) -> None:
    window = CpuWindow(settings.server_pid)
    window.start()
    out = publish(conn, js.subject, size, settings.msgs, js.window, settings.duration, progress)
    window.stop()
    result.sent = out.acked + out.errors
    result.delivered = out.acked
    _timing(result, window, pub=True)
    if out.errors:
        result.errors.append(f"{out.errors} publishes refused: {out.first_error[:200]}")


def _run_sub(conn: JsConn, js: JetStreamSettings, size: int, settings: Settings,
             progress: ProgressFn, result: ThroughputResult) -> None:
    filled = publish(conn, js.subject, size, settings.msgs, max(js.window, 256),
                     settings.duration)
    if filled.errors or not filled.acked:
        raise JsError(f"filling the stream: {filled.acked} stored, {filled.errors} refused "
                      f"{filled.first_error[:200]}")
    name = f"bench_{os.urandom(4).hex()}"
    if js.push:
        conn.send(b"SUB %s %s\r\n" % (conn.push_inbox, SID_PUSH))
    window = CpuWindow(settings.server_pid)
    window.start()
    try:
        create_consumer(conn, js, name, filled.first_seq)
        if js.push:
            got = push(conn, filled.acked, settings.duration, progress)
        else:
            got = pull(conn, js, name, filled.acked, settings.duration, progress)
        window.stop()
    finally:
        if js.push:
            conn.send(b"UNSUB %s\r\n" % SID_PUSH)
        conn.api(f"CONSUMER.DELETE.{js.stream}.{name}")
    result.sent, result.delivered = filled.acked, got
    _timing(result, window, pub=False)


def _timing(result: ThroughputResult, window: CpuWindow, pub: bool) -> None:
    result.secs = window.wall
    if window.wall <= 0:
        return
    own = window.own / window.wall
    result.pub_cpu, result.sub_cpu = (own, None) if pub else (None, own)
    result.server_cpu = window.server_cores()
    result.other_cpu = window.other_cores(0.0)
