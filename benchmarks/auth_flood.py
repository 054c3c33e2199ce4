#!/usr/bin/env python3
"""Failed logins against bcrypt passwords must not hold up the other clients: tidings and the
reference, each with one bcrypt user (cost 11, as `nats server passwd` makes them), take
wrong passwords at a steady rate while another client measures its PING round trip.

Prints the round trip (median, p99, max) without and with the flood, and how many of the
flood's logins were answered, for both servers.

    python benchmarks/auth_flood.py [--rate 100] [--seconds 5] [--cost 11]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bcrypt  # noqa: E402

from tests.harness import Server, start_configured  # noqa: E402

CONNECT = b'CONNECT {"user":"%s","pass":"%s","verbose":false,"pedantic":false}\r\n'


def rtts(port: int, seconds: float, stop: threading.Event | None = None) -> list[float]:
    """PING round trips of one logged-in client, one every 10 ms."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.recv(4096)
    sock.sendall(CONNECT % (b"ok", b"ok") + b"PING\r\n")
    _read_pong(sock)
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop and stop.is_set()):
        start = time.perf_counter()
        sock.sendall(b"PING\r\n")
        _read_pong(sock)
        out.append(time.perf_counter() - start)
        time.sleep(0.01)
    sock.close()
    return out


def _read_pong(sock: socket.socket) -> None:
    buf = b""
    while not buf.endswith(b"PONG\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk


def flood(port: int, rate: float, seconds: float, answered: list[int]) -> None:
    """Wrong passwords for the bcrypt user at `rate` logins per second."""
    threads = []

    def one() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.recv(4096)
                sock.sendall(CONNECT % (b"hashed", b"wrong"))
                while sock.recv(4096):
                    pass
                answered.append(1)
        except OSError:
            pass

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = threading.Thread(target=one, daemon=True)
        t.start()
        threads.append(t)
        time.sleep(1 / rate)
    for t in threads:
        t.join(30)


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"median {statistics.median(ms):7.2f} ms  p99 {p99:7.2f} ms  max {ms[-1]:7.2f} ms"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=100.0, help="failed logins per second")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--cost", type=int, default=11, help="bcrypt cost of the user's hash")
    args = p.parse_args()
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(args.cost)).decode()
    conf = ('authorization { timeout: 5, users = [\n'
            f'  {{user: hashed, password: "{hashed}"}}\n  {{user: ok, password: ok}}\n] }}\n')
    for kind in ("reference", "tidings"):
        server: Server = start_configured(kind, conf)
        try:
            quiet = rtts(server.port, 2.0)
            answered: list[int] = []
            attack = threading.Thread(target=flood, args=(server.port, args.rate, args.seconds,
                                                          answered))
            attack.start()
            loaded = rtts(server.port, args.seconds)
            attack.join()
            total = int(args.rate * args.seconds)
            print(f"{kind:9}  quiet:   {summary(quiet)}")
            print(f"{kind:9}  flooded: {summary(loaded)}   "
                  f"({len(answered)}/{total} bad logins refused)")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
