"""`tidings server -c FILE` reads nats-server's configuration files: the same file started
with tidings and with the reference means the same; `-t` checks a file as the reference does;
flags override the file; and the other operator flags (-P, -l, -T, -v, --signal)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.harness import Process, nats_server_binary, wait_for_file_line
from tests.harness.rawnats import CONNECT_PLAIN, RawConn
from tidings.testing.process import ports_in

pytestmark = pytest.mark.timeout(60)


def tidings(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings", "server", *args],
                          capture_output=True, text=True, timeout=30)


def reference(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([nats_server_binary(), *args], capture_output=True, text=True,
                          timeout=30)


def start(cmd: list[str], log_file: Path | None = None) -> tuple[Process, int]:
    """`cmd`, a server on a port of its own (-1), once it says it is ready (on stderr, or
    in `log_file` with -l): the process and its client port."""
    proc = Process(cmd, kind="server")
    if log_file is None:
        proc.wait_for("Server is ready")
        return proc, proc.ports["client"]
    wait_for_file_line(log_file, "Server is ready", proc=proc.proc)
    return proc, ports_in(log_file.read_text())["client"]


def stop(proc: Process) -> None:
    proc.stop()


def info_of(port: int) -> dict:
    with socket.create_connection(("127.0.0.1", port)) as s:
        return json.loads(s.makefile("rb").readline()[5:])


def test_the_same_file_means_the_same_to_both(tmp_path: Path) -> None:
    for kind in ("tidings", "reference"):
        conf = tmp_path / f"{kind}.conf"
        conf.write_text(
            "# as an operator writes it\n"
            "listen: 127.0.0.1:-1\n"
            'server_name: "conf-test"\n'
            "max_payload: 512KB\n"
            'ping_interval: "30s"\n'
            "SECRET: s3cret\n"
            "authorization {\n  user: alice\n  password: $SECRET\n  timeout: 2\n}\n"
        )
        cmd = ([sys.executable, "-m", "tidings", "server", "--no_streaming", "-c", str(conf)]
               if kind == "tidings" else [nats_server_binary(), "-c", str(conf)])
        proc, port = start(cmd)
        try:
            info = info_of(port)
            assert (info["server_name"], info["max_payload"], info["auth_required"]) == (
                "conf-test", 512 * 1024, True), kind
            with RawConn(port) as ok:
                ok.connect(b'CONNECT {"verbose":false,"pedantic":false,"user":"alice",'
                           b'"pass":"s3cret"}\r\n')
            with RawConn(port) as bad:
                bad.send(b'CONNECT {"user":"alice","pass":"nope"}\r\n')
                assert bad.read_to_eof() == b"-ERR 'Authorization Violation'\r\n", kind
        finally:
            stop(proc)


@pytest.mark.parametrize(("text", "error"), [
    ("port: 4333\nfoo_bar: 1\n", ':2:1: unknown field "foo_bar"'),
    ("authorization {\n  user: a\n  bogus: 1\n}\n", ':3:3: unknown field "bogus"'),
    ("cluster { listen: 127.0.0.1:6222, foo: 1 }\n", ':1:34: unknown field "foo"'),
])
def test_unknown_fields_as_the_reference_reports_them(tmp_path: Path, text: str,
                                                      error: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    ref = reference("-t", "-c", str(conf))
    assert ref.returncode != 0 and f"{conf}{error}" in ref.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and f"{conf}{error}" in ours.stderr
    assert "Traceback" not in ours.stderr


@pytest.mark.parametrize(("text", "code", "out"), [
    # A key the reference has and tidings does not: refused by name.
    ("port: 4333\ngateway: {}\n", 1, ':2:1: "gateway": gateways are not supported'),
    ("port: 4333\nmax_payload: 1MB\ncluster { listen: 127.0.0.1:6222 }\n", 0, "is valid"),
], ids=["unsupported", "valid"])
def test_checking_files_the_reference_accepts(tmp_path: Path, text: str, code: int,
                                              out: str) -> None:
    conf = tmp_path / "f.conf"
    conf.write_text(text)
    assert reference("-t", "-c", str(conf)).returncode == 0
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == code and out in ours.stdout + ours.stderr


def test_flags_override_the_file(tmp_path: Path) -> None:
    with socket.socket() as held:  # the file's port: taken, so only the flag's can serve
        held.bind(("127.0.0.1", 0))
        held.listen()
        file_port = held.getsockname()[1]
        conf = tmp_path / "f.conf"
        conf.write_text(f"listen: 127.0.0.1:{file_port}\nserver_name: from-file\n")
        proc, port = start([sys.executable, "-m", "tidings", "server", "--no_streaming", "-c",
                            str(conf), "-p", "-1", "-n", "from-flag"])
    try:
        assert port != file_port
        assert info_of(port)["server_name"] == "from-flag"
    finally:
        stop(proc)


def test_pid_file_log_file_and_signals(tmp_path: Path) -> None:
    pid_file, log_file = tmp_path / "t.pid", tmp_path / "t.log"
    proc, port = start([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                        "127.0.0.1", "-p", "-1", "-P", str(pid_file), "-l", str(log_file)],
                       log_file)
    try:
        assert pid_file.read_text() == str(proc.pid)
        with RawConn(port) as c:
            c.connect(CONNECT_PLAIN)
        lines = log_file.read_text().splitlines()
        # The reference's shape: [pid] YYYY/MM/DD HH:MM:SS.micro [INF] text
        assert lines and lines[0].startswith(f"[{proc.pid}] ")
        stamp, tag = lines[0].split(" ")[1:3], lines[0].split(" ")[3]
        assert time.strptime(stamp[0], "%Y/%m/%d") and len(stamp[1]) == 15 and tag == "[INF]"
        # --signal through the PID file: quit (SIGINT) ends it cleanly, removing the file.
        sent = tidings("--signal", "quit", "-P", str(pid_file))
        assert sent.returncode == 0, sent.stderr
        assert proc.wait(10) == 0
        assert not pid_file.exists()
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_logtime_false_drops_the_time(tmp_path: Path) -> None:
    log_file = tmp_path / "t.log"
    proc, _ = start([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                     "127.0.0.1", "-p", "-1", "-l", str(log_file), "-T=false"], log_file)
    try:
        first = log_file.read_text().splitlines()[0]
        assert first.startswith(f"[{proc.pid}] [INF] "), first
    finally:
        stop(proc)


def test_version_and_bad_signals() -> None:
    out = tidings("--version")
    assert out.returncode == 0 and out.stdout.startswith("tidings-server: v")
    bad = tidings("--signal", "dance=1")
    assert bad.returncode == 1 and "unknown signal 'dance'" in bad.stderr
    nopid = tidings("--signal", "reload")
    assert nopid.returncode == 1 and "no pid" in nopid.stderr


@pytest.mark.parametrize(("flag", "why"), [
    (["-s"], "syslog"), (["--ms", "8222"], "TLS"), (["-r", "udp://h:514"], "syslog"),
    (["--tls"], "TLS"),
])
def test_reference_flags_tidings_lacks_are_refused(flag: list[str], why: str) -> None:
    out = tidings(*flag, "--no_streaming", "-p", "-1")
    assert out.returncode == 1 and why in out.stderr.strip().splitlines()[-1]


def test_dash_c_is_never_taken_for_another_flag(tmp_path: Path) -> None:
    """argparse once expanded -c to -cid: now an unreadable file is an error about the file."""
    out = tidings("-t", "-c", str(tmp_path / "missing.conf"))
    assert out.returncode == 1 and "missing.conf" in out.stderr


def test_go_style_flag_spellings() -> None:
    """As with nats-server (Go's flag package), -name and --name are one flag."""
    for args in (["-routes", "nats://127.0.0.1:1"], ["--routes=nats://127.0.0.1:1"]):
        out = tidings(*args, "--no_streaming")
        assert out.returncode == 1 and "solicited routes require cluster" in out.stderr
    assert tidings("--v").stdout.startswith("tidings-server: v")


def test_debug_and_trace_lines(tmp_path: Path) -> None:
    """-DV: the reference's connection lines and protocol trace; a failed login is logged
    with its user, never its password."""
    log_file = tmp_path / "dv.log"
    proc, port = start([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                        "127.0.0.1", "-p", "-1", "-DV", "-l", str(log_file), "--user", "u",
                        "--pass", "topsecret"], log_file)
    try:
        with RawConn(port) as c:
            c.connect(b'CONNECT {"verbose":false,"pedantic":false,"user":"u",'
                      b'"pass":"topsecret"}\r\n')
            c.send(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
            c.barrier()
        with RawConn(port) as bad:
            bad.send(b'CONNECT {"user":"u","pass":"wrong-guess"}\r\n')
            bad.read_to_eof()
    finally:
        stop(proc)
    text = log_file.read_text()
    for line in ("[DBG] 127.0.0.1:", "Client connection created", "[TRC] 127.0.0.1:",
                 "<<- [SUB foo 1]", "<<- [PUB foo 2]", '<<- MSG_PAYLOAD: ["hi"]',
                 "->> [MSG foo 1 2]", '->> MSG_PAYLOAD: ["hi"]', "->> [PONG]", 'authentication error - User "u"', "Client connection closed"):
        assert line in text, line
    assert "wrong-guess" not in text
    assert "Server Exiting.." in text


def test_log_file_size_limit(tmp_path: Path) -> None:
    """Past --log_size_limit the log file is renamed FILE.<date-time> and started anew."""
    log_file = tmp_path / "s.log"
    proc, port = start([sys.executable, "-m", "tidings", "server", "--no_streaming", "-a",
                        "127.0.0.1", "-p", "-1", "-D", "-l", str(log_file),
                        "--log_size_limit", "1KB"], log_file)
    try:
        for _ in range(20):  # each connection logs two debug lines
            with RawConn(port) as c:
                c.connect(CONNECT_PLAIN)
    finally:
        stop(proc)
    rotated = [p for p in tmp_path.iterdir() if p.name.startswith("s.log.")]
    assert rotated, list(tmp_path.iterdir())
    assert all(p.stat().st_size < 1024 + 300 for p in rotated)


# Every top-level key of the reference's processConfigFileLine (opts.go), aliases included.
REFERENCE_KEYS = (
    "listen client_advertise port server_name host net debug trace trace_verbose trace_headers "
    "logtime logtime_utc mappings maps disable_sublist_cache no_sublist_cache accounts "
    "default_sentinel authorization http https http_port monitor_port https_port "
    "http_base_path cluster gateway leaf leafnodes store_dir storedir jetstream logfile "
    "log_file logfile_size_limit log_size_limit logfile_max_num log_max_num syslog "
    "remote_syslog pidfile pid_file ports_file_dir prof_port prof_block_rate max_control_line "
    "max_payload max_pending proxy_protocol max_connections max_conn max_traced_msg_len "
    "max_subscriptions max_subs max_sub_tokens max_subscription_tokens ping_interval ping_max "
    "tls ocsp allow_non_tls write_deadline write_timeout lame_duck_duration "
    "lame_duck_grace_period operator operators roots root root_operators root_operator "
    "resolver account_resolver accounts_resolver resolver_tls resolver_preload "
    "resolver_pinned_accounts no_auth_user system_account system no_system_account no_system "
    "no_sys_acc no_header_support trusted trusted_keys connect_error_reports "
    "reconnect_error_reports websocket ws mqtt server_tags server_metadata feature_flags "
    "default_js_domain ocsp_cache no_fast_producer_stall max_closed_clients proxies").split()


def test_no_key_of_the_reference_is_called_unknown(tmp_path: Path) -> None:
    """Each key the reference knows is taken or refused by name, never an "unknown field"
    (which `auth`, no key of the reference, is on both)."""
    from tidings.config import ConfigError, parse
    from tidings.config.server import ServerOptions, apply_server_config

    conf = tmp_path / "all.conf"
    conf.write_text("".join(f"{key}: 1\n" for key in REFERENCE_KEYS) + "auth: 1\n")
    said = reference("-t", "-c", str(conf)).stderr
    assert said.count("unknown field") == 1 and 'unknown field "auth"' in said
    for key in (*REFERENCE_KEYS, "auth"):
        try:
            apply_server_config(ServerOptions(), parse(f"{key}: 1\n", "f.conf"))
            why = ""
        except (ConfigError, ValueError) as exc:
            why = str(exc)
        assert ("unknown field" in why) == (key == "auth"), (key, why)


def test_aliases_mean_what_they_mean_to_the_reference(tmp_path: Path) -> None:
    """logfile, pidfile, net, monitor_port and max_conn, in one file started by both."""
    for kind in ("tidings", "reference"):
        log, pid = tmp_path / f"{kind}.log", tmp_path / f"{kind}.pid"
        conf = tmp_path / f"{kind}.conf"
        conf.write_text(f"net: 127.0.0.1\nport: -1\nmonitor_port: -1\nmax_conn: 7\n"
                        f"logfile: {log}\npidfile: {pid}\n")
        cmd = ([sys.executable, "-m", "tidings", "server", "--no_streaming", "-c", str(conf)]
               if kind == "tidings" else [nats_server_binary(), "-c", str(conf)])
        proc, _ = start(cmd, log)
        http = ports_in(log.read_text())["http"]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10) as r:
                varz = json.loads(r.read())
            assert (varz["max_connections"], varz["host"]) == (7, "127.0.0.1"), kind
            assert pid.read_text().strip() == str(proc.pid), kind
            assert "Server is ready" in log.read_text(), kind
        finally:
            stop(proc)
