"""Throughput workloads: pub only, pub→sub, fan-out to N subscribers, queue group of N.

One publisher process writes a pre-encoded batch of PUB frames with ``sendall`` until it has
sent ``msgs`` messages or ``duration`` seconds have passed, then does a PING/PONG barrier.
Subscriber processes ``recv_into`` a big buffer and count MSG frames from byte counts
(see counter.py). The publisher stores the final count in shared memory *before* its last
batch, so the parent knows exactly how many deliveries to wait for.

Timing: from the publisher's first byte to the last byte any subscriber received (pub only:
to the publisher's PONG, i.e. the server has read and routed everything).
"""

from __future__ import annotations

import time
from typing import Any

from tidings.bench.counter import FrameCounter
from tidings.bench.crew import Crew, WorkerError
from tidings.bench.procstat import CpuWindow
from tidings.bench.results import ThroughputResult
from tidings.bench.settings import ProgressFn, Settings, no_progress
from tidings.bench.wire import (
    CLIENT_NAME,
    Conn,
    Endpoint,
    ProtocolError,
    await_interest,
    make_payload,
    msg_frame_len,
    pub_frame,
    sub_frame,
    unique_subject,
)

THROUGHPUT_WORKLOADS = ("pub", "pubsub", "fanout", "queue")
RECV_BYTES = 4 << 20
POLL = 0.01  # parent's wake-up interval while a run is in flight


