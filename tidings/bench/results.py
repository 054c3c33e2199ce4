"""Result records of the bench workloads; each flattens to a dict for JSON and CSV."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


def _per_s(count: float, secs: float) -> float:
    return count / secs if secs > 0 else math.nan


@dataclass
class ThroughputResult:
    """pub, pubsub, fanout or queue. CPU figures are in cores (1.0 = one busy core)."""

    workload: str
    size: int
    subs: int
    sent: int
    delivered: int
    secs: float
    server_cpu: float | None = None
    pub_cpu: float | None = None
    sub_cpu: float | None = None
    other_cpu: float | None = None
    per_sub: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.workload in ("fanout", "queue"):
            return f"{self.workload}{self.subs}"
        return self.workload

    @property
    def msgs_per_s(self) -> float:
        """Delivered messages per second (for pub only: messages the server consumed)."""
        return _per_s(self.delivered, self.secs)

    @property
    def mib_per_s(self) -> float:
        return self.msgs_per_s * self.size / (1 << 20)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(kind="throughput", label=self.label, msgs_per_s=self.msgs_per_s,
                 mib_per_s=self.mib_per_s, pub_msgs_per_s=_per_s(self.sent, self.secs))
        return d


@dataclass
class LatencyResult:
    """Sequential request/reply round trips, in microseconds."""

    workload: str
    size: int
    count: int
    secs: float
    median_us: float = math.nan
    p90_us: float = math.nan
    p99_us: float = math.nan
    p999_us: float = math.nan
    min_us: float = math.nan
    max_us: float = math.nan
    mean_us: float = math.nan
    server_cpu: float | None = None
    client_cpu: float | None = None
    other_cpu: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.workload

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(kind="latency", label=self.label)
        return d


@dataclass
class MemoryResult:
    """Server resident memory while holding many idle connections with subscriptions."""

    workload: str
    conns: int
    subs_per_conn: int
    opened: int = 0
    setup_secs: float = math.nan
    baseline_mib: float = math.nan
    rss_mib: float = math.nan
    hwm_mib: float = math.nan
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.workload

    @property
    def size(self) -> int:
        return 0

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(kind="memory", label=self.label, size=0)
        return d


Result = ThroughputResult | LatencyResult | MemoryResult
