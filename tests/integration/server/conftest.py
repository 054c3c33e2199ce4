"""Fixtures for the core-server tests: pairs of servers (tidings and the reference) with the
same options, shared by the whole session, and the differential summary line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.harness import Server, start_reference, start_tidings
from tests.harness.fixtures import server_factory

# `tidings server` embeds the streaming server, whose internal client needs more than the
# small control line; the core-server tests run tidings without it where options differ.
NO_STREAMING = ["--no_streaming"]  # only where a test is about something streaming disturbs

# Options of the configurations the differential and raw tests share. The same keyword
# options start both servers (tests/harness/servers.py turns them into flags or a config file).
CONFIGS: dict[str, dict[str, Any]] = {
    "small": {"max_payload": 64, "max_control_line": 96},
    "auth": {"user": "alice", "password": "s3cret"},
    "token": {"token": "t0ken"},
}

# Filled by test_differential.py: exchange name -> ("agree" | "allowed" | "differ", detail).
DIFF_RESULTS: dict[str, tuple[str, str]] = {}


class ServerPair:
    """Lazily started tidings + reference servers for each named configuration."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, str], Server] = {}

    def get(self, kind: str, config: str) -> Server:
        """kind: "tidings", "tidings-pure" (the compiled PUB scanner disabled) or
        "reference"."""
        key = (kind, config)
        if key not in self._servers:
            opts = CONFIGS.get(config, {})
            if kind == "reference":
                self._servers[key] = start_reference(**opts)
            elif kind == "tidings-pure":
                self._servers[key] = start_tidings(env={"TIDINGS_PURE_PYTHON": "1"}, **opts)
            else:
                self._servers[key] = start_tidings(**opts)
        return self._servers[key]

    def stop(self) -> None:
        for server in self._servers.values():
            server.stop()


@pytest.fixture(scope="session")
def server_pairs(
    tidings_server: Server, reference_server: Server
) -> Iterator[ServerPair]:
    pairs = ServerPair()
    pairs._servers[("tidings", "default")] = tidings_server
    pairs._servers[("reference", "default")] = reference_server
    yield pairs
    del pairs._servers[("tidings", "default")]
    del pairs._servers[("reference", "default")]
    pairs.stop()


@pytest.fixture(scope="session")
def small_tidings(server_pairs: ServerPair) -> Server:
    """tidings with max_payload 64 and max_control_line 96."""
    return server_pairs.get("tidings", "small")


@pytest.fixture(scope="session")
def auth_tidings(server_pairs: ServerPair) -> Server:
    """tidings requiring user alice, password s3cret."""
    return server_pairs.get("tidings", "auth")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its differential results to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["tidings_diff_results"] = json.dumps(DIFF_RESULTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """(pytest-xdist, on the controller) a worker's differential results join the summary."""
    got = getattr(node, "workeroutput", {}).get("tidings_diff_results")
    if got:
        DIFF_RESULTS.update({k: tuple(v) for k, v in json.loads(got).items()})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not DIFF_RESULTS:
        return
    total = len(DIFF_RESULTS)
    agree = sum(1 for v, _ in DIFF_RESULTS.values() if v == "agree")
    allowed = sorted((k, d) for k, (v, d) in DIFF_RESULTS.items() if v == "allowed")
    differ = sorted(k for k, (v, _) in DIFF_RESULTS.items() if v == "differ")
    tr = terminalreporter
    tr.write_sep("-", "differential: tidings vs reference nats-server")
    tr.write_line(
        f"{total} exchanges: {agree} agree, {len(allowed)} differ as allowed, "
        f"{len(differ)} differ unexpectedly"
    )
    by_reason: dict[str, list[str]] = {}
    for name, reason in allowed:
        by_reason.setdefault(reason, []).append(name)
    for reason, names in by_reason.items():
        tr.write_line(f"  allowed ({', '.join(names)}): {reason}")
    for name in differ:
        tr.write_line(f"  UNEXPECTED difference: {name}")


@pytest.fixture(params=["tidings", "reference"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def port(kind: str, server_pairs: ServerPair) -> int:
    """The session's default server of this kind."""
    return server_pairs.get(kind, "default").port


@pytest.fixture
def start(kind: str) -> Iterator[Callable[..., Server]]:
    """Start a server of this kind with options; stopped after the test."""

    def start_kind(**opts: Any) -> Server:
        if kind == "tidings":
            # As a user starts it, streaming on: its own connection is internal (no
            # max_connections slot, no credentials), so the limits and logins compared
            # with the reference are the clients' alone.
            return start_tidings(**opts)
        return start_reference(**opts)

    yield from server_factory(start_kind)
