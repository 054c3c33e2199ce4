"""Listening sockets as the reference's Go listeners make them, and the URLs a listener is
reached at (for the ports file, portsfile.py). Every port of the server (clients, monitoring,
routes, WebSocket) is bound here.

A wildcard host (0.0.0.0, :: or none, the default) is one dual-stack socket on [::] with
IPV6_V6ONLY off, as Go listens for "tcp" on 0.0.0.0: IPv4 and IPv6 clients alike on one port,
so that a client that tries `localhost` as ::1 first is accepted. Where the machine has no
IPv6, it is 0.0.0.0. Any other host is resolved and its first address bound, an IPv4 one if
there is one (as Go's listener picks).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import ipaddress
import socket
import sys
from typing import Any

WILDCARDS = ("", "0.0.0.0", "::")
# The errors of a machine without IPv6 (the wildcard falls back to 0.0.0.0 then).
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


async def listening_socket(host: str, port: int, backlog: int = 4096) -> socket.socket:
    """A non-blocking socket listening on host:port (port 0: any free port), to hand to
    `loop.create_server(sock=...)` or the TLS listener. OSError when it cannot be bound."""
    sock = _dual_stack(port) if host in WILDCARDS else None
    if sock is None:
        sock = _bound(await _address(host, port))
    try:
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _dual_stack(port: int) -> socket.socket | None:
    """A socket bound to [::]:port taking IPv4 too; None where IPv6 is not there."""
    if not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    except (OSError, AttributeError):
        sock.close()
        return None  # a system without dual-stack sockets
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::", port))
    except OSError as exc:
        sock.close()
        if exc.errno in _NO_IPV6:
            return None
        raise
    return sock


async def _address(host: str, port: int) -> tuple[int, tuple[object, ...]]:
    """(family, address) to bind for `host`: its first IPv4 address, else its first."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(errno.EADDRNOTAVAIL, f"no address for {host!r}")
    family, _, _, _, address = next(
        (info for info in infos if info[0] == socket.AF_INET), infos[0])
    return family, address


def _bound(where: tuple[int, tuple[object, ...]]) -> socket.socket:
    family, address = where
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


# -- the URLs a listener is reached at ---------------------------------------------------------
def join_host_port(host: str, port: int) -> str:
    """host:port, an IPv6 host in brackets (Go's net.JoinHostPort)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listener_urls(scheme: str, bound: tuple[Any, ...]) -> list[str]:
    """`scheme://host:port` for each address a listener bound to `bound` (its getsockname())
    is reached at: that one, or, for a wildcard, every address of the machine's interfaces
    (as the reference's ports file lists them)."""
    host, port = bound[0], bound[1]
    return [f"{scheme}://{join_host_port(h, port)}" for h in _reached_at(host)]


def _reached_at(host: str) -> list[str]:
    try:
        unspecified = ipaddress.ip_address(host.partition("%")[0]).is_unspecified
    except ValueError:
        unspecified = False
    if not unspecified:
        return [host]
    try:
        return interface_addresses()
    except (OSError, AttributeError, TypeError, ValueError):  # (no getifaddrs here)
        return _fallback_addresses()


class _IfAddrs(ctypes.Structure):
    """struct ifaddrs (getifaddrs(3)); the same layout on Linux and the BSDs."""


_IfAddrs._fields_ = [
    ("ifa_next", ctypes.POINTER(_IfAddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.c_void_p),
    ("ifa_netmask", ctypes.c_void_p),
    ("ifa_ifu", ctypes.c_void_p),
    ("ifa_data", ctypes.c_void_p),
]


def interface_addresses() -> list[str]:
    """The IPv4 and IPv6 addresses of the machine's interfaces, interface by interface in
    their index order (Go's net.Interfaces and Addrs). OSError when they cannot be read."""
    libc = ctypes.CDLL(None, use_errno=True)  # the C library the process runs with
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        raise OSError(ctypes.get_errno(), "getifaddrs failed")
    found: list[tuple[int, str]] = []
    try:
        node = head
        while node:
            entry = node.contents
            address = _sockaddr_ip(entry.ifa_addr)
            if address is not None and entry.ifa_name:
                found.append((_index(entry.ifa_name.decode(errors="replace")), address))
            node = entry.ifa_next
    finally:
        libc.freeifaddrs(head)
    found.sort(key=lambda item: item[0])  # stable: each interface's in the system's order
    return [address for _, address in found]


def _index(name: str) -> int:
    try:
        return socket.if_nametoindex(name.partition(":")[0])  # (an IPv4 alias: eth0:1)
    except OSError:
        return sys.maxsize


def _sockaddr_ip(pointer: int | None) -> str | None:
    """The IP address of a struct sockaddr, when it is an IPv4 or IPv6 one."""
    if not pointer:
        return None
    head = ctypes.string_at(pointer, 2)
    bsd = sys.platform.startswith(("darwin", "freebsd", "openbsd", "netbsd", "dragonfly"))
    family = head[1] if bsd else int.from_bytes(head, sys.byteorder)
    if family == socket.AF_INET:
        return str(ipaddress.IPv4Address(ctypes.string_at(pointer + 4, 4)))
    if family == socket.AF_INET6:
        return str(ipaddress.IPv6Address(ctypes.string_at(pointer + 8, 16)))
    return None


def _fallback_addresses() -> list[str]:
    """Where interfaces cannot be listed: the loopback addresses and those the machine's
    name resolves to."""
    hosts = ["127.0.0.1", *(["::1"] if socket.has_ipv6 else [])]
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return hosts
    return hosts + sorted({str(info[4][0]) for info in infos} - set(hosts))
