#!/usr/bin/env python3
"""Start-up as a test harness sees it: from exec to the first INFO on the client port, for
the reference nats-server, `tidings server --no_streaming` and `tidings server` with
embedded streaming on the memory store; the median of 20 starts each, alternating, and the
ratio to the reference.

    python benchmarks/startup.py [--runs 20]

Python's compiled bytecode is written on a first, uncounted start of each command (as an
installed package has it), whatever PYTHONDONTWRITEBYTECODE says.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout
    sys.path.insert(0, str(ROOT))

from tests.harness import nats_server_binary  # noqa: E402


def free_port() -> int:
    """A port nobody listens on now: what is timed is exec to the first INFO on a port
    known before the start (reading a port back from the log would time the log too)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TIDINGS = [sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1", "-p", "{port}"]
COMMANDS = {
    "reference": [nats_server_binary(), "-a", "127.0.0.1", "-p", "{port}"],
    "tidings --no_streaming": [*TIDINGS, "--no_streaming"],
    "tidings, streaming (memory)": [*TIDINGS, "--store", "memory"],
}
TARGETS = {"tidings --no_streaming": 0.100, "tidings, streaming (memory)": 0.150}


def first_info(command: list[str], env: dict[str, str]) -> float:
    """Seconds from exec to the first INFO line read from the new server."""
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in command]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=ROOT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    if sock.recv(4096).startswith(b"INFO"):
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.0005)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():
        first_info(command, env)  # writes the bytecode; not counted
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            times[name].append(first_info(command, env))
    ref = statistics.median(times["reference"])
    print(f"{'exec -> first INFO (median of ' + str(args.runs) + ')':<34}{'ms':>8}{'ratio':>8}"
          f"{'target':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        target = TARGETS.get(name)
        verdict = "" if target is None else (
            f"{'<=' if median <= target else '>'} {target * 1000:.0f}")
        print(f"{name:<34}{median * 1000:>8.1f}{median / ref:>8.1f}{verdict:>9}")
    if any(name.startswith("__editable__") for name in sys.modules):
        print("note: this is an editable install (pip install -e): its import hook adds about "
              "10 ms to every Python start; a regular install does not have it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
