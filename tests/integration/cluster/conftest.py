"""Clusters of real servers for the cluster tests: tidings, the reference nats-server, or both
mixed, routed on 127.0.0.1, every port the server's own choice. The same tests run on every
kind, so that they check the test as much as the server.

Route ports are read back from each server's log, so a server can only be given routes to
servers started before it. A seed that names a later member (two servers routing to each
other, `seeds = {0: [1], 1: [0]}`) is given by restarting the earlier member, on its same
ports, once the later one listens: both then solicit each other, as configured."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.harness import Server, start_reference, start_tidings
from tests.messaging import synced

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
    server: Server | None = None

    @property
    def port(self) -> int:
        """Its client port (once started: the servers choose their ports)."""
        assert self.server is not None, "not started yet"
        return self.server.port

    @property
    def route_port(self) -> int:
        assert self.server is not None, "not started yet"
        return self.server.ports.get("route") or int(self.server.cluster_url.rsplit(":", 1)[1])

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
        self.members = [Member(k) for k in kinds]
        self.seeds: dict[int, list[int]] = {i: [0] for i in range(1, len(kinds))}

    def args(self, i: int) -> list[str]:
        """More flags of member i (the cluster's listener and routes are its options)."""
        args = ["--cluster_name", self.name] if self.name else []
        # (without a name the servers agree on a name of their own)
        if self.members[i].kind == "t":
            args.append("--no_streaming")
        return args

    def _routes(self, i: int) -> list[str]:
        """Routes to the seeds of member i that listen already."""
        return [self.members[s].route_url for s in self.seeds.get(i, ())
                if self.members[s].server is not None]

    def start(self, i: int) -> Server:
        """Start member i: the first time on ports of its own, then on the same ones."""
        m = self.members[i]
        if m.server is not None:
            return m.server.start()
        start = start_tidings if m.kind == "t" else start_reference
        m.server = start(extra_args=self.args(i), cluster=True, routes=self._routes(i))
        return m.server

    def start_all(self) -> None:
        """Start every member in order; then a member whose seeds include a later one is
        restarted with the routes to all of its seeds."""
        for i in range(len(self.members)):
            self.start(i)
        for i, m in enumerate(self.members):
            routes = self._routes(i)
            assert m.server is not None
            if routes != m.server.options.route_urls:
                m.server.stop()
                m.server.options.routes = routes
                m.server.start()

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
