"""Consumer priority groups (`priority_policy` overflow, pinned_client, prioritized;
`priority_groups`, `priority_timeout`), on tidings and on the reference nats-server: the
configuration's checks and defaults, pull requests with `group`, `min_pending`,
`min_ack_pending`, `id` and `priority` (their 400s and 423s, who gets the messages, the
`Nats-Pin-Id` header), consumer info's `priority_groups`, `CONSUMER.UNPIN`, a pin's timeout
and the pinned/unpinned advisories. Raw `$JS.API` requests and pull requests on inboxes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

MS = 10**6
SECOND = 10**9
NEVER = "0001-01-01T00:00:00Z"
GROUP_NAME_ERROR = ("Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not "
                    "exceed 16 characters")


async def api(nc: Client, subject: str, body: Any = None) -> dict[str, Any]:
    payload = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=5)
    return json.loads(msg.data)


async def stream(nc: Client, name: str, messages: int = 0) -> None:
    created = await api(nc, f"STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                      "storage": "memory"})
    assert "error" not in created, created
    for _ in range(messages):
        await nc.request(name.lower(), b"x", timeout=5)


async def consumer(nc: Client, stream_name: str, name: str, **config: Any) -> dict[str, Any]:
    created = await api(nc, f"CONSUMER.CREATE.{stream_name}.{name}", {
        "stream_name": stream_name, "config": {"durable_name": name, **config}})
    assert "error" not in created, created
    return created


class Pull:
    """One pull request, answered on an inbox of its own."""

    def __init__(self, nc: Client, stream_name: str, consumer_name: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.{consumer_name}"
        self.sub: Any = None

    async def send(self, body: Any) -> Pull:
        inbox = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(inbox)
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        await self.nc.publish(self.subject, payload, reply=inbox)
        await self.nc.flush()
        return self

    async def next(self) -> Msg:
        return await self.sub.next_msg(timeout=10)


async def pull(nc: Client, stream_name: str, consumer_name: str, body: Any) -> Pull:
    return await Pull(nc, stream_name, consumer_name).send(body)


def status(msg: Msg) -> str:
    """A status message's `<code> <description>` ("" for a message of the stream)."""
    headers = msg.headers or {}
    if "Status" not in headers:
        return ""
    return f"{headers['Status']} {headers.get('Description', '')}".strip()


def left(msg: Msg) -> tuple[str, str]:
    headers = msg.headers or {}
    return headers.get("Nats-Pending-Messages", ""), headers.get("Nats-Pending-Bytes", "")


def seq(msg: Msg) -> int:
    """A delivery's stream sequence (from its ack reply)."""
    return int(msg.reply.split(".")[5])


async def waiting(nc: Client, stream_name: str, name: str, count: int) -> None:
    """Until `count` pull requests wait at the consumer (the reference queues them apart
    from its API answers)."""
    for _ in range(100):
        info = await api(nc, f"CONSUMER.INFO.{stream_name}.{name}")
        if info["num_waiting"] == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} requests never waited")


async def advisories(nc: Client, stream_name: str, name: str) -> Any:
    sub = await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.*.{stream_name}.{name}")
    await nc.flush()
    return sub


