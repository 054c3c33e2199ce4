"""`tidings streaming migrate`: NATS Streaming into JetStream, on tidings -js and nats-server -js.

Sources: tidings' running streaming server (monitoring and the streaming protocol), a tidings
file store directory, and a directory in the reference nats-streaming-server's layout
(written by test_importref's writer). Every migrated message is checked (subject, data,
sequence, the headers), and each durable consumer by what it delivers first.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, eventually, start_reference, start_tidings
from tests.unit.streaming.test_importref import T0, make_reference
from tidings.cli import build_parser
from tidings.client import Client
from tidings.client import connect as nats_connect
from tidings.protocol.headers import Headers
from tidings.server.gojson import go_time
from tidings.streaming import migrate
from tidings.streaming.client import connect as stan_connect
from tidings.streaming.migrate_plan import Channel, MigrateError, Settings, gap_block
from tidings.streaming.migrate_run import copy_channel, plan_migration, run_migration
from tidings.streaming.migrate_sources import open_directory
from tidings.streaming.migrate_target import JetStreamTarget
from tidings.streaming.stores import MsgRecord, SubRecord, open_store

TARGETS = ["tidings", "reference"]


# --- the source: what a streaming application leaves behind --------------------------------


@dataclass
class Expected:
    """Each channel's messages (seq, data, timestamp) and each durable's first unacked."""

    msgs: dict[str, list[tuple[int, bytes, int]]] = field(default_factory=dict)
    durables: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)


async def fill(url: str) -> dict[tuple[str, str], tuple[int, str]]:
    """orders (20), events (12), an empty channel; durables: dur1 on orders acked 1, 2, 3
    and 5 of 1..5 (first unacked 4), caught on orders acked everything (21), the durable
    queue group qd:workers on events acked 1, 2 of 1..4 (3); a non-durable (left out)."""
    sc = await stan_connect("test-cluster", "app", url=url)
    for i in range(1, 21):
        await sc.publish("orders", b"order %d" % i)
    for i in range(1, 13):
        await sc.publish("events", b"event %d" % i)
    await _consume(sc, "orders", {1, 2, 3, 5}, 5, durable_name="dur1")
    await _consume(sc, "orders", set(range(1, 21)), 20, durable_name="caught")
    await _consume(sc, "events", {1, 2}, 4, durable_name="qd", queue="workers")
    await sc.subscribe("quiet", cb=lambda m: None)
    await sc.subscribe("orders", cb=lambda m: None, deliver_all_available=True)
    await sc.close()
    return {("orders", "dur1"): (4, ""), ("orders", "caught"): (21, ""),
            ("events", "qd"): (3, "workers")}


async def _consume(sc: Any, channel: str, ack: set[int], upto: int, **kw: Any) -> None:
    seen: list[int] = []
    done = asyncio.Event()

    async def cb(m: Any) -> None:
        seen.append(m.seq)
        if m.seq in ack:
            await m.ack()
        if len(seen) == upto:
            done.set()

    sub = await sc.subscribe(channel, cb=cb, manual_acks=True, max_inflight=upto,
                             deliver_all_available=True, **kw)
    await asyncio.wait_for(done.wait(), 10)
    await sc.nc.flush()
    await sub.close()


async def read_back(url: str) -> dict[str, list[tuple[int, bytes, int]]]:
    sc = await stan_connect("test-cluster", "reader", url=url)
    out = {}
    for channel, n in (("orders", 20), ("events", 12)):
        sub = await sc.subscribe(channel, deliver_all_available=True)
        out[channel] = [(m.seq, m.data, m.timestamp)
                        for m in [await sub.next_msg(5) for _ in range(n)]]
        await sub.unsubscribe()
    await sc.close()
    return out


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[Server, Expected]]:
    """A running tidings streaming server with monitoring, filled."""
    srv = start_tidings(extra_args=["-m", "-1"])
    exp = Expected()
    exp.durables = asyncio.run(fill(srv.url))
    exp.msgs = asyncio.run(read_back(srv.url))
    yield srv, exp
    srv.stop()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected]:
    """A tidings file store directory, filled by a server that has stopped."""
    store_dir = tmp_path_factory.mktemp("stan") / "data"
    srv = start_tidings(extra_args=["--store", "file", "--dir", str(store_dir)])
    exp = Expected()
    try:
        exp.durables = asyncio.run(fill(srv.url))
    finally:
        srv.stop()
    with open_store("file", path=store_dir) as store:
        exp.msgs = {ch: [(m.seq, m.data, m.timestamp) for m in store.get_msgs(ch, 1, 100)]
                    for ch in ("orders", "events")}
    return store_dir, exp


@pytest.fixture
def reference_dir(tmp_path: Path) -> tuple[Path, Expected]:
    """The reference's layout (test_importref's): orders 1..7, events.eu 10..14 with 13
    missing (the reader fills it empty, stamped as 14), durable dur1 on orders with 3 and 4
    unacked."""
    root = tmp_path / "ref"
    make_reference(root)
    exp = Expected(
        msgs={"orders": [(s, b"d%d" % s, T0 + s) for s in range(1, 8)],
              "events.eu": [(s, b"d%d" % s, T0 + s) for s in (10, 11, 12, 14)]},
        durables={("orders", "dur1"): (3, "")})
    exp.msgs["events.eu"].insert(3, (13, b"", T0 + 14))
    return root, exp


# --- the targets ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    store = str(tmp_path_factory.mktemp("js"))
    start = start_tidings if request.param == "tidings" else start_reference
    srv = start(extra_args=["-js", "-sd", store])
    yield srv
    srv.stop()


@pytest.fixture
async def js(target: Server) -> AsyncIterator[Client]:
    """A client of the target; every stream is removed after the test."""
    nc = await nats_connect(target.url)
    yield nc
    for name in (await api(nc, "STREAM.NAMES")).get("streams") or []:
        await api(nc, f"STREAM.DELETE.{name}")
    await nc.close()


async def api(nc: Client, op: str, body: Any = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{op}", json.dumps(body).encode() if body else b"",
                           timeout=5)
    return json.loads(msg.data)


async def run(*argv: str) -> int:
    """`tidings streaming migrate ARGV` in this process."""
    args = build_parser("streaming").parse_args(["streaming", "migrate", "--no-progress", *argv])
    return await migrate.main(args)


def live_args(srv: Server) -> list[str]:
    return ["--url", srv.url, "--monitor", f"http://127.0.0.1:{srv.ports['http']}"]


# --- checks --------------------------------------------------------------------------------


async def check_stream(nc: Client, stream: str, channel: str,
                       msgs: list[tuple[int, bytes, int]]) -> None:
    """The stream holds exactly the channel's messages, at their sequences, with the
    migration's headers."""
    info = await api(nc, f"STREAM.INFO.{stream}")
    state = info["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (
        len(msgs), msgs[0][0], msgs[-1][0])
    assert info["config"]["subjects"] == [channel]
    for seq, data, ts in msgs:
        got = (await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq}))["message"]
        headers = Headers.decode(base64.b64decode(got["hdrs"]))
        assert (got["seq"], got["subject"], base64.b64decode(got.get("data", ""))) == (
            seq, channel, data)
        assert headers.to_dict() == {
            "Nats-Msg-Id": f"{channel}:{seq}", "Nats-Streaming-Channel": channel,
            "Nats-Streaming-Sequence": str(seq),
            "Nats-Streaming-Timestamp": go_time(ts, utc=True)}


