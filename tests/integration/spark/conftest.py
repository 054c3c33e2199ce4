"""Fixtures for the Spark connector tests: one real local Spark session, one tidings server.

Starting Spark costs several seconds, so the session is shared by every test here (local[2],
UI off, two shuffle partitions, UTC). Each test uses channels of its own, so tests do not see
each other's messages. Everything is skipped, with the reason, when pyspark, pyarrow or Java
is missing, or when the Python workers Spark starts cannot import tidings.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.harness import Server, start_tidings


def _skip_reason() -> str | None:
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install 'tidings[spark]')"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "Java is not installed (Spark needs a JVM)"
    # Spark's Python workers are fresh interpreters: tidings must be installed, not on sys.path.
    probe = subprocess.run([sys.executable, "-c", "import tidings.spark"], cwd="/",
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "tidings is not importable by Spark's Python workers (pip install -e .)"
    return None


_SKIP = _skip_reason()
if _SKIP:
    pytest.skip(_SKIP, allow_module_level=True)


@dataclass
class StanServer:
    server: Server
    monitor_url: str

    @property
    def url(self) -> str:
        return self.server.url


def wait_streaming(url: str, timeout: float = 20.0, **options: str) -> None:
    """Until the embedded streaming server answers a connect (it starts after the core)."""
    from tidings.spark.stan import wait_for_streaming

    wait_for_streaming(url, timeout, **options)


@pytest.fixture(scope="session")
def stan_server() -> Iterator[StanServer]:
    """A tidings server with streaming (memory store) and monitoring, for the whole session."""
    server = start_tidings(http_port=-1, extra_args=["--max_msgs", "0", "--max_channels", "0"])
    try:
        wait_streaming(server.url)
        yield StanServer(server, f"http://127.0.0.1:{server.ports['http']}")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import tidings.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tidings-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    tidings.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def channel_name() -> Any:
    """A maker of channel names unique to this test."""
    tag = uuid.uuid4().hex[:8]
    return lambda name="c": f"t{tag}.{name}"


def publish(url: str, channel: str, payloads: list[bytes], **nats_options: Any) -> None:
    """Store `payloads` in `channel`, in order; returns once every PubAck is in."""
    from tidings.streaming import client as stan

    async def run() -> None:
        sc = await stan.connect("test-cluster", f"feeder-{uuid.uuid4().hex[:10]}", url=url,
                                **nats_options)
        try:
            futs = []
            loop = asyncio.get_running_loop()
            for payload in payloads:
                fut: asyncio.Future[None] = loop.create_future()

                def done(guid: str, err: Any, fut: asyncio.Future[None] = fut) -> None:
                    if err:
                        fut.set_exception(RuntimeError(str(err)))
                    else:
                        fut.set_result(None)

                await sc.publish_async(channel, payload, ack_handler=done)
                futs.append(fut)
            await asyncio.gather(*futs)
        finally:
            await sc.close()

    asyncio.run(run())
