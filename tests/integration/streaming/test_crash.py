"""Crash safety: kill -9 the server mid-stream, restart it on the same file store."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import start_tidings
from tidings.streaming.client import StanError
from tidings.streaming.client import connect as stan_connect

from .conftest import Inbox
from .test_cli import wait_streaming

pytestmark = pytest.mark.timeout(120)


async def test_kill_9_mid_stream_loses_no_acknowledged_message(tmp_path):
    args = ["--store", "file", "--dir", str(tmp_path / "data")]
    srv = start_tidings(extra_args=args)
    srv2 = None
    try:
        await wait_streaming(srv.url)
        sc = await stan_connect("test-cluster", "crash-client", url=srv.url, ack_timeout=20,
                                max_pub_acks_inflight=2048)
        # a durable subscriber acknowledges the first 200 messages, is closed, holds 201
        dur = Inbox()
        sub = await sc.subscribe("crash", cb=dur, durable_name="dur", manual_acks=True,
                                 deliver_all_available=True, max_inflight=4096)
        for i in range(200):
            await sc.publish_async("crash", b"pre-%d" % i)
        for m in await dur.take(200):
            await m.ack()
        await sc.publish("crash", b"pre-200")  # its PubAck: the acks above are stored
        assert (await dur.next()).seq == 201
        await sub.close()

        # publish with async acks; kill -9 once some thousands are acknowledged
        acked: list[int] = []
        failed: list[int] = []
        enough = asyncio.Event()

        def on_ack(i: int):
            def handler(guid: str, err: StanError | None) -> None:
                (failed if err else acked).append(i)
                if len(acked) >= 3000:
                    enough.set()
            return handler

        async def publisher() -> None:
            for i in range(20_000):
                try:
                    await sc.publish_async("crash", b"live-%d" % i, ack_handler=on_ack(i))
                except StanError:
                    failed.append(i)
                if i % 256 == 0:
                    await asyncio.sleep(0)

        task = asyncio.create_task(publisher())
        await asyncio.wait_for(enough.wait(), 60)
        srv.kill()
        acked_at_kill = sorted(acked)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(acked_at_kill) >= 3000

        srv2 = start_tidings(port=srv.port, extra_args=args)
        await wait_streaming(srv2.url)
        check = await stan_connect("test-cluster", "checker", url=srv2.url)
        try:
            everything = Inbox()
            await check.subscribe("crash", cb=everything, deliver_all_available=True,
                                  max_inflight=8192)
            # read up to the last stored message
            last = None
            while True:
                m = await everything.next(timeout=10)
                last = m
                if m.data == b"live-%d" % acked_at_kill[-1]:
                    break
            assert last is not None
            datas = [m.data for m in everything.all]
            seqs = [m.seq for m in everything.all]
            assert seqs == list(range(1, len(seqs) + 1))  # in order, no gaps
            assert len(set(datas)) == len(datas)  # exactly once
            pre = [b"pre-%d" % i for i in range(201)]
            assert datas[:201] == pre
            live = [int(d.split(b"-")[1]) for d in datas[201:]]
            assert live == sorted(live)  # in publish order
            assert set(acked_at_kill) <= set(live)  # every acknowledged message is there
        finally:
            await check.close()

        # the same client (its NATS connection reconnected, it answers heartbeats) resumes
        # its durable where the acks left off: 201 (unacknowledged), then the rest
        dur2 = Inbox()
        await sc.subscribe("crash", cb=dur2, durable_name="dur", deliver_all_available=True,
                           manual_acks=True)
        first, second = await dur2.take(2)
        assert (first.seq, first.data, first.redelivered) == (201, b"pre-200", True)
        assert second.seq == 202
        await sc.close()
    finally:
        srv.stop()
        if srv2 is not None:
            srv2.stop()
