"""The wire protocol as a raw client sees it: subjects, responses and every error string."""

from __future__ import annotations

import pytest

from tidings.streaming.pb import protocol_pb2 as pb
from tidings.streaming.server import errors as E

CID = "test-cluster"
DISCOVER = f"_STAN.discover.{CID}"


def connect_req(client_id: str, hb: str = "hb.inbox", protocol: int = 1,
                conn_id: bytes = b"cid-1") -> pb.ConnectRequest:
    return pb.ConnectRequest(clientID=client_id, heartbeatInbox=hb, protocol=protocol,
                             connID=conn_id, pingInterval=5, pingMaxOut=3)


async def raw_connect(env, client_id: str, **kw) -> pb.ConnectResponse:
    return await env.request(DISCOVER, connect_req(client_id, **kw), pb.ConnectResponse)


async def test_connect_response_subjects_and_ping_settings(stan):
    env = await stan()
    resp = await raw_connect(env, "raw1")
    assert resp.error == ""
    assert resp.pubPrefix == f"_STAN.pub.{CID}"
    assert resp.subRequests == f"_STAN.sub.{CID}"
    assert resp.unsubRequests == f"_STAN.unsub.{CID}"
    assert resp.subCloseRequests == f"_STAN.subclose.{CID}"
    assert resp.closeRequests == f"_STAN.close.{CID}"
    assert resp.protocol == 1
    assert resp.pingRequests == f"{DISCOVER}.pings"
    assert (resp.pingInterval, resp.pingMaxOut) == (5, 3)
    old = await raw_connect(env, "raw0", protocol=0, conn_id=b"cid-0")
    assert old.error == "" and old.pingRequests == "" and old.pingInterval == 0
    assert old.protocol == 0 and old.pubPrefix == resp.pubPrefix


async def test_connect_errors(stan):
    env = await stan()
    nc = await env.nats()
    r = await nc.request(DISCOVER, b"\xff\xff\xff", timeout=2)
    resp = pb.ConnectResponse.FromString(r.data)
    assert resp.error == E.ERR_INVALID_CONN_REQ
    resp = await env.request(DISCOVER, pb.ConnectRequest(clientID="a"), pb.ConnectResponse)
    assert resp.error == E.ERR_INVALID_CONN_REQ  # no heartbeat inbox
    for bad in ("", "a b", "é", "a.b", "a*"):
        resp = await raw_connect(env, bad)
        assert resp.error == E.ERR_INVALID_CLIENT_ID, bad
    assert E.ERR_INVALID_CLIENT_ID == (
        "stan: invalid clientID: only alphanumeric and `-` or `_` characters allowed")


async def test_duplicate_client_id_live_old_client_is_refused(stan):
    env = await stan()
    nc = await env.nats()
    hb = nc.new_inbox()

    async def answer(msg):
        await nc.publish(msg.reply, b"")

    await nc.subscribe(hb, cb=answer)
    assert (await raw_connect(env, "dup", hb=hb)).error == ""
    resp = await raw_connect(env, "dup", hb=nc.new_inbox(), conn_id=b"other")
    assert resp.error == E.ERR_INVALID_CLIENT == "stan: clientID already registered"


async def test_duplicate_client_id_dead_old_client_is_replaced(stan):
    env = await stan()
    assert (await raw_connect(env, "ghost", hb="nobody.listens", conn_id=b"c-old")).error == ""
    resp = await raw_connect(env, "ghost", hb="new.hb", conn_id=b"c-new")
    assert resp.error == ""
    # pings: the new connection is known, the replaced one is told so
    ok = await env.request(f"{DISCOVER}.pings", pb.Ping(connID=b"c-new"), pb.PingResponse)
    assert ok.error == ""
    gone = await env.request(f"{DISCOVER}.pings", pb.Ping(connID=b"c-old"), pb.PingResponse)
    assert gone.error == "client has been replaced or is no longer registered"