async def first_delivery(nc: Client, stream: str, consumer: str) -> int | None:
    """The stream sequence the consumer delivers first (None: nothing to deliver)."""
    info = await api(nc, f"CONSUMER.INFO.{stream}.{consumer}")
    cfg = info["config"]
    assert (cfg["ack_policy"], cfg["description"]) == ("explicit", "Migrated from NATS Streaming")
    # a pull consumer's message is sent to the inbox under its own subject: no request()
    inbox = nc.new_inbox()
    deliver, group = cfg.get("deliver_subject", inbox), cfg.get("deliver_group", "")
    sub = await nc.subscribe(deliver, queue=group)
    try:
        if deliver == inbox:
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                             json.dumps({"batch": 1, "no_wait": True}).encode(), reply=inbox)
        msg = await sub.next_msg(timeout=1)
    except asyncio.TimeoutError:
        return None
    finally:
        await sub.unsubscribe()
    if msg.headers is not None and msg.headers.status is not None:
        return None  # 404/408: nothing to deliver
    return int(msg.headers["Nats-Streaming-Sequence"])


async def check_all(nc: Client, exp: Expected, streams: dict[str, str], pull: bool,
                    deliver: bool = True) -> None:
    """Every stream (check_stream), every consumer's configuration and (``deliver``) what it
    delivers first (then that message waits for its ack)."""
    for channel, stream in streams.items():
        await check_stream(nc, stream, channel, exp.msgs[channel])
    for (channel, name), (first, queue) in exp.durables.items():
        stream = streams[channel]
        cfg = (await api(nc, f"CONSUMER.INFO.{stream}.{name}"))["config"]
        assert cfg["opt_start_seq"] == first
        assert ("deliver_subject" in cfg, cfg.get("deliver_group", "")) == (
            not pull, "" if pull else queue)
        last = exp.msgs[channel][-1][0]
        assert not deliver or await first_delivery(nc, stream, name) == (first if first <= last else None)


