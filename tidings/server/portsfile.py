"""The ports file (`ports_file_dir`, --ports_file_dir), as the reference writes it: once the
server is ready, `DIR/<executable>_<pid>.ports` holds a JSON object with the URLs of each of
its listeners ("nats", "monitoring", "cluster", "websocket", the ones it has), so that a test
launcher (nats.js's) learns the ports that `-1` picked. It is removed when the server stops,
and moved when a reload changes the directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..oserrors import reason

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("tidings.server")

# The reference's keys, in its order (Ports in server.go); "profile" is Go's profiler's.
KEYS = ("nats", "monitoring", "cluster", "profile", "websocket")


def executable_name() -> str:
    """The name the server was started as: `tidings` (also as `python -m tidings`), or that
    of a script or a link that runs it (`nats-server`, for a launcher that expects one)."""
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("tidings")
    if path.name == "__main__.py":
        return path.parent.name
    return path.name


def ports_file_path(directory: str) -> str:
    return os.path.join(directory, f"{executable_name()}_{os.getpid()}.ports")


class PortsFile:
    """The ports file of one server: `write()` once it is ready, `remove()` when it stops."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.path = ""  # the file written, until removed
        self.ready = False

    def ports(self) -> dict[str, list[str]]:
        """The URLs of each listener, under the reference's keys."""
        found: dict[str, list[str]] = {}
        for listener in self.server.listeners:
            found.update(listener.ports())
        return {key: found[key] for key in KEYS if found.get(key)}

    def write(self) -> None:
        """The server is ready: write the file, when ports_file_dir names a directory. A
        failure is logged, as the reference logs it; the server runs on."""
        self.ready = True
        directory = self.server.options.ports_file_dir
        if not directory:
            return
        path = ports_file_path(directory)
        partial = f"{path}.partial"  # renamed into place: a reader never sees half of it
        try:
            with open(partial, "w", encoding="utf-8") as f:
                json.dump(self.ports(), f, separators=(",", ":"))
            os.replace(partial, path)
        except OSError as exc:
            log.error("Error writing ports file (%s): %s", path, reason(exc))
            with contextlib.suppress(OSError):
                os.unlink(partial)
            return
        self.path = path

    def remove(self) -> None:
        path, self.path = self.path, ""
        if path:
            try:
                os.unlink(path)
            except OSError as exc:
                log.error("Error cleaning up ports file %s: %s", path, reason(exc))

    def moved(self) -> None:
        """A reload changed ports_file_dir: the file goes from the old one to the new one."""
        if self.ready:
            self.remove()
            self.write()