async def test_publish_errors_echo_the_guid(stan):
    env = await stan()
    assert (await raw_connect(env, "pubber", conn_id=b"pc")).error == ""
    pub = f"_STAN.pub.{CID}"
    cases = [
        (pb.PubMsg(clientID="pubber", guid="", subject="foo", connID=b"pc"), ""),
        (pb.PubMsg(clientID="pubber", guid="g1", subject="foo.*", connID=b"pc"), "g1"),
        (pb.PubMsg(clientID="pubber", guid="g2", subject="foo..bar", connID=b"pc"), "g2"),
        (pb.PubMsg(clientID="nobody", guid="g3", subject="foo"), "g3"),
        (pb.PubMsg(clientID="pubber", guid="g4", subject="foo", connID=b"unknown"), "g4"),
    ]
    for msg, guid in cases:
        ack = await env.request(f"{pub}.foo", msg, pb.PubAck)
        assert (ack.guid, ack.error) == (guid, E.ERR_INVALID_PUB_REQ)
    ack = await env.request(f"{pub}.foo",
                            pb.PubMsg(clientID="pubber", guid="ok", subject="foo", data=b"x",
                                      connID=b"pc"), pb.PubAck)
    assert (ack.guid, ack.error) == ("ok", "")
    # the clientID alone identifies a client that sent no connID
    assert (await raw_connect(env, "legacy", protocol=0, conn_id=b"")).error == ""
    ack = await env.request(f"{pub}.foo", pb.PubMsg(clientID="legacy", guid="l1", subject="foo"),
                            pb.PubAck)
    assert ack.error == ""


def sub_req(**kw) -> pb.SubscriptionRequest:
    base = dict(clientID="subber", subject="foo", inbox="my.inbox", maxInFlight=10,
                ackWaitInSecs=30)
    base.update(kw)
    return pb.SubscriptionRequest(**base)


@pytest.mark.parametrize("kw,err", [
    ({"clientID": ""}, E.ERR_MISSING_CLIENT),
    ({"ackWaitInSecs": 0}, E.ERR_INVALID_ACK_WAIT),
    ({"ackWaitInSecs": -1}, E.ERR_INVALID_ACK_WAIT),
    ({"maxInFlight": 0}, E.ERR_INVALID_MAX_INFLIGHT),
    ({"startPosition": 7}, E.ERR_INVALID_START),
    ({"subject": "foo.>"}, E.ERR_INVALID_SUBJECT),
    ({"subject": ""}, E.ERR_INVALID_SUBJECT),
    ({"subject": ".foo"}, E.ERR_INVALID_SUBJECT),
    ({"clientID": "stranger"}, E.ERR_UNKNOWN_CLIENT),
    ({"qGroup": "q", "durableName": "a:b"}, E.ERR_INVALID_DUR_NAME),
])
async def test_subscription_request_errors(stan, kw, err):
    env = await stan()
    assert (await raw_connect(env, "subber")).error == ""
    resp = await env.request(f"_STAN.sub.{CID}", sub_req(**kw), pb.SubscriptionResponse)
    assert resp.error == err and resp.ackInbox == ""


async def test_subscription_request_undecodable_and_duplicate_durable(stan):
    env = await stan()
    nc = await env.nats()
    r = await nc.request(f"_STAN.sub.{CID}", b"\xff\xff", timeout=2)
    assert pb.SubscriptionResponse.FromString(r.data).error == E.ERR_INVALID_SUB_REQ
    assert (await raw_connect(env, "subber")).error == ""
    first = await env.request(f"_STAN.sub.{CID}", sub_req(durableName="d"),
                              pb.SubscriptionResponse)
    assert first.error == "" and first.ackInbox.startswith(f"_STAN.ack.{CID}.")
    again = await env.request(f"_STAN.sub.{CID}", sub_req(durableName="d", inbox="other"),
                              pb.SubscriptionResponse)
    assert again.error == E.ERR_DUP_DURABLE == "stan: duplicate durable registration"


