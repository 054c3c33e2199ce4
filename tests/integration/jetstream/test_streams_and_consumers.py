"""JetStream on tidings and on the reference nats-server (`-js`), driven by nats-py's
JetStream API: streams (create, info, publish with PubAcks, duplicates, expected-sequence
checks, message get, purge, delete), the API's errors, and consumers (pull with fetch and
acks, push with a subscription)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StorageType
from nats.js.errors import APIError, BadRequestError, NotFoundError

from tests.harness import Server, start_reference, start_tidings
from tests.integration.jetstream.conftest import KINDS


async def test_a_stream_stores_what_is_published_on_its_subjects(nc: Client) -> None:
    js = nc.jetstream()
    info = await js.add_stream(name="ORDERS", subjects=["orders.>"],
                               storage=StorageType.MEMORY)
    assert info.config.name == "ORDERS" and info.state.messages == 0
    acks = [await js.publish("orders.new", b"one"), await js.publish("orders.paid", b"two")]
    assert [(a.stream, a.seq) for a in acks] == [("ORDERS", 1), ("ORDERS", 2)]
    state = (await js.stream_info("ORDERS")).state
    assert (state.messages, state.first_seq, state.last_seq) == (2, 1, 2)
    assert state.bytes == 2 * 16 + len("orders.new") + 3 + len("orders.paid") + 3
    msg = await js.get_msg("ORDERS", 2)
    assert (msg.subject, msg.data, msg.seq) == ("orders.paid", b"two", 2)
    assert await js.purge_stream("ORDERS")
    assert (await js.stream_info("ORDERS")).state.first_seq == 3
    assert await js.delete_stream("ORDERS")
    with pytest.raises(NotFoundError):
        await js.stream_info("ORDERS")


async def test_a_message_id_is_stored_once_within_the_window(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DEDUP", subjects=["dedup"], storage=StorageType.MEMORY)
    try:
        first = await js.publish("dedup", b"a", headers={"Nats-Msg-Id": "x1"})
        again = await js.publish("dedup", b"a", headers={"Nats-Msg-Id": "x1"})
        assert (first.seq, first.duplicate) == (1, None)
        assert (again.seq, again.duplicate) == (1, True)
        assert (await js.stream_info("DEDUP")).state.messages == 1
    finally:
        await js.delete_stream("DEDUP")


async def test_expected_last_sequence_is_checked(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="EXPECT", subjects=["expect.*"], storage=StorageType.MEMORY)
    try:
        await js.publish("expect.a", b"1")
        ok = await js.publish("expect.a", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
        assert ok.seq == 2
        with pytest.raises(APIError) as refused:
            await js.publish("expect.a", b"3", headers={"Nats-Expected-Last-Sequence": "1"})
        assert (refused.value.code, refused.value.err_code) == (400, 10071)
        assert refused.value.description == "wrong last sequence: 2"
        with pytest.raises(APIError) as other:
            await js.publish("expect.a", b"4", headers={"Nats-Expected-Stream": "NOPE"})
        assert other.value.err_code == 10060
    finally:
        await js.delete_stream("EXPECT")


async def test_the_apis_errors_are_the_references(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SAME", subjects=["same"], storage=StorageType.MEMORY)
    try:
        with pytest.raises(BadRequestError) as exists:
            await js.add_stream(name="SAME", subjects=["different"],
                                storage=StorageType.MEMORY)
        assert (exists.value.code, exists.value.err_code) == (400, 10058)
        reply = await nc.request("$JS.API.STREAM.CREATE.OTHER", json.dumps(
            {"name": "WRONG"}).encode(), timeout=5)
        body = json.loads(reply.data)
        assert body["type"] == "io.nats.jetstream.api.v1.stream_create_response"
        assert body["error"] == {"code": 400, "err_code": 10056,
                                 "description": "stream name in subject does not match request"}
        reply = await nc.request("$JS.API.STREAM.INFO.NOPE", b"", timeout=5)
        assert json.loads(reply.data)["error"]["err_code"] == 10059
    finally:
        await js.delete_stream("SAME")


async def test_a_pull_consumer_fetches_and_acks(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PULL", subjects=["pull.>"], storage=StorageType.MEMORY)
    try:
        for i in range(5):
            await js.publish("pull.x", b"m%d" % i)
        sub = await js.pull_subscribe("pull.>", durable="worker")
        first = await sub.fetch(3, timeout=5)
        assert [m.data for m in first] == [b"m0", b"m1", b"m2"]
        assert [m.metadata.sequence.stream for m in first] == [1, 2, 3]
        for m in first[:2]:
            await m.ack_sync()  # (the reference takes acks on another goroutine: a flush
        info = await js.consumer_info("PULL", "worker")  # would not wait for them)
        assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (3, 2)
        assert (info.num_ack_pending, info.num_pending) == (1, 2)
        rest = await sub.fetch(5, timeout=1)
        assert [m.data for m in rest] == [b"m3", b"m4"]
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
    finally:
        await js.delete_stream("PULL")


async def test_a_push_subscription_gets_old_and_new_messages(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PUSH", subjects=["push.>"], storage=StorageType.MEMORY)
    try:
        await js.publish("push.a", b"before")
        sub = await js.subscribe("push.>")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("push.a", b"before")
        await msg.ack()
        await js.publish("push.b", b"after")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("push.b", b"after")
        await msg.ack()
        await sub.unsubscribe()
    finally:
        await js.delete_stream("PUSH")


async def test_account_info_counts_streams(nc: Client, server: Server) -> None:
    js = nc.jetstream()
    await js.add_stream(name="COUNTED", subjects=["counted"], storage=StorageType.MEMORY)
    try:
        info = await js.account_info()
        assert info.streams == 1 and info.limits.max_streams == -1
    finally:
        await js.delete_stream("COUNTED")


async def test_stream_names_by_subject(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="AA", subjects=["aa.>"], storage=StorageType.MEMORY)
    await js.add_stream(name="BB", subjects=["bb.*"], storage=StorageType.MEMORY)
    try:
        reply = await nc.request("$JS.API.STREAM.NAMES", b'{"subject":"bb.x"}', timeout=5)
        assert json.loads(reply.data)["streams"] == ["BB"]
        assert await js.find_stream_name_by_subject("aa.q.r") == "AA"
    finally:
        await js.delete_stream("AA")
        await js.delete_stream("BB")


async def test_an_ordered_push_consumer_gets_every_message(nc: Client) -> None:
    """nats-py's ordered consumer: flow control and idle heartbeats on."""
    js = nc.jetstream()
    await js.add_stream(name="ORDERED", subjects=["ordered.>"], storage=StorageType.MEMORY)
    try:
        for i in range(20):
            await js.publish(f"ordered.{i % 3}", b"%d" % i)
        sub = await js.subscribe("ordered.>", ordered_consumer=True, idle_heartbeat=0.5)
        got = [(await sub.next_msg(timeout=5)).data for _ in range(20)]
        assert got == [b"%d" % i for i in range(20)]
        await js.publish("ordered.0", b"late")
        assert (await sub.next_msg(timeout=5)).data == b"late"
        await sub.unsubscribe()
    finally:
        await js.delete_stream("ORDERED")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_file_stream_survives_a_restart(kind: str, tmp_path: Path) -> None:
    """A file stream's configuration and messages (a removal and a purge too) are there
    after the server is stopped and started again on the same store directory."""
    start = start_tidings if kind == "tidings" else start_reference
    server = start(extra_args=["-js", "-sd", str(tmp_path)])
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="KEPT", subjects=["kept.>"], storage=StorageType.FILE)
        for i in range(5):
            await js.publish("kept.x", b"m%d" % i)
        await js.delete_msg("KEPT", 2)
        await nc.close()
        server.stop()
        server.start()
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        info = await js.stream_info("KEPT")
        assert info.config.subjects == ["kept.>"]
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (4, 1, 5)
        assert (await js.get_msg("KEPT", 5)).data == b"m4"
        ack = await js.publish("kept.y", b"after")
        assert ack.seq == 6
        await js.purge_stream("KEPT")
        await nc.close()
        server.stop()
        server.start()
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        state = (await js.stream_info("KEPT")).state
        assert (state.messages, state.first_seq, state.last_seq) == (0, 7, 6)
        await nc.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_duplicate_window_outlives_a_restart(kind: str, tmp_path: Path) -> None:
    """A publish retried with its Nats-Msg-Id after the server restarted is still a
    duplicate (the window is read again from the stored messages), once it is past the
    window, not."""
    start = start_tidings if kind == "tidings" else start_reference
    server = start(extra_args=["-js", "-sd", str(tmp_path)])
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="DUP", subjects=["dup.>"], storage=StorageType.FILE,
                            duplicate_window=3.0)
        old = await js.publish("dup.x", b"old", headers={"Nats-Msg-Id": "a"})
        await asyncio.sleep(3.2)  # (out of the window by the time the server starts again)
        for i in range(3):
            await js.publish("dup.x", b"m%d" % i, headers={"Nats-Msg-Id": f"id-{i}"})
        await nc.close()
        server.stop()
        server.start()
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        again = await js.publish("dup.x", b"m1", headers={"Nats-Msg-Id": "id-1"})
        assert (again.seq, again.duplicate) == (3, True)
        fresh = await js.publish("dup.x", b"old", headers={"Nats-Msg-Id": "a"})
        assert fresh.seq == 5 and not fresh.duplicate and old.seq == 1
        await nc.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_durable_consumer_goes_on_where_it_was_after_a_restart(
        kind: str, tmp_path: Path) -> None:
    start = start_tidings if kind == "tidings" else start_reference
    server = start(extra_args=["-js", "-sd", str(tmp_path)])
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="WORK", subjects=["work.>"], storage=StorageType.FILE)
        for i in range(4):
            await js.publish("work.x", b"m%d" % i)
        sub = await js.pull_subscribe("work.>", durable="w")
        for msg in await sub.fetch(2, timeout=5):
            await msg.ack_sync()
        await nc.close()
        server.stop()
        server.start()
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        info = await js.consumer_info("WORK", "w")
        assert (info.ack_floor.stream_seq, info.num_pending) == (2, 2)
        sub = await js.pull_subscribe("work.>", durable="w")
        assert [m.data for m in await sub.fetch(2, timeout=5)] == [b"m2", b"m3"]
        await nc.close()
    finally:
        server.stop()


