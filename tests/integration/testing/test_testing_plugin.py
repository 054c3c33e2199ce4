"""The pytest plugin (tidings.testing) as a user's test suite meets it, through pytester.

Each test writes a small sample project that uses only the plugin's fixtures (and nats-py)
and runs pytest on it in a subprocess, as `pip install tidings` then `pytest` would. The
samples run with ResourceWarning and unraisable exceptions as errors, so a server that
leaks a socket or a task fails them.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

STRICT = ["-W", "error::ResourceWarning", "-W", "error::pytest.PytestUnraisableExceptionWarning",
          "-p", "no:cacheprovider"]

# Helpers of the samples: nats-py round trips, and a raw CONNECT for refused credentials
# (nats-py itself leaks its socket when the server refuses it).
HELPERS = '''
import asyncio
import json
import socket

import nats


async def roundtrip(url, **auth):
    nc = await nats.connect(url, **auth)
    sub = await nc.subscribe("greet.*")
    await nc.publish("greet.joe", b"hello")
    msg = await sub.next_msg(timeout=2)
    assert (msg.subject, msg.data) == ("greet.joe", b"hello")

    async def reply(m):
        await m.respond(m.data.upper())

    await nc.subscribe("echo", cb=reply)
    resp = await nc.request("echo", b"ping", timeout=2)
    assert resp.data == b"PING"
    await nc.drain()


def refused(port, **creds):
    """Whether the server answers CONNECT with these credentials by -ERR Authorization."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"INFO")
        s.sendall(b"CONNECT " + json.dumps({"verbose": False, **creds}).encode()
                  + b"\\r\\nPING\\r\\n")
        line = f.readline()
        f.close()
        return line.startswith(b"-ERR 'Authorization Violation'")
