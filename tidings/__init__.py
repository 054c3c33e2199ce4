"""tidings: a NATS-compatible messaging system in Python."""

from __future__ import annotations

from .lazy import lazy_names

__version__ = "0.1.0"

# `tidings.serve()` is imported when first used: `import tidings` stays cheap.
__getattr__ = lazy_names(__name__, {"serve": ".testing.inprocess"}, globals())
