"""JetStream's advisories on `$JS.EVENT.ADVISORY.>`: a stream's and a consumer's actions, a
message terminated, naked, delivered max_deliver times, with the reference's subjects,
types and fields, on tidings and on the reference."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription

SECOND = 10**9


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=5)
    return json.loads(msg.data)


async def advisory(sub: Subscription, subject: str = "") -> tuple[str, dict[str, Any]]:
    """The next advisory (on `subject`, others skipped, if one is named)."""
    while True:
        msg = await sub.next_msg(10)
        if not subject or msg.subject == subject:
            return msg.subject, json.loads(msg.data)


async def test_actions_and_deliveries_are_advised(nc: Client) -> None:
    sub = await nc.subscribe("$JS.EVENT.ADVISORY.*.>")  # (not the API audit)
    audit = await nc.subscribe("$JS.EVENT.ADVISORY.API")
    await nc.flush()
    await api(nc, "STREAM.CREATE.ADV", {"name": "ADV", "subjects": ["adv"],
                                        "storage": "memory"})
    subject, event = await advisory(sub)
    assert subject == "$JS.EVENT.ADVISORY.STREAM.CREATED.ADV"
    assert list(event) == ["type", "id", "timestamp", "stream", "action"]
    assert (event["type"], event["action"]) == ("io.nats.jetstream.advisory.v1.stream_action",
                                                "create")
    await api(nc, "CONSUMER.CREATE.ADV.c", {"stream_name": "ADV", "config": {
        "name": "c", "ack_policy": "explicit", "max_deliver": 2, "ack_wait": SECOND}})
    subject, event = await advisory(sub)
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADV.c"
    assert list(event) == ["type", "id", "timestamp", "stream", "consumer", "action"]
    for data in (b"term", b"nak", b"ignored"):
        await nc.request("adv", data, timeout=5)
    inbox = nc.new_inbox()
    pulls = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.c", b'{"batch": 3}', reply=inbox)
    got = [await pulls.next_msg(5) for _ in range(3)]
    await nc.publish(got[0].reply, b"+TERM not for us")
    subject, event = await advisory(sub)
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ADV.c"
    assert event["type"] == "io.nats.jetstream.advisory.v1.terminated"
    assert (event["stream_seq"], event["consumer_seq"], event["deliveries"],
            event["reason"]) == (1, 1, 1, "not for us")
    await nc.publish(got[1].reply, b"-NAK")
    subject, event = await advisory(sub, "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ADV.c")
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ADV.c"
    assert list(event) == ["type", "id", "timestamp", "stream", "consumer",
                           "consumer_seq", "stream_seq", "deliveries"]
    # The third is never acked: it comes again once, then it has had its max_deliver.
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.c", b'{"batch": 5, "expires": 4000000000}',
                     reply=inbox)
    subject, event = await advisory(sub, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ADV.c")
    assert event["type"] == "io.nats.jetstream.advisory.v1.max_deliver"
    assert (event["stream_seq"], event["deliveries"]) in ((2, 2), (3, 2))
    info = await api(nc, "CONSUMER.INFO.ADV.c")
    assert info["num_ack_pending"] <= 1
    await api(nc, "STREAM.DELETE.ADV")
    seen = []
    while not seen or seen[-1][0] != "$JS.EVENT.ADVISORY.STREAM.DELETED.ADV":
        seen.append(await advisory(sub))
    assert seen[-1][1]["action"] == "delete"
    subject, event = await advisory(audit)
    assert subject == "$JS.EVENT.ADVISORY.API"
    assert list(event)[:5] == ["type", "id", "timestamp", "server", "client"]
    assert event["type"] == "io.nats.jetstream.advisory.v1.api_audit"
    assert event["subject"] == "$JS.API.STREAM.CREATE.ADV"
    assert json.loads(event["request"])["name"] == "ADV"
    assert json.loads(event["response"])["type"].endswith("stream_create_response")
    assert event["client"]["acc"] == "$G"
