"""tidings as the NATS server of Python test suites.

- the pytest plugin (:mod:`tidings.testing.plugin`, registered as `pytest11`): fixtures
  ``nats_server``, ``nats_url``, ``streaming_server``, ``nats_server_factory`` and their
  module- and session-scoped variants;
- :func:`serve` (also ``tidings.serve``): a server on the running event loop for an
  ``async with`` block;
- :func:`start_server`: a subprocess server for fixtures of your own.

See docs/testing.md. The names below are imported when first used.
"""

from __future__ import annotations

from ..lazy import lazy_names

_WHERE = {
    "InProcessServer": ".inprocess",
    "serve": ".inprocess",
    "SubprocessServer": ".process",
    "start_server": ".process",
    "ServerSpec": ".spec",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, _WHERE, globals())
