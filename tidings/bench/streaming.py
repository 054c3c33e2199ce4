"""Streaming workloads for `tidings bench`: publish with async acks, subscribe-and-ack.

Both talk the streaming protocol over a plain blocking socket (no client library), so that
the load generator costs little CPU and the streaming server is what gets measured:

- :func:`bench_publish`: PubMsgs pipelined with at most ``max_inflight`` PubAcks outstanding
  (the official clients' async publish), until ``msgs`` are acknowledged. Into a file store
  this measures group commit: a PubAck is sent only once its message is fsync'd.
- :func:`bench_subscribe`: a subscription from the first message with ``max_inflight``,
  acknowledging every message as it arrives, until ``msgs`` are delivered and acknowledged.
  With ``prefill=True`` it first publishes them (not measured).

Each returns a :class:`StreamingBenchResult`. ``python -m tidings.bench.streaming`` runs them
from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import time
from dataclasses import asdict, dataclass

from tidings.bench.wire import Conn, Endpoint, ProtocolError
from tidings.streaming.pb import protocol_pb2 as pb
from tidings.varint import put_uvarint

__all__ = ["StreamingBenchResult", "bench_publish", "bench_subscribe", "main"]

DEFAULT_CLUSTER_ID = "test-cluster"
# One channel per workload, reused by every run: the streaming protocol cannot delete a
# channel, so unique names would pile up (and reach the server's max_channels, 100 by
# default). What a run leaves is bounded by the channel limits (max_msgs, max_bytes).
PUB_CHANNEL = "tidings-bench.stan-pub"
SUB_CHANNEL = "tidings-bench.stan-sub"
SUB_INFLIGHT_BYTES = 16 << 20  # bytes a stan-sub subscription may have unacknowledged
_CHUNK = 256


@dataclass
class StreamingBenchResult:
    workload: str
    size: int
    msgs: int
    seconds: float
    errors: int = 0
    max_inflight: int = 0

    @property
    def msgs_per_sec(self) -> float:
        return self.msgs / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_sec(self) -> float:
        return self.msgs_per_sec * self.size

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["msgs_per_sec"] = self.msgs_per_sec
        d["bytes_per_sec"] = self.bytes_per_sec
        return d


class BenchError(ProtocolError):
    """The streaming server refused or did not answer."""


class _Conn(Conn):
    """A raw NATS connection (handshake from the bench's wire module), then non-blocking
    reads of MSG frames with PINGs answered."""

    def __init__(self, url: str, timeout: float) -> None:
        try:
            super().__init__(Endpoint.parse(url), "stan-bench", timeout)
        except ProtocolError as exc:
            raise BenchError(str(exc)) from exc
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.held: list[tuple[bytes, bytes, bytes]] = []  # frames read while awaiting a reply
        self.timeout = timeout
        self.sock.setblocking(False)

    def send(self, data: bytes | bytearray) -> None:
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    def recv_some(self, wait: float) -> bool:
        """Read what is available (waiting up to ``wait`` seconds for something)."""
        r, _, _ = select.select([self.sock], [], [], wait)
        if not r:
            return False
        try:
            data = self.sock.recv(1 << 22)
        except BlockingIOError:
            return False
        if not data:
            raise BenchError("connection closed by the server")
        self.buf += data
        return True

    def frames(self) -> list[tuple[bytes, bytes, bytes]]:
        """Complete MSG frames in the buffer as (sid, reply, payload); answers PINGs."""
        out, self.held = self.held, []
        buf = self.buf
        pos = 0
        n = len(buf)
        while pos < n:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            if line.startswith(b"MSG "):
                parts = line.split(b" ")
                size = int(parts[-1])
                end = eol + 2 + size
                if end + 2 > n:
                    break
                reply = parts[3] if len(parts) == 5 else b""
                out.append((parts[2], reply, bytes(buf[eol + 2:end])))
                pos = end + 2
            else:
                pos = eol + 2
                if line.startswith(b"PING"):
                    self.send(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise BenchError(line.decode())
        del buf[:pos]
        return out

    def request(self, subject: str, payload: bytes, sid: bytes, inbox: str) -> bytes:
        self.send(b"SUB %s %s\r\nPUB %s %s %d\r\n%s\r\n" % (
            inbox.encode(), sid, subject.encode(), inbox.encode(), len(payload), payload))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            frames = self.frames()
            for i, (fsid, _, data) in enumerate(frames):
                if fsid == sid:
                    self.send(b"UNSUB %s\r\n" % sid)
                    self.held = frames[:i] + frames[i + 1:]
                    return data
            self.held = frames
            self.recv_some(0.05)
        raise BenchError(f"no reply from {subject} (is a streaming server running?)")

    def close(self) -> None:
        self.sock.close()


class _Stan:
    """A minimal streaming client connection on a raw socket."""

    HB_SID = b"1"

    def __init__(self, url: str, cluster_id: str, client_id: str, timeout: float) -> None:
        self.conn = _Conn(url, timeout)
        self.client_id = client_id
        tag = os.urandom(6).hex()
        self.hb_inbox = f"_INBOX.bench.{tag}.hb"
        self.conn.send(b"SUB %s %s\r\n" % (self.hb_inbox.encode(), self.HB_SID))
        self.conn_id = tag.encode()
        req = pb.ConnectRequest(clientID=client_id, heartbeatInbox=self.hb_inbox, protocol=1,
                                connID=self.conn_id, pingInterval=60, pingMaxOut=10)
        resp = pb.ConnectResponse.FromString(self.conn.request(
            f"_STAN.discover.{cluster_id}", req.SerializeToString(), b"9", f"_INBOX.bench.{tag}.c"))
        if resp.error:
            raise BenchError(resp.error)
        self.resp = resp
        self.tag = tag

    def subscribe(self, channel: str, sid: bytes, max_inflight: int,
                  start: int = pb.First, start_seq: int = 0) -> pb.SubscriptionResponse:
        """Subscribe to ``channel``; its messages arrive as MSG frames on ``sid``."""
        inbox = f"_INBOX.bench.{self.tag}.{sid.decode()}"
        self.conn.send(b"SUB %s %s\r\n" % (inbox.encode(), sid))
        req = pb.SubscriptionRequest(clientID=self.client_id, subject=channel, inbox=inbox,
                                     maxInFlight=max_inflight, ackWaitInSecs=60,
                                     startPosition=start, startSequence=start_seq)
        resp = pb.SubscriptionResponse.FromString(self.conn.request(
            self.resp.subRequests, req.SerializeToString(), b"7", f"{inbox}.r"))
        if resp.error:
            raise BenchError(resp.error)
        return resp

    def first_sequence(self, sid: bytes) -> int:
        """The sequence of the first message delivered on ``sid``."""
        deadline = time.monotonic() + self.conn.timeout
        while time.monotonic() < deadline:
            for fsid, _, data in self.conn.frames():
                if fsid == sid:
                    return pb.MsgProto.FromString(data).sequence
            self.conn.recv_some(0.05)
        raise BenchError(f"no message for {self.conn.timeout}s on the probe subscription")

    def heartbeat(self, frames: list[tuple[bytes, bytes, bytes]]) -> None:
        for sid, reply, _ in frames:
            if sid == self.HB_SID and reply:
                self.conn.send(b"PUB %s 0\r\n\r\n" % reply)

    def close(self) -> None:
        try:
            self.conn.request(self.resp.closeRequests,
                              pb.CloseRequest(clientID=self.client_id).SerializeToString(),
                              b"8", f"_INBOX.bench.{self.tag}.x")
        except (BenchError, OSError):
            pass
        self.conn.close()


def _pub_frames(stan: _Stan, channel: str, payload: bytes, ack_subject: str, start: int,
                count: int) -> bytes:
    """``count`` PUB frames of PubMsgs whose guids are 16-digit counters."""
    head = pb.PubMsg(clientID=stan.client_id, guid="0" * 16).SerializeToString()
    tail = pb.PubMsg(subject=channel, data=payload, connID=stan.conn_id).SerializeToString()
    prefix = head[:-16]
    n = len(head) + len(tail)
    subj = f"{stan.resp.pubPrefix}.{channel}".encode()
    line = b"PUB %s %s %d\r\n" % (subj, ack_subject.encode(), n)
    return b"".join(
        line + prefix + b"%016d" % i + tail + b"\r\n" for i in range(start, start + count)
    )


def bench_publish(
    url: str,
    *,
    cluster_id: str = DEFAULT_CLUSTER_ID,
    msgs: int = 200_000,
    size: int = 128,
    max_inflight: int = 16384,
    channel: str = PUB_CHANNEL,
    timeout: float = 30.0,
    duration: float = 0.0,
) -> StreamingBenchResult:
    """Publish ``msgs`` messages of ``size`` bytes with async PubAcks; time until all acked.

    With ``duration`` publishing stops after that many seconds (the acks of what was sent
    are still awaited)."""
    stan = _Stan(url, cluster_id, f"bench-pub-{os.urandom(4).hex()}", timeout)
    conn = stan.conn
    ack_sid = b"2"
    ack_subject = f"_STAN.acks.bench.{stan.tag}"
    conn.send(b"SUB %s %s\r\n" % (ack_subject.encode(), ack_sid))
    payload = os.urandom(size // 2 + 1).hex()[:size].encode()
    ok_len = len(pb.PubAck(guid="0" * 16).SerializeToString())
    sent = acked = errors = 0
    last_progress = time.monotonic()
    start = time.perf_counter()
    try:
        while acked + errors < msgs:
            if duration and sent < msgs and time.perf_counter() - start >= duration:
                msgs = sent
                continue
            room = min(max_inflight - (sent - acked - errors), msgs - sent)
            if room >= _CHUNK or (room > 0 and sent + room == msgs):
                k = min(room, _CHUNK * 8)
                conn.send(_pub_frames(stan, channel, payload, ack_subject, sent, k))
                sent += k
            if conn.recv_some(0 if room >= _CHUNK else 0.05):
                frames = conn.frames()
                for sid, _, data in frames:
                    if sid == ack_sid:
                        if len(data) == ok_len or not pb.PubAck.FromString(data).error:
                            acked += 1
                        else:
                            errors += 1
                stan.heartbeat(frames)
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                raise BenchError(f"no PubAck for {timeout}s ({acked} of {msgs} acknowledged)")
        elapsed = time.perf_counter() - start
    finally:
        stan.close()
    return StreamingBenchResult("stan-pub", size, acked, elapsed, errors, max_inflight)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def bench_subscribe(
    url: str,
    *,
    cluster_id: str = DEFAULT_CLUSTER_ID,
    msgs: int = 200_000,
    size: int = 128,
    max_inflight: int = 0,
    channel: str = SUB_CHANNEL,
    prefill: bool = True,
    timeout: float = 30.0,
    duration: float = 0.0,
) -> StreamingBenchResult:
    """Subscribe and ack each message; time until ``msgs`` are acked.

    ``max_inflight`` defaults to 16,384 messages, or fewer so that at most 16 MiB are in
    flight: 16,384 unacknowledged 16 KiB messages are 256 MiB, more than a server holds for
    one connection (max_pending) before it closes it as a slow consumer.

    With ``prefill`` the channel is first filled with ``msgs`` messages (for at most
    ``duration`` seconds; not timed) and the subscription starts at the first of them, so
    what earlier runs left in the channel is not read; otherwise it starts at the channel's
    first message and ``channel`` must already hold them.
    """
    if not max_inflight:
        max_inflight = max(1, min(16384, SUB_INFLIGHT_BYTES // max(size, 1)))
    start_seq = 0
    if prefill:
        probe = _Stan(url, cluster_id, f"bench-probe-{os.urandom(4).hex()}", timeout)
        try:
            probe.subscribe(channel, b"4", max_inflight=1, start=pb.NewOnly)
            msgs = bench_publish(url, cluster_id=cluster_id, msgs=msgs, size=size,
                                 channel=channel, timeout=timeout, duration=duration).msgs
            start_seq = probe.first_sequence(b"4") if msgs else 0
        finally:
            probe.close()
    stan = _Stan(url, cluster_id, f"bench-sub-{os.urandom(4).hex()}", timeout)
    conn = stan.conn
    sid = b"3"
    ack_head = pb.Ack(subject=channel).SerializeToString() + b"\x10"
    got = 0
    seen_last = 0
    last_progress = time.monotonic()
    start = time.perf_counter()
    try:
        resp = stan.subscribe(channel, sid, max_inflight,
                              pb.SequenceStart if start_seq else pb.First, start_seq)
        ack_line = b"PUB %s " % resp.ackInbox.encode()
        while got < msgs:
            if conn.recv_some(0.05):
                frames = conn.frames()
                out = []
                for fsid, _, data in frames:
                    if fsid != sid or data[0] != 0x08:
                        continue
                    seq, _ = _varint(data, 1)
                    if seq > seen_last:
                        seen_last = seq
                        got += 1
                    body = ack_head + put_uvarint(seq)
                    out.append(b"%s%d\r\n%s\r\n" % (ack_line, len(body), body))
                if out:
                    conn.send(b"".join(out))
                stan.heartbeat(frames)
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                raise BenchError(f"no message for {timeout}s ({got} of {msgs} delivered)")
        elapsed = time.perf_counter() - start
    finally:
        stan.close()
    return StreamingBenchResult("stan-sub", size, got, elapsed, 0, max_inflight)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tidings.bench.streaming",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="nats://127.0.0.1:4222")
    p.add_argument("--cluster_id", default=DEFAULT_CLUSTER_ID)
    p.add_argument("--workload", choices=("pub", "sub", "both"), default="both")
    p.add_argument("--msgs", type=int, default=200_000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--max_inflight", type=int, default=16384)
    p.add_argument("--json", action="store_true", help="print JSON lines")
    args = p.parse_args(argv)
    results = []
    if args.workload in ("pub", "both"):
        results.append(bench_publish(args.url, cluster_id=args.cluster_id, msgs=args.msgs,
                                     size=args.size, max_inflight=args.max_inflight))
    if args.workload in ("sub", "both"):
        results.append(bench_subscribe(args.url, cluster_id=args.cluster_id, msgs=args.msgs,
                                       size=args.size, max_inflight=args.max_inflight))
    for r in results:
        if args.json:
            print(json.dumps(r.as_dict()))
        else:
            print(f"{r.workload:9} {r.size:>6} B  {r.msgs:>9,} msgs  {r.seconds:7.2f} s  "
                  f"{r.msgs_per_sec:>10,.0f} msgs/s  errors {r.errors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