async def test_priority_configurations_are_refused_as_the_reference_refuses(
        nc: Client) -> None:
    await stream(nc, "PCR")
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"priority_policy": "overflow"}, 10159,
         "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
        ({"priority_policy": "overflow", "priority_groups": []}, 10159,
         "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
        ({"priority_policy": "overflow", "priority_groups": ["a", ""]}, 10161,
         "Group name cannot be an empty string"),
        ({"priority_policy": "pinned_client", "priority_groups": ["a.b"]}, 10162,
         GROUP_NAME_ERROR),
        ({"priority_policy": "prioritized", "priority_groups": ["x" * 17]}, 10162,
         GROUP_NAME_ERROR),
        ({"priority_groups": ["a"]}, 10196,
         "consumer can not have priority groups when policy is none"),
        ({"priority_policy": "none", "priority_groups": ["a"]}, 10196,
         "consumer can not have priority groups when policy is none"),
        ({"priority_timeout": 5 * SECOND}, 10197,
         "PinnedTTL cannot be set when PriorityPolicy is none"),
        ({"deliver_subject": "out", "priority_policy": "overflow", "priority_groups": ["a"]},
         10178, "priority groups can not be used with push consumers"),
        ({"priority_policy": "hello", "priority_groups": ["a"]}, 10025,
         'invalid JSON: unknown priority policy: "hello"'),
        ({"priority_policy": "overflow", "priority_groups": "a"}, 10025,
         "invalid JSON: json: cannot unmarshal string into Go struct field "
         "CreateConsumerRequest.config.priority_groups of type []string"),
        ({"priority_policy": "overflow", "priority_groups": [1]}, 10025,
         "invalid JSON: json: cannot unmarshal number into "
         "CreateConsumerRequest.config.priority_groups.0 of type string"),
        ({"priority_policy": None}, 10025, "invalid JSON: unknown priority policy: null"),
        ({"priority_policy": "pinned_client", "priority_groups": ["a"],
          "priority_timeout": "5s"}, 10025,
         "invalid JSON: json: cannot unmarshal string into Go struct field "
         "CreateConsumerRequest.config.priority_timeout of type time.Duration"),
        ({"priority_policy": "pinned_client", "priority_groups": ["a"],
          "priority_timeout": 1.5}, 10025,
         "invalid JSON: json: cannot unmarshal number 1.5 into Go struct field "
         "CreateConsumerRequest.config.priority_timeout of type time.Duration"),
    ]
    try:
        for config, code, description in cases:
            answer = await api(nc, "CONSUMER.CREATE.PCR", {"stream_name": "PCR",
                                                           "config": config})
            assert answer.get("error") == {"code": 400, "err_code": code,
                                           "description": description}, config
    finally:
        await api(nc, "STREAM.DELETE.PCR")


async def test_a_priority_configuration_is_filled_in_as_the_reference_does(
        nc: Client) -> None:
    await stream(nc, "PCF")
    try:
        pinned = await consumer(nc, "PCF", "pin", ack_policy="explicit",
                                priority_policy="pinned_client", priority_groups=["g"])
        config = pinned["config"]
        assert list(config)[-4:] == ["metadata", "priority_groups", "priority_policy",
                                     "priority_timeout"]
        assert (config["priority_groups"], config["priority_policy"],
                config["priority_timeout"]) == (["g"], "pinned_client", 120 * SECOND)
        assert config["metadata"]["_nats.req.level"] == "1"
        assert list(pinned)[-2:] == ["ts", "priority_groups"]
        assert pinned["priority_groups"] == [{"group": "g", "pinned_ts": NEVER}]

        overflow = (await consumer(nc, "PCF", "over", priority_policy="overflow",
                                   priority_groups=["a", "b"], priority_timeout=-1))["config"]
        assert "priority_timeout" not in overflow
        assert (overflow["priority_groups"], overflow["priority_policy"]) == (
            ["a", "b"], "overflow")
        info = await api(nc, "CONSUMER.INFO.PCF.over")
        assert info["priority_groups"] == [{"group": "a", "pinned_ts": NEVER}]

        none = await consumer(nc, "PCF", "none", priority_policy="none")
        assert "priority_policy" not in none["config"] and "priority_groups" not in none
        assert none["config"]["metadata"]["_nats.req.level"] == "0"
    finally:
        await api(nc, "STREAM.DELETE.PCF")


