"""The monitoring endpoints (-m PORT) of tidings next to the reference's: the same traffic on
both, the same keys and types, and the counters that must agree do (connections,
subscriptions of the client, messages and bytes in and out, also messages nobody wanted)."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    Process,
    refused_port,
    start_configured,
    start_server_process,
    wait_until,
)
from tests.harness.rawnats import RawConn

pytestmark = pytest.mark.timeout(60)

# Keys the reference has and tidings leaves out, with the reason.
ONLY_REFERENCE = {
    "varz": {
        "git_commit",  # a Go build's commit
        "feature_flags",  # no feature flags
        "disk_io_wait_stats",  # JetStream's disk semaphore
        "config_digest",  # the sha256 of Go's JSON encoding of the parsed file
    },
    "connz": set(),
}
TRAFFIC = (b'CONNECT {"verbose":false,"pedantic":false,"name":"c1","lang":"python",'
           b'"version":"1"}\r\nSUB foo 1\r\nSUB bar q 2\r\nPUB foo 2\r\nhi\r\n'
           b"PUB nobody 3\r\nabc\r\nPUB foo r 4\r\nabcd\r\n")


def get(http: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=10) as r:
        return json.loads(r.read())


class Monitored:
    def __init__(self, kind: str, *args: str) -> None:
        self.kind = kind
        self.proc = start_server_process(kind, "-a", "127.0.0.1", "-p", "-1", "-m", "-1",
                                         *args)
        self.port, self.http = self.proc.ports["client"], self.proc.ports["http"]

    def get(self, path: str) -> Any:
        return get(self.http, path)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Monitored]]:
    both = {kind: Monitored(kind) for kind in ("tidings", "reference")}
    conns = []
    for server in both.values():
        c = RawConn(server.port)
        c.send(TRAFFIC)
        assert c.barrier() == b"MSG foo 1 2\r\nhi\r\nMSG foo 1 r 4\r\nabcd\r\n"
        conns.append(c)
    yield both
    for c in conns:
        c.close()
    for server in both.values():
        server.proc.stop()


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
    # Without accounts configured, both have the global and the system account.
    assert sorted(t.get("/accountz")["accounts"]) == sorted(r.get("/accountz")["accounts"]) \
        == ["$G", "$SYS"]


def test_routez_lists_the_routes() -> None:
    a = Monitored("tidings", "--cluster", "nats://127.0.0.1:0")
    b = start_server_process("tidings", "-a", "127.0.0.1", "-p", "-1", "--cluster",
                             "nats://127.0.0.1:0", "--routes",
                             f"nats://127.0.0.1:{a.proc.ports['route']}")
    try:
        # The route is being made: poll, with a bound.
        routez = wait_until(lambda: (r := a.get("/routez"))["num_routes"] == 1 and r, 10,
                            "one route in /routez")
        assert routez["num_routes"] == 1
        assert routez["routes"][0]["did_solicit"] is False
    finally:
        for p in (a.proc, b):
            p.stop()


def test_varz_cluster_urls_are_host_and_port_only() -> None:
    """/varz cluster.urls lists the configured routes as the reference does, `host:port`:
    never the user and password of a route URL."""
    clusters = {}
    # Nothing listens there (held, refusing): only configured.
    with refused_port() as dead, refused_port() as other:
        for kind in ("tidings", "reference"):
            conf = ("cluster {\n  listen: 127.0.0.1:-1\n  name: C\n  routes: ["
                    f'"nats://ruser:routepw-SECRET@127.0.0.1:{dead}", '
                    f'"nats://127.0.0.1:{other}"]\n}}\n')
            server = start_configured(kind, conf, extra_args=["-m", "-1"])
            try:
                clusters[kind] = get(server.ports["http"], "/varz")["cluster"]
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

        def gone(server: Monitored = server) -> list[dict[str, Any]]:
            closed = server.get("/connz?state=closed&subs=1")["connections"]
            return [c for c in closed if c.get("name") == "gone"]

        found[kind] = wait_until(gone, 10, f"{kind}: the closed connection listed")[0]
    assert shape(found["tidings"]) == shape(found["reference"])
    assert found["tidings"]["subscriptions_list"] == ["a"]
    assert found["tidings"]["reason"] in ("Client Closed", "Read Error")
    with pytest.raises(urllib.error.HTTPError):
        servers["tidings"].get("/connz?state=bogus")


def _by_sid(subs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sorted by sid, without the cid (each server numbers its connections its own way)."""
    return sorted(({k: v for k, v in sub.items() if k != "cid"} for sub in subs),
                  key=lambda sub: sub["sid"])


