"""A live progress bar (rich) for a single run, shown only once the run lasts over a second.

Refreshes happen in the caller's thread (auto_refresh off): the bench forks worker processes
while a bar may be up, and a background refresh thread could hold a lock across the fork.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

REFRESH = 0.1


class RunProgress:
    def __init__(self, console: Console, title: str, unit: str = "msgs", delay: float = 1.0):
        self.console = console
        self.title = title
        self.unit = unit
        self.delay = delay
        self.enabled = console.is_terminal
        self._t0 = time.monotonic()
        self._shown = 0.0
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        self._t0 = time.monotonic()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __call__(self, fraction: float, count: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._bar is None:
            if now - self._t0 < self.delay:
                return
            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TextColumn(f"{{task.fields[count]:>12,}} {self.unit}"), TimeElapsedColumn(),
                console=self.console, transient=True, auto_refresh=False)
            self._task = self._bar.add_task(self.title, total=1.0, completed=fraction, count=count)
            self._bar.start()
        if now - self._shown >= REFRESH and self._task is not None:
            self._bar.update(self._task, completed=fraction, count=count)
            self._bar.refresh()
            self._shown = now

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
