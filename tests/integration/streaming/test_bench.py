"""The streaming workloads of `tidings bench` run and count correctly (no timing asserted)."""

from __future__ import annotations

import asyncio

from tidings.bench.streaming import bench_publish, bench_subscribe


async def test_bench_workloads_publish_and_subscribe(stan, tmp_path):
    env = await stan(store="file", dir=str(tmp_path / "data"))
    pub = await asyncio.to_thread(bench_publish, env.url, msgs=3000, size=128, max_inflight=512,
                                  channel="bench.smoke", timeout=20)
    assert (pub.workload, pub.msgs, pub.errors, pub.size) == ("stan-pub", 3000, 0, 128)
    info = env.server.store.channel_info("bench.smoke")
    assert (info.msgs, info.bytes) == (3000, 3000 * 128)
    sub = await asyncio.to_thread(bench_subscribe, env.url, msgs=3000, channel="bench.smoke",
                                  prefill=False, max_inflight=256, timeout=20)
    assert (sub.workload, sub.msgs) == ("stan-sub", 3000)
    assert sub.msgs_per_sec > 0 and pub.as_dict()["msgs_per_sec"] > 0
    # the bench clients closed their connections; their acks were all processed
    assert env.server.clients == {}