async def test_direct_gets(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DIRECT", subjects=["dk.>"], storage=StorageType.MEMORY,
                        allow_direct=True)
    try:
        await js.publish("dk.a", b"1", headers={"X-Mine": "yes"})
        await js.publish("dk.b", b"2")
        await js.publish("dk.a", b"3")
        last = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"last_by_subj":"dk.a"}',
                                timeout=5)
        assert last.data == b"3" and last.headers is not None
        assert (last.headers["Nats-Stream"], last.headers["Nats-Subject"],
                last.headers["Nats-Sequence"]) == ("DIRECT", "dk.a", "3")
        first = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"seq":1}', timeout=5)
        assert first.data == b"1" and first.headers["X-Mine"] == "yes"
        by_subject = await nc.request("$JS.API.DIRECT.GET.DIRECT.dk.b", b"", timeout=5)
        assert by_subject.data == b"2"
        nxt = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"next_by_subj":"dk.a","seq":2}',
                               timeout=5)
        assert nxt.headers["Nats-Sequence"] == "3"
        missing = await nc.request("$JS.API.DIRECT.GET.DIRECT", b'{"seq":99}', timeout=5)
        assert missing.headers[nats.js.api.Header.STATUS] == "404"
        msg = await js.get_msg("DIRECT", 2, direct=True)
        assert (msg.subject, msg.data) == ("dk.b", b"2")
    finally:
        await js.delete_stream("DIRECT")


