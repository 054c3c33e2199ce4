"""tidings bench: a raw-socket load generator and benchmark for NATS-protocol servers.

Workloads (pub, pubsub, fanout, queue, latency, memory) run in forked processes that write
pre-encoded frames and count received bytes, so the server, not Python, is what is measured.
`cli` is the `tidings bench` command; `runner.run_spec` is the library entry point that
benchmarks/compare.py uses.
"""

from tidings.bench.results import LatencyResult, MemoryResult, Result, ThroughputResult
from tidings.bench.runner import WORKLOADS, Spec, run_spec
from tidings.bench.settings import Settings
from tidings.bench.wire import Endpoint

__all__ = ["Endpoint", "LatencyResult", "MemoryResult", "Result", "Settings", "Spec",
           "ThroughputResult", "WORKLOADS", "run_spec"]
