"""`nats-server` as the ecosystem's test launchers run it (nats.py's `nats.server.run`,
nats.js's nst, Go projects' helpers): a link named nats-server to the `tidings` command
(`tidings nats-server-link DIR` makes it) is `tidings server --no_streaming` with the
reference's flags, log lines and words. Each behaviour is checked on the link and on the
reference binary, started the same way."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.harness import (
    Process,
    eventually,
    nats_server_binary,
    tidings_command,
    wait_until,
)

pytestmark = pytest.mark.timeout(90)

LISTENING = r"\[INF\] Listening for client connections on (.+):(\d+)$"
READY = r"\[INF\] Server is ready$"
ROUTES = r"\[INF\] Listening for route connections on (.+):(\d+)$"


def make_link(directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tidings_command("nats-server-link", str(directory), *flags),
                          capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def dropin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """DIR/nats-server, made by `tidings nats-server-link DIR`."""
    directory = tmp_path_factory.mktemp("bin")
    made = make_link(directory)
    assert made.returncode == 0, made.stderr
    return str(directory / "nats-server")


@pytest.fixture(params=["dropin", "reference"])
def exe(request: pytest.FixtureRequest, dropin: str) -> str:
    return dropin if request.param == "dropin" else nats_server_binary()


def run(exe: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def start(exe: str, *args: str) -> tuple[Process, str, int]:
    """The server, once ready, and the host and port its log says it listens on."""
    proc = Process([exe, *args], kind=Path(exe).name)
    try:
        listening = proc.wait_for(LISTENING)
        proc.wait_for(READY)
    except BaseException:
        proc.kill()
        raise
    return proc, listening.group(1), int(listening.group(2))


def test_the_link_is_a_symlink_to_the_tidings_command(tmp_path: Path, dropin: str) -> None:
    link = Path(dropin)
    assert link.is_symlink() and link.name == "nats-server"
    target = Path(os.readlink(link))
    assert target.is_absolute() and target.name == "tidings" and os.access(target, os.X_OK)
    directory = tmp_path / "new" / "bin"  # made if missing
    assert make_link(directory).returncode == 0
    again = make_link(directory)  # already there, the same link: nothing to do
    assert again.returncode == 0, again.stderr
    assert os.readlink(directory / "nats-server") == str(target)


def test_the_link_does_not_replace_another_file(tmp_path: Path) -> None:
    other = tmp_path / "nats-server"
    other.write_text("#!/bin/sh\n")
    refused = make_link(tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (f"tidings nats-server-link: error: {other} exists "
                                      "(--force replaces it)")
    assert other.read_text() == "#!/bin/sh\n"
    assert make_link(tmp_path, "--force").returncode == 0
    assert other.is_symlink()


def test_version(exe: str, dropin: str) -> None:
    shown = run(exe, "--version")
    assert shown.returncode == 0 and shown.stderr == ""
    assert re.fullmatch(r"nats-server: v\d+\.\d+\.\d+\n", shown.stdout), shown.stdout
    assert run(exe, "-v").stdout == shown.stdout


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None while it is missing or still being written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def test_help(exe: str) -> None:
    shown = run(exe, "-h")
    assert shown.returncode == 0 and "nats-server" in shown.stdout


async def test_a_launchers_flags_log_lines_and_files(exe: str, tmp_path: Path) -> None:
    """What nats.py's and nats.js's launchers pass and read: the client port from its log
    line, ready when it says so, the ports file named after the executable, the PID file."""
    store, ports_dir, pid_file = tmp_path / "store", tmp_path / "ports", tmp_path / "pid"
    ports_dir.mkdir()
    proc, host, port = start(exe, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(store),
                             "-n", "dropin", "-m", "-1", "-P", str(pid_file),
                             "--ports_file_dir", str(ports_dir))
    try:
        assert host == "127.0.0.1"
        assert pid_file.read_text() == str(proc.pid)
        # (The reference writes it before its ready line, tidings just after: nats.js's nst
        # waits for the file itself. The reference creates it before it writes it, so a file
        # that does not parse yet is not yet the file.)
        ports_file = ports_dir / f"nats-server_{proc.pid}.ports"
        ports = wait_until(lambda: read_json(ports_file), 10, "the ports file")
        assert ports["nats"] == [f"nats://127.0.0.1:{port}"]
        assert len(ports["monitoring"]) == 1
        nc = await nats.connect(f"nats://{host}:{port}")
        try:
            assert nc._server_info["server_name"] == "dropin"
            assert nc._server_info["jetstream"] is True
            if exe != nats_server_binary():
                shown = run(exe, "--version").stdout
                assert shown == f"nats-server: v{nc._server_info['version']}\n"
            sub = await nc.subscribe("dropin.>")
            await nc.publish("dropin.x", b"hello")
            assert (await sub.next_msg(timeout=5)).data == b"hello"
        finally:
            await nc.close()
    finally:
        assert proc.stop() == 0


async def test_debug_and_trace(exe: str) -> None:
    proc, host, port = start(exe, "-a", "127.0.0.1", "-p", "-1", "-DV")
    try:
        nc = await nats.connect(f"nats://{host}:{port}")
        await nc.flush()
        await nc.close()
        proc.wait_for(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - Client connection created$")
        proc.wait_for(r"\[TRC\] 127\.0\.0\.1:\d+ - cid:\d+ - <<- \[CONNECT \{")
    finally:
        proc.stop()


async def test_a_cluster_from_the_flags(exe: str, dropin: str) -> None:
    """--cluster, --routes, --cluster_name, -n, as nats.py's run_cluster passes them."""
    # (A listen port of its own choosing: 0 for tidings; the reference's is -1, which
    # tidings' --cluster does not take yet.)
    any_port = "nats://127.0.0.1:" + ("0" if exe == dropin else "-1")
    common = ("-a", "127.0.0.1", "-p", "-1", "--cluster_name", "c", "--cluster", any_port)
    first, host, port = start(exe, *common, "-n", "one")
    second = None
    try:
        route = first.wait_for(ROUTES)
        second, host2, port2 = start(exe, *common, "-n", "two", "--routes",
                                     f"nats://127.0.0.1:{route.group(2)}")
        one = await nats.connect(f"nats://{host}:{port}")
        two = await nats.connect(f"nats://{host2}:{port2}")
        try:
            async def respond(msg: nats.aio.msg.Msg) -> None:
                await msg.respond(b"from two")

            await two.subscribe("across", cb=respond)
            await two.flush()

            async def answered() -> nats.aio.msg.Msg | None:
                try:  # no responders until the subscription has crossed the route
                    return await one.request("across", b"", timeout=5)
                except nats.errors.NoRespondersError:
                    return None

            reply = await eventually(answered, 15, "a reply across the route")
            assert reply.data == b"from two"
        finally:
            await one.close()
            await two.close()
    finally:
        if second is not None:
            second.stop()
        first.stop()


