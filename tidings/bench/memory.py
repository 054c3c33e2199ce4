"""Memory workload: the server's resident memory while it holds many idle subscribers.

A few forked processes open the connections over raw sockets, in batches: each connection
sends CONNECT, its subscriptions (distinct subjects) and a PING up front, and counts as open
once its PONG has arrived. With every connection confirmed, the parent reads VmRSS of the
server from /proc/<pid>/status. Connections are closed with SO_LINGER 0 so that repeated runs
do not pile up TIME_WAIT sockets.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from tidings.bench.crew import Crew, WorkerError
from tidings.bench.procstat import memory_kib, raise_nofile_limit
from tidings.bench.results import MemoryResult
from tidings.bench.settings import ProgressFn, Settings, no_progress
from tidings.bench.wire import CLIENT_NAME, Endpoint, ProtocolError, sub_frame

BATCH = 100  # connections handshaking at once per worker
CONNS_PER_WORKER = 2500
POLL = 0.05


def _await_pong(sock: socket.socket) -> None:
    data = b""
    while b"PONG\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ProtocolError(f"server closed an idle connection: {data[-200:]!r}")
        data += chunk
        if b"-ERR" in data:
            line = data[data.index(b"-ERR") :].split(b"\r\n")[0]
            raise ProtocolError(line.decode(errors="replace"))


def _holder(out: Any, name: str, endpoint: Endpoint, first: int, n: int, subs: int, idx: int,
            opened: Any, release: Any, timeout: float) -> None:
    linger = struct.pack("ii", 1, 0)
    connect = endpoint.connect_options(f"{CLIENT_NAME}-idle")
    socks: list[socket.socket] = []
    for start in range(first, first + n, BATCH):
        batch = []
        for c in range(start, min(first + n, start + BATCH)):
            sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            hello = b"".join(sub_frame(f"idle.{c}.{j}", str(j + 1)) for j in range(subs))
            sock.sendall(connect + hello + b"PING\r\n")
            batch.append(sock)
        for sock in batch:
            _await_pong(sock)
        socks.extend(batch)
        opened[idx] = len(socks)
    out.put(("ready", name, None))
    release.wait(600)
    for sock in socks:
        sock.close()
    out.put(("result", name, {"opened": len(socks)}))


def run_memory(settings: Settings, progress: ProgressFn = no_progress) -> MemoryResult:
    result = MemoryResult("memory", settings.conns, settings.conn_subs)
    pid = settings.server_pid
    if pid is None:
        result.errors.append("the memory workload needs the server pid (--server-pid)")
        return result
    limit = raise_nofile_limit()
    workers = max(1, -(-settings.conns // CONNS_PER_WORKER))
    if settings.conns // workers + 16 > limit:
        result.errors.append(f"open-files limit {limit} is too low for {settings.conns} conns")
        return result
    result.baseline_mib = memory_kib(pid)["VmRSS"] / 1024
    with Crew() as crew:
        ctx = crew.ctx
        opened, release = ctx.RawArray("q", workers), ctx.Event()
        share, extra = divmod(settings.conns, workers)
        first = 0
        for i in range(workers):
            n = share + (i < extra)
            crew.spawn(f"holder{i}", _holder, settings.endpoint, first, n, settings.conn_subs,
                       i, opened, release, settings.timeout)
            first += n
        t0 = time.monotonic()
        try:
            _drive(crew, settings, progress, opened)
            result.setup_secs = time.monotonic() - t0
            time.sleep(settings.settle)  # let the server's allocator/GC settle after the storm
            mem = memory_kib(pid)
            result.rss_mib = mem["VmRSS"] / 1024
            result.hwm_mib = mem.get("VmHWM", 0) / 1024
        except (WorkerError, OSError) as e:
            result.errors.append(str(e))
        finally:
            result.opened = sum(opened)
            release.set()
        crew.collect(list(crew.procs), settings.timeout)
        result.errors.extend(e for e in crew.errors if e not in result.errors)
    return result


def _drive(crew: Crew, settings: Settings, progress: ProgressFn, opened: Any) -> None:
    moved = time.monotonic()
    last_seen = -1
    while not crew.all_ready():
        crew.poll(POLL)
        now = time.monotonic()
        done = sum(opened)
        progress(done / settings.conns, done)
        crew.check_alive()
        if done != last_seen:
            last_seen, moved = done, now
        elif now - moved > settings.timeout:
            raise WorkerError(f"stalled at {done} connections")
