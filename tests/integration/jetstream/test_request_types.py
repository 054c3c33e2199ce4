"""API request bodies whose JSON the reference's decoder refuses (a string for a number, a
number too large or not an integer, an unknown policy, field or time, a body of the wrong
kind): the same raw bytes sent to tidings and to the reference nats-server, their answers
compared whole. None may cost tidings a traceback or an unanswered request."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.harness import Server

STREAM_BODIES = [
    '{"name":"S","subjects":["a.*"],"max_msgs":"invalid"}',
    '{"name":"S","max_age":"1s"}',
    '{"name":"S","discard":5}',
    '{"name":"S","subjects":"a"}',
    '{"name":"S","subjects":[1]}',
    '{"name":"S","max_msgs":1.5}',
    '{"name":"S","max_msgs":1e3}',
    '{"name":"S","max_msgs":9223372036854775808}',
    '{"name":"S","max_msg_size":3000000000}',
    '{"name":"S","first_seq":-1}',
    '{"name":"S","allow_direct":"yes"}',
    '{"name":"S","metadata":{"a":1}}',
    '{"name":"S","num_replicas":"1"}',
    '{"name":"S","retention":"bogus"}',
    '{"name":"S","retention":null}',
    '{"name":"S","storage":1}',
    '{"name":"S","compression":"zip"}',
    '{"name":"S","compression":5}',
    '{"name":"S","compression":null}',
    '{"name":"S","persist_mode":"x"}',
    '{"name":"S","republish":{"src":">","dest":5}}',
    '{"name":"S","republish":{"src":">","dest":"x","foo":1}}',
    '{"name":"S","consumer_limits":{"max_ack_pending":"x"}}',
    '{"name":"S","placement":{"tags":"x"}}',
    '{"name":"S","mirror":"x"}',
    '{"name":"S","sources":[{"name":"x","opt_start_seq":"1"}]}',
    '{"name":"S","sources":[{"name":"x","opt_start_time":"notatime"}]}',
    '{"name":"S","sources":[{"name":"x","opt_start_time":5}]}',
    '{"name":"S","pedantic":"x"}',
    '{"name":"S","unknownfield":1,"max_msgs":"x"}',
    '{"name":"S","max_msgs":"x","unknownfield":1}',
    '{"name":"S","max_msgs":"x","retention":"bogus"}',
    '{"name":"S","retention":"bogus","max_msgs":"x"}',
    '[1]',
    '"x"',
    # a field is named as the body spells it; names are matched as Go folds case (one
    # letter for one: the long s is an s, the sharp s no ss)
    '{"name":"S","SUBJECTS":"a"}',
    '{"name":"S","sources":[{"NAME":1}]}',
    '{"name":"S","\u017fubjects":"a"}',
    '{"name":"S","compre\u00dfion":"zip"}',
]
CONSUMER_BODIES = [
    '{"stream_name":"T","config":{"ack_policy":"explicit","foo":1}}',
    '{"stream_name":"T","foo":2,"config":{"ack_policy":"explicit"}}',
    '{"stream_name":"T","config":{"ack_policy":"explicit","max_deliver":"x"}}',
    '{"stream_name":"T","config":{"ack_policy":null}}',
    '{"stream_name":"T","config":{"deliver_policy":"bogus"}}',
    '{"stream_name":"T","config":{"ack_policy":"explicit"},"action":"bogus"}',
    '{"stream_name":"T","config":{"ack_policy":"explicit","backoff":["1s"]}}',
    '{"stream_name":"T","config":{"ack_policy":"explicit","opt_start_time":"2020-01-01"}}',
    '{"stream_name":"T","config":{"priority_policy":"first"}}',
    '{"stream_name":"T","config":{"priority_timeout":1.5}}',
    '{"stream_name":"T","config":{"priority_groups":["a",2]}}',
    '{"stream_name":"T","config":"x"}',
    '{"stream_name":5,"config":{}}',
]
OTHER = [
    ("STREAM.INFO.T", '{"subjects_filter":5}'),
    ("STREAM.INFO.T", '{"deleted_details":true,"foo":1}'),
    ("STREAM.NAMES", '{"offset":"1"}'),
    ("STREAM.LIST", '{"subject":["x"]}'),
    ("STREAM.PURGE.T", '{"keep":-1}'),
    ("STREAM.MSG.GET.T", '{"seq":"1"}'),
    ("STREAM.MSG.GET.T", '{"seq":1,"start_time":"yesterday"}'),
    ("STREAM.MSG.DELETE.T", '{"seq":1,"no_erase":"x"}'),
    ("CONSUMER.NAMES.T", '{"offset":true}'),
    ("CONSUMER.UNPIN.T.c", '{"group":5}'),
    ("CONSUMER.UNPIN.T.c", '[]'),
    # bodies that are no JSON, as Go's json.Decoder reads them: cut short, a syntax error
    # with its offset, a second value after the first
    ("STREAM.CREATE.S", '{"name":'),
    ("STREAM.CREATE.S", '{"name" "S"}'),
    ("STREAM.CREATE.S", 'nope'),
    ("STREAM.INFO.T", '{'),
    ("STREAM.CREATE.S", '{"name":"S"} x'),
    ("STREAM.NAMES", '[1,2'),
]




async def answers(server: Server, requests: list[tuple[str, str]]) -> list[Any]:
    nc = await nats.connect(server.url)
    try:
        got = []
        for subject, body in requests:
            msg = await nc.request("$JS.API." + subject, body.encode(), timeout=5)
            got.append(json.loads(msg.data).get("error"))
        return got
    finally:
        await nc.close()


async def test_bodies_the_reference_refuses_are_refused_in_its_words(
        servers: list[Server]) -> None:
    requests = [("STREAM.CREATE.T", '{"name":"T","subjects":["t.>"],"storage":"memory"}')]
    requests += [("STREAM.CREATE.S", body) for body in STREAM_BODIES]
    requests += [("STREAM.UPDATE.T", '{"name":"T","subjects":["t.>"],"max_msgs":"x"}'),
                 ("STREAM.UPDATE.T", '{"name":"T","subjects":["t.>"],"foo":1}')]
    requests += [("CONSUMER.CREATE.T", body) for body in CONSUMER_BODIES]
    requests += OTHER
    ours, theirs = [await answers(srv, requests) for srv in servers]
    assert ours[0] is None and theirs[0] is None
    for (subject, body), mine, reference in zip(requests[1:], ours[1:], theirs[1:],
                                                strict=True):
        assert reference is not None and reference["err_code"] == 10025, (subject, body)
        assert mine == reference, (subject, body)


async def test_nulls_field_names_in_any_case_and_values_in_a_row_are_taken_as_go_takes_them(
        servers: list[Server]) -> None:
    requests = [
        ("STREAM.CREATE.N", '{"name":"N","subjects":null,"max_msgs":null,"metadata":null,'
                            '"republish":null,"storage":"memory"}'),
        ("STREAM.CREATE.M", '{"Name":"M","SUBJECTS":["m.>"],"Max_Msgs":5,"storage":"memory",'
                            '"metadata":{"a":null}}'),
    ]
    requests.append(("STREAM.CREATE.D", '{"name":"D","storage":"memory"}{"subjects":["d.>"]}'))
    ours, theirs = [await answers(srv, requests) for srv in servers]
    assert ours == theirs == [None, None, None]
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            info = json.loads((await nc.request("$JS.API.STREAM.INFO.M", b"", timeout=5)).data)
            assert info["config"]["max_msgs"] == 5 and info["config"]["subjects"] == ["m.>"]
            assert info["config"]["metadata"]["a"] == ""  # a null in a map: its zero value
        finally:
            await nc.close()


async def test_subjects_no_api_subscription_takes_are_dropped_unanswered(
        servers: list[Server]) -> None:
    """The reference's API dispatcher drops what none of its API subjects takes, without an
    answer (a KV put that a service import of `$JS.API.>` also carried there must not be
    answered before the stream's PubAck): asked after them, `$JS.API.INFO` is answered
    and they are not."""
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            dropped = await nc.subscribe("dropped.answers")
            answered = await nc.subscribe("info.answer")
            for subject in ("$JS.API.$KV.a.b", "$JS.API.NOPE", "$JS.API.STREAM.INFO.a.b",
                            "$JS.API.STREAM"):
                await nc.publish(subject, b"C", reply="dropped.answers")
            await nc.publish("$JS.API.INFO", b"", reply="info.answer")
            info = json.loads((await answered.next_msg(timeout=5)).data)
            assert info["type"] == "io.nats.jetstream.api.v1.account_info_response"
            await nc.flush()
            assert dropped.pending_msgs == 0
        finally:
            await nc.close()


async def test_zero_values_of_fields_go_leaves_out_are_left_out(servers: list[Server]) -> None:
    """A configuration that gives `omitempty` fields their zero values (as nats-py's KV and
    object store create their streams): the configuration answered is the reference's."""
    body = {"name": "Z", "subjects": ["z.>"], "storage": "memory", "no_ack": False,
            "discard_new_per_subject": False, "description": "", "first_seq": 0,
            "subject_delete_marker_ttl": 0, "duplicate_window": 0, "sealed": False}
    configs = []
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            reply = await nc.request("$JS.API.STREAM.CREATE.Z", json.dumps(body).encode(),
                                     timeout=5)
            config = json.loads(reply.data)["config"]
            config.pop("metadata", None)  # (the versions)
            configs.append(config)
        finally:
            await nc.close()
    ours, theirs = configs
    assert "no_ack" not in theirs and "discard_new_per_subject" not in theirs
    assert ours == theirs


async def test_msg_get_forms_as_the_reference_answers_them(servers: list[Server]) -> None:
    """STREAM.MSG.GET by sequence, last or next on a subject (from a sequence or a time), at
    or after a time, without headers; and the combinations it refuses (batches too)."""
    requests = [("STREAM.CREATE.G", json.dumps({"name": "G", "subjects": ["g.>"],
                                                "storage": "memory"}))]
    bodies = [{"seq": 2}, {"seq": 2, "next_by_subj": "g.a"}, {"next_by_subj": "g.b"},
              {"last_by_subj": "g.a"}, {"start_time": "2000-01-01T00:00:00Z"},
              {"start_time": "2000-01-01T00:00:00Z", "next_by_subj": "g.b"},
              {"start_time": "2200-01-01T00:00:00Z"}, {"seq": 9}, {"seq": 1, "no_hdr": True},
              {"seq": 1, "last_by_subj": "g.a"}, {}, {"seq": 1, "batch": 2},
              {"seq": 1, "max_bytes": 10}, {"last_by_subj": "g.a", "next_by_subj": "g.a"},
              {"seq": 1, "start_time": "2000-01-01T00:00:00Z"}]
    got = []
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            await nc.request("$JS.API.STREAM.CREATE.G", requests[0][1].encode(), timeout=5)
            for subject, data in (("g.a", b"1"), ("g.b", b"2"), ("g.a", b"3")):
                await nc.request(subject, data, headers={"H": "v"}, timeout=5)
            answers = []
            for body in bodies:
                msg = await nc.request("$JS.API.STREAM.MSG.GET.G", json.dumps(body).encode(),
                                       timeout=5)
                answer = json.loads(msg.data)
                if "message" in answer:
                    answer["message"].pop("time")
                answers.append(answer)
            got.append(answers)
        finally:
            await nc.close()
    ours, theirs = got
    assert theirs[1]["message"]["seq"] == 3 and theirs[4]["message"]["seq"] == 1
    for body, mine, reference in zip(bodies, ours, theirs, strict=True):
        assert mine == reference, body


async def test_a_new_consumer_stands_just_before_where_it_starts(servers: list[Server]) -> None:
    """Its delivered and ack floor stream sequences, for each way to start, on a stream
    whose first messages are gone."""
    starts = [{"deliver_policy": "all"}, {"deliver_policy": "new"}, {"deliver_policy": "last"},
              {"deliver_policy": "by_start_sequence", "opt_start_seq": 5},
              {"deliver_policy": "by_start_sequence", "opt_start_seq": 1},
              {"deliver_policy": "by_start_time", "opt_start_time": "2000-01-01T00:00:00Z"}]
    got = []
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            await nc.request("$JS.API.STREAM.CREATE.NC", json.dumps(
                {"name": "NC", "subjects": ["nc.>"], "storage": "memory"}).encode(), timeout=5)
            for i in range(6):
                await nc.request(f"nc.{i % 2}", b"x", timeout=5)
            await nc.request("$JS.API.STREAM.PURGE.NC", b'{"seq": 3}', timeout=5)
            answers = []
            for start in starts:
                reply = await nc.request("$JS.API.CONSUMER.CREATE.NC", json.dumps(
                    {"stream_name": "NC", "config": {"ack_policy": "explicit", **start}}
                ).encode(), timeout=5)
                info = json.loads(reply.data)
                answers.append((info["delivered"], info["ack_floor"], info["num_pending"]))
            got.append(answers)
        finally:
            await nc.close()
    ours, theirs = got
    assert theirs[0][0] == {"consumer_seq": 0, "stream_seq": 2}
    assert ours == theirs
