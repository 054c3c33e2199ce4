"""The `tidings` command: streaming embedded in `tidings server`, `tidings streaming` on any
NATS server, `tidings streaming import-ref` of a reference data directory."""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import subprocess
import sys
import urllib.request
from pathlib import Path
from zlib import crc32

import pytest

from tests.harness import Process, Server, eventually, start_tidings, tidings_command
from tidings.client import connect as nats_connect
from tidings.client import errors as nerr
from tidings.streaming.client import connect as stan_connect
from tidings.streaming.pb import filestore_pb2 as spb
from tidings.streaming.pb import protocol_pb2 as pb
from tidings.testing.process import ports_in

from .conftest import Inbox

pytestmark = pytest.mark.timeout(90)


async def wait_streaming(url: str, cluster_id: str = "test-cluster", timeout: float = 15) -> None:
    """Until the streaming server answers on its discover subject (no client registered)."""
    nc = await nats_connect(url)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                r = await nc.request(f"_STAN.discover.{cluster_id}",
                                     pb.ConnectRequest(clientID="probe").SerializeToString(),
                                     timeout=0.5)
                assert pb.ConnectResponse.FromString(r.data).error
                return
            except (nerr.NoRespondersError, nerr.TimeoutError):
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


def get_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def servers():
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


async def test_server_runs_streaming_by_default_with_monitoring(servers):
    srv = start_tidings(extra_args=["-m", "-1"])
    servers.append(srv)
    mport = srv.ports["http"]
    await wait_streaming(srv.url)
    sc = await stan_connect("test-cluster", "cli", url=srv.url)
    try:
        await sc.publish("cli.chan", b"hello")
        ib = Inbox()
        await sc.subscribe("cli.chan", cb=ib, deliver_all_available=True)
        assert (await ib.next()).data == b"hello"
        store = await asyncio.to_thread(get_json, mport, "/streaming/storez")
        assert store["type"] == "MEMORY" and store["total_msgs"] == 1
        server = await asyncio.to_thread(get_json, mport, "/streaming/serverz")
        assert server["clients"] == 1 and server["channels"] == 1
    finally:
        await sc.close()


async def test_max_bytes_flag_reads_sizes_as_the_reference(servers):
    """-mb 64k is 64000 bytes: nats-streaming-server reads the flag with the configuration
    file's parser (`k` a power of 1000, `KB` of 1024)."""
    srv = start_tidings(extra_args=["-m", "-1", "-mb", "64k"])
    servers.append(srv)
    mport = srv.ports["http"]
    await wait_streaming(srv.url)
    store = await asyncio.to_thread(get_json, mport, "/streaming/storez")
    assert store["limits"]["max_bytes"] == 64_000


async def test_no_streaming_flag_turns_it_off(servers):
    srv = start_tidings(extra_args=["--no_streaming"])
    servers.append(srv)
    nc = await nats_connect(srv.url)
    try:
        with pytest.raises((nerr.NoRespondersError, nerr.TimeoutError)):
            await nc.request("_STAN.discover.test-cluster", b"", timeout=0.5)
    finally:
        await nc.close()


async def test_embedded_streaming_takes_no_client_slot(servers):
    srv = start_tidings(max_connections=2)
    servers.append(srv)
    await wait_streaming(srv.url)
    first = await nats_connect(srv.url)
    second = await nats_connect(srv.url)
    try:
        with pytest.raises(Exception, match="maximum connections exceeded"):
            await nats_connect(srv.url, max_reconnect_attempts=0, allow_reconnect=False)
    finally:
        await first.close()
        await second.close()


