"""The official node-nats-streaming client (npm), unmodified, against tidings.

The client is installed with npm into tests/integration/streaming/node/node_modules (ignored
by git) the first time; the tests are skipped only when `node` is not installed.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import Inbox

NODE_DIR = Path(__file__).parent / "node"
DRIVER = NODE_DIR / "driver.js"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node_client() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the node-nats-streaming tests need Node.js and npm")
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not: cannot install node-nats-streaming"
    modules = NODE_DIR / "node_modules"  # ignored by git, like the lock file inside it
    modules.mkdir(exist_ok=True)
    with open(modules / ".tidings-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (modules / "node-nats-streaming" / "package.json").exists():
            out = subprocess.run(
                [npm, "install", "--no-package-lock", "--no-audit", "--no-fund", "--silent"],
                cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
            )
            assert out.returncode == 0, f"npm install node-nats-streaming failed:\n{out.stderr}"
    return node


async def drive(node: str, scenario: str, env, client_id: str, *args: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        node, str(DRIVER), scenario, env.url, env.cluster_id, client_id, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, f"node driver {scenario} failed:\n{err.decode()}"
    return json.loads(out.decode().strip().splitlines()[-1])


async def test_node_connect_publish_with_acks_and_start_positions(stan, node_client):
    env = await stan()
    out = await drive(node_client, "pubsub", env, "node-pub")
    assert out["guids"] == out["unique"] == 10
    subs = out["subs"]
    assert subs["all"] == list(range(1, 12))
    assert subs["last"] == [10, 11]
    assert subs["seq"] == [7, 8, 9, 10, 11]
    assert subs["delta"] == list(range(1, 12))
    assert subs["time"] == [11]
    assert subs["newOnly"] == [11]
    assert out["first"] == {"seq": 1, "data": "m0", "redelivered": False, "count": 0}
    assert env.server.store.channel_info("node.pubsub").msgs == 11


async def test_node_async_publish_burst(stan, node_client):
    env = await stan()
    out = await drive(node_client, "burst", env, "node-burst", "5000")
    assert out == {"acked": 5000, "errors": 0}
    assert env.server.store.channel_info("node.burst").msgs == 5000


async def test_node_durable_resume(stan, node_client, tmp_path):
    env = await stan(store="file", dir=str(tmp_path / "data"))
    first = await drive(node_client, "durableFirst", env, "node-dur")
    assert first["got"] == [1, 2, 3, 4, 5]
    await env.restart()  # and across a restart of the streaming server
    resumed = await drive(node_client, "durableResume", env, "node-dur")
    # 4 and 5 were not acknowledged, 6 (published after the acks) was delivered, not acked
    assert [(m["seq"], m["redelivered"]) for m in resumed["got"]] == [
        (4, True), (5, True), (6, True)]


async def test_node_queue_group(stan, node_client):
    env = await stan()
    out = await drive(node_client, "queue", env, "node-q")
    a, b = out["a"], out["b"]
    assert sorted(a + b) == list(range(1, 41))
    assert a and b and not set(a) & set(b)


async def test_node_redelivery(stan, node_client):
    env = await stan()
    out = await drive(node_client, "redelivery", env, "node-rd")
    assert [(m["seq"], m["redelivered"], m["count"]) for m in out["got"]] == [
        (1, False, 0), (1, True, 1), (1, True, 2)]


async def test_node_sees_the_error_strings(stan, node_client):
    env = await stan()
    out = await drive(node_client, "errors", env, "node-err")
    assert out == {
        "duplicate": "stan: clientID already registered",
        "durableQueueName":
            "stan: durable name of a durable queue subscriber can't contain the character ':'",
        "wildcard": "stan: invalid subject",
    }


async def test_node_and_python_clients_interoperate(stan, node_client):
    env = await stan()
    py = await env.connect("py-side")
    for i in range(3):
        await py.publish("interop", b"from python %d" % i)
    ib = Inbox()
    await py.subscribe("interop", cb=ib, start_at="new_only")
    out = await drive(node_client, "read", env, "node-side", "interop", "3")
    assert out["got"] == [f"from python {i}" for i in range(3)]
    assert (await ib.next()).data == b"from node"
