"""The monitoring endpoints (-m PORT) of tidings next to the reference's: the same traffic on
both, the same keys and types, and the counters that must agree do (connections,
subscriptions of the client, messages and bytes in and out, also messages nobody wanted)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import (
    _wait_ready,
    free_port,
    nats_server_binary,
    start_configured,
    wait_listening,
)

from .rawnats import RawConn

pytestmark = pytest.mark.timeout(60)

# Keys the reference has and tidings leaves out, with the reason.
ONLY_REFERENCE = {
    "varz": {
        "git_commit",  # a Go build's commit
        "feature_flags", "system_account", "stale_connections", "stalled_clients",
        "stale_connection_stats", "disk_io_wait_stats", "config_digest",  # JetStream/accounts
    },
    "connz": set(),
}
TRAFFIC = (b'CONNECT {"verbose":false,"pedantic":false,"name":"c1","lang":"python",'
           b'"version":"1"}\r\nSUB foo 1\r\nSUB bar q 2\r\nPUB foo 2\r\nhi\r\n'
           b"PUB nobody 3\r\nabc\r\nPUB foo r 4\r\nabcd\r\n")


class Monitored:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.port, self.http = free_port(), free_port()
        args = ["-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http)]
        cmd = ([sys.executable, "-m", "tidings", "server", "--no_streaming", *args]
               if kind == "tidings" else [nats_server_binary(), *args])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_ready(self.port, self.proc)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=10) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Monitored]]:
    both = {kind: Monitored(kind) for kind in ("tidings", "reference")}
    conns = []
    for server in both.values():
        c = RawConn(server.port)
        c.send(TRAFFIC)
        assert c.barrier() == b"MSG foo 1 2\r\nhi\r\nMSG foo 1 r 4\r\nabcd\r\n"
        conns.append(c)
    for server in both.values():
        # Until the start-up probe's connection is gone (a busy server may lag).
        deadline = time.monotonic() + 10
        while server.get("/connz")["num_connections"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    yield both
    for c in conns:
        c.close()
    for server in both.values():
        server.proc.terminate()
        server.proc.wait(10)


def shape(value: Any) -> Any:
    """Keys (recursively) and JSON types, not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def test_varz(servers: dict[str, Monitored]) -> None:
    ours, ref = servers["tidings"].get("/varz"), servers["reference"].get("/varz")
    missing = set(ref) - set(ours) - ONLY_REFERENCE["varz"]
    assert not missing, missing
    assert not set(ours) - set(ref)
    for key in ours:
        if key in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream",
                   "http_req_stats"):
            continue
        assert shape(ours[key]) == shape(ref[key]), key
    for key in ("in_client_msgs", "in_client_bytes", "out_client_msgs", "out_client_bytes",
                "connections", "slow_consumers", "max_payload",
                "max_pending", "ping_interval", "write_deadline"):
        assert ours[key] == ref[key], key
    assert ours["http_req_stats"]["/varz"] == 1


def test_connz(servers: dict[str, Monitored]) -> None:
    ours = servers["tidings"].get("/connz?subs=1")
    ref = servers["reference"].get("/connz?subs=1")
    # (The start-up probe's connection may still be listed by a busy server: pick ours.)
    mine = next(c for c in ours["connections"] if c.get("name") == "c1")
    theirs = next(c for c in ref["connections"] if c.get("name") == "c1")
    assert shape({**ours, "connections": [mine]}) == shape({**ref, "connections": [theirs]})
    for key in ("in_msgs", "in_bytes", "out_msgs", "out_bytes", "subscriptions", "name",
                "lang", "version", "kind", "type", "ip"):
        assert mine[key] == theirs[key], key
    # The reference lists them from a Go map: in no particular order.
    assert sorted(mine["subscriptions_list"]) == sorted(theirs["subscriptions_list"])
    assert (ours["num_connections"], ours["total"], ours["limit"]) == (1, 1, 1024)
    paged = servers["tidings"].get("/connz?offset=1&sort=msgs_from")
    assert (paged["num_connections"], paged["offset"]) == (0, 1)


