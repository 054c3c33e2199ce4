"""/streaming/serverz, storez, clientsz, channelsz with the reference's fields."""

from __future__ import annotations

from tidings.streaming.stores import ChannelLimits, StoreLimits

from .conftest import Inbox
from .test_delivery import publish_n

SUBZ_FIELDS = {"client_id", "inbox", "ack_inbox", "is_durable", "is_offline", "max_inflight",
               "ack_wait", "last_sent", "pending_count", "is_stalled"}


async def test_monitoring_endpoints(stan):
    limits = StoreLimits(max_msgs=100, channels={"lim": ChannelLimits(max_msgs=5)})
    env = await stan(monitor=True, limits=limits)
    a = await env.connect("alpha")
    b = await env.connect("beta")
    await publish_n(a, "ch.one", 3)
    await publish_n(a, "ch.two", 2)
    await a.subscribe("ch.one", cb=Inbox(), durable_name="dur", deliver_all_available=True)
    q = Inbox()
    await b.subscribe("ch.two", cb=q, queue="grp", manual_acks=True, deliver_all_available=True,
                      max_inflight=7, ack_wait=9)
    await q.take(2)

    status, sz = await env.get("/streaming/serverz")
    assert status == 200
    assert sz["cluster_id"] == "test-cluster" and sz["state"] == "STANDALONE"
    assert (sz["clients"], sz["channels"], sz["subscriptions"]) == (2, 2, 2)
    assert (sz["total_msgs"], sz["total_bytes"]) == (5, sum(len(b"m%d" % i) for i in
                                                           (0, 1, 2, 0, 1)))
    assert sz["in_msgs"] == 5 and sz["out_msgs"] >= 5 and sz["in_bytes"] > 0
    for key in ("server_id", "version", "now", "start_time", "uptime", "out_bytes"):
        assert key in sz

    status, st = await env.get("/streaming/storez")
    assert status == 200 and st["type"] == "MEMORY"
    assert st["limits"]["max_msgs"] == 100 and st["limits"]["max_channels"] == 100
    assert st["limits"]["channels"]["lim"]["max_msgs"] == 5
    assert (st["total_msgs"], st["cluster_id"]) == (5, "test-cluster")

    status, cz = await env.get("/streaming/clientsz")
    assert status == 200 and (cz["total"], cz["count"]) == (2, 2)
    assert [c["id"] for c in cz["clients"]] == ["alpha", "beta"]
    assert "subscriptions" not in cz["clients"][0]
    status, one = await env.get("/streaming/clientsz?client=beta&subs=1")
    assert status == 200 and one["subs_count"] == 1 and one["hb_inbox"]
    (bsub,) = one["subscriptions"]["ch.two"]
    assert SUBZ_FIELDS <= set(bsub)
    assert (bsub["queue_name"], bsub["max_inflight"], bsub["ack_wait"],
            bsub["pending_count"], bsub["last_sent"]) == ("grp", 7, 9, 2, 2)
    status, page = await env.get("/streaming/clientsz?offset=1&limit=1")
    assert [c["id"] for c in page["clients"]] == ["beta"] and page["total"] == 2
    status, text = await env.get("/streaming/clientsz?client=nobody")
    assert status == 404 and "Client nobody not found" in text

    status, chz = await env.get("/streaming/channelsz")
    assert status == 200 and chz["names"] == ["ch.one", "ch.two"] and chz["count"] == 2
    status, chz = await env.get("/streaming/channelsz?subs=1")
    one_ch = chz["channels"][0]
    assert (one_ch["name"], one_ch["msgs"], one_ch["first_seq"], one_ch["last_seq"]) == (
        "ch.one", 3, 1, 3)
    (dsub,) = one_ch["subscriptions"]
    assert dsub["durable_name"] == "dur" and dsub["is_durable"] and not dsub["is_offline"]
    status, text = await env.get("/streaming/channelsz?channel=nope")
    assert status == 404 and "Channel nope not found" in text

    await a.close()  # the durable goes offline and is still listed
    status, ch1 = await env.get("/streaming/channelsz?channel=ch.one&subs=1")
    (dsub,) = ch1["subscriptions"]
    assert dsub["is_offline"] and dsub["client_id"] == "alpha"
    status, sz = await env.get("/streaming/serverz")
    assert sz["clients"] == 1 and sz["subscriptions"] == 2
