"""The synchronous entry points for code that cannot await: publish_nowait and raw_cb."""

from __future__ import annotations

import asyncio

import pytest

from tidings.client import Client, errors


async def test_raw_callback_gets_every_message_in_order(nc: Client) -> None:
    got: list[tuple[bytes, bytes | None, bytes | None, bytes]] = []
    done = asyncio.get_running_loop().create_future()

    def raw(subject: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes) -> None:
        got.append((subject, reply, hdr, payload))
        if len(got) == 3 and not done.done():
            done.set_result(None)

    await nc.subscribe("raw.>", raw_cb=raw)
    await nc.flush()
    await nc.publish("raw.a", b"1")
    await nc.publish("raw.b", b"2", reply="inbox.x")
    await nc.publish("raw.c", b"3", headers={"K": "v"})
    await asyncio.wait_for(done, 5)
    assert [(s, r, p) for s, r, _, p in got] == [
        (b"raw.a", None, b"1"), (b"raw.b", b"inbox.x", b"2"), (b"raw.c", None, b"3")]
    assert got[0][2] is None
    assert got[2][2] is not None and b"K: v" in got[2][2]


async def test_raw_callback_with_max_msgs_and_errors_logged(nc: Client) -> None:
    calls: list[bytes] = []

    def raw(subject: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes) -> None:
        calls.append(payload)
        raise RuntimeError("a broken handler must not break the connection")

    await nc.subscribe("raw.max", raw_cb=raw, max_msgs=2)
    await nc.flush()
    for i in range(5):
        await nc.publish("raw.max", b"%d" % i)
    # A request round trip proves the server has routed all five publishes before it.
    probe = await nc.subscribe("raw.probe", cb=lambda m: m.respond(b"ok"))
    assert (await nc.request("raw.probe", b"", timeout=5)).data == b"ok"
    await probe.unsubscribe()
    assert calls == [b"0", b"1"]
    assert nc.is_connected


async def test_raw_and_cb_are_exclusive(nc: Client) -> None:
    async def cb(msg: object) -> None: ...

    with pytest.raises(errors.Error):
        await nc.subscribe("raw.x", cb=cb, raw_cb=lambda *a: None)


async def test_publish_nowait_buffers_in_order(nc: Client) -> None:
    sub = await nc.subscribe("nowait")
    await nc.flush()
    for i in range(200):
        nc.publish_nowait("nowait", b"%d" % i, reply="r" if i % 2 else "")
    await nc.flush()
    got = [await sub.next_msg(timeout=5) for _ in range(200)]
    assert [m.data for m in got] == [b"%d" % i for i in range(200)]
    assert [m.reply for m in got[:2]] == ["", "r"]


async def test_publish_nowait_checks_like_publish(nc: Client) -> None:
    with pytest.raises(errors.BadSubjectError):
        nc.publish_nowait("bad subject", b"x")
    with pytest.raises(errors.MaxPayloadError):
        nc.publish_nowait("big", b"x" * (nc.max_payload + 1))


async def test_publish_many_nowait_delivers_in_order_and_checks_each(nc: Client) -> None:
    sub = await nc.subscribe("many.>")
    await nc.flush()
    big = b"B" * 70_000  # past the client's small-payload tables
    nc.publish_many_nowait([("many.a", b"1"), ("many.b", b""), ("many.a", big)])
    got = [await sub.next_msg(timeout=5) for _ in range(3)]
    assert [(m.subject, m.data) for m in got] == [
        ("many.a", b"1"), ("many.b", b""), ("many.a", big)]
    with pytest.raises(errors.BadSubjectError):
        nc.publish_many_nowait([("many.ok", b"x"), ("bad subject", b"y")])
    with pytest.raises(errors.MaxPayloadError):
        nc.publish_many_nowait([("many.c", b"x" * (nc.max_payload + 1))])
    await nc.flush()
    assert sub.pending_msgs == 0  # a refused batch publishes none of its messages
    await nc.close()
    with pytest.raises(errors.ConnectionClosedError):
        nc.publish_many_nowait([("many.a", b"1")])
