"""Request/reply latency: strictly sequential round trips between two processes.

The requester publishes a request with a reply subject (its inbox) and waits for the whole
reply before sending the next one. The responder knows the inbox in advance, so it answers
each complete request frame with a pre-encoded reply without parsing it. Both sides count
frames with FrameCounter, so a PING from the server is answered and never mistaken for data.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tidings.bench.counter import FrameCounter
from tidings.bench.crew import Crew, WorkerError
from tidings.bench.procstat import CpuWindow
from tidings.bench.results import LatencyResult
from tidings.bench.settings import ProgressFn, Settings, no_progress
from tidings.bench.wire import (
    CLIENT_NAME,
    Conn,
    Endpoint,
    ProtocolError,
    make_payload,
    msg_frame_len,
    pub_frame,
    sub_frame,
    unique_subject,
)

POLL = 0.02


def _responder(out: Any, name: str, endpoint: Endpoint, subject: str, request_len: int,
               reply: bytes, stop: Any) -> None:
    conn = Conn(endpoint, f"{CLIENT_NAME}-responder")
    conn.sock.sendall(sub_frame(subject, "1"))
    conn.flush()
    sock = conn.sock
    sock.settimeout(0.05)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    counter = FrameCounter(request_len)
    out.put(("ready", name, None))
    cpu0 = time.process_time()
    answered = 0
    while not stop.value:
        try:
            n = sock.recv_into(view)
        except TimeoutError:
            continue
        if not n:
            raise ProtocolError(f"server closed the connection after {answered} requests")
        pings = counter.feed(buf, view, n)
        todo = counter.count - answered
        if todo or pings:
            sock.sendall(reply * todo + b"PONG\r\n" * pings)
            answered += todo
        if counter.failed:
            raise ProtocolError(counter.errors[-1])
    conn.close()
    out.put(("result", name, {"answered": answered, "cpu": time.process_time() - cpu0}))


def _requester(out: Any, name: str, endpoint: Endpoint, inbox: str, request: bytes,
               reply_len: int, count: int, warmup: int, duration: float, go: Any, stop: Any,
               done_v: Any) -> None:
    conn = Conn(endpoint, f"{CLIENT_NAME}-requester")
    conn.sock.sendall(sub_frame(inbox, "1"))
    conn.flush()
    sock = conn.sock
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    counter = FrameCounter(reply_len)
    clock = time.perf_counter_ns
    samples: list[int] = []
    out.put(("ready", name, None))
    if not go.wait(600) or stop.value:
        return
    cpu0 = time.process_time()
    t0 = time.monotonic()
    deadline = t0 + duration
    for i in range(warmup + count):
        t = clock()
        sock.sendall(request)
        while counter.count <= i:
            n = sock.recv_into(view)
            if not n:
                raise ProtocolError(f"server closed the connection after {i} replies")
            pings = counter.feed(buf, view, n)
            if pings:
                sock.sendall(b"PONG\r\n" * pings)
            if counter.failed:
                raise ProtocolError(counter.errors[-1])
        elapsed = clock() - t
        if i >= warmup:
            samples.append(elapsed)
        done_v.value = i + 1
        if not i & 63 and time.monotonic() > deadline and len(samples) > 0:
            break
    secs = time.monotonic() - t0
    conn.close()
    out.put(("result", name, {"samples": _summary(samples), "secs": secs,
                              "cpu": time.process_time() - cpu0}))


def _summary(samples_ns: list[int]) -> dict[str, float]:
    if not samples_ns:
        return {"count": 0}
    us = sorted(s / 1000.0 for s in samples_ns)

    def rank(q: float) -> float:  # nearest-rank percentile
        return us[min(len(us) - 1, max(0, int(q * len(us) + 0.999999) - 1))]

    return {"count": len(us), "median_us": statistics.median(us), "p90_us": rank(0.90),
            "p99_us": rank(0.99), "p999_us": rank(0.999), "min_us": us[0], "max_us": us[-1],
            "mean_us": statistics.fmean(us)}


def run_latency(size: int, settings: Settings,
                progress: ProgressFn = no_progress) -> LatencyResult:
    subject = unique_subject("req")
    inbox = unique_subject("inbox")
    payload = make_payload(size)
    request = pub_frame(subject, payload, reply=inbox)
    reply = pub_frame(inbox, payload)
    count = settings.msgs
    warmup = min(1000, max(10, count // 10))
    result = LatencyResult("latency", size, 0, 0.0)
    with Crew() as crew:
        ctx = crew.ctx
        stop, go, done_v = ctx.RawValue("b", 0), ctx.Event(), ctx.RawValue("q", 0)
        crew.spawn("responder", _responder, settings.endpoint, subject,
                   msg_frame_len(subject, "1", size, reply=inbox), reply, stop)
        crew.spawn("requester", _requester, settings.endpoint, inbox, request,
                   msg_frame_len(inbox, "1", size), count, warmup, settings.duration, go, stop,
                   done_v)
        window = CpuWindow(settings.server_pid)
        try:
            crew.wait_ready(settings.timeout)
            window.start()
            go.set()
            _drive(crew, settings, progress, done_v, warmup + count)
        except WorkerError as e:
            result.errors.append(str(e))
        finally:
            window.stop()
            stop.value = 1
            go.set()
        crew.collect(["requester", "responder"], settings.timeout)
    requester = crew.results.get("requester", {})
    summary = requester.get("samples", {})
    result.count = int(summary.pop("count", 0))
    for key, value in summary.items():
        setattr(result, key, value)
    result.secs = requester.get("secs", 0.0)
    result.errors.extend(e for e in crew.errors if e not in result.errors)
    if result.secs > 0:
        client = requester.get("cpu", 0.0) + crew.results.get("responder", {}).get("cpu", 0.0)
        result.client_cpu = client / result.secs
        result.server_cpu = window.server_cores()
        result.other_cpu = window.other_cores(client)
    return result


def _drive(crew: Crew, settings: Settings, progress: ProgressFn, done_v: Any,
           total: int) -> None:
    t_go = moved = time.monotonic()
    last_seen = -1
    while not crew.finished("requester"):
        crew.poll(POLL)
        now = time.monotonic()
        done = done_v.value
        progress(min(1.0, max((now - t_go) / settings.duration, done / total)), done)
        crew.check_alive()
        if done != last_seen:
            last_seen, moved = done, now
        elif now - moved > settings.timeout:
            raise WorkerError(f"stalled: no reply for {settings.timeout:.0f}s after {done}")