def test_subsz_routez_accountz_healthz(servers: dict[str, Monitored]) -> None:
    t, r = servers["tidings"], servers["reference"]
    assert shape(t.get("/routez")) == shape(r.get("/routez"))
    assert t.get("/healthz") == r.get("/healthz") == {"status": "ok"}
    ours = t.get("/subsz?subs=1")
    assert {s["subject"] for s in ours["subscriptions_list"]} == {"foo", "bar"}
    theirs = r.get("/subsz")
    assert set(theirs) >= set(ours) - {"total", "offset", "limit", "subscriptions_list"}
    assert t.get("/accountz")["accounts"] == ["$G"]


def test_routez_lists_the_routes() -> None:
    ports = [free_port(), free_port()]
    http = free_port()
    a = subprocess.Popen([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                          "127.0.0.1", "-p", str(free_port()), "-m", str(http), "--cluster",
                          f"nats://127.0.0.1:{ports[0]}"], stderr=subprocess.DEVNULL)
    b_port = free_port()
    b = subprocess.Popen([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                          "127.0.0.1", "-p", str(b_port), "--cluster",
                          f"nats://127.0.0.1:{ports[1]}", "--routes",
                          f"nats://127.0.0.1:{ports[0]}"], stderr=subprocess.DEVNULL)
    try:
        _wait_ready(b_port, b)
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/routez", timeout=5) as r:
                    routez = json.loads(r.read())
            except OSError:
                routez = {"num_routes": 0}
            if routez["num_routes"] == 1:
                break
            time.sleep(0.05)  # the route is being made: poll, with a bound
        assert routez["num_routes"] == 1
        assert routez["routes"][0]["did_solicit"] is False
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(10)


def test_varz_cluster_urls_are_host_and_port_only() -> None:
    """/varz cluster.urls lists the configured routes as the reference does, `host:port`:
    never the user and password of a route URL."""
    dead, other = free_port(), free_port()  # nothing listens there: only configured
    clusters = {}
    for kind in ("tidings", "reference"):
        http, route = free_port(), free_port()
        conf = (f"cluster {{\n  listen: 127.0.0.1:{route}\n  name: C\n  routes: ["
                f'"nats://ruser:routepw-SECRET@127.0.0.1:{dead}", "nats://127.0.0.1:{other}"'
                "]\n}\n")
        server = start_configured(kind, conf, extra_args=["-m", str(http)])
        try:
            wait_listening(http, server.proc)
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10) as r:
                clusters[kind] = json.loads(r.read())["cluster"]
        finally:
            server.stop()
    assert clusters["tidings"]["urls"] == clusters["reference"]["urls"] == [
        f"127.0.0.1:{dead}", f"127.0.0.1:{other}"]


def test_metrics_in_prometheus_format(servers: dict[str, Monitored]) -> None:
    t = servers["tidings"]
    with urllib.request.urlopen(f"http://127.0.0.1:{t.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line and not line.startswith("#")}
    varz = t.get("/varz")
    assert samples["gnatsd_varz_in_client_msgs"] == varz["in_client_msgs"] == 3
    assert samples["gnatsd_varz_connections"] == 1
    assert "# TYPE gnatsd_varz_in_msgs counter" in text


def test_closed_connections(servers: dict[str, Monitored]) -> None:
    """/connz?state=closed lists a client that has gone, with when and why, as the
    reference's does; an unknown state is a 400."""
    for server in servers.values():
        c = RawConn(server.port)
        c.send(b'CONNECT {"verbose":false,"pedantic":false,"name":"gone"}\r\nSUB a 9\r\n')
        c.barrier()
        c.close()
    found = {}
    for kind, server in servers.items():
        deadline = time.monotonic() + 10
        while True:
            closed = server.get("/connz?state=closed&subs=1")["connections"]
            gone = [c for c in closed if c.get("name") == "gone"]
            if gone:
                break
            assert time.monotonic() < deadline, kind
            time.sleep(0.02)
        found[kind] = gone[0]
    assert shape(found["tidings"]) == shape(found["reference"])
    assert found["tidings"]["subscriptions_list"] == ["a"]
    assert found["tidings"]["reason"] in ("Client Closed", "Read Error")
    with pytest.raises(urllib.error.HTTPError):
        servers["tidings"].get("/connz?state=bogus")
