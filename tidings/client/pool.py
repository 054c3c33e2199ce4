"""The server pool: URLs given and discovered, failed-attempt counts, and reconnect order/delay.

Order follows the seed's connector: shuffle (unless asked to keep the order), then a stable sort
by failed attempts, so servers that failed least are tried first; the server whose connection
was just lost goes behind the others with as many failures. Back-off is per server: one that
has failed n times in a row is tried again `delay(n + 1)` after its last failure (the seed's
table by default: 0, 0, 2, 8, 32, 128, 512, 2048 ms, then 4 s), so every other server that is
due is tried before the client sleeps.

One server reached by two names is one entry: names are resolved (when the client connects,
or when INFO names a new one), and entries whose addresses (all loopback addresses counting as
one) and port match are merged; a discovered IP address that matches is not added at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import ParseResult, urlparse

from ..redact import redact_url

DEFAULT_PORT = 4222
_DEFAULT_PORTS = {"nats": DEFAULT_PORT, "tls": DEFAULT_PORT, "ws": 80, "wss": 443}
_BACKOFF_MS = (0, 0, 2, 8, 32, 128, 512, 2048)
_BACKOFF_CAP_MS = 4000
_LOOPBACK = "loopback"


def default_reconnect_delay(attempt: int) -> float:
    """Seconds to wait before the `attempt`-th (1-based) attempt in a row on one server."""
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
        raise ValueError(f"unsupported URL scheme {uri.scheme!r} in {redact_url(url)!r}")
    if not uri.hostname:
        raise ValueError(f"no host in {redact_url(url)!r}")
    if uri.port is None:
        netloc = uri.netloc
        host = netloc.rsplit("@", 1)[-1]
        if host.startswith("[") or ":" not in host:
            netloc = f"{netloc}:{_DEFAULT_PORTS[uri.scheme]}"
        uri = uri._replace(netloc=netloc)
    return uri


def _address(ip: str) -> str | None:
    """The canonical form of an IP address, or None if `ip` is not one."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    # 127.0.0.1 and ::1 are the same machine; a server on 0.0.0.0 or [::] answers both.
    return _LOOPBACK if addr.is_loopback else str(addr)


@dataclass(eq=False)
class Server:
    uri: ParseResult
    discovered: bool = False
    failed: int = 0  # consecutive failed attempts
    retry_at: float = 0.0  # loop time before which it is not tried again
    did_connect: bool = False
    tls_name: str | None = None  # hostname to verify when the URL holds an IP we learned
    addrs: frozenset[str] | None = None  # resolved addresses; None until resolved

    def __post_init__(self) -> None:
        addr = _address(self.uri.hostname or "")
        if addr is not None:
            self.addrs = frozenset((addr,))

    @property
    def key(self) -> str:
        """host:port, to recognise the same server however it was named."""
        return f"{self.uri.hostname}:{self.uri.port}"

    @property
    def url(self) -> str:
        return self.uri.geturl()

    @property
    def identity(self) -> tuple[frozenset[str], int | None]:
        """What makes two entries one server: the addresses reached (or the name) and port."""
        return (self.addrs or frozenset((self.key,)), self.uri.port)


@dataclass
class ServerPool:
    servers: list[Server] = field(default_factory=list)
    randomize: bool = True
    lost: Server | None = None  # the server whose connection was lost last

    @classmethod
    def from_urls(cls, urls: Iterable[str], randomize: bool = True) -> ServerPool:
        pool = cls(randomize=randomize)
        for url in urls:
            pool.add(parse_url(url))
        if randomize:
            random.shuffle(pool.servers)
        return pool

    def add(self, uri: ParseResult, discovered: bool = False) -> Server | None:
        """Add a server unless the pool already has it; returns the new one."""
        srv = Server(uri, discovered=discovered)
        if any(s.key == srv.key or (s.addrs is not None and s.identity == srv.identity)
               for s in self.servers):
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

    @property
    def unresolved(self) -> bool:
        """True when some entry's name still has to be resolved to recognise duplicates."""
        return any(s.addrs is None for s in self.servers)

    async def resolve(self, timeout: float) -> None:
        """Resolve the names not resolved yet, then merge entries that are one server.

        A name that does not resolve (now) is compared by name only."""
        todo = [s for s in self.servers if s.addrs is None]
        if todo:
            found = await asyncio.gather(*(_resolve(s.uri, timeout) for s in todo))
            for srv, addrs in zip(todo, found, strict=True):
                if srv.addrs is None:
                    srv.addrs = addrs
        self._merge()

    def _merge(self) -> None:
        """Keep one entry per server: the one that connected, else the first listed."""
        keep: dict[tuple[frozenset[str], int | None], Server] = {}
        for srv in self.servers:
            first = keep.setdefault(srv.identity, srv)
            if first is not srv and srv.did_connect and not first.did_connect:
                keep[srv.identity] = srv
        if len(keep) != len(self.servers):
            if self.lost is not None:
                self.lost = keep.get(self.lost.identity, self.lost)
            kept = set(map(id, keep.values()))
            self.servers = [s for s in self.servers if id(s) in kept]

    # -- reconnect order and back-off -------------------------------------------
    def candidates(self) -> list[Server]:
        """This pass's order: shuffled unless told not to, then fewest failures first; the
        server just lost goes behind the others with as many failures."""
        order = list(self.servers)
        if self.randomize:
            random.shuffle(order)
        lost = self.lost
        order.sort(key=lambda s: (s.failed, s is lost))
        return order

    def next_attempt(self, now: float) -> tuple[Server | None, float]:
        """The server to try now, or none and the seconds until one is due."""
        order = self.candidates()
        for srv in order:
            if srv.retry_at <= now:
                return srv, 0.0
        return None, min(s.retry_at for s in order) - now

    def failed(self, srv: Server, now: float, delay: Callable[[int], float]) -> None:
        """An attempt on `srv` failed: it waits `delay(n)` before its n-th attempt in a row."""
        srv.failed += 1
        srv.retry_at = now + max(delay(srv.failed + 1), 0.0)

    def connected(self, srv: Server) -> None:
        srv.failed = 0
        srv.retry_at = 0.0
        srv.did_connect = True
        if self.lost is srv:
            self.lost = None


async def _resolve(uri: ParseResult, timeout: float) -> frozenset[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(uri.hostname, uri.port, type=socket.SOCK_STREAM), timeout
        )
    except (OSError, asyncio.TimeoutError, UnicodeError):
        return frozenset()
    return frozenset(a for a in (_address(str(info[4][0])) for info in infos) if a is not None)