def test_connz_subs_detail(servers: dict[str, Monitored]) -> None:
    """subs=detail: each subscription's subject, queue group, sid, messages and max (UNSUB
    with a count), and its connection's cid."""
    found = {}
    for kind, server in servers.items():
        with RawConn(server.port) as c:
            c.send(b'CONNECT {"verbose":false,"pedantic":false,"name":"detail"}\r\n'
                   b"SUB d.a 1\r\nSUB d.b grp 2\r\nSUB d.c 3\r\nUNSUB 3 5\r\n"
                   b"PUB d.a 1\r\nx\r\nPUB d.a 1\r\ny\r\nPUB d.b 1\r\nz\r\n")
            c.barrier()
            connz = server.get("/connz?subs=detail")
        mine = next(conn for conn in connz["connections"] if conn.get("name") == "detail")
        assert "subscriptions_list" not in mine, kind
        assert {sub["cid"] for sub in mine["subscriptions_list_detail"]} == {mine["cid"]}
        found[kind] = _by_sid(mine["subscriptions_list_detail"])
    assert found["tidings"] == found["reference"] == [
        {"subject": "d.a", "sid": "1", "msgs": 2},
        {"subject": "d.b", "qgroup": "grp", "sid": "2", "msgs": 1},
        {"subject": "d.c", "sid": "3", "msgs": 0, "max": 5},
    ]
    closed = servers["tidings"].get("/connz?state=closed&subs=detail")["connections"]
    gone = next(conn for conn in closed if conn.get("name") == "detail")
    assert _by_sid(gone["subscriptions_list_detail"]) == found["reference"]


def test_subsz_counters_and_detail(servers: dict[str, Monitored]) -> None:
    """num_inserts, num_removes, num_matches, num_cache, cache_hit_rate, max_fanout and
    avg_fanout move as the reference's do; subs=1 lists the subscriptions (test=SUBJECT
    those matching it) with account, sid, messages and cid; a bad test subject is a 400."""
    for kind, server in servers.items():
        before = server.get("/subsz")
        with RawConn(server.port) as c:
            c.send(b'CONNECT {"verbose":false,"pedantic":false,"name":"sz"}\r\n'
                   b"SUB sz.a 1\r\nSUB sz.* 2\r\nSUB sz.b 3\r\nUNSUB 3\r\n"
                   + b"PUB sz.a 1\r\nx\r\n" * 3 + b"PUB sz.none 0\r\n\r\n")
            c.barrier()
            after = server.get("/subsz")
            detail = server.get("/subsz?subs=1&test=sz.a")
            with pytest.raises(urllib.error.HTTPError) as bad:
                server.get("/subsz?subs=1&test=sz.*")
        assert bad.value.code == 400, kind
        delta = {key: after[key] - before[key]
                 for key in ("num_subscriptions", "num_inserts", "num_removes")}
        assert delta == {"num_subscriptions": 2, "num_inserts": 3, "num_removes": 1}, kind
        assert after["num_matches"] > before["num_matches"], kind
        assert 0 <= after["cache_hit_rate"] <= 1 and after["num_cache"] >= 1, kind
        assert after["max_fanout"] >= 2 and after["avg_fanout"] > 0, kind
        assert (detail["total"], detail["offset"], detail["limit"]) == (2, 0, 1024), kind
        subs = detail["subscriptions_list"]
        assert _by_sid(subs) == [
            {"account": "$G", "account_tag": "$G", "subject": "sz.a", "sid": "1", "msgs": 3},
            {"account": "$G", "account_tag": "$G", "subject": "sz.*", "sid": "2", "msgs": 4},
        ], kind
        assert len({sub["cid"] for sub in subs}) == 1, kind


def _cluster_of_two(kind: str) -> tuple[Monitored, Process]:
    """Two servers of one cluster on 127.0.0.1, the first monitored, the second routed to
    the first (routes go both ways once made)."""
    any_port = "nats://127.0.0.1:" + ("0" if kind == "tidings" else "-1")
    first = Monitored(kind, "--cluster", any_port)
    second = start_server_process(kind, "-a", "127.0.0.1", "-p", "-1", "--cluster", any_port,
                                  "--routes", f"nats://127.0.0.1:{first.proc.ports['route']}")
    return first, second