ACCOUNTS = """
jetstream {{ store_dir: "{dir}" }}
accounts {{
  A: {{ jetstream: enabled, users: [{{user: a, password: a}}] }}
  B: {{ users: [{{user: b, password: b}}] }}
}}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_jetstream_in_the_accounts_that_enable_it(kind: str, tmp_path: Path) -> None:
    from tests.harness import start_configured

    server = start_configured(kind, ACCOUNTS.format(dir=tmp_path))
    host = server.url.removeprefix("nats://")
    try:
        a = await nats.connect(f"nats://a:a@{host}")
        b = await nats.connect(f"nats://b:b@{host}")
        js = a.jetstream()
        await js.add_stream(name="MINE", subjects=["mine.>"], storage=StorageType.FILE)
        assert (await js.publish("mine.x", b"1")).seq == 1
        reply = await b.request("$JS.API.INFO", b"", timeout=5)
        assert json.loads(reply.data)["error"] == {
            "code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
        with pytest.raises(nats.errors.NoRespondersError):
            await b.request("mine.x", b"not A's stream", timeout=2)
        await a.close()
        await b.close()
    finally:
        server.stop()


async def test_work_queue_and_interest_retention(nc: Client) -> None:
    from nats.js.api import RetentionPolicy

    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["wq.>"], storage=StorageType.MEMORY,
                        retention=RetentionPolicy.WORK_QUEUE)
    await js.add_stream(name="INT", subjects=["int.>"], storage=StorageType.MEMORY,
                        retention=RetentionPolicy.INTEREST)
    try:
        for i in range(3):
            await js.publish("wq.x", b"%d" % i)
        await js.publish("int.x", b"before any consumer")
        assert (await js.stream_info("INT")).state.messages == 0
        work = await js.pull_subscribe("wq.>", durable="w")
        for msg in await work.fetch(2, timeout=5):
            await msg.ack_sync()
        assert (await js.stream_info("WQ")).state.messages == 1
        one = await js.pull_subscribe("int.>", durable="one")
        two = await js.pull_subscribe("int.>", durable="two")
        await js.publish("int.x", b"for both")
        (first,) = await one.fetch(1, timeout=5)
        await first.ack_sync()
        assert (await js.stream_info("INT")).state.messages == 1
        (second,) = await two.fetch(1, timeout=5)
        await second.ack_sync()
        assert (await js.stream_info("INT")).state.messages == 0
    finally:
        await js.delete_stream("WQ")
        await js.delete_stream("INT")


async def test_rollups_and_purges_of_a_subject(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ROLL", subjects=["roll.>"], storage=StorageType.MEMORY,
                        allow_rollup_hdrs=True)
    await js.add_stream(name="NOROLL", subjects=["noroll"], storage=StorageType.MEMORY)
    try:
        for i in range(3):
            await js.publish("roll.a", b"a%d" % i)
            await js.publish("roll.b", b"b%d" % i)
        await js.publish("roll.a", b"a-last", headers={"Nats-Rollup": "sub"})
        state = (await js.stream_info("ROLL")).state
        assert (state.messages, state.last_seq) == (4, 7)
        assert await js.purge_stream("ROLL", subject="roll.b", keep=1)
        assert (await js.stream_info("ROLL")).state.messages == 2
        await js.publish("roll.c", b"all", headers={"Nats-Rollup": "all"})
        assert (await js.stream_info("ROLL")).state.messages == 1
        with pytest.raises(APIError) as refused:
            await js.publish("noroll", b"x", headers={"Nats-Rollup": "sub"})
        assert (refused.value.err_code, refused.value.description) == (
            10111, "rollup not permitted")
    finally:
        await js.delete_stream("ROLL")
        await js.delete_stream("NOROLL")


async def test_deliver_last_per_subject_and_by_start_time(nc: Client) -> None:
    from nats.js.api import ConsumerConfig, DeliverPolicy

    js = nc.jetstream()
    await js.add_stream(name="LPS", subjects=["lps.>"], storage=StorageType.MEMORY)
    try:
        for key, value in (("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4"), ("b", b"5")):
            await js.publish(f"lps.{key}", value)
        sub = await js.pull_subscribe("lps.>", durable="last", config=ConsumerConfig(
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
        got = [(m.subject, m.data) for m in await sub.fetch(3, timeout=5)]
        assert got == [("lps.a", b"3"), ("lps.c", b"4"), ("lps.b", b"5")]
        await js.publish("lps.a", b"6")
        assert [m.data for m in await sub.fetch(1, timeout=5)] == [b"6"]
        info = await nc.request("$JS.API.STREAM.MSG.GET.LPS", b'{"seq":3}', timeout=5)
        when = json.loads(info.data)["message"]["time"]
        by_time = await js.pull_subscribe("lps.>", durable="time", config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=when))
        assert [m.data for m in await by_time.fetch(4, timeout=5)] == [b"3", b"4", b"5", b"6"]
    finally:
        await js.delete_stream("LPS")


async def test_max_consumers_and_a_nak_redelivers(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LIMITED", subjects=["limited"], storage=StorageType.MEMORY,
                        max_consumers=1)
    try:
        await js.publish("limited", b"x")
        sub = await js.pull_subscribe("limited", durable="only")
        with pytest.raises(BadRequestError) as refused:
            await js.pull_subscribe("limited", durable="second")
        assert refused.value.err_code == 10026
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.nak()
        (again,) = await sub.fetch(1, timeout=5)
        assert again.data == b"x" and again.metadata.num_delivered == 2
        info = await js.consumer_info("LIMITED", "only")
        assert (info.num_redelivered, info.num_ack_pending) == (1, 1)
        await again.ack_sync()
        info = await js.consumer_info("LIMITED", "only")
        assert (info.num_redelivered, info.num_ack_pending) == (0, 0)
    finally:
        await js.delete_stream("LIMITED")


async def test_lists_are_paged_and_a_direct_get_needs_allow_direct(nc: Client) -> None:
    js = nc.jetstream()
    names = [f"PAGE_{i:03d}" for i in range(260)]
    for name in names:
        await js.add_stream(name=name, subjects=[f"page.{name}"], storage=StorageType.MEMORY)
    try:
        first = json.loads((await nc.request("$JS.API.STREAM.LIST", b"", timeout=10)).data)
        rest = json.loads((await nc.request("$JS.API.STREAM.LIST", b'{"offset":256}',
                                            timeout=10)).data)
        assert (first["total"], first["limit"], len(first["streams"])) == (260, 256, 256)
        assert (rest["offset"], len(rest["streams"])) == (256, 4)
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$JS.API.DIRECT.GET.PAGE_000", b'{"seq":1}', timeout=5)
    finally:
        for name in names:
            await js.delete_stream(name)


async def test_a_durable_created_through_the_durable_api(nc: Client) -> None:
    reply = await nc.request("$JS.API.STREAM.CREATE.DUR", b'{"name":"DUR","storage":"memory"}',
                             timeout=5)
    assert "error" not in json.loads(reply.data)
    try:
        reply = await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.DUR.keep", json.dumps(
            {"stream_name": "DUR", "config": {"durable_name": "keep", "ack_policy": "explicit"}}
        ).encode(), timeout=5)
        body = json.loads(reply.data)
        assert body["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
        assert (body["name"], body["config"]["durable_name"]) == ("keep", "keep")
    finally:
        await nc.request("$JS.API.STREAM.DELETE.DUR", b"", timeout=5)


async def test_a_waiting_pull_request_gets_idle_heartbeats(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="HB", subjects=["hb"], storage=StorageType.MEMORY)
    try:
        await js.pull_subscribe("hb", durable="hb")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.HB.hb", json.dumps(
            {"batch": 1, "expires": 3_000_000_000, "idle_heartbeat": 500_000_000}).encode(),
            reply=inbox)
        beat = await sub.next_msg(timeout=5)
        assert beat.headers is not None
        assert beat.headers[nats.js.api.Header.STATUS] == "100"
        assert beat.headers[nats.js.api.Header.DESCRIPTION] == "Idle Heartbeat"
    finally:
        await js.delete_stream("HB")


async def test_a_nak_with_a_delay_waits_that_long(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NAKD", subjects=["nakd"], storage=StorageType.MEMORY)
    try:
        await js.publish("nakd", b"later")
        sub = await js.pull_subscribe("nakd", durable="d")
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.nak(delay=3)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=1)  # (not before its delay, however slow the machine)
        (again,) = await sub.fetch(1, timeout=10)
        assert again.data == b"later" and again.metadata.num_delivered == 2
    finally:
        await js.delete_stream("NAKD")


async def test_a_paused_consumer_delivers_once_resumed(nc: Client) -> None:
    from datetime import datetime, timedelta, timezone

    js = nc.jetstream()
    await js.add_stream(name="PAUSED", subjects=["paused"], storage=StorageType.MEMORY)
    try:
        await js.publish("paused", b"held")
        sub = await js.pull_subscribe("paused", durable="p")
        until = (datetime.now(timezone.utc) + timedelta(minutes=5)).isoformat().replace(
            "+00:00", "Z")
        reply = await nc.request("$JS.API.CONSUMER.PAUSE.PAUSED.p", json.dumps(
            {"pause_until": until}).encode(), timeout=5)
        body = json.loads(reply.data)
        assert body["type"] == "io.nats.jetstream.api.v1.consumer_pause_response"
        assert body["paused"] is True and body["pause_remaining"] > 0
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.PAUSED.p", b"",
                                            timeout=5)).data)
        assert info["paused"] is True and "pause_until" in info["config"]
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=1)
        reply = await nc.request("$JS.API.CONSUMER.PAUSE.PAUSED.p", b"{}", timeout=5)
        assert json.loads(reply.data) == {
            "type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": False,
            "pause_until": "0001-01-01T00:00:00Z"}
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.data == b"held"
    finally:
        await js.delete_stream("PAUSED")


async def test_discard_new_per_subject(nc: Client) -> None:
    from nats.js.api import DiscardPolicy

    js = nc.jetstream()
    await js.add_stream(name="PERSUBJ", subjects=["ps.*"], storage=StorageType.MEMORY,
                        discard=DiscardPolicy.NEW, max_msgs_per_subject=1,
                        discard_new_per_subject=True)
    try:
        await js.publish("ps.a", b"1")
        await js.publish("ps.b", b"1")
        with pytest.raises(APIError) as refused:
            await js.publish("ps.a", b"2")
        assert (refused.value.code, refused.value.err_code, refused.value.description) == (
            503, 10077, "maximum messages per subject exceeded")
    finally:
        await js.delete_stream("PERSUBJ")


async def test_last_per_subject_deliveries_count_down_what_is_pending(nc: Client) -> None:
    """(nats-py's KV watcher ends its first values when a delivery says none is pending.)"""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    js = nc.jetstream()
    await js.add_stream(name="LPSP", subjects=["lpsp.>"], storage=StorageType.MEMORY)
    try:
        for key in ("a", "b", "a", "c"):
            await js.publish(f"lpsp.{key}", key.encode())
        sub = await js.pull_subscribe("lpsp.>", durable="w", config=ConsumerConfig(
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
        got = await sub.fetch(3, timeout=5)
        assert [m.metadata.num_pending for m in got] == [2, 1, 0]
    finally:
        await js.delete_stream("LPSP")


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_directory_is_made_at_start_or_refused(kind: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    store = tmp_path / "sd"
    start = start_tidings if kind == "tidings" else start_reference
    srv = start(extra_args=["-js", "-sd", str(store)])
    try:
        assert (store / "jetstream").is_dir()  # made at start, before any stream
    finally:
        srv.stop()
    (tmp_path / "file").write_text("")
    command = ([sys.executable, "-m", "tidings", "server", "--no_streaming"]
               if kind == "tidings" else [str(Path(sys.executable).parent / "nats-server")])
    done = subprocess.run([*command, "-p", "-1", "-js", "-sd", str(tmp_path / "file")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Can't start JetStream: storage directory is not a directory" in done.stderr


async def test_a_pull_for_no_consumer_has_no_responders(nc: Client) -> None:
    from nats.errors import NoRespondersError

    js = nc.jetstream()
    await js.add_stream(name="GONE", subjects=["gone"], storage=StorageType.MEMORY)
    await js.add_consumer("GONE", durable_name="c")
    assert (await nc.request("$JS.API.CONSUMER.MSG.NEXT.GONE.c",
                             b'{"batch": 1, "no_wait": true}', timeout=5)).headers
    await js.delete_stream("GONE")
    for subject in ("$JS.API.CONSUMER.MSG.NEXT.GONE.c", "$JS.API.DIRECT.GET.GONE"):
        with pytest.raises(NoRespondersError):
            await nc.request(subject, b"", timeout=5)


async def test_flow_control_holds_deliveries_until_answered(nc: Client) -> None:
    """A push consumer with flow control stalls past its window (2 MB at first) until the
    subscriber answers the request; its heartbeat says so (Nats-Consumer-Stalled)."""
    js = nc.jetstream()
    await js.add_stream(name="FLOW", subjects=["flow"], storage=StorageType.MEMORY)
    try:
        chunk = b"x" * 100_000
        for _ in range(40):
            await js.publish("flow", chunk)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("FLOW", durable_name="fc", deliver_subject=inbox,
                              flow_control=True, idle_heartbeat=1.0)
        data, requests = 0, []
        while True:
            msg = await sub.next_msg(10)
            status = msg.headers.get("Status") if msg.headers else None
            if status is None:
                data += 1
            elif msg.reply:  # a flow control request
                requests.append(msg.reply)
            elif msg.headers.get("Nats-Consumer-Stalled"):
                break  # an idle heartbeat while stalled
        assert requests and msg.headers["Nats-Consumer-Stalled"] == requests[-1]
        assert 10 <= data < 40
        await nc.publish(requests[-1], b"")
        while data < 40:
            msg = await sub.next_msg(10)
            if msg.headers and msg.headers.get("Status"):
                if msg.reply:
                    await nc.publish(msg.reply, b"")
                continue
            data += 1
    finally:
        await js.delete_stream("FLOW")


async def test_direct_get_batches_and_the_last_of_several_subjects(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DG", subjects=["dg.*"], storage=StorageType.MEMORY,
                        allow_direct=True)
    try:
        for subject in ("dg.a", "dg.b", "dg.a", "dg.c"):
            await js.publish(subject, subject.encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.DIRECT.GET.DG", b'{"seq": 2, "batch": 2}', reply=inbox)
        first, second, eob = [await sub.next_msg(5) for _ in range(3)]
        assert [(m.headers or {}).get("Nats-Sequence") for m in (first, second)] == ["2", "3"]
        assert (first.headers or {})["Nats-Num-Pending"] == "2"
        assert (second.headers or {})["Nats-Last-Sequence"] == "2"
        assert eob.headers and eob.headers["Status"] == "204"
        assert (eob.headers["Nats-Num-Pending"], eob.headers["Nats-Last-Sequence"]) == ("1", "3")
        await nc.publish("$JS.API.DIRECT.GET.DG", b'{"multi_last": ["dg.a", "dg.b"]}',
                         reply=inbox)
        b_last, a_last, end = [await sub.next_msg(5) for _ in range(3)]
        assert [m.data for m in (b_last, a_last)] == [b"dg.b", b"dg.a"]
        assert end.headers and end.headers["Nats-UpTo-Sequence"] == "4"
        for body, status in ((b"", "408"), (b'{"seq": 1, "last_by_subj": "dg.a"}', "408"),
                             (b'{"multi_last": ["dg.z"]}', "404")):
            await nc.publish("$JS.API.DIRECT.GET.DG", body, reply=inbox)
            refused = await sub.next_msg(5)
            assert refused.headers and refused.headers["Status"] == status, body
    finally:
        await js.delete_stream("DG")


async def test_replay_original_keeps_the_stored_spacing(nc: Client) -> None:
    import asyncio

    js = nc.jetstream()
    await js.add_stream(name="REPLAY", subjects=["replay"], storage=StorageType.MEMORY)
    try:
        await js.publish("replay", b"first")
        await asyncio.sleep(1.0)  # (the stored messages a second apart: the data, not a wait)
        await js.publish("replay", b"second")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("REPLAY", deliver_subject=inbox, replay_policy="original")
        assert (await sub.next_msg(5)).data == b"first"
        await nc.flush()
        assert sub.pending_msgs == 0  # not before its second has passed
        assert (await sub.next_msg(5)).data == b"second"
    finally:
        await js.delete_stream("REPLAY")


async def test_names_with_what_the_reference_refuses_are_refused_alike(
        servers: list[Server]) -> None:
    """A stream's, consumer's, durable's, mirror's or source's name with a form feed is
    refused as one with a blank is (the reference's isValidAssetName); a vertical tab is
    no blank to it."""
    requests = [
        ("STREAM.CREATE.a\vb", {"name": "a\vb", "storage": "memory"}),
        ("STREAM.CREATE.NAMES", {"name": "NAMES", "subjects": ["names"], "storage": "memory"}),
        ("STREAM.CREATE.a\fb", {"name": "a\fb", "storage": "memory"}),
        ("STREAM.UPDATE.a\fb", {"name": "a\fb", "storage": "memory"}),
        ("STREAM.CREATE.a/\fb", {"name": "a/\fb", "storage": "memory"}),
        ("STREAM.CREATE." + "n" * 256, {"name": "n" * 256, "storage": "memory"}),
        ("CONSUMER.CREATE.NAMES.c\fd", {"stream_name": "NAMES", "config": {
            "name": "c\fd", "ack_policy": "explicit"}}),
        ("CONSUMER.DURABLE.CREATE.NAMES.c\fd", {"stream_name": "NAMES", "config": {
            "durable_name": "c\fd", "ack_policy": "explicit"}}),
        ("STREAM.CREATE.M", {"name": "M", "storage": "memory", "mirror": {"name": "x\fy"}}),
        ("STREAM.CREATE.S", {"name": "S", "storage": "memory", "sources": [{"name": "x\fy"}]}),
    ]
    answers = []
    for server in servers:
        nc = await nats.connect(server.url)
        try:
            got = []
            for subject, body in requests:
                msg = await nc.request("$JS.API." + subject, json.dumps(body).encode(),
                                       timeout=5)
                got.append(json.loads(msg.data).get("error"))
            answers.append(got)
        finally:
            await nc.close()
    ours, theirs = answers
    assert theirs[0] is None and theirs[1] is None
    assert all(error is not None for error in theirs[2:])
    assert ours == theirs