async def test_file_store_cluster_id_and_config_survive_a_restart(servers, tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "stan.conf"
    conf.write_text('streaming { store_limits { channels { "capped": { max_msgs: 3 } } } }')
    args = ["--store", "file", "--dir", str(data), "-cid", "mine", "-sc", str(conf)]
    srv = start_tidings(extra_args=args)
    servers.append(srv)
    await wait_streaming(srv.url, "mine")
    sc = await stan_connect("mine", "restarter", url=srv.url)
    for i in range(5):
        await sc.publish("capped", b"%d" % i)
        await sc.publish("free", b"%d" % i)
    ib = Inbox()
    sub = await sc.subscribe("free", cb=ib, durable_name="d", deliver_all_available=True,
                             manual_acks=True)
    got = await ib.take(5)
    for m in got[:2]:
        await m.ack()
    await sub.close()
    await sc.close()
    proc = srv.proc
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    srv2 = srv.start()  # again, on its port
    await wait_streaming(srv2.url, "mine")
    sc2 = await stan_connect("mine", "restarter", url=srv2.url)
    try:
        ib2 = Inbox()
        await sc2.subscribe("free", cb=ib2, durable_name="d", deliver_all_available=True)
        back = await ib2.take(3)
        assert [(m.seq, m.redelivered) for m in back] == [(3, True), (4, True), (5, True)]
        capped = Inbox()
        await sc2.subscribe("capped", cb=capped, deliver_all_available=True)
        assert [m.seq for m in await capped.take(3)] == [3, 4, 5]
    finally:
        await sc2.close()


async def test_standalone_streaming_on_the_reference_nats_server(reference_factory, tmp_path):
    ref = reference_factory()
    proc = Process(tidings_command("streaming", "--nats", ref.url, "-m", "-1", "--store",
                                   "file", "--dir", str(tmp_path / "d")))
    try:
        await wait_streaming(ref.url)
        mport = int((await asyncio.to_thread(proc.wait_for, r"Starting http monitor on \S+:(\d+)"))
                    .group(1))
        sc = await stan_connect("test-cluster", "standalone", url=ref.url)
        try:
            await sc.publish("sa", b"via the reference server")
            ib = Inbox()
            await sc.subscribe("sa", cb=ib, deliver_all_available=True)
            assert (await ib.next()).data == b"via the reference server"
            store = await asyncio.to_thread(get_json, mport, "/streaming/storez")
            assert store["type"] == "FILE"
        finally:
            await sc.close()
    finally:
        assert proc.stop(15) == 0


# --- import-ref -------------------------------------------------------------------------

def _record(msg, rtype: int = 0) -> bytes:
    payload = msg.SerializeToString()
    word = rtype << 24 | len(payload) if rtype else len(payload)
    return struct.pack("<II", word, crc32(payload)) + payload


def _write(path: Path, records: list[bytes]) -> None:
    path.write_bytes(struct.pack("<I", 1) + b"".join(records))


def make_reference_dir(root: Path) -> None:
    """A reference file store: channel `orders` (5 messages), client c1, durable `dur1`
    with messages 1-4 sent, 1-2 acknowledged, closed (offline)."""
    root.mkdir()
    _write(root / "server.dat", [_record(spb.ServerInfo(ClusterID="ref-cluster"))])
    _write(root / "clients.dat",
           [_record(spb.ClientInfo(ID="c1", HbInbox="_INBOX.gone", Protocol=1), 1)])
    orders = root / "orders"
    orders.mkdir()
    _write(orders / "msgs.1.dat", [
        _record(pb.MsgProto(sequence=s, subject="orders", data=b"o%d" % s,
                            timestamp=1_600_000_000_000_000_000 + s))
        for s in range(1, 6)
    ])
    sub = dict(ID=1, clientID="c1", inbox="_INBOX.old", ackInbox="_STAN.ack.old",
               maxInFlight=1024, ackWaitInSecs=30, durableName="dur1", isDurable=True)
    upd = spb.SubStateUpdate
    _write(orders / "subs.dat", [
        _record(spb.SubState(**sub), 1),
        *(_record(upd(ID=1, seqno=s), 5) for s in (1, 2, 3, 4)),
        _record(upd(ID=1, seqno=1), 4),
        _record(upd(ID=1, seqno=2), 4),
        _record(spb.SubState(**sub, lastSent=4, isClosed=True), 2),
    ])


async def test_import_ref_then_serve_the_old_clients_durable(servers, tmp_path):
    make_reference_dir(tmp_path / "ref")
    data = tmp_path / "data"
    out = subprocess.run(
        [sys.executable, "-m", "tidings", "streaming", "import-ref", str(tmp_path / "ref"),
         "--store", "file", "--dir", str(data)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "1 channel(s), 5 message(s), 1 subscription(s)" in out.stdout
    srv = start_tidings(extra_args=["--store", "file", "--dir", str(data), "-cid", "ref-cluster"])
    servers.append(srv)
    await wait_streaming(srv.url, "ref-cluster")
    # the same client id and durable name as before the move: resume where it left off
    sc = await stan_connect("ref-cluster", "c1", url=srv.url)
    try:
        ib = Inbox()
        await sc.subscribe("orders", cb=ib, durable_name="dur1", deliver_all_available=True)
        got = await ib.take(3)
        assert [(m.seq, m.data, m.redelivered) for m in got] == [
            (3, b"o3", True), (4, b"o4", True), (5, b"o5", False)]
        await eventually(lambda: len(ib.all) == 3)
    finally:
        await sc.close()


# --- start-up messages (issue 21, item 7) -----------------------------------------------

def test_standalone_beside_another_streaming_server_is_one_error_line(servers):
    srv = start_tidings()  # streaming on, cluster id test-cluster
    servers.append(srv)
    asyncio.run(wait_streaming(srv.url))
    proc = subprocess.run([sys.executable, "-m", "tidings", "streaming", "--nats", srv.url],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("tidings streaming: error: discovered another streaming server with "
                    "cluster ID 'test-cluster'"), proc.stderr


def banner(*args: str) -> list[str]:
    """What `tidings <args>` logs until its streaming server is ready (then it is stopped)."""
    proc = subprocess.Popen([sys.executable, "-m", "tidings", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        for line in iter(proc.stderr.readline, ""):  # type: ignore[union-attr]
            lines.append(line.split("] ", 2)[-1].rstrip())
            if "Streaming server ready" in line:
                break
    finally:
        proc.terminate()
        proc.wait(15)
    assert any("Streaming server ready" in line for line in lines), lines
    return lines


def test_the_banner_says_where_streaming_keeps_its_data(tmp_path):
    port = "-1"
    lines = banner("server", "-a", "127.0.0.1", "-p", port)
    assert "  Message store: MEMORY (lost when the server stops; keep it with "\
           "--store file --dir DIR)" in lines
    assert "  Monitoring:    off (enable with -m PORT)" in lines
    data = tmp_path / "data"
    lines = banner("server", "-a", "127.0.0.1", "-p", port, "-m", "-1",
                   "--store", "file", "--dir", str(data))
    mport = ports_in("\n".join(lines))["http"]  # any free port: the one it logged
    assert f"  Message store: FILE in {data}" in lines
    assert f"  Monitoring:    http://127.0.0.1:{mport}/streaming/serverz" in lines
    lines = banner("server", "-a", "127.0.0.1", "-p", port, "--store", "sql",
                   "--dir", str(data))
    assert f"  Message store: SQL (sqlite) in {data / 'streaming.db'}" in lines


def test_standalone_monitoring_on_any_free_port(reference_server, tmp_path):
    """`tidings streaming -m -1` serves its endpoints on a free port, named in its log as the
    core server names its own ("Starting http monitor on HOST:PORT"); its banner says so."""
    from tests.harness import Process, tidings_command

    proc = Process(tidings_command("streaming", "--nats", reference_server.url,
                                   "--http_host", "127.0.0.1", "-m", "-1"))
    try:
        proc.wait_for("Streaming server ready")
        assert "  Monitoring:    http://127.0.0.1:<any free port>/streaming/serverz" in \
            proc.text()
        port = int(proc.wait_for(r"Starting http monitor on 127\.0\.0\.1:(\d+)").group(1))
        assert proc.ports["http"] == port
        assert get_json(port, "/streaming/serverz")["cluster_id"] == "test-cluster"
    finally:
        assert proc.stop() == 0


def test_the_standalone_banner(reference_server, tmp_path):
    lines = banner("streaming", "--nats", reference_server.url, "--store", "file", "--dir",
                   str(tmp_path / "d"), "--http_host", "127.0.0.1", "-m", "-1")
    assert f"  Message store: FILE in {tmp_path / 'd'}" in lines
    # Any free port: the banner says so, and the port is logged once it listens.
    assert "  Monitoring:    http://127.0.0.1:<any free port>/streaming/serverz" in lines
    lines = banner("streaming", "--nats", reference_server.url)
    assert "  Monitoring:    off (enable with -m PORT)" in lines
