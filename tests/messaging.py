"""Helpers for tests that pass messages between nats-py clients."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors


async def publish_until_received(pub: Any, sub: Any, subject: str, data: bytes,
                                 attempts: int = 10, wait: float = 0.5) -> Any:
    """Publish on `pub` until `sub` (a nats-py subscription) gets a message; returns it.

    In about one run in twenty the reference nats-server does not deliver the first message
    to a subscription made just before (flushed) on another connection; tidings did in every
    run. Sending again keeps such tests about what they check."""
    for _ in range(attempts):
        await pub.publish(subject, data)
        await pub.flush()
        with contextlib.suppress(nats.errors.TimeoutError, asyncio.TimeoutError):
            return await sub.next_msg(timeout=wait)
    raise AssertionError(f"no message on {subject} after {attempts} publishes")