def _publisher(out: Any, name: str, endpoint: Endpoint, frame: bytes, count: int,
               duration: float, batch_bytes: int, go: Any, stop: Any, sent_v: Any,
               final_v: Any) -> None:
    conn = Conn(endpoint, f"{CLIENT_NAME}-pub")
    sock = conn.sock
    per_batch = max(1, batch_bytes // len(frame))
    batch = frame * per_batch
    out.put(("ready", name, None))
    if not go.wait(600) or stop.value:
        return
    cpu0 = time.process_time()
    t0 = time.monotonic()
    deadline = t0 + duration
    sent = 0
    while sent < count:
        n = min(per_batch, count - sent)
        last = sent + n >= count or time.monotonic() >= deadline
        if last:
            final_v.value = sent + n  # published before the bytes leave: receivers never overshoot
        sock.sendall(batch if n == per_batch else frame * n)
        sent += n
        sent_v.value = sent
        if last:
            break
    t_sent = time.monotonic()
    conn.flush()
    t_pong = time.monotonic()
    cpu = time.process_time() - cpu0
    conn.close()
    out.put(("result", name, {"sent": sent, "t0": t0, "t_sent": t_sent, "t_pong": t_pong,
                              "cpu": cpu}))


def _subscriber(out: Any, name: str, endpoint: Endpoint, subject: str, queue: str | None,
                frame_len: int, idx: int, counts: Any, stop: Any) -> None:
    conn = Conn(endpoint, f"{CLIENT_NAME}-{name}")
    conn.sock.sendall(sub_frame(subject, "1", queue))
    conn.flush()  # the subscription is registered before the publisher starts
    if conn.buf:
        raise ProtocolError(f"unexpected data after SUB: {bytes(conn.buf[:80])!r}")
    sock = conn.sock
    sock.settimeout(0.05)  # lets the loop notice `stop`
    buf = bytearray(RECV_BYTES)
    view = memoryview(buf)
    counter = FrameCounter(frame_len)
    out.put(("ready", name, None))
    cpu0 = time.process_time()
    t_last = 0.0
    errors: list[str] = []
    while not stop.value:
        try:
            n = sock.recv_into(view)
        except TimeoutError:
            continue
        if not n:
            errors.append(f"server closed the connection after {counter.count} msgs")
            break
        t_last = time.monotonic()
        pings = counter.feed(buf, view, n)
        counts[idx] = counter.count
        if pings:
            sock.sendall(b"PONG\r\n" * pings)
        if counter.failed:
            break
    end_problem = counter.check_end()
    errors = counter.errors + errors + ([end_problem] if end_problem else [])
    cpu = time.process_time() - cpu0
    conn.close()
    out.put(("result", name, {"count": counter.count, "t_last": t_last, "cpu": cpu,
                              "errors": errors}))


def subscriber_count(workload: str, settings: Settings) -> int:
    return {"pub": 0, "pubsub": 1}.get(workload, settings.subs)


def run_throughput(workload: str, size: int, settings: Settings,
                   progress: ProgressFn = no_progress) -> ThroughputResult:
    if workload not in THROUGHPUT_WORKLOADS:
        raise ValueError(f"not a throughput workload: {workload}")
    nsubs = subscriber_count(workload, settings)
    copies = nsubs if workload == "fanout" else min(nsubs, 1)  # deliveries per message
    subject = unique_subject(workload)
    frame = pub_frame(subject, make_payload(size))
    frame_len = msg_frame_len(subject, "1", size)
    queue = "workers" if workload == "queue" else None
    result = ThroughputResult(workload, size, nsubs, 0, 0, 0.0)
    with Crew() as crew:
        ctx = crew.ctx
        sent_v, final_v = ctx.RawValue("q", 0), ctx.RawValue("q", -1)
        stop, go = ctx.RawValue("b", 0), ctx.Event()
        counts = ctx.RawArray("q", max(1, nsubs))
        subs = [f"sub{i}" for i in range(nsubs)]
        sub_endpoint = settings.sub_endpoint or settings.endpoint
        for i, name in enumerate(subs):
            crew.spawn(name, _subscriber, sub_endpoint, subject, queue, frame_len, i,
                       counts, stop)
        crew.spawn("pub", _publisher, settings.endpoint, frame, settings.msgs,
                   settings.duration, settings.batch_bytes, go, stop, sent_v, final_v)
        window = CpuWindow(settings.server_pid)
        try:
            crew.wait_ready(settings.timeout)
            if sub_endpoint != settings.endpoint:
                await_interest(settings.endpoint, sub_endpoint, settings.timeout)
            window.start()
            go.set()
            _drive(crew, settings, progress, sent_v, final_v, counts, nsubs, copies)
        except (WorkerError, ProtocolError, OSError) as e:
            result.errors.append(str(e))
        finally:
            window.stop()
            stop.value = 1
            go.set()
        crew.collect(subs + ["pub"], settings.timeout)
        _fill(result, crew, window, subs, copies)
    return result


def _drive(crew: Crew, settings: Settings, progress: ProgressFn, sent_v: Any, final_v: Any,
           counts: Any, nsubs: int, copies: int) -> None:
    """Poll until every expected delivery arrived; raise WorkerError on failure or stall."""
    t_go = moved = time.monotonic()
    last_seen = -1
    planned = settings.msgs * max(copies, 1)
    while True:
        crew.poll(POLL)
        now = time.monotonic()
        delivered = sum(counts) if nsubs else sent_v.value
        progress(min(1.0, max((now - t_go) / settings.duration, delivered / planned)), delivered)
        crew.check_alive()
        if nsubs and any(crew.finished(n) for n in crew.procs if n != "pub"):
            raise WorkerError("a subscriber stopped early")
        final = final_v.value
        if crew.finished("pub") and (nsubs == 0 or delivered >= final * copies):
            return
        if delivered + sent_v.value != last_seen:
            last_seen, moved = delivered + sent_v.value, now
        elif now - moved > settings.timeout:
            raise WorkerError(f"stalled: nothing moved for {settings.timeout:.0f}s "
                              f"({delivered} delivered)")


def _fill(result: ThroughputResult, crew: Crew, window: CpuWindow, subs: list[str],
          copies: int) -> None:
    pub = crew.results.get("pub", {})
    sub_results = [crew.results.get(n, {}) for n in subs]
    result.sent = pub.get("sent", 0)
    result.per_sub = [s.get("count", 0) for s in sub_results]
    result.delivered = sum(result.per_sub) if subs else result.sent
    t0 = pub.get("t0")
    t_end = max((s.get("t_last", 0.0) for s in sub_results), default=0.0) if subs \
        else pub.get("t_pong", 0.0)
    result.secs = t_end - t0 if t0 and t_end else 0.0
    for s in sub_results:
        result.errors.extend(s.get("errors", []))
    result.errors.extend(e for e in crew.errors if e not in result.errors)
    expected = result.sent * copies
    if subs and result.delivered != expected:
        result.errors.append(f"delivered {result.delivered} of {expected} expected")
    if result.secs > 0:
        pub_cpu = pub.get("cpu", 0.0)
        sub_cpu = sum(s.get("cpu", 0.0) for s in sub_results)
        result.pub_cpu = pub_cpu / result.secs
        result.sub_cpu = sub_cpu / result.secs if subs else None
        result.server_cpu = window.server_cores()
        result.other_cpu = window.other_cores(pub_cpu + sub_cpu)