async def test_pull_requests_the_reference_refuses(nc: Client) -> None:
    await stream(nc, "PRR", messages=1)
    await consumer(nc, "PRR", "plain")
    await consumer(nc, "PRR", "over", priority_policy="overflow", priority_groups=["g"])
    await consumer(nc, "PRR", "pin", priority_policy="pinned_client", priority_groups=["g"])
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("plain", {"batch": 1, "min_pending": 1}, "Not a Overflow Priority consumer"),
        ("plain", {"batch": 1, "id": "x"}, "Not a Pinned Client Priority consumer"),
        ("plain", {"batch": 1, "priority": 10}, "Priority must be between 0 and 9"),
        ("plain", {"batch": 1, "priority": -1}, "Priority must be between 0 and 9"),
        ("plain", {"batch": 1, "group": 1},
         "json: cannot unmarshal number into Go struct field .group of type string"),
        ("plain", {"batch": 1, "min_pending": "x"},
         "json: cannot unmarshal string into Go struct field .min_pending of type int64"),
        ("plain", {"batch": 1, "priority": 1.5},
         "json: cannot unmarshal number 1.5 into Go struct field .priority of type int"),
        ("plain", {"batch": 1, "min_ack_pending": 2**64},
         "json: cannot unmarshal number 18446744073709551616 into Go struct field "
         ".min_ack_pending of type int64"),
        ("plain", {"batch": "1"},
         "json: cannot unmarshal string into Go struct field .batch of type int"),
        ("over", {"batch": 1}, "Priority Group missing"),
        ("over", {"batch": 1, "group": "h"}, "Invalid Priority Group"),
        ("over", {"batch": 1, "group": "g", "id": "x"}, "Not a Pinned Client Priority consumer"),
        ("pin", {"batch": 1, "group": "g", "min_ack_pending": 1},
         "Not a Overflow Priority consumer"),
        ("pin", {"batch": 1, "priority": 3}, "Priority Group missing"),
    ]
    try:
        for name, body, description in cases:
            answer = await (await pull(nc, "PRR", name, body)).next()
            assert status(answer) == f"400 Bad Request - {description}", (name, body)
    finally:
        await api(nc, "STREAM.DELETE.PRR")


async def test_overflow_serves_a_request_once_its_minimums_are_reached(nc: Client) -> None:
    await stream(nc, "OVF", messages=5)
    await consumer(nc, "OVF", "o", ack_policy="explicit", priority_policy="overflow",
                   priority_groups=["g"])
    try:
        short = {"batch": 1, "group": "g", "expires": 300 * MS}
        not_yet = await (await pull(nc, "OVF", "o", {**short, "min_pending": 10})).next()
        assert (status(not_yet), left(not_yet)) == ("408 Request Timeout", ("1", "0"))
        first = await (await pull(nc, "OVF", "o", {"batch": 1, "group": "g",
                                                   "min_pending": 5})).next()
        assert (status(first), seq(first)) == ("", 1)

        waits = await pull(nc, "OVF", "o", {"batch": 1, "group": "g", "min_pending": 5,
                                            "expires": 10 * SECOND})
        await waiting(nc, "OVF", "o", 1)  # (4 pending: it waits for a fifth)
        await nc.request("ovf", b"x", timeout=5)
        assert seq(await waits.next()) == 2

        by_acks = await (await pull(nc, "OVF", "o", {**short, "min_ack_pending": 2})).next()
        assert (status(by_acks), seq(by_acks)) == ("", 3)
        neither = await (await pull(nc, "OVF", "o", {**short, "min_pending": 10,
                                                     "min_ack_pending": 5})).next()
        assert status(neither) == "408 Request Timeout"
        plain = await (await pull(nc, "OVF", "o", {"batch": 1, "group": "g"})).next()
        assert seq(plain) == 4
    finally:
        await api(nc, "STREAM.DELETE.OVF")