def test_a_port_in_use_is_a_fatal_log_line(exe: str, busy_port: int) -> None:
    failed = run(exe, "-a", "127.0.0.1", "-p", str(busy_port))
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert re.search(rf"\[FTL\] (?i:error listening on port): 127\.0\.0\.1:{busy_port}, ",
                     last), failed.stderr


# A file the parser refuses (nats.py's tests/configs/invalid.conf), one the options refuse,
# and ones the parser refuses in its own words (not the lexer's).
BAD_CONFIGS = {
    "lexer": '{\n  "port": : "invalid syntax"\n}',
    "options": "port: 4222\nbogus_key: 1\n",
    "no-value": "port: 4222\nserver_name",
    "range": "port: 99999999999999999999\n",
    "variable": "port: $nope\n",
}


@pytest.mark.parametrize("kind", BAD_CONFIGS)
@pytest.mark.parametrize("check_only", [True, False], ids=["-t", "run"])
def test_a_bad_configuration_in_the_references_words(
        tmp_path: Path, dropin: str, kind: str, check_only: bool) -> None:
    (tmp_path / "bad.conf").write_text(BAD_CONFIGS[kind])
    args = ("-t", "-c", "bad.conf") if check_only else ("-p", "-1", "-c", "bad.conf")
    ours, ref = run(dropin, *args, cwd=tmp_path), run(nats_server_binary(), *args, cwd=tmp_path)
    assert ref.returncode == 1 and ours.returncode == 1, ours.stderr
    assert ours.stdout == ref.stdout == ""
    assert ours.stderr.strip() == ref.stderr.strip()


def test_the_parse_error_launchers_look_for(tmp_path: Path, dropin: str) -> None:
    (tmp_path / "bad.conf").write_text(BAD_CONFIGS["lexer"])
    said = run(dropin, "-c", "bad.conf", cwd=tmp_path).stderr
    assert said == ("nats-server: Parse error on line 2: 'Expected a block-level value to "
                    "end with a new line, comment or EOF, but got '\"' instead.'\n")


def test_a_missing_configuration_file(tmp_path: Path, dropin: str) -> None:
    ours = run(dropin, "-c", "missing.conf", cwd=tmp_path)
    ref = run(nats_server_binary(), "-c", "missing.conf", cwd=tmp_path)
    assert ours.returncode == ref.returncode == 1
    assert ours.stderr == ref.stderr == ("nats-server: open missing.conf: no such file or "
                                         "directory\n")


def test_t_without_a_file(dropin: str) -> None:
    ours, ref = run(dropin, "-t"), run(nats_server_binary(), "-t")
    assert ours.returncode == ref.returncode == 1
    assert ours.stderr.strip() == ref.stderr.strip() == (
        "nats-server: must specify [-c, --config] option to check configuration file syntax")


def test_a_valid_configuration_with_its_digest(tmp_path: Path, dropin: str) -> None:
    conf = tmp_path / "good.conf"
    conf.write_text('port: 4567\nserver_name: "a<b>&c"\nmax_payload: 1MB\n'
                    "debug: true\nauthorization { users = [{user: a, password: b}] }\n"
                    "cluster { name: c, listen: 127.0.0.1:-1 }\n")
    ours, ref = run(dropin, "-t", "-c", str(conf)), run(nats_server_binary(), "-t", "-c", str(conf))
    assert ours.returncode == ref.returncode == 0
    assert ours.stdout == ref.stdout == ""
    assert re.fullmatch(rf"nats-server: configuration file {conf} is valid "
                        r"\(sha256:[0-9a-f]{64}\)\n", ref.stderr), ref.stderr
    assert ours.stderr == ref.stderr
