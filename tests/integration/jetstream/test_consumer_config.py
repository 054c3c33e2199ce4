"""Consumer configurations the reference refuses: the same CONSUMER.CREATE requests sent to
tidings and to the reference nats-server, their errors compared whole (code, err_code,
description)."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.harness import Server

MS = 10**6

CASES: list[dict[str, Any]] = [
    {"name": "a.b"},
    {"durable_name": "d", "name": "other"},
    {"deliver_subject": "out.*"},
    {"deliver_subject": "in.x"},  # a cycle: the stream's own subject
    {"deliver_subject": "out", "max_waiting": 5},
    {"deliver_subject": "out", "max_ack_pending": 5},
    {"deliver_subject": "out", "idle_heartbeat": 50 * MS},
    {"deliver_subject": "out", "flow_control": True},
    {"idle_heartbeat": 1000 * MS},
    {"flow_control": True},
    {"rate_limit_bps": 1000},
    {"max_expires": 10},
    {"ack_policy": "explicit", "backoff": [1000 * MS, 2000 * MS], "max_deliver": 1},
    {"ack_policy": "explicit", "ack_wait": -5},
    {"filter_subject": "in.a", "filter_subjects": ["in.b"]},
    {"filter_subjects": ["in.a", ""]},
    {"filter_subjects": ["in.>", "in.a"]},
    {"deliver_policy": "all", "opt_start_seq": 3},
    {"deliver_policy": "last_per_subject"},
    {"deliver_policy": "by_start_sequence"},
    {"deliver_policy": "by_start_time"},
    {"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"},
    {"sample_freq": "abc%"},
    {"description": "x" * 5000},
]




async def answers(server: Server, requests: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    nc = await nats.connect(server.url)
    try:
        got = []
        for subject, body in requests:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
            got.append(json.loads(msg.data).get("error"))
        return got
    finally:
        await nc.close()


async def test_refused_configurations_get_the_references_errors(servers: list[Server]) -> None:
    requests = [("$JS.API.STREAM.CREATE.CC", {"name": "CC", "subjects": ["in.>"],
                                              "storage": "memory"})]
    requests += [("$JS.API.CONSUMER.CREATE.CC", {"stream_name": "CC", "config": case})
                 for case in CASES]
    ours, theirs = [await answers(srv, requests) for srv in servers]
    assert ours[0] is None and theirs[0] is None
    for case, mine, reference in zip(CASES, ours[1:], theirs[1:], strict=True):
        assert reference is not None, case  # (every case is a refusal)
        assert mine == reference, case


async def test_a_work_queue_takes_one_consumer_per_subject(servers: list[Server]) -> None:
    stream = {"name": "WQC", "subjects": ["wq.>"], "storage": "memory",
              "retention": "workqueue"}

    def create(name: str, **config: Any) -> tuple[str, dict[str, Any]]:
        return (f"$JS.API.CONSUMER.CREATE.WQC.{name}",
                {"stream_name": "WQC", "config": {"name": name, **config}})

    requests = [("$JS.API.STREAM.CREATE.WQC", stream),
                create("none", ack_policy="none"),
                create("new", ack_policy="explicit", deliver_policy="new"),
                create("a", ack_policy="explicit", filter_subject="wq.a.*"),
                create("b", ack_policy="explicit", filter_subject="wq.*.x"),  # collides
                create("c", ack_policy="explicit", filter_subject="wq.c"),
                create("all", ack_policy="explicit")]
    ours, theirs = [await answers(srv, requests) for srv in servers]
    assert ours == theirs
    assert [e and e["err_code"] for e in ours] == [None, 10084, 10101, None, 10100, None,
                                                  10099]


async def test_updates_and_pedantic_creates_as_the_reference(servers: list[Server]) -> None:
    def create(config: dict[str, Any], action: str = "", **request: Any
               ) -> tuple[str, dict[str, Any]]:
        body = {"stream_name": "UP", "config": {"durable_name": "d", **config}, **request}
        if action:
            body["action"] = action
        return "$JS.API.CONSUMER.CREATE.UP.d", body

    requests = [
        ("$JS.API.STREAM.CREATE.UP", {"name": "UP", "subjects": ["up.>"],
                                      "storage": "memory",
                                      "consumer_limits": {"max_ack_pending": 10}}),
        create({"ack_policy": "explicit", "filter_subject": "up.a"}),
        create({"ack_policy": "explicit", "filter_subject": "up.a",
                "filter_subjects": ["up.b"]}, "update"),
        create({"ack_policy": "explicit", "filter_subjects": ["up.a", "up.b"]}, "update"),
        create({"ack_policy": "all", "filter_subjects": ["up.a", "up.b"]}, "update"),
        create({"ack_policy": "explicit", "deliver_policy": "new"}, "update"),
        create({"ack_policy": "explicit", "filter_subject": "up.c"}, "create"),
        ("$JS.API.CONSUMER.CREATE.UP.p", {"stream_name": "UP", "pedantic": True, "config": {
            "name": "p", "ack_policy": "explicit"}}),
        ("$JS.API.CONSUMER.CREATE.UP.q", {"stream_name": "UP", "pedantic": True, "config": {
            "name": "q", "ack_policy": "explicit", "max_ack_pending": 5,
            "backoff": [10**9], "ack_wait": 2 * 10**9}}),
    ]
    ours, theirs = [await answers(srv, requests) for srv in servers]
    assert ours == theirs
    assert [e and e["err_code"] for e in ours] == [None, None, 10136, None, 10012, 10012,
                                                  10148, 10157, 10157]


async def test_the_apis_answers_have_the_references_fields(servers: list[Server]) -> None:
    """The same requests to both servers: each answer's fields in the same order."""
    requests = [
        ("$JS.API.STREAM.CREATE.KEYS", {"name": "KEYS", "subjects": ["keys"]}),
        ("$JS.API.STREAM.UPDATE.KEYS", {"name": "KEYS", "subjects": ["keys", "more"]}),
        ("$JS.API.STREAM.INFO.KEYS", {}),
        ("$JS.API.STREAM.LIST", {}),
        ("$JS.API.CONSUMER.CREATE.KEYS.d", {"stream_name": "KEYS",
                                            "config": {"durable_name": "d"}}),
        ("$JS.API.CONSUMER.INFO.KEYS.d", {}),
        ("$JS.API.CONSUMER.LIST.KEYS", {}),
    ]

    async def shapes(server: Server) -> list[Any]:
        nc = await nats.connect(server.url)
        try:
            got = []
            for subject, body in requests:
                msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
                answer = json.loads(msg.data)
                inner = answer.get("streams") or answer.get("consumers") or [{}]
                got.append((list(answer), list(inner[0])))
            return got
        finally:
            await nc.close()

    ours, theirs = [await shapes(srv) for srv in servers]
    assert ours == theirs
