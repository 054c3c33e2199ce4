"""A user's mistakes on the command line end with one clear line and a non-zero exit code,
never a traceback, as nats-server does for the same mistakes (compared where it has the flag)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import nats_server_binary

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


def test_port_in_use(busy_port: int) -> None:
    args = ("-a", "127.0.0.1", "-p", str(busy_port))
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1,
                          f"127.0.0.1:{busy_port}", "Address already in use")
    # Also with the embedded streaming server (it starts after the listener).
    assert_one_line_error(tidings("server", *args), 1, "Address already in use")


def test_unresolvable_address() -> None:
    args = ("-a", "no-such-host.invalid", "-p", "-1")
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1, "no-such-host.invalid")


@pytest.mark.parametrize("flag, value", [("-p", "70000"), ("-p", "-2"), ("-m", "65536")])
def test_out_of_range_ports_are_refused(flag: str, value: str) -> None:
    # The reference: 'listen tcp: address 70000: invalid port', exit code 1.
    assert reference("-a", "127.0.0.1", flag, value).returncode != 0
    assert_one_line_error(tidings("server", "-a", "127.0.0.1", flag, value), 1,
                          "invalid port", value)


def test_port_numbers() -> None:
    from tidings.config.units import flag_port

    assert flag_port("4222") == 4222
    assert flag_port("0") == flag_port("-1") == 0  # -1: the reference's RANDOM_PORT


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_payload_must_be_positive(value: str) -> None:
    assert_one_line_error(tidings("server", "--max_payload", value), 1, "--max_payload", value)


def test_max_payload_above_max_pending() -> None:
    # The reference's own check and words (set in its config file).
    last = assert_one_line_error(
        tidings("server", "--max_payload", "2000", "--max_pending", "1000"), 1)
    assert last.endswith("max_payload (2000) cannot be higher than max_pending (1000)")


@pytest.mark.parametrize("store", [["--store", "file", "--dir"], ["--store", "sql", "--dir"],
                                   ["--store", "sql", "--sql_source"]])
def test_bad_store_path(tmp_path: Path, store: list[str], refused_port: int) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = str(blocker / "store")
    assert_one_line_error(tidings("server", "-a", "127.0.0.1", "-p", "-1", *store,
                                  bad), 1, "a-file")
    assert_one_line_error(tidings("streaming", "--nats", f"nats://127.0.0.1:{refused_port}",
                                  *store, bad), 1, "a-file")


def test_unreachable_nats_server_for_standalone_streaming(refused_port: int) -> None:
    assert_one_line_error(tidings("streaming", "--nats", f"nats://127.0.0.1:{refused_port}"), 1,
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
    args = ("-a", "127.0.0.1", "-p", "-1",
            "--cluster", f"nats://127.0.0.1:{busy_port}")
    assert reference(*args).returncode != 0
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1, "router",
                          f"127.0.0.1:{busy_port}", "Address already in use")


def test_routes_without_a_cluster_listener() -> None:
    args = ("-a", "127.0.0.1", "-p", "-1", "--routes", "nats://127.0.0.1:6222")
    ref = reference(*args)
    assert ref.returncode != 0
    assert "solicited routes require cluster capabilities" in ref.stderr
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1,
                          "solicited routes require cluster capabilities")


@pytest.mark.parametrize("url", ["bogus", "nats://127.0.0.1", "http://127.0.0.1:6222"])
def test_unusable_route_urls(url: str) -> None:
    assert_one_line_error(tidings("server", "--routes", url, "--no_streaming"), 1, "route URL")


@pytest.mark.parametrize(("conf", "words"), [
    ("max_payload: 70MB\nmax_pending: 100MB\n", "cannot exceed"),
    ("max_payload: 0\n", "must be above 0"),
])
def test_max_payload_bounds_in_a_file(tmp_path: Path, conf: str, words: str) -> None:
    path = tmp_path / "mp.conf"
    path.write_text(conf)
    assert_one_line_error(tidings("server", "-t", "-c", str(path)), 1, "max_payload", words)


# --- issue 21, item 7: what a new user trips over ------------------------------------------

def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return proc.stderr.strip().splitlines()


@pytest.mark.parametrize("args", [
    ("server", "-p", "abc"),
    ("server", "--max_payload", "lots"),
    ("server", "-T", "maybe"),
    ("server", "--store", "paper"),
    ("server", "--routes", "bogus"),
    ("streaming", "-m", "abc"),
    ("streaming", "--max_age", "forever"),
], ids=lambda a: " ".join(a))
def test_a_bad_value_is_one_error_line_and_exit_1(args: tuple[str, ...]) -> None:
    # The README's promise: one `error:` line and exit code 1, never pages of usage.
    proc = tidings(*args)
    assert proc.returncode == 1, proc.stderr
    assert len(stderr_lines(proc)) == 1, proc.stderr
    assert stderr_lines(proc)[0].startswith(f"tidings {args[0]}: error: argument "), proc.stderr
    assert args[-1] in proc.stderr


@pytest.mark.parametrize(("args", "closest"), [
    (("server", "--max_paylod", "5"), "--max_payload"),
    (("server", "-max_paylod", "5"), "--max_payload"),  # Go style: -name is --name
    (("server", "--max_payload=5", "--clustr", "nats://127.0.0.1:6222"), "--cluster"),
    (("server", "--no_stremaing"), "--no_streaming"),
    (("streaming", "--cluster_idd", "x"), "--cluster_id"),
    (("streaming", "import-ref", "d", "--sotre", "file"), "--store"),
], ids=lambda a: " ".join(a) if isinstance(a, tuple) else a)
def test_a_mistyped_flag_gets_the_closest_one(args: tuple[str, ...], closest: str) -> None:
    proc = tidings(*args)
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tidings "), proc.stderr
    assert lines[0].endswith(f"did you mean {closest}?"), proc.stderr


def test_an_unknown_flag_without_a_close_one() -> None:
    assert "flag provided but not defined" in reference("--zzzzqqq").stderr
    proc = tidings("server", "--zzzzqqq")
    assert proc.returncode == 2, proc.stderr
    assert stderr_lines(proc) == [
        "tidings server: error: unknown flag --zzzzqqq (tidings server --help lists the flags)"]


def test_the_readme_names_the_flags_as_the_server_takes_them() -> None:
    """Every flag the README's flag paragraph names exists, and those it calls refused are."""
    import re

    from tidings.cli import build_parser
    from tidings.config.flags import REFUSED_FLAGS

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    start = readme.index("The server's flags are named")
    paragraph = readme[start:readme.index("\n\n", start)]
    server = build_parser("server")._subparsers._group_actions[0].choices["server"]  # type: ignore[union-attr]
    known = set(server._option_string_actions)
    named = re.findall(r"`(-{1,2}[A-Za-z_]+)", paragraph)
    assert named
    for flag in named:
        assert flag in known or "-" + flag in known or flag.lstrip("-") == "DV", flag
    refused = re.search(r"tidings lacks\s+\(([^)]*)\)\s+are\s+refused", paragraph)
    assert refused is not None, paragraph
    for flag in re.findall(r"`(-{1,2}[A-Za-z_]+)`", refused.group(1)):
        dest = server._option_string_actions[flag].dest
        assert dest in REFUSED_FLAGS, flag


