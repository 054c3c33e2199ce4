"""tidings.client: an asyncio NATS client with nats-py's API, for tidings and any NATS server.

    nc = await tidings.client.connect("nats://127.0.0.1:4222", name="app")
    sub = await nc.subscribe("greet.*")
    await nc.publish("greet.joe", b"hello")
    msg = await sub.next_msg(timeout=1)
    await nc.close()
"""

from __future__ import annotations

from . import errors
from .client import Client, connect
from .msg import Msg, MsgHeaders
from .subscription import Subscription

NATS = Client  # nats-py's name for the client class

__all__ = ["Client", "Msg", "MsgHeaders", "NATS", "Subscription", "connect", "errors"]