def test_varz_connect_urls_once_the_cluster_forms() -> None:
    """connect_urls: the client URLs of the cluster, this server's first, as the reference
    fills it (nats.js's tests read it to see that a cluster formed)."""
    for kind in ("tidings", "reference"):
        first, second = _cluster_of_two(kind)
        a, b = first.port, second.ports["client"]
        try:
            # The route is being made: poll, with a bound.
            varz = wait_until(lambda first=first: "connect_urls" in (v := first.get("/varz"))
                              and v["routes"] and v, 15, f"{kind}: the cluster formed")
            assert varz["connect_urls"] == [f"127.0.0.1:{a}", f"127.0.0.1:{b}"], kind
        finally:
            for p in (first.proc, second):
                p.stop()


@pytest.fixture(scope="module")
def monitor_certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    import trustme

    d = tmp_path_factory.mktemp("monitor-certs")
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(d / "server.pem")
    cert.private_key_pem.write_to_path(d / "server-key.pem")
    return str(d / "server.pem"), str(d / "server-key.pem")


# (Not `http: HOST:X` with `http_port: P` in one file: the reference reads a file's keys in
# Go's map order, which is random, so either may win there; it failed one run in a few.)
@pytest.mark.parametrize(("conf", "flags", "scheme"), [
    ("http: 127.0.0.1:{P}", [], "http"),
    ("http: 127.0.0.1:{X}", ["-m", "{P}"], "http"),
    ("https: 127.0.0.1:{P}\n{TLS}", [], "https"),
], ids=["http", "m-flag-after-http", "https"])
def test_the_monitor_binds_the_host_given(tmp_path: Path, monitor_certs: tuple[str, str],
                                          conf: str, flags: list[str], scheme: str) -> None:
    """`http: HOST:PORT` (and https, and a port from http_port or -m after it) listens on
    HOST only, as the reference does; the client port stays on every address."""
    cert, key = monitor_certs
    tls = f'tls {{ cert_file: "{cert}", key_file: "{key}" }}'
    for kind in ("tidings", "reference"):
        # P: any free port; X: a port taken meanwhile (it is not the one that counts).
        with refused_port() as other:
            values = {"P": "-1", "X": str(other), "TLS": tls}
            path = tmp_path / f"{kind}.conf"
            path.write_text("port: -1\n" + conf.format(**values) + "\n")
            args = ["-c", str(path), *(f.format(**values) for f in flags)]
            proc = start_server_process(kind, *args)
        port, http = proc.ports["client"], proc.ports[scheme]
        try:
            assert http != other
            context = ssl.create_default_context(cafile=None)
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{http}/varz", timeout=10,
                                        context=context if scheme == "https" else None) as r:
                assert json.loads(r.read())["http_host"] == "127.0.0.1", kind
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", http), timeout=5).close()
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
        finally:
            proc.stop()


def test_varz_counts_stale_connections(tmp_path: Path) -> None:
    """A client that answers no PING is closed as stale, and counted so, on both."""
    for kind in ("tidings", "reference"):
        path = tmp_path / f"{kind}.conf"
        path.write_text('listen: 127.0.0.1:-1\nhttp: 127.0.0.1:-1\n'
                        'ping_interval: "100ms"\nping_max: 1\n')
        proc = start_server_process(kind, "-c", str(path))
        port, http = proc.ports["client"], proc.ports["http"]
        try:
            with RawConn(port) as silent:
                silent.send(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
                assert silent.read_to_eof().endswith(b"-ERR 'Stale Connection'\r\n"), kind
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10) as r:
                varz = json.loads(r.read())
            assert varz["stale_connections"] == 1, kind
            assert varz["stale_connection_stats"] == {"clients": 1, "routes": 0,
                                                      "gateways": 0, "leafs": 0}, kind
        finally:
            proc.stop()


@pytest.mark.parametrize("how", ["-m -1", "http: -1", "http: HOST:-1", "http_port: -1"])
def test_a_monitor_port_of_minus_one_is_any_free_port(how: str) -> None:
    """-m -1 (and -1 as the file's http port) serves monitoring on a free port, the one the
    log names ("Starting http monitor on HOST:PORT"), as the reference's RANDOM_PORT does;
    /varz says http_port -1 on both."""
    conf = "" if how.startswith("-m") else how.replace("HOST", "127.0.0.1") + "\n"
    args = how.split() if how.startswith("-m") else []
    for kind in ("tidings", "reference"):
        server = start_configured(kind, conf, extra_args=args, streaming=False)
        try:
            http = server.ports.get("http")
            assert http, (kind, server.log())
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10) as r:
                varz = json.loads(r.read())
            assert (varz["port"], varz["http_port"]) == (server.port, -1), kind
        finally:
            server.stop()
