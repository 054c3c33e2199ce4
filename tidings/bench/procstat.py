"""CPU and memory accounting from /proc (Linux), plus the open-files limit.

CPU figures are in cores: 1.0 means one core was busy for the whole run.
"""

from __future__ import annotations

import os
import resource
import time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds used so far by ``pid``, or None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_busy_seconds() -> float | None:
    """Busy CPU seconds summed over all cores since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            values = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / _TICK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and friends of ``pid`` in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key.startswith("Vm") or key.startswith("Rss"):
                value = rest.split()
                if value and value[0].isdigit():
                    out[key] = int(value[0])
    return out


def raise_nofile_limit() -> int:
    """Raise the soft open-files limit to the hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


class CpuWindow:
    """Wall time, server CPU, machine CPU and our own CPU between start() and stop()."""

    def __init__(self, server_pid: int | None):
        self.server_pid = server_pid
        self.wall = 0.0
        self.server: float | None = None
        self.machine: float | None = None
        self.own = 0.0
        self._start: tuple[float, float | None, float | None, float] | None = None

    def start(self) -> None:
        self._start = (time.monotonic(), cpu_seconds(self.server_pid), machine_busy_seconds(),
                       time.process_time())

    def stop(self) -> None:
        if self._start is None:
            return
        t, server0, machine0, own0 = self._start
        self.wall = time.monotonic() - t
        server, machine = cpu_seconds(self.server_pid), machine_busy_seconds()
        self.server = server - server0 if server is not None and server0 is not None else None
        self.machine = machine - machine0 if machine is not None and machine0 is not None else None
        self.own = time.process_time() - own0
        self._start = None

    def server_cores(self) -> float | None:
        return self.server / self.wall if self.server is not None and self.wall > 0 else None

    def other_cores(self, loadgen_seconds: float) -> float | None:
        """CPU used by everything except the server and the load generator (a noise gauge)."""
        if self.machine is None or self.server is None or self.wall <= 0:
            return None
        return max(0.0, self.machine - self.server - self.own - loadgen_seconds) / self.wall
