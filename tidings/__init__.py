"""tidings: a NATS-compatible messaging system in Python."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `tidings.serve()` is imported when first used: `import tidings` stays cheap.
    if name == "serve":
        from .testing.inprocess import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