def _listener_args(kind: str, busy: int, tmp_path: Path) -> tuple[str, ...]:
    base = ("-a", "127.0.0.1", "-p", "-1")
    if kind == "monitor":
        return (*base, "-m", str(busy))
    if kind == "cluster":
        return (*base, "--cluster", f"nats://127.0.0.1:{busy}")
    conf = tmp_path / "ws.conf"
    conf.write_text(f"websocket {{ listen: 127.0.0.1:{busy}, no_tls: true }}\n")
    return (*base, "-c", str(conf))


@pytest.mark.parametrize(("kind", "words"), [
    ("monitor", "monitor port"),
    ("cluster", "router"),
    ("websocket", "websocket"),
])
def test_a_listener_in_use_names_itself(busy_port: int, tmp_path: Path, kind: str,
                                        words: str) -> None:
    args = _listener_args(kind, busy_port, tmp_path)
    ref = reference(*args)
    assert ref.returncode != 0 and f"127.0.0.1:{busy_port}" in ref.stderr
    for extra in ((), ("--no_streaming",)):
        last = assert_one_line_error(tidings("server", *args, *extra), 1, words,
                                     f"127.0.0.1:{busy_port}")
        assert "address already in use" in last.lower()
        assert re.findall(r"127\.0\.0\.1:(-?\d+)", last) == [str(busy_port)]  # not the client's


def test_https_monitor_port_in_use(busy_port: int, tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    cert.private_key_pem.write_to_path(tmp_path / "key.pem")
    args = ("-a", "127.0.0.1", "-p", "-1", "--tls", "--tlscert",
            str(tmp_path / "cert.pem"), "--tlskey", str(tmp_path / "key.pem"),
            "-ms", str(busy_port))
    assert "monitor port" in reference(*args).stderr
    assert_one_line_error(tidings("server", *args, "--no_streaming"), 1, "monitor port",
                          f"127.0.0.1:{busy_port}", "Address already in use")


def test_standalone_streaming_monitor_port_in_use(busy_port: int, reference_server) -> None:
    proc = tidings("streaming", "--nats", reference_server.url, "--http_host", "127.0.0.1",
                   "-m", str(busy_port))
    assert_one_line_error(proc, 1, "streaming", "monitor port", f"127.0.0.1:{busy_port}",
                          "Address already in use")


@pytest.mark.parametrize("store", ["file", "sql"])
def test_a_bad_store_directory_is_one_sentence_and_never_ready(tmp_path: Path,
                                                               store: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "x"
    proc = tidings("server", "-a", "127.0.0.1", "-p", "-1", "--store", store,
                   "--dir", str(bad))
    last = assert_one_line_error(proc, 1)
    assert last == f"tidings server: error: streaming store directory {bad}: not a directory"
    assert "Server is ready" not in proc.stderr
    assert "Errno" not in proc.stderr


def test_start_up_os_errors_name_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    pid = blocker / "tidings.pid"
    proc = tidings("server", "-a", "127.0.0.1", "-p", "-1", "--no_streaming",
                   "-P", str(pid))
    last = assert_one_line_error(proc, 1)
    assert last == f"tidings server: error: pid file {pid}: not a directory"
    log = blocker / "tidings.log"
    proc = tidings("server", "-a", "127.0.0.1", "-p", "-1", "--no_streaming",
                   "-l", str(log))
    last = assert_one_line_error(proc, 1)
    assert last == f"tidings server: error: log file {log}: not a directory"


def test_import_ref_without_a_durable_store_is_an_error_line(tmp_path: Path) -> None:
    for store in ((), ("--store", "file")):
        proc = tidings("streaming", "import-ref", str(tmp_path), *store)
        assert proc.returncode == 2, proc.stderr
        assert stderr_lines(proc) == [
            "tidings streaming import-ref: error: choose a durable store "
            "(--store file --dir DIR, or --store sql)"], proc.stderr
