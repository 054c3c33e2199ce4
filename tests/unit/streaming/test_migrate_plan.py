"""The migration's plan, without servers: names, positions, configurations, headers, acks."""

from __future__ import annotations

import pytest

from tidings.protocol.headers import Headers
from tidings.server.gojson import go_time
from tidings.streaming.migrate_plan import (
    Channel,
    MigrateError,
    Options,
    Stamper,
    SubState,
    build_plan,
    consumer_config,
    consumer_differences,
    durables,
    parse_maps,
    stream_config,
    stream_differences,
)
from tidings.streaming.migrate_target import AckWindow

T0 = 1_700_000_000_000_000_000


def test_maps() -> None:
    assert parse_maps(["orders=ORDERS", "a.b=AB", "x=y=Z"]) == {
        "orders": "ORDERS", "a.b": "AB", "x=y": "Z"}
    for bad in ("orders", "=S", "orders="):
        with pytest.raises(MigrateError, match="expected CHANNEL=STREAM"):
            parse_maps([bad])
    with pytest.raises(MigrateError, match="mapped twice"):
        parse_maps(["a=B", "a=C"])


@pytest.mark.parametrize("ns", [T0, T0 + 1, T0 + 120_000_000, T0 + 999_999_999, 0])
def test_timestamps_as_go_writes_them(ns: int) -> None:
    stamp = Stamper("orders")
    assert stamp.timestamp(ns) == go_time(ns, utc=True)
    assert stamp.timestamp(ns + 5) == go_time(ns + 5, utc=True)  # the second's text kept


def test_header_block() -> None:
    block = Stamper("orders").block(17, T0 + 5)
    assert Headers.decode(block).to_dict() == {
        "Nats-Msg-Id": "orders:17", "Nats-Streaming-Channel": "orders",
        "Nats-Streaming-Sequence": "17", "Nats-Streaming-Timestamp": go_time(T0 + 5, utc=True)}
    assert block.endswith(b"\r\n\r\n")


def test_positions_of_durables_and_queue_groups() -> None:
    subs = [
        SubState("orders", "c1", "dur", "", 9, 4),  # 4 and more unacked
        SubState("orders", "c2", "dur", "", 9, None),  # another client's durable "dur"
        SubState("orders", "c1", "", "qd:workers", 12, None),
        SubState("orders", "c2", "", "qd:workers", 10, 7),
        SubState("orders", "c3", "", "q2:w", 5, None),
        SubState("orders", "c4", "", "q2:w", 8, None),
    ]
    got = {(d.name, d.queue, d.clients): d.next_seq for d in durables(subs)}
    assert got == {("dur", "", ("c1",)): 4, ("dur", "", ("c2",)): 10,
                   ("qd", "workers", ("c1", "c2")): 7, ("q2", "w", ("c3", "c4")): 9}


def test_stream_configs_start_at_the_channel() -> None:
    opts = Options()
    assert stream_config(Channel("a", 1, 5, 5), "A", opts) == {
        "name": "A", "subjects": ["a"], "storage": "file", "num_replicas": 1}
    assert stream_config(Channel("a", 10, 14, 5), "A", opts)["first_seq"] == 10
    assert stream_config(Channel("a", 15, 14, 0), "A", opts)["first_seq"] == 15  # expired
    assert "first_seq" not in stream_config(Channel("a", 0, 0, 0), "A", opts)  # never used


def test_differences() -> None:
    want = stream_config(Channel("a", 10, 14, 5), "A", Options())
    same = {**want, "retention": "limits", "max_msgs": -1}
    assert stream_differences(same, want, empty=True) == []
    assert stream_differences({**same, "first_seq": 1}, want, empty=False) == []
    assert stream_differences({**same, "first_seq": 1}, want, empty=True) == [
        "first_seq 1, not 10"]
    assert stream_differences({**same, "storage": "memory"}, want, empty=False) == [
        "storage 'memory', not 'file'"]
    d = durables([SubState("a", "c", "dur", "", 3, None)])[0]
    push = consumer_config(d, False, "_INBOX.x")
    assert consumer_differences({**push, "deliver_subject": "_INBOX.other"}, push) == []
    assert consumer_differences(consumer_config(d, True, ""), push) == [
        "a pull consumer, not push"]
    assert consumer_differences({**push, "opt_start_seq": 2}, push) == [
        "opt_start_seq 2, not 4"]


def test_plans_refuse_what_jetstream_would() -> None:
    chans = [Channel("orders", 1, 3, 3), Channel("a.b", 1, 1, 1)]
    subs = [SubState("orders", "c1", "dur", "", 3, None),
            SubState("orders", "c2", "dur", "", 1, None)]
    with pytest.raises(MigrateError, match="durable 'dur' of client 'c1' and of client 'c2' "
                       "would both become consumer 'dur' of stream 'orders'"):
        build_plan(chans, subs, Options(channels=("orders",)))
    with pytest.raises(MigrateError, match=r"'a.b' cannot be a stream name"):
        build_plan(chans, [], Options())
    with pytest.raises(MigrateError, match=r"'x y' cannot be a stream name \(it holds ' '\)"):
        build_plan(chans, [], Options(maps={"a.b": "x y"}))
    bad_durable = [SubState("orders", "c1", "d.1", "", 3, None)]
    with pytest.raises(MigrateError, match=r"durable 'd.1' cannot be a consumer name"):
        build_plan(chans, bad_durable, Options(channels=("orders",)))
    plans = build_plan(chans, subs[:1], Options(maps={"a.b": "AB"}, pull=True))
    assert [(p.stream, [c.config.get("deliver_subject") for c in p.consumers]) for p in plans] \
        == [("AB", []), ("orders", [None])]


def test_acks() -> None:
    w = AckWindow("S", "orders")
    for seq in (1, 2, 3):
        w.sent(seq)
    w.ack(1, b'{"stream":"S","seq":1}', None)
    w.ack(2, b'{"stream":"S","seq":2,"duplicate":true}', None)  # stored by an earlier run
    assert (w.acked, w.error, w.waiting) == (2, None, {3})
    w.ack(3, b'{"stream":"S","seq":4}', None)
    assert "stored channel 'orders' message 3 as its message 4" in (w.error or "")
    refused = AckWindow("S", "orders")
    refused.sent(1)
    refused.ack(1, b'{"error":{"code":503,"err_code":10077,"description":"maximum messages '
                   b'exceeded"},"stream":"S","seq":0}', None)
    assert refused.error == ("stream 'S' refused channel 'orders' message 1: maximum messages "
                             "exceeded (err_code 10077)")
    nobody = AckWindow("S", "orders")
    nobody.sent(1)
    nobody.ack(1, b"", 503)
    assert nobody.error is not None and "no stream of the target takes subject" in nobody.error


def test_a_durable_behind_the_channel_starts_at_its_first_message() -> None:
    """Its unacknowledged messages expired from the channel: none of them is in the stream."""
    (plan,) = build_plan([Channel("a", 10, 14, 5)], [SubState("a", "c", "d", "", 3, 2)],
                         Options())
    assert plan.consumers[0].config["opt_start_seq"] == 10
