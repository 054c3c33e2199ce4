"""The workload catalogue: names, default sizes, parsing of the lists, and running one spec."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidings.bench.jetstream import JS_WORKLOADS, run_jetstream
from tidings.bench.latency import run_latency
from tidings.bench.memory import run_memory
from tidings.bench.results import Result, ThroughputResult
from tidings.bench.settings import ProgressFn, Settings, no_progress
from tidings.bench.throughput import THROUGHPUT_WORKLOADS, run_throughput, subscriber_count

# Streaming: publish with async PubAcks, and subscribe-and-ack from the first message.
STREAMING_WORKLOADS = ("stan-pub", "stan-sub")
WORKLOADS = (*THROUGHPUT_WORKLOADS, "latency", "memory", *STREAMING_WORKLOADS, *JS_WORKLOADS)
DEFAULT_WORKLOADS = (*THROUGHPUT_WORKLOADS, "latency")
DEFAULT_SIZES = "16,128,1KiB,16KiB,64KiB"
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20}


@dataclass(frozen=True)
class Spec:
    workload: str
    size: int = 0  # payload bytes; unused by the memory workload
    cluster: bool = False  # publisher and subscribers on two servers of a cluster

    def title(self, settings: Settings) -> str:
        if self.workload == "memory":
            return f"memory {settings.conns:,} conns x {settings.conn_subs} subs"
        name = self.workload
        if name in ("fanout", "queue"):
            name += str(subscriber_count(name, settings))
        across = " across 2 servers" if self.cluster else ""
        return f"{name} {format_size(self.size)}{across}{js_shape(self.workload, settings)}"


def js_shape(workload: str, settings: Settings) -> str:
    """How a JetStream workload runs, for its title: storage, ack window or consumer kind."""
    js = settings.jetstream
    if workload == "js-pub":
        acks = "sync" if js.window == 1 else f"window {js.window}"
        return f" ({js.storage}, {acks})"
    if workload == "js-sub":
        return f" ({js.storage}, {'push' if js.push else f'pull batch {js.batch}'})"
    return ""


def format_size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"bad size {text!r} (examples: 16, 128B, 1KiB, 64K)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def parse_workloads(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    return names


def plan(workloads: list[str], sizes: list[int]) -> list[Spec]:
    specs: list[Spec] = []
    for workload in workloads:
        if workload == "memory":
            specs.append(Spec("memory"))
        else:
            specs.extend(Spec(workload, size) for size in sizes)
    return specs


def run_spec(spec: Spec, settings: Settings, progress: ProgressFn = no_progress) -> Result:
    if spec.workload == "latency":
        return run_latency(spec.size, settings, progress)
    if spec.workload == "memory":
        return run_memory(settings, progress)
    if spec.workload in JS_WORKLOADS:
        return run_jetstream(spec.workload, spec.size, settings, progress)
    if spec.workload in STREAMING_WORKLOADS:
        return run_streaming(spec.workload, spec.size, settings)
    return run_throughput(spec.workload, spec.size, settings, progress)


def run_streaming(workload: str, size: int, settings: Settings) -> Result:
    """A streaming workload against the streaming server behind the URL (cluster id from
    TIDINGS_BENCH_CLUSTER_ID, default test-cluster), publishing for at most --duration into
    one channel per workload that every run reuses."""
    import os

    from tidings.bench.streaming import bench_publish, bench_subscribe

    cluster_id = os.environ.get("TIDINGS_BENCH_CLUSTER_ID", "test-cluster")
    url = str(settings.endpoint)
    msgs = min(settings.msgs, 200_000)
    bench = bench_publish if workload == "stan-pub" else bench_subscribe
    r = bench(url, cluster_id=cluster_id, msgs=msgs, size=size, timeout=settings.timeout,
              duration=settings.duration)
    errors = [f"{r.errors} errors"] if r.errors else []
    return ThroughputResult(workload, size, 1 if workload == "stan-sub" else 0, r.msgs, r.msgs,
                            r.seconds, errors=errors)