async def test_a_pinned_client_gets_the_messages_and_its_pin(nc: Client) -> None:
    await stream(nc, "PIN", messages=10)
    await consumer(nc, "PIN", "p", ack_policy="explicit", priority_policy="pinned_client",
                   priority_groups=["g"])
    events = await advisories(nc, "PIN", "p")
    try:
        first = await (await pull(nc, "PIN", "p", {"batch": 1, "group": "g"})).next()
        pin = first.headers["Nats-Pin-Id"]
        assert (seq(first), len(pin)) == (1, 22)

        advisory = json.loads((await events.next_msg(timeout=5)).data)
        assert list(advisory) == ["type", "id", "timestamp", "account", "stream", "consumer",
                                  "group", "pinned_id"]
        assert advisory["type"] == "io.nats.jetstream.advisory.v1.consumer_group_pinned"
        assert (advisory["account"], advisory["stream"], advisory["consumer"],
                advisory["group"], advisory["pinned_id"]) == ("$G", "PIN", "p", "g", pin)

        (state,) = (await api(nc, "CONSUMER.INFO.PIN.p"))["priority_groups"]
        assert list(state) == ["group", "pinned_client_id", "pinned_ts"]
        assert (state["group"], state["pinned_client_id"]) == ("g", pin)
        assert state["pinned_ts"] != NEVER

        other = await (await pull(nc, "PIN", "p", {"batch": 1, "group": "g",
                                                   "expires": 300 * MS})).next()
        assert (status(other), left(other)) == ("408 Request Timeout", ("1", "0"))
        wrong = await (await pull(nc, "PIN", "p", {"batch": 1, "group": "g",
                                                   "id": "nope"})).next()
        assert status(wrong) == "423 Nats-Pin-Id mismatch"

        again = await pull(nc, "PIN", "p", {"batch": 2, "group": "g", "id": pin})
        two = [await again.next(), await again.next()]
        assert [(seq(m), m.headers["Nats-Pin-Id"]) for m in two] == [(2, pin), (3, pin)]
    finally:
        await api(nc, "STREAM.DELETE.PIN")


async def test_an_unpin_gives_the_next_puller_a_new_pin(nc: Client) -> None:
    await stream(nc, "UNP", messages=10)
    await consumer(nc, "UNP", "p", ack_policy="explicit", priority_policy="pinned_client",
                   priority_groups=["g"])
    await consumer(nc, "UNP", "plain")
    events = await advisories(nc, "UNP", "p")
    try:
        first = await (await pull(nc, "UNP", "p", {"batch": 1, "group": "g"})).next()
        old = first.headers["Nats-Pin-Id"]
        await events.next_msg(timeout=5)  # (pinned)

        refusals = [("UNP.p", b"", 10025, "invalid JSON: unexpected end of JSON input"),
                    ("UNP.p", {}, 10025, "invalid JSON: consumer group not specified"),
                    ("UNP.p", {"group": "a b"}, 10162, GROUP_NAME_ERROR),
                    ("UNP.p", {"group": "h"}, 10160,
                     "Provided priority group does not exist for this consumer"),
                    ("UNP.plain", {"group": "g"}, 10160,
                     "Provided priority group does not exist for this consumer"),
                    ("UNP.none", {"group": "g"}, 10014, "consumer not found"),
                    ("NONE.p", {"group": "g"}, 10059, "stream not found")]
        for where, body, code, description in refusals:
            answer = await api(nc, f"CONSUMER.UNPIN.{where}", body)
            assert answer["type"] == "io.nats.jetstream.api.v1.consumer_unpin_response"
            assert (answer["error"]["err_code"], answer["error"]["description"]) == (
                code, description), (where, body)

        done = await api(nc, "CONSUMER.UNPIN.UNP.p", {"group": "g"})
        assert done == {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}
        advisory = json.loads((await events.next_msg(timeout=5)).data)
        assert advisory["type"] == "io.nats.jetstream.advisory.v1.consumer_group_unpinned"
        assert list(advisory)[-2:] == ["group", "reason"]
        assert (advisory["group"], advisory["reason"]) == ("g", "admin")
        info = await api(nc, "CONSUMER.INFO.UNP.p")
        assert info["priority_groups"] == [{"group": "g", "pinned_ts": NEVER}]

        stale = await (await pull(nc, "UNP", "p", {"batch": 1, "group": "g",
                                                   "id": old})).next()
        assert (status(stale), left(stale)) == ("423 Nats-Wrong-Pin-Id", ("1", "0"))
        fresh = await (await pull(nc, "UNP", "p", {"batch": 1, "group": "g"})).next()
        assert seq(fresh) == 2
        assert fresh.headers["Nats-Pin-Id"] not in ("", old)
    finally:
        await api(nc, "STREAM.DELETE.UNP")


