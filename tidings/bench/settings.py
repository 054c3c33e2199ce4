"""What a bench run needs to know: the server, the bounds of each run and the workload shape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tidings.bench.wire import Endpoint

# Called by a running workload about every 10 ms with (fraction done, messages so far).
ProgressFn = Callable[[float, int], None]


def no_progress(fraction: float, count: int) -> None:
    pass


@dataclass(frozen=True)
class JetStreamSettings:
    """The JetStream workloads' shape (`tidings bench --js`; see jetstream.py)."""

    stream: str = "benchstream"
    subject: str = "benchsubject"  # what the stream captures and js-pub publishes to
    storage: str = "file"  # or "memory"
    window: int = 256  # PubAcks outstanding at most (1: synchronous publishing)
    batch: int = 500  # messages per pull request
    push: bool = False  # js-sub from a push consumer instead of pull requests
    fresh: bool = False  # the stream created anew for a run and deleted after it


@dataclass(frozen=True)
class Settings:
    endpoint: Endpoint = field(default_factory=lambda: Endpoint("127.0.0.1", 4222))
    # Subscribers connect here instead (another server of the same cluster), when set.
    sub_endpoint: Endpoint | None = None
    msgs: int = 5_000_000  # per run; a run also stops after `duration`
    duration: float = 3.0  # seconds of publishing (or of requests) per run
    subs: int = 4  # subscribers for fan-out and queue-group workloads
    server_pid: int | None = None  # enables server CPU and memory figures
    timeout: float = 10.0  # give up when nothing moves for this long
    batch_bytes: int = 1 << 20  # pre-encoded frames per sendall
    conns: int = 10_000  # memory workload: idle connections
    conn_subs: int = 10  # memory workload: subscriptions per connection
    settle: float = 1.0  # memory workload: pause before reading the server's RSS
    jetstream: JetStreamSettings = field(default_factory=JetStreamSettings)
