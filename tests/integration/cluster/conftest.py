"""Clusters of real servers for the cluster tests: tidings, the reference nats-server, or both
mixed, routed on 127.0.0.1 with free ports. The same tests run on every kind, so that they
check the test as much as the server."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.messaging import synced
from tests.servers import RunningServer, free_port, start_reference, start_tidings

# A cluster is named by its servers' kinds: "t" tidings, "r" reference. The first is the
# seed the others have routes to (so a mesh between the others needs gossip).
KINDS = {
    "tidings": "ttt",
    "reference": "rrr",
    "mixed, tidings seed": "trr",
    "mixed, reference seed": "rtr",
}
_ids = itertools.count()


@dataclass
class Member:
    kind: str
    route_port: int
    port: int = field(default_factory=free_port)
    server: RunningServer | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def route_url(self) -> str:
        return f"nats://127.0.0.1:{self.route_port}"


class Cluster:
    """Servers routed to the first one (or to `seeds`), started, stopped and restarted on
    the same ports."""

    def __init__(self, kinds: str, name: str = "tc") -> None:
        self.name = name
        self.members = [Member(k, free_port()) for k in kinds]
        self.seeds: dict[int, list[int]] = {i: [0] for i in range(1, len(kinds))}

    def args(self, i: int) -> list[str]:
        m = self.members[i]
        args = ["--cluster", m.route_url]
        if self.name:  # without one the servers agree on a name of their own
            args += ["--cluster_name", self.name]
        seeds = self.seeds.get(i)
        if seeds:
            args += ["--routes", ",".join(self.members[s].route_url for s in seeds)]
        if m.kind == "t":
            args.append("--no_streaming")
        return args

    def start(self, i: int) -> RunningServer:
        m = self.members[i]
        start = start_tidings if m.kind == "t" else start_reference
        m.server = start(m.port, extra_args=self.args(i))
        return m.server

    def start_all(self) -> None:
        """The first start: a member whose server exits at once gets fresh ports and another
        try (a port chosen free may be taken by someone else before the server binds it; seen
        once in a clean-clone run). Restarts keep the ports."""
        for i, m in enumerate(self.members):
            for attempt in range(3):
                try:
                    self.start(i)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
                    m.port, m.route_port = free_port(), free_port()

    def kill(self, i: int) -> None:
        server = self.members[i].server
        assert server is not None
        server.kill()

    def stop(self) -> None:
        for m in self.members:
            if m.server is not None:
                m.server.stop()

    def url(self, i: int) -> str:
        return self.members[i].url


async def connect(url: str, **kw: object) -> NATS:
    return await nats.connect(url, **kw)  # type: ignore[arg-type]


async def eventually(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until pred() holds (messages still crossing a route), failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def wait_interest(pub: NATS, sub: NATS, subject: str, timeout: float = 30.0) -> None:
    """Until a message published on `pub` reaches a fresh subscription on `sub`: the
    route between their servers is up and carries `sub`'s interest."""
    got = asyncio.Event()

    async def seen(msg: nats.aio.msg.Msg) -> None:
        got.set()

    s = await sub.subscribe(subject, cb=seen)
    await synced(sub)
    deadline = time.monotonic() + timeout
    try:
        while not got.is_set():
            assert time.monotonic() < deadline, f"no route carried {subject} in {timeout}s"
            await pub.publish(subject, b"probe")
            try:
                await asyncio.wait_for(got.wait(), 0.1)
            except asyncio.TimeoutError:
                pass
    finally:
        await s.unsubscribe()
        await synced(sub)


async def wait_mesh(cluster: Cluster) -> None:
    """Every server reaches every other directly (one hop: a message crosses one route)."""
    n = len(cluster.members)
    ncs = [await connect(cluster.url(i)) for i in range(n)]
    try:
        for i in range(n):
            for j in range(n):
                if i != j:
                    await wait_interest(ncs[i], ncs[j], f"_mesh.{i}.{j}.{next(_ids)}")
    finally:
        for nc in ncs:
            await nc.close()


@pytest.fixture(scope="module", params=list(KINDS), ids=list(KINDS))
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A formed cluster of three, shared by a module's tests (they use their own subjects)."""
    c = Cluster(KINDS[request.param])
    try:
        c.start_all()
        asyncio.run(wait_mesh(c))
        yield c
    finally:
        c.stop()


@pytest.fixture
def fresh_cluster() -> Iterator[Callable[[str], Cluster]]:
    """Clusters a test may kill and restart servers of."""
    made: list[Cluster] = []

    def make(kinds: str) -> Cluster:
        c = Cluster(kinds)
        made.append(c)
        c.start_all()
        return c

    yield make
    for c in made:
        c.stop()
