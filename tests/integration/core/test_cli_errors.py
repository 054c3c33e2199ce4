"""A user's mistakes on the command line end with one clear line and a non-zero exit code,
never a traceback, as nats-server does for the same mistakes (compared where it has the flag)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port, nats_server_binary

pytestmark = pytest.mark.timeout(60)


def tidings(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings", *args], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


def reference(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([nats_server_binary(), *args], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tidings "), proc.stderr
    for word in words:
        assert word in last, proc.stderr
    return last


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_port_in_use(busy_port: int) -> None:
    args = ("-a", "127.0.0.1", "-p", str(busy_port))
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1,
                          f"127.0.0.1:{busy_port}", "Address already in use")
    # Also with the embedded streaming server (it starts after the listener).
    assert_one_line_error(tidings("server", *args), 1, "Address already in use")


def test_unresolvable_address() -> None:
    args = ("-a", "no-such-host.invalid", "-p", str(free_port()))
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1, "no-such-host.invalid")


@pytest.mark.parametrize("flag, value", [("-p", "70000"), ("-p", "-2"), ("-m", "65536")])
def test_out_of_range_ports_are_refused(flag: str, value: str) -> None:
    # The reference: 'listen tcp: address 70000: invalid port', exit code 1.
    assert reference("-a", "127.0.0.1", flag, value).returncode != 0
    assert_one_line_error(tidings("server", "-a", "127.0.0.1", flag, value), 2,
                          "invalid port", value)


def test_port_numbers() -> None:
    from tidings.server.options import port_number

    assert port_number("4222") == 4222
    assert port_number("0") == port_number("-1") == 0  # -1: the reference's RANDOM_PORT


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_payload_must_be_positive(value: str) -> None:
    assert_one_line_error(tidings("server", "--max_payload", value), 2, "--max_payload", value)


def test_max_payload_above_max_pending() -> None:
    # The reference's own check and words (set in its config file).
    last = assert_one_line_error(
        tidings("server", "--max_payload", "2000", "--max_pending", "1000"), 1)
    assert last.endswith("max_payload (2000) cannot be higher than max_pending (1000)")


@pytest.mark.parametrize("store", [["--store", "file", "--dir"], ["--store", "sql", "--dir"],
                                   ["--store", "sql", "--sql_source"]])
def test_bad_store_path(tmp_path: Path, store: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = str(blocker / "store")
    assert_one_line_error(tidings("server", "-a", "127.0.0.1", "-p", str(free_port()), *store,
                                  bad), 1, "a-file")
    assert_one_line_error(tidings("streaming", "--nats", f"nats://127.0.0.1:{free_port()}",
                                  *store, bad), 1, "a-file")


def test_unreachable_nats_server_for_standalone_streaming() -> None:
    assert_one_line_error(tidings("streaming", "--nats", f"nats://127.0.0.1:{free_port()}"), 1,
                          "no servers available")


def test_import_ref_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "store"
    proc = tidings("streaming", "import-ref", str(tmp_path / "missing"), "--store", "file",
                   "--dir", str(target))
    assert_one_line_error(proc, 1, "missing", "not a directory")
    assert not target.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = tidings("streaming", "import-ref", str(empty), "--store", "sql", "--dir", str(target))
    assert_one_line_error(proc, 1, "no server.dat")
    assert not target.exists()


def test_debug_keeps_the_traceback_in_the_log(busy_port: int) -> None:
    proc = tidings("server", "-D", "-a", "127.0.0.1", "-p", str(busy_port), "--no_streaming")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr  # for developers, behind -D only
    assert proc.stderr.strip().splitlines()[-1].startswith("tidings server: error:")


def test_route_port_in_use(busy_port: int) -> None:
    args = ("-a", "127.0.0.1", "-p", str(free_port()),
            "--cluster", f"nats://127.0.0.1:{busy_port}")
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1, "router",
                          f"127.0.0.1:{busy_port}", "Address already in use")


def test_routes_without_a_cluster_listener() -> None:
    args = ("-a", "127.0.0.1", "-p", str(free_port()), "--routes", "nats://127.0.0.1:6222")
    ref = reference(*args)
    assert ref.returncode != 0
    assert "solicited routes require cluster capabilities" in ref.stderr
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1,
                          "solicited routes require cluster capabilities")


@pytest.mark.parametrize("url", ["bogus", "nats://127.0.0.1", "http://127.0.0.1:6222"])
def test_unusable_route_urls(url: str) -> None:
    assert_one_line_error(tidings("server", "--routes", url, "--no_streaming"), 2, "route URL")


@pytest.mark.parametrize(("conf", "words"), [
    ("max_payload: 70MB\nmax_pending: 100MB\n", "cannot exceed"),
    ("max_payload: 0\n", "must be above 0"),
])
def test_max_payload_bounds_in_a_file(tmp_path: Path, conf: str, words: str) -> None:
    path = tmp_path / "mp.conf"
    path.write_text(conf)
    assert_one_line_error(tidings("server", "-t", "-c", str(path)), 1, "max_payload", words)
