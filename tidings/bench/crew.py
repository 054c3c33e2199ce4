"""Forked load-generator processes that report back over one queue.

Every worker runs in its own process (the 'fork' start method, so the frame buffers and
arguments need no pickling) and sends ``(kind, name, payload)`` tuples: ``ready`` once it is
connected and subscribed, ``result`` with a dict at the end, or ``error`` with a message.
The parent uses the queue wait as its poll interval, so it needs no sleeps.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from tidings.bench.wire import ProtocolError

Message = tuple[str, str, Any]


class WorkerError(Exception):
    """A worker failed or did not report in time."""


def _guard(target: Callable[..., None], out: Any, name: str, args: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        target(out, name, *args)
    except Exception as e:  # report instead of dying silently; the parent decides
        detail = f"{type(e).__name__}: {e}"
        if not isinstance(e, OSError | ProtocolError):
            detail += "\n" + traceback.format_exc(limit=3)
        out.put(("error", name, detail))


class Crew:
    """The worker processes of one run, their queue, and what they reported."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("fork")
        self.out = self.ctx.Queue()
        self.procs: dict[str, mp.process.BaseProcess] = {}
        self.ready: set[str] = set()
        self.results: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []

    def __enter__(self) -> Crew:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(patient=exc_type is None)

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        proc = self.ctx.Process(target=_guard, args=(target, self.out, name, args), daemon=True)
        proc.start()
        self.procs[name] = proc

    def wait_ready(self, timeout: float) -> None:
        """Block until every worker said ``ready``; raise WorkerError on a failure."""
        deadline = time.monotonic() + timeout
        while not self.all_ready():
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = ", ".join(sorted(set(self.procs) - self.ready))
                raise WorkerError(f"not ready after {timeout:.0f}s: {waiting}")
            self.poll(min(left, 0.1))
            self.check_alive()

    def all_ready(self) -> bool:
        return self.ready >= set(self.procs)

    def check_alive(self) -> None:
        """Raise WorkerError if a worker reported an error or vanished without a word."""
        if self.errors:
            raise WorkerError(self.errors[0])
        if self.lost() and not self.poll(0.2) and self.lost():
            raise WorkerError(f"exited without a result: {', '.join(sorted(self.lost()))}")

    def poll(self, timeout: float) -> list[Message]:
        """Wait up to ``timeout`` for messages; record results and errors as they come."""
        got: list[Message] = []
        try:
            got.append(self.out.get(timeout=timeout))
            while True:
                got.append(self.out.get_nowait())
        except queue.Empty:
            pass
        for kind, name, payload in got:
            if kind == "ready":
                self.ready.add(name)
            elif kind == "result":
                self.results[name] = payload
            elif kind == "error":
                self.errors.append(f"{name}: {payload}")
                self.results.setdefault(name, {})
        return got

    def finished(self, name: str) -> bool:
        return name in self.results

    def lost(self) -> list[str]:
        """Workers that exited without a result or an error."""
        return [n for n, p in self.procs.items() if n not in self.results and not p.is_alive()]

    def collect(self, names: list[str], timeout: float) -> None:
        """Wait until the named workers have reported (or died, or the time is up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            missing = [n for n in names if n not in self.results]
            if not missing:
                return
            self.poll(0.05)
            if all(not self.procs[n].is_alive() for n in missing) and not self.poll(0.2):
                break
        for n in names:
            if n not in self.results:
                self.errors.append(f"{n}: no result")
                self.results[n] = {}

    def close(self, patient: bool = True) -> None:
        for proc in self.procs.values():
            proc.join(2.0 if patient else 0.0)
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
        self.out.close()
        self.out.join_thread()
