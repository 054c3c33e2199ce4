"""Channel limits (global and per channel), max subscriptions, inactivity, the config file."""

from __future__ import annotations

from tests.harness import eventually
from tidings.config import parse as parse_config
from tidings.streaming.server.options import StreamingOptions, apply_config
from tidings.streaming.stores import ChannelLimits, StoreLimits

from .conftest import Inbox
from .test_delivery import publish_n, seqs


async def test_max_msgs_drops_the_oldest_and_first_seq_moves(stan):
    env = await stan(limits=StoreLimits(max_msgs=5))
    sc = await env.connect("mm")
    await publish_n(sc, "mm", 12)
    info = env.server.store.channel_info("mm")
    assert (info.first_seq, info.last_seq, info.msgs) == (8, 12, 5)
    ib = Inbox()
    await sc.subscribe("mm", cb=ib, deliver_all_available=True)
    assert seqs(await ib.take(5)) == [8, 9, 10, 11, 12]
    ib2 = Inbox()
    await sc.subscribe("mm", cb=ib2, sequence=2)  # before first: clamped to first
    assert seqs(await ib2.take(1)) == [8]


async def test_max_bytes_per_channel_override(stan):
    limits = StoreLimits(max_bytes=0, channels={"big.*": ChannelLimits(max_bytes=300)})
    env = await stan(limits=limits)
    sc = await env.connect("mb")
    for _ in range(10):
        await sc.publish("big.one", b"x" * 100)
        await sc.publish("other", b"x" * 100)
    big = env.server.store.channel_info("big.one")
    assert big.bytes <= 300 and big.msgs == 3 and big.first_seq == 8
    assert env.server.store.channel_info("other").msgs == 10


async def test_max_age_expires_messages(stan):
    env = await stan(limits=StoreLimits(max_age=0.3))
    sc = await env.connect("ma")
    await publish_n(sc, "ma", 3)
    assert env.server.store.channel_info("ma").msgs == 3
    await eventually(lambda: env.server.store.channel_info("ma").msgs == 0, timeout=10)
    info = env.server.store.channel_info("ma")
    assert info.first_seq == 4 and info.last_seq == 3
    await publish_n(sc, "ma", 1, start=3)
    ib = Inbox()
    await sc.subscribe("ma", cb=ib, deliver_all_available=True)
    assert seqs(await ib.take(1)) == [4]


async def test_unacked_message_dropped_by_limits_is_not_redelivered(stan):
    env = await stan(limits=StoreLimits(max_msgs=2))
    sc = await env.connect("dr")
    ib = Inbox()
    await sc.subscribe("dr", cb=ib, manual_acks=True, ack_wait=1, max_inflight=1)
    await publish_n(sc, "dr", 1)
    first = await ib.next()
    assert first.seq == 1
    await publish_n(sc, "dr", 2, start=1)  # seq 1 is dropped from the channel
    assert env.server.store.channel_info("dr").first_seq == 2
    nxt = await ib.next(timeout=5)  # not a redelivery of 1: the next available message
    assert (nxt.seq, nxt.redelivered) == (2, False)


async def test_max_inactivity_deletes_an_idle_channel(stan):
    env = await stan(max_inactivity=0.3)
    sc = await env.connect("mi")
    await publish_n(sc, "idle", 1)
    sub = await sc.subscribe("busy", cb=Inbox())
    await eventually(lambda: "idle" not in env.server.channels, timeout=10)
    assert "idle" not in env.server.store.channels()
    assert "busy" in env.server.channels  # an active subscription keeps it
    await sub.unsubscribe()
    await eventually(lambda: "busy" not in env.server.channels, timeout=10)


def test_config_file_reference_syntax():
    conf = parse_config('''
        # a reference streaming config
        streaming {
          id: "mycluster"
          store: "file"
          dir: "/tmp/x"
          hb_interval: "10s"
          hb_fail_count: 3
          store_limits {
            max_channels: 10
            max_msgs: 1000
            max_bytes: 10MB
            max_age: "1h"
            max_subs: 5
            max_inactivity: "30m"
            channels: {
              "orders.*": { max_msgs: 50, max_age: "10s" }
              "logs": { max_bytes: -1, max_inactivity: "1m" }
            }
          }
        }
    ''')
    o = apply_config(StreamingOptions(), conf)
    assert (o.cluster_id, o.store, o.dir, o.hb_interval, o.hb_fail_count) == (
        "mycluster", "file", "/tmp/x", 10.0, 3)
    lim = o.limits
    assert (lim.max_channels, lim.max_msgs, lim.max_bytes, lim.max_age, lim.max_subs) == (
        10, 1000, 10 * 1024 * 1024, 3600.0, 5)
    assert o.max_inactivity == 1800.0
    assert lim.for_channel("orders.eu").max_msgs == 50
    assert lim.for_channel("orders.eu").max_age_ns == 10 * 10**9
    assert lim.for_channel("orders.eu").max_bytes == 10 * 1024 * 1024  # inherited
    assert lim.for_channel("logs").max_bytes == 0  # -1 in the file: unlimited
    assert o.inactivity_for("logs") == 60.0 and o.inactivity_for("other") == 1800.0
    as_json = apply_config(StreamingOptions(), parse_config(
        '{"store_limits": {"max_msgs": 7, "channels": {"a": {"max_msgs": 2}}}}'))
    assert as_json.limits.max_msgs == 7 and as_json.limits.for_channel("a").max_msgs == 2



def test_an_exact_channel_name_wins_then_the_first_matching_pattern():
    wide, exact, narrow = (ChannelLimits(max_msgs=n) for n in (1, 2, 3))
    limits = StoreLimits(max_msgs=9, channels={"orders.>": wide, "orders.eu": exact,
                                               "orders.*": narrow, "logs": narrow})
    assert limits.for_channel("orders.eu").max_msgs == 2  # exact, though "orders.>" is first
    assert limits.for_channel("orders.us").max_msgs == 1  # "orders.>" is before "orders.*"
    assert limits.for_channel("orders.us.x").max_msgs == 1
    assert limits.for_channel("orders").max_msgs == 9
    assert limits.for_channel("logs.x").max_msgs == 9  # a plain name is not a prefix
    opts = StreamingOptions(max_inactivity=5.0, channel_inactivity={
        "a.*": 1.0, "a.b": 2.0, "a.>": 3.0})
    assert [opts.inactivity_for(ch) for ch in ("a.b", "a.c", "a.b.c", "a", "b")] == [
        2.0, 1.0, 3.0, 5.0, 5.0]
