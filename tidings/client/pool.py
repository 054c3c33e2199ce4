"""The server pool: URLs given and discovered, failed-attempt counts, and reconnect order/delay.

Order follows the seed's connector: shuffle (unless asked to keep the order), then a stable sort
by failed attempts, so servers that failed least are tried first. The default delay before the
n-th attempt of one reconnect episode is 0, 0, 2, 8, 32, 128, 512, 2048 ms, then 4 s.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import ParseResult, urlparse

DEFAULT_PORT = 4222
_DEFAULT_PORTS = {"nats": DEFAULT_PORT, "tls": DEFAULT_PORT, "ws": 80, "wss": 443}
_BACKOFF_MS = (0, 0, 2, 8, 32, 128, 512, 2048)
_BACKOFF_CAP_MS = 4000


def default_reconnect_delay(attempt: int) -> float:
    """Seconds to wait before the `attempt`-th (1-based) attempt of a reconnect episode."""
    if attempt <= len(_BACKOFF_MS):
        return _BACKOFF_MS[max(attempt, 1) - 1] / 1000
    return _BACKOFF_CAP_MS / 1000


def parse_url(url: str) -> ParseResult:
    """A server URL with scheme and port filled in: `host:4222` → `nats://host:4222`."""
    url = url.strip()
    if "://" not in url:
        url = "nats://" + url
    uri = urlparse(url)
    if uri.scheme not in _DEFAULT_PORTS:
        raise ValueError(f"unsupported URL scheme {uri.scheme!r} in {url!r}")
    if not uri.hostname:
        raise ValueError(f"no host in {url!r}")
    if uri.port is None:
        netloc = uri.netloc
        host = netloc.rsplit("@", 1)[-1]
        if host.startswith("[") or ":" not in host:
            netloc = f"{netloc}:{_DEFAULT_PORTS[uri.scheme]}"
        uri = uri._replace(netloc=netloc)
    return uri


@dataclass
class Server:
    uri: ParseResult
    discovered: bool = False
    failed: int = 0  # consecutive failed attempts
    did_connect: bool = False
    tls_name: str | None = None  # hostname to verify when the URL holds an IP we learned

    @property
    def key(self) -> str:
        """host:port, to recognise the same server however it was named."""
        return f"{self.uri.hostname}:{self.uri.port}"

    @property
    def url(self) -> str:
        return self.uri.geturl()


@dataclass
class ServerPool:
    servers: list[Server] = field(default_factory=list)
    randomize: bool = True

    @classmethod
    def from_urls(cls, urls: Iterable[str], randomize: bool = True) -> ServerPool:
        pool = cls(randomize=randomize)
        for url in urls:
            pool.add(parse_url(url))
        if randomize:
            random.shuffle(pool.servers)
        return pool

    def add(self, uri: ParseResult, discovered: bool = False) -> Server | None:
        """Add a server unless one with the same host:port is there; returns the new one."""
        srv = Server(uri, discovered=discovered)
        if any(s.key == srv.key for s in self.servers):
            return None
        self.servers.append(srv)
        return srv

    def add_discovered(self, connect_urls: Iterable[str], scheme: str,
                       tls_name: str | None) -> list[Server]:
        """Servers learned from INFO `connect_urls` (host:port) join the pool."""
        added: list[Server] = []
        for hostport in connect_urls:
            try:
                uri = parse_url(f"{scheme}://{hostport}")
            except ValueError:
                continue
            srv = self.add(uri, discovered=True)
            if srv is not None:
                srv.tls_name = tls_name
                added.append(srv)
        return added

    def candidates(self) -> list[Server]:
        """This pass's order: shuffled unless told not to, then fewest failures first."""
        order = list(self.servers)
        if self.randomize:
            random.shuffle(order)
        order.sort(key=lambda s: s.failed)
        return order