# --- the round trips -----------------------------------------------------------------------


async def test_from_a_running_server(live: tuple[Server, Expected], js: Client,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    srv, exp = live
    assert await run(*live_args(srv), "--to", js.connected_url.geturl()) == 0
    out = capsys.readouterr().out
    assert "32 message(s)" in out and "3 consumer(s) created" in out
    await check_all(js, exp, {"orders": "orders", "events": "events"}, pull=False)
    assert (await api(js, "STREAM.INFO.quiet"))["state"]["messages"] == 0
    names = (await api(js, "CONSUMER.NAMES.orders"))["consumers"]
    assert sorted(names) == ["caught", "dur1"]  # the non-durable is not migrated


async def test_from_a_file_store_directory(stored: tuple[Path, Expected], js: Client) -> None:
    store_dir, exp = stored
    assert await run("--dir", str(store_dir), "--to", js.connected_url.geturl(), "--pull",
                     "--channel", "orders", "--channel", "events",
                     "--map", "orders=ORDERS") == 0
    await check_all(js, exp, {"orders": "ORDERS", "events": "events"}, pull=True)
    assert sorted((await api(js, "STREAM.NAMES"))["streams"]) == ["ORDERS", "events"]


async def test_from_a_reference_store_directory(reference_dir: tuple[Path, Expected],
                                                js: Client,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root, exp = reference_dir
    assert await run("--dir", str(root), "--to", js.connected_url.geturl(),
                     "--map", "events.eu=EVENTS") == 0
    assert "13..13 missing" in capsys.readouterr().err
    await check_all(js, exp, {"orders": "orders", "events.eu": "EVENTS"}, pull=False)
    # the stream starts at the channel's first sequence
    assert (await api(js, "STREAM.INFO.EVENTS"))["config"]["first_seq"] == 10


# --- resuming ------------------------------------------------------------------------------


async def test_a_limited_run_then_the_rest(stored: tuple[Path, Expected], js: Client,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    store_dir, exp = stored
    to = js.connected_url.geturl()
    assert await run("--dir", str(store_dir), "--to", to, "--limit", "7") == 0
    assert "run the same command again" in capsys.readouterr().out
    assert (await api(js, "STREAM.INFO.events"))["state"]["last_seq"] == 7
    assert (await api(js, "CONSUMER.NAMES.events"))["consumers"] == []  # not yet
    assert await run("--dir", str(store_dir), "--to", to, "--limit", "20") == 0
    assert await run("--dir", str(store_dir), "--to", to) == 0
    await check_all(js, exp, {"orders": "orders", "events": "events"}, pull=False)
    # once more: nothing to copy, the consumers are there with the same configuration
    assert await run("--dir", str(store_dir), "--to", to) == 0
    assert "0 message(s)" in capsys.readouterr().out.splitlines()[-1]
    await check_all(js, exp, {"orders": "orders", "events": "events"}, pull=False,
                    deliver=False)


async def test_a_message_published_again_is_not_stored_twice(
        stored: tuple[Path, Expected], js: Client) -> None:
    """Within the duplicate window Nats-Msg-Id drops what a run that lost its PubAcks would
    publish again (here: a copy restarted from an earlier sequence than the stream's)."""
    store_dir, exp = stored
    source = open_directory(str(store_dir))
    target = await JetStreamTarget.connect(js.connected_url.geturl())
    try:
        plans = await plan_migration(source, target, Settings())
        orders = next(p for p in plans if p.channel.name == "orders")
        await target.create_stream(orders.config)
        assert await copy_channel(source, target, orders, Settings(), None, lambda n: None) == 20
        orders.resume_from = 5  # as if the acks of 5..20 had been lost
        assert await copy_channel(source, target, orders, Settings(), None, lambda n: None) == 16
    finally:
        await source.close()
        await target.close()
    await check_stream(js, "orders", "orders", exp.msgs["orders"])


async def test_killed_midway_then_run_again(target: Server, js: Client,
                                            tmp_path: Path) -> None:
    """A migration killed while it copies, run again: every message once, in place."""
    store_dir = tmp_path / "big"
    n = 20_000
    with open_store("file", path=store_dir) as store:
        store.restore_msgs("big", (MsgRecord(s, T0 + s, "big", "", b"%d" % s)
                                   for s in range(1, n + 1)))
    cmd = [sys.executable, "-m", "tidings", "streaming", "migrate", "--dir", str(store_dir),
           "--to", target.url, "--window", "16"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        async def started() -> bool:
            info = await api(js, "STREAM.INFO.big")
            return "state" in info and info["state"]["last_seq"] > 100
        await eventually(started, timeout=30, what="the copy under way")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    stopped_at = (await api(js, "STREAM.INFO.big"))["state"]["last_seq"]
    assert 100 < stopped_at <= n
    again = await asyncio.to_thread(subprocess.run, cmd[:-2], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"{n - stopped_at} message(s)" in again.stdout
    state = (await api(js, "STREAM.INFO.big"))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (n, 1, n)
    for seq in (1, stopped_at, stopped_at + 1, n) if stopped_at < n else (1, n):
        got = (await api(js, "STREAM.MSG.GET.big", {"seq": seq}))["message"]
        assert base64.b64decode(got["data"]) == b"%d" % seq


# --- dry run and refusals ------------------------------------------------------------------


async def test_dry_run_creates_nothing(live: tuple[Server, Expected], js: Client,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    srv, _ = live
    assert await run(*live_args(srv), "--to", js.connected_url.geturl(), "--dry-run") == 0
    out = capsys.readouterr().out
    assert 'stream orders (to create) from channel \'orders\': {"name": "orders", ' in out
    assert "messages: 20 in the channel (1..20), 20 to copy (1..20)" in out
    assert "consumer dur1 (push, to create; client 'app'), first delivery at 4" in out
    assert "consumer qd (push, to create; queue group 'workers'), first delivery at 3" in out
    assert (await api(js, "STREAM.NAMES"))["streams"] in (None, [])
    # without a target: the same plan
    assert await run(*live_args(srv), "--dry-run") == 0
    assert "20 to copy (1..20)" in capsys.readouterr().out


async def test_a_stream_with_another_configuration_is_left_alone(
        reference_dir: tuple[Path, Expected], js: Client) -> None:
    root, _ = reference_dir
    await api(js, "STREAM.CREATE.orders", {"name": "orders", "subjects": ["orders.>"]})
    with pytest.raises(MigrateError, match=r"stream 'orders' exists with another "
                       r"configuration \(subjects \['orders.>'\], not \['orders'\]\)"):
        await run("--dir", str(root), "--to", js.connected_url.geturl(),
                  "--map", "events.eu=EVENTS")
    assert sorted((await api(js, "STREAM.NAMES"))["streams"]) == ["orders"]  # nothing else
    info = await api(js, "STREAM.INFO.orders")
    assert (info["config"]["subjects"], info["state"]["messages"]) == (["orders.>"], 0)


async def test_a_stream_holding_other_messages_is_left_alone(
        reference_dir: tuple[Path, Expected], js: Client) -> None:
    root, _ = reference_dir
    await api(js, "STREAM.CREATE.orders", {"name": "orders", "subjects": ["orders"]})
    await js.request("orders", b"not migrated", timeout=5)
    with pytest.raises(MigrateError, match="holds messages that are not channel 'orders'"):
        await run("--dir", str(root), "--to", js.connected_url.geturl(), "--channel", "orders")
    assert (await api(js, "STREAM.INFO.orders"))["state"]["messages"] == 1


async def test_bad_input(reference_dir: tuple[Path, Expected], js: Client) -> None:
    root, _ = reference_dir
    to = js.connected_url.geturl()
    with pytest.raises(MigrateError, match=r"channel 'nope' does not exist in the source "
                       r"\(its channels: events.eu, orders\)"):
        await run("--dir", str(root), "--to", to, "--channel", "nope")
    with pytest.raises(MigrateError, match=r"'events.eu' cannot be a stream name \(it holds "
                       r"'.'\); use --map events.eu=NAME"):
        await run("--dir", str(root), "--to", to)
    with pytest.raises(MigrateError, match="would both become stream 'S'"):
        await run("--dir", str(root), "--to", to, "--map", "events.eu=S", "--map", "orders=S")
    assert (await api(js, "STREAM.NAMES"))["streams"] in (None, [])


@pytest.mark.parametrize("kind", TARGETS)
async def test_a_target_without_jetstream(kind: str, reference_dir: tuple[Path, Expected]
                                          ) -> None:
    root, _ = reference_dir
    srv = (start_tidings if kind == "tidings" else start_reference)()
    try:
        with pytest.raises(MigrateError, match=f"the target {srv.url} has no JetStream"):
            await run("--dir", str(root), "--to", srv.url, "--map", "events.eu=E")
    finally:
        srv.stop()


def test_the_command_says_what_is_wrong(tmp_path: Path) -> None:
    """Through `tidings`: one error line, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "tidings", "streaming", "migrate", "--dir",
                           str(tmp_path), "--dry-run"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr == (f"tidings streaming migrate: error: {tmp_path}: no streaming store "
                           "there (neither a tidings file store nor a nats-streaming-server "
                           "file store)\n")


async def test_a_refused_publish_stops_the_migration(reference_dir: tuple[Path, Expected],
                                                     js: Client) -> None:
    """An existing stream of the same shape whose limits refuse the messages: the server's
    error, and nothing after it."""
    root, _ = reference_dir
    await api(js, "STREAM.CREATE.orders", {"name": "orders", "subjects": ["orders"],
                                           "max_msg_size": 60})
    with pytest.raises(MigrateError, match=r"stream 'orders' refused channel 'orders' message "
                       r"1: message size exceeds maximum allowed \(err_code 10054\)"):
        await run("--dir", str(root), "--to", js.connected_url.geturl(), "--channel", "orders")
    info = await api(js, "STREAM.INFO.orders")
    assert (info["state"]["messages"], info["state"]["consumer_count"]) == (0, 0)


# --- messages that expire while the migration reads ----------------------------------------


class Expiring:
    """A source whose channel lost messages between its listing and its read (as a running
    server's channel with a max age can): the read skips them."""

    description = "a channel losing messages"

    def __init__(self, last: int, gone: set[int]) -> None:
        self.last, self.gone = last, gone

    async def channels(self) -> list[Channel]:
        return [Channel("gappy", 1, self.last, self.last)]

    async def subscriptions(self, channels: Any) -> list[Any]:
        return []

    async def read(self, channel: Channel, start: int) -> AsyncIterator[list[MsgRecord]]:
        yield [MsgRecord(s, T0 + s, "gappy", "", b"%d" % s)
               for s in range(start, self.last + 1) if s not in self.gone]

    async def close(self) -> None:
        pass


async def migrate_from(source: Any, url: str) -> None:
    target = await JetStreamTarget.connect(url)
    try:
        plans = await plan_migration(source, target, Settings())
        await run_migration(source, target, plans, Settings(), migrate.Meter(False))
    finally:
        await target.close()


async def stored_seqs(nc: Client, stream: str, upto: int) -> list[int]:
    out = []
    for seq in range(1, upto + 1):
        got = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            assert base64.b64decode(got["message"]["data"]) == b"%d" % seq
            out.append(seq)
    return out


async def test_expired_messages_leave_gaps_in_place(js: Client) -> None:
    """Messages 4 and 5 expired before they were read: stand-ins keep 6..8 at their
    sequences and are deleted; a stand-in an interrupted run left at the end is deleted by
    the next run."""
    url = js.connected_url.geturl()
    await migrate_from(Expiring(8, {4, 5}), url)
    state = (await api(js, "STREAM.INFO.gappy"))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (6, 1, 8)
    assert await stored_seqs(js, "gappy", 8) == [1, 2, 3, 6, 7, 8]
    # a run killed between storing the stand-in of 9 and deleting it
    await js.request("gappy", b"", headers=Headers.decode(gap_block("gappy", 9)), timeout=5)
    await migrate_from(Expiring(10, {4, 5, 9}), url)
    state = (await api(js, "STREAM.INFO.gappy"))["state"]
    assert (state["messages"], state["last_seq"]) == (7, 10)
    assert await stored_seqs(js, "gappy", 10) == [1, 2, 3, 6, 7, 8, 10]


async def test_from_a_sqlite_store(js: Client, tmp_path: Path) -> None:
    db = tmp_path / "streaming.db"
    with open_store("sqlite", path=str(db)) as store:
        store.restore_msgs("audit", (MsgRecord(s, T0 + s, "audit", "", b"a%d" % s)
                                     for s in range(3, 9)))
        store.create_sub("audit", SubRecord(client_id="c", durable_name="d", is_durable=True,
                                            last_sent=6, pending={5, 6}))
        store.create_sub("audit", SubRecord(client_id="c", is_durable=False, last_sent=8))
    assert await run("--sqlite", str(db), "--to", js.connected_url.geturl()) == 0
    await check_stream(js, "audit", "audit", [(s, b"a%d" % s, T0 + s) for s in range(3, 9)])
    assert await first_delivery(js, "audit", "d") == 5
    assert (await api(js, "CONSUMER.NAMES.audit"))["consumers"] == ["d"]
