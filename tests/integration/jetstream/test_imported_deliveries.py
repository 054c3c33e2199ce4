"""A push consumer's deliveries carried into another account by a stream import with a
`prefix` or `to`: routed by the import's subject, delivered with the message's own stored
subject, on tidings as on the reference."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig, StorageType, StreamConfig

from tests.harness import start_configured

CONF = """
jetstream: {{ store_dir: "{store}" }}
accounts: {{
  A {{
    jetstream: enabled
    users: [{{ user: "a", password: "a" }}]
    exports: [{{ stream: "dlv.>" }}]
  }}
  B {{
    users: [{{ user: "b", password: "b" }}]
    imports: [
      {{ stream: {{ account: "A", subject: "dlv.p.>" }}, prefix: "pfx" }}
      {{ stream: {{ account: "A", subject: "dlv.t.>" }}, to: "moved.>" }}
    ]
  }}
}}
"""


@pytest.mark.parametrize("kind", ["tidings", "reference"])
async def test_a_push_consumers_deliveries_through_an_import_with_a_prefix_or_to(
        kind: str, tmp_path: Path) -> None:
    server = start_configured(kind, CONF.format(store=tmp_path), streaming=False)
    a = b = None
    try:
        a = await nats.connect(server.url, user="a", password="a")
        b = await nats.connect(server.url, user="b", password="b")
        got: dict[str, asyncio.Queue[tuple[str, bytes]]] = {}
        for subject in ("pfx.dlv.p.x", "moved.x"):
            queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
            got[subject] = queue

            async def on_msg(msg: nats.aio.msg.Msg, queue: asyncio.Queue = queue) -> None:
                await queue.put((msg.subject, msg.data))
            await b.subscribe(subject, cb=on_msg)
        await b.flush()
        js = a.jetstream()
        await js.add_stream(StreamConfig(name="O", subjects=["orders.>"],
                                         storage=StorageType.MEMORY))
        await js.publish("orders.1", b"one")
        for name, deliver in (("P", "dlv.p.x"), ("T", "dlv.t.x")):
            await js.add_consumer("O", ConsumerConfig(durable_name=name, deliver_subject=deliver,
                                                      ack_policy="none"))
        assert await asyncio.wait_for(got["pfx.dlv.p.x"].get(), 5) == ("orders.1", b"one")
        assert await asyncio.wait_for(got["moved.x"].get(), 5) == ("orders.1", b"one")
    finally:
        for nc in (a, b):
            if nc is not None:
                await nc.close()
        server.stop()