@pytest.mark.parametrize("kind", ["unsub", "subclose"])
async def test_unsubscribe_and_subclose_errors(stan, kind):
    env = await stan()
    nc = await env.nats()
    subj = f"_STAN.{kind}.{CID}"
    r = await nc.request(subj, b"\xff\xff", timeout=2)
    assert pb.SubscriptionResponse.FromString(r.data).error == E.ERR_INVALID_UNSUB_REQ
    assert (await raw_connect(env, "subber")).error == ""
    sub = await env.request(f"_STAN.sub.{CID}", sub_req(), pb.SubscriptionResponse)
    assert sub.error == ""

    def req(**kw):
        base = dict(clientID="subber", subject="foo", inbox=sub.ackInbox)
        base.update(kw)
        return pb.UnsubscribeRequest(**base)

    resp = await env.request(subj, req(subject="nochannel"), pb.SubscriptionResponse)
    assert resp.error == E.ERR_UNKNOWN_CHANNEL == "stan: unknown channel"
    resp = await env.request(subj, req(inbox="not.an.inbox"), pb.SubscriptionResponse)
    assert resp.error == E.ERR_INVALID_SUB == "stan: invalid subscription"
    resp = await env.request(subj, req(clientID="stranger"), pb.SubscriptionResponse)
    assert resp.error == E.ERR_UNKNOWN_CLIENT
    # by delivery inbox works as well as by ack inbox
    resp = await env.request(subj, req(inbox="my.inbox"), pb.SubscriptionResponse)
    assert resp.error == ""
    resp = await env.request(subj, req(), pb.SubscriptionResponse)
    assert resp.error == E.ERR_INVALID_SUB


async def test_close_errors(stan):
    env = await stan()
    nc = await env.nats()
    r = await nc.request(f"_STAN.close.{CID}", b"\xff\xff", timeout=2)
    assert pb.CloseResponse.FromString(r.data).error == E.ERR_INVALID_CLOSE_REQ
    resp = await env.request(f"_STAN.close.{CID}", pb.CloseRequest(clientID="nobody"),
                             pb.CloseResponse)
    assert resp.error == E.ERR_UNKNOWN_CLIENT == "stan: unknown clientID"
    assert (await raw_connect(env, "closer")).error == ""
    resp = await env.request(f"_STAN.close.{CID}", pb.CloseRequest(clientID="closer"),
                             pb.CloseResponse)
    assert resp.error == ""
    resp = await env.request(f"_STAN.close.{CID}", pb.CloseRequest(clientID="closer"),
                             pb.CloseResponse)
    assert resp.error == E.ERR_UNKNOWN_CLIENT


async def test_other_cluster_id_is_not_answered(stan):
    env = await stan(cluster_id="mine")
    nc = await env.nats()
    from tidings.client.errors import NoRespondersError, TimeoutError

    with pytest.raises((NoRespondersError, TimeoutError)):
        await nc.request(DISCOVER, connect_req("x").SerializeToString(), timeout=0.3)
    ok = await env.request("_STAN.discover.mine", connect_req("x"), pb.ConnectResponse)
    assert ok.error == "" and ok.pubPrefix == "_STAN.pub.mine"


async def test_limits_errors_too_many_channels_and_subscriptions(stan):
    from tidings.streaming.stores import StoreLimits

    env = await stan(limits=StoreLimits(max_channels=1, max_subs=1))
    assert (await raw_connect(env, "subber")).error == ""
    assert (await env.request(f"_STAN.sub.{CID}", sub_req(), pb.SubscriptionResponse)).error == ""
    resp = await env.request(f"_STAN.sub.{CID}", sub_req(inbox="i2"), pb.SubscriptionResponse)
    assert resp.error == "too many subscriptions per channel"
    resp = await env.request(f"_STAN.sub.{CID}", sub_req(subject="bar"), pb.SubscriptionResponse)
    assert resp.error == "too many channels"
    ack = await env.request(f"_STAN.pub.{CID}.baz",
                            pb.PubMsg(clientID="subber", guid="g", subject="baz",
                                      connID=b"cid-1"), pb.PubAck)
    assert (ack.guid, ack.error) == ("g", "too many channels")


async def test_server_takes_messages_straight_from_the_client_read_path(stan):
    """The server's own subscriptions are raw ones: messages come from the client's read
    path with no Msg object and no queue."""
    from tidings.client.subscription import RawSubscription

    env = await stan()
    subs = env.server._internal_subs
    assert len(subs) == 8
    assert all(isinstance(s, RawSubscription) for s in subs), "raw delivery not in use"