'''


def project(pytester: pytest.Pytester, tests: str, ini: str = INI) -> None:
    pytester.makeini(ini)
    pytester.makepyfile(helpers=HELPERS)
    pytester.makepyfile(test_sample=textwrap.dedent(tests))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*STRICT, "-v", *args, timeout=120)


def test_pubsub_and_request_reply_in_both_modes(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import asyncio
        import os

        import pytest
        from helpers import roundtrip


        async def test_async_is_in_process(nats_server, nats_url):
            assert nats_server.mode == "inprocess"
            assert nats_server.core.port == nats_server.port
            assert nats_url == f"nats://127.0.0.1:{nats_server.port}"
            await roundtrip(nats_url)


        def test_sync_is_a_subprocess(nats_server, nats_url):
            assert nats_server.mode == "subprocess"
            assert nats_server.pid != os.getpid() and nats_server.running
            asyncio.run(roundtrip(nats_url))


        @pytest.mark.tidings(mode="subprocess")
        async def test_marker_chooses_subprocess(nats_server):
            assert nats_server.mode == "subprocess"
            await roundtrip(nats_server.url)


        @pytest.mark.tidings(max_payload=1024)
        async def test_marker_options(nats_server):
            import nats
            nc = await nats.connect(nats_server.url)
            assert nc.max_payload == 1024
            await nc.close()
    """)
    result = run(pytester)
    result.assert_outcomes(passed=4)


def test_mode_option_forces_subprocess(pytester: pytest.Pytester) -> None:
    project(pytester, """
        async def test_async(nats_server):
            assert nats_server.mode == "subprocess"
    """)
    run(pytester, "--tidings-mode=subprocess").assert_outcomes(passed=1)


def test_strict_asyncio_mode(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import pytest
        from helpers import roundtrip

        @pytest.mark.asyncio
        async def test_marked(nats_server):
            assert nats_server.mode == "inprocess"
            await roundtrip(nats_server.url)

        @pytest.mark.asyncio(loop_scope="module")
        async def test_module_loop(nats_server):
            assert nats_server.mode == "inprocess"
            await roundtrip(nats_server.url)
    """, ini="[pytest]\nasyncio_mode = strict\n")
    run(pytester).assert_outcomes(passed=2)


def test_restart_keeps_port_and_reconnects(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import asyncio

        import nats
        import pytest


        async def bounce(srv):
            port = srv.port
            reconnected = asyncio.Event()

            async def on_reconnect():
                reconnected.set()

            nc = await nats.connect(srv.url, reconnected_cb=on_reconnect,
                                    reconnect_time_wait=0.05, max_reconnect_attempts=-1)
            await srv.restart()
            assert srv.port == port and srv.running
            await asyncio.wait_for(reconnected.wait(), 10)
            sub = await nc.subscribe("after")
            await nc.publish("after", b"x")
            assert (await sub.next_msg(timeout=2)).data == b"x"
            await nc.close()


        async def test_in_process(nats_server):
            await bounce(nats_server)


        @pytest.mark.tidings(mode="subprocess")
        async def test_subprocess(nats_server):
            await bounce(nats_server)


        def test_stop_refuses_connections(nats_server):
            import socket
            port = nats_server.port
            nats_server.stop()
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()


        def test_kill_then_restart(nats_server):
            pid = nats_server.pid
            nats_server.kill()
            assert not nats_server.running
            nats_server.restart()
            assert nats_server.running and nats_server.pid != pid
            asyncio.run(bounce(nats_server))
    """)
    run(pytester).assert_outcomes(passed=4)


STREAMING = """
    import asyncio

    import pytest
    from tidings.streaming.client import connect


    @pytest.fixture
    async def no_tasks_left():
        yield  # torn down after the server: nothing of it may be left on the loop
        left = asyncio.all_tasks() - {asyncio.current_task()}
        assert not left, left


    async def durable_survives(srv):
        assert srv.store == "file" and srv.cluster_id == "test-cluster"
        sc = await connect(srv.cluster_id, "worker", url=srv.url)
        got = []
        sub = await sc.subscribe("orders", durable_name="d", manual_acks=True,
                                 deliver_all_available=True)
        await sc.publish("orders", b"one")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"one"
        await msg.ack()
        await sc.close()  # the durable keeps its place

        await srv.restart()

        pub = await connect(srv.cluster_id, "publisher", url=srv.url)
        await pub.publish("orders", b"two")
        await pub.close()
        sc = await connect(srv.cluster_id, "worker", url=srv.url)
        sub = await sc.subscribe("orders", durable_name="d", manual_acks=True,
                                 deliver_all_available=True)
        msg = await sub.next_msg(timeout=5)
        assert (msg.data, msg.seq) == (b"two", 2)  # "one" was acknowledged before
        await msg.ack()
        await sc.close()


    async def test_in_process(no_tasks_left, streaming_server):
        assert streaming_server.mode == "inprocess"
        await durable_survives(streaming_server)


    @pytest.mark.tidings(mode="subprocess")
    async def test_subprocess(streaming_server):
        assert streaming_server.mode == "subprocess"
        await durable_survives(streaming_server)
"""


def test_streaming_durable_survives_restart(pytester: pytest.Pytester) -> None:
    project(pytester, STREAMING)
    run(pytester).assert_outcomes(passed=2)


def test_module_scoped_servers_are_shared(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import asyncio

        from helpers import roundtrip

        seen = []


        def test_one(nats_server_module, streaming_server_module):
            seen.append((nats_server_module.port, nats_server_module.pid,
                         streaming_server_module.port))
            asyncio.run(roundtrip(nats_server_module.url))


        async def test_two(nats_server_module, streaming_server_module):
            assert seen == [(nats_server_module.port, nats_server_module.pid,
                             streaming_server_module.port)]
            assert nats_server_module.mode == "subprocess"
            await roundtrip(nats_server_module.url)


        def test_session(nats_server_session):
            seen.append(nats_server_session.port)


        def test_session_again(nats_server_session):
            assert seen[-1] == nats_server_session.port
    """)
    run(pytester).assert_outcomes(passed=4)


def test_two_servers_with_different_auth(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import asyncio

        from helpers import refused, roundtrip


        def check(users, tokens):
            assert users.port != tokens.port
            asyncio.run(roundtrip(users.url, user="alice", password="s3cret"))
            asyncio.run(roundtrip(tokens.url, token="t0ken"))
            assert refused(users.port, user="alice", **{"pass": "wrong"})
            assert refused(users.port, auth_token="t0ken")
            assert refused(tokens.port, auth_token="wrong")
            assert refused(tokens.port)
            assert not refused(tokens.port, auth_token="t0ken")


        def test_sync(nats_server_factory):
            check(nats_server_factory(user="alice", password="s3cret"),
                  nats_server_factory(token="t0ken"))


        async def test_async(nats_server_factory):
            users = await nats_server_factory(user="alice", password="s3cret")
            tokens = await nats_server_factory(token="t0ken", mode="subprocess")
            assert (users.mode, tokens.mode) == ("inprocess", "subprocess")
            await asyncio.to_thread(check, users, tokens)


        def test_config_file(nats_server_factory):
            srv = nats_server_factory(config='authorization { token: "from-file" }')
            assert refused(srv.port, auth_token="nope")
            assert not refused(srv.port, auth_token="from-file")
    """)
    run(pytester).assert_outcomes(passed=3)


def test_a_cluster_from_the_factory(pytester: pytest.Pytester) -> None:
    project(pytester, """
        import nats


        async def crosses(pub_url, sub_url):
            a, b = await nats.connect(pub_url), await nats.connect(sub_url)
            sub = await b.subscribe("across")
            await b.flush()
            try:
                for _ in range(100):  # until the subscription's interest has crossed
                    await a.publish("across", b"hi")
                    await a.flush()
                    try:
                        return (await sub.next_msg(timeout=0.1)).data == b"hi"
                    except nats.errors.TimeoutError:
                        continue
                return False
            finally:
                await a.close()
                await b.close()


        async def test_in_process(nats_server_factory):
            servers = await nats_server_factory.cluster(3)
            assert len({s.port for s in servers}) == 3
            assert await crosses(servers[2].url, servers[1].url)


        def test_subprocess(nats_server_factory):
            import asyncio

            first, second = nats_server_factory.cluster(2)
            assert asyncio.run(crosses(first.url, second.url))
    """)
    run(pytester).assert_outcomes(passed=2)


def test_ports_are_read_back_and_kept_on_restart(pytester: pytest.Pytester) -> None:
    """A server asked for a route listener and monitoring on any free port (`cluster=True`,
    `http_port=-1`) names the ports it got in `.ports` (a subprocess's read from its log);
    `cluster_url` has the route port, and a restart keeps the client and route ports."""
    project(pytester, """
        import asyncio
        import json
        import urllib.request

        import pytest


        def varz(port):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=10) as r:
                return json.loads(r.read())


        def check(srv, got=None):
            ports = srv.ports
            assert ports["client"] == srv.port
            assert ports["route"] > 0 and srv.cluster_url.endswith(f":{ports['route']}")
            assert (got or varz(ports["http"]))["port"] == srv.port
            return ports


        @pytest.mark.tidings(cluster=True, http_port=-1)
        async def test_in_process(nats_server):
            # (the server runs on this loop: the HTTP call runs in a thread)
            before = check(nats_server, await asyncio.to_thread(varz, nats_server.ports["http"]))
            await nats_server.restart()
            after = check(nats_server, await asyncio.to_thread(varz, nats_server.ports["http"]))
            assert (after["client"], after["route"]) == (before["client"], before["route"])


        @pytest.mark.tidings(cluster=True, http_port=-1)
        def test_subprocess(nats_server):
            before = check(nats_server)
            nats_server.restart()
            after = check(nats_server)
            assert after == before
    """)
    run(pytester).assert_outcomes(passed=2)


def test_failure_shows_the_server_log(pytester: pytest.Pytester) -> None:
    project(pytester, """
        def test_fails(nats_server):
            assert nats_server.port == -1


        async def test_fails_in_process(nats_server):
            assert nats_server.port == -2
    """)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_fails _*",
        "*tidings server nats://127.0.0.1:* (subprocess) log*",
        "*Listening for client connections on 127.0.0.1:*",
        "*Server is ready*",
        "*_ test_fails_in_process _*",
        "*Captured log setup*",
        "*Listening for client connections on 127.0.0.1:*",
    ])


def test_unused_plugin_changes_nothing(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    project(pytester, """
        import os
        import sys

        def test_plain():
            loaded = sorted(m for m in sys.modules if m.startswith("tidings"))
            expected = ["tidings", "tidings.lazy", "tidings.testing", "tidings.testing.plugin"]
            assert loaded == (expected if os.environ["EXPECT_PLUGIN"] == "1" else []), loaded

        async def test_async_plain():
            assert True
    """)
    monkeypatch.setenv("EXPECT_PLUGIN", "1")
    run(pytester).assert_outcomes(passed=2)
    monkeypatch.setenv("EXPECT_PLUGIN", "0")
    run(pytester, "-p", "no:tidings").assert_outcomes(passed=2)
    fixtures = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    fixtures.stdout.fnmatch_lines(["*nats_server -- *", "*streaming_server_session*"])


async def test_serve_outside_pytest() -> None:
    import nats

    import tidings

    async with tidings.serve(port=0) as srv:
        assert srv.mode == "inprocess" and srv.port > 0
        nc = await nats.connect(srv.url)
        sub = await nc.subscribe("x")
        await nc.publish("x", b"1")
        assert (await sub.next_msg(timeout=2)).data == b"1"
        await nc.close()
    assert not srv.running
    assert asyncio.all_tasks() == {asyncio.current_task()}
    async with tidings.serve(streaming=True, store="memory") as srv:
        from tidings.streaming.client import connect

        sc = await connect("test-cluster", "me", url=srv.url)
        await sc.publish("ch", b"a")
        sub = await sc.subscribe("ch", deliver_all_available=True)
        assert (await sub.next_msg(timeout=2)).data == b"a"
        await sc.close()
    # nothing of the servers is left running on the loop
    assert asyncio.all_tasks() == {asyncio.current_task()}


def test_import_tidings_stays_cheap() -> None:
    code = ("import sys, tidings; assert 'tidings.testing' not in sys.modules; "
            "assert 'tidings.server.server' not in sys.modules; print(tidings.serve.__name__)")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "serve"