async def test_a_pin_ends_after_priority_timeout_without_pulls(nc: Client) -> None:
    await stream(nc, "PTO", messages=3)
    await consumer(nc, "PTO", "p", ack_policy="explicit", priority_policy="pinned_client",
                   priority_groups=["g"], priority_timeout=SECOND)
    events = await advisories(nc, "PTO", "p")
    try:
        first = await (await pull(nc, "PTO", "p", {"batch": 1, "group": "g"})).next()
        pin = first.headers["Nats-Pin-Id"]
        pinned = json.loads((await events.next_msg(timeout=5)).data)
        assert pinned["pinned_id"] == pin
        unpinned = json.loads((await events.next_msg(timeout=10)).data)
        assert (unpinned["type"], unpinned["reason"]) == (
            "io.nats.jetstream.advisory.v1.consumer_group_unpinned", "timeout")
        info = await api(nc, "CONSUMER.INFO.PTO.p")
        assert info["priority_groups"] == [{"group": "g", "pinned_ts": NEVER}]
        stale = await (await pull(nc, "PTO", "p", {"batch": 1, "group": "g",
                                                   "id": pin})).next()
        assert status(stale) == "423 Nats-Wrong-Pin-Id"
    finally:
        await api(nc, "STREAM.DELETE.PTO")


async def test_prioritized_requests_are_served_lowest_priority_first(nc: Client) -> None:
    await stream(nc, "PRI")
    await consumer(nc, "PRI", "p", priority_policy="prioritized", priority_groups=["g"])
    try:
        body = {"group": "g", "expires": 10 * SECOND}
        later = await pull(nc, "PRI", "p", {**body, "batch": 1, "priority": 5})
        first = await pull(nc, "PRI", "p", {**body, "batch": 1, "priority": 1})
        await waiting(nc, "PRI", "p", 2)
        await nc.request("pri", b"x", timeout=5)
        assert seq(await first.next()) == 1
        await nc.request("pri", b"x", timeout=5)
        assert seq(await later.next()) == 2

        a = await pull(nc, "PRI", "p", {**body, "batch": 2, "priority": 2})
        b = await pull(nc, "PRI", "p", {**body, "batch": 2, "priority": 2})
        c = await pull(nc, "PRI", "p", {**body, "batch": 1, "priority": 3})
        await waiting(nc, "PRI", "p", 3)
        for _ in range(5):
            await nc.request("pri", b"x", timeout=5)
        got = {name: [seq(await p.next()) for _ in range(n)]
               for name, p, n in (("a", a, 2), ("b", b, 2), ("c", c, 1))}
        assert got == {"a": [3, 5], "b": [4, 6], "c": [7]}
    finally:
        await api(nc, "STREAM.DELETE.PRI")


async def test_waiting_requests_take_messages_in_turn(nc: Client) -> None:
    await stream(nc, "TURN")
    await consumer(nc, "TURN", "c")
    try:
        a = await pull(nc, "TURN", "c", {"batch": 2, "expires": 10 * SECOND})
        b = await pull(nc, "TURN", "c", {"batch": 2, "expires": 10 * SECOND})
        await waiting(nc, "TURN", "c", 2)
        for _ in range(4):
            await nc.request("turn", b"x", timeout=5)
        assert [seq(await a.next()) for _ in range(2)] == [1, 3]
        assert [seq(await b.next()) for _ in range(2)] == [2, 4]
    finally:
        await api(nc, "STREAM.DELETE.TURN")
