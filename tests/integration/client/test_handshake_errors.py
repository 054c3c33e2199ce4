"""An -ERR that comes right behind the server's INFO is raised as the server's error."""

from __future__ import annotations

import asyncio

import pytest

from tidings.client import connect, errors


@pytest.mark.parametrize("kind", ["tidings", "reference"])
async def test_max_connections_is_reported_not_eof(kind, tidings_factory, reference_factory):
    if kind == "tidings":
        srv = tidings_factory(max_connections=1)
    else:
        srv = reference_factory(max_connections=1)
    # The server may still count the readiness probe's connection for a moment.
    first = None
    for _ in range(100):
        try:
            first = await connect(srv.url, max_reconnect_attempts=0, allow_reconnect=False)
            break
        except errors.ServerError:
            await asyncio.sleep(0.05)
    assert first is not None
    try:
        with pytest.raises(errors.ServerError, match="maximum connections exceeded"):
            await connect(srv.url, max_reconnect_attempts=0, allow_reconnect=False)
        assert first.is_connected
    finally:
        await first.close()
