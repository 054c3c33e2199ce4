"""A throwaway PostgreSQL server for the session (the `postgres_dsn` fixture, shared by the
store tests and the streaming FT tests)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bindir() -> Path | None:
    candidates = ["/usr/lib/postgresql/15/bin", *sorted(glob.glob("/usr/lib/postgresql/*/bin"))]
    for d in candidates:
        if os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(
            os.path.join(d, "pg_ctl"), os.X_OK
        ):
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a database on a private PostgreSQL server, started once per session."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'psycopg[binary]'")
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server programs not found in /usr/lib/postgresql/*/bin")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root: run its programs as the postgres user.
        runuser = shutil.which("runuser")
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = None
        if runuser is None or owner is None:
            pytest.skip(
                "running as root without runuser or a postgres user: cannot start PostgreSQL"
            )
        prefix = [runuser, "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="tidings-pg-"))
    if owner is not None:
        os.chown(base, owner.pw_uid, owner.pw_gid)
    data = base / "data"
    port = _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=60)

    pg_ctl = str(bindir / "pg_ctl")
    options = (
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    )
    started = False
    try:
        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        run(
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(base / "log"),
            "-w",
            "-t",
            "30",
            "-o",
            options,
            "start",
        )
        started = True
        admin = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE tidings_test")
    except (subprocess.SubprocessError, psycopg.Error) as exc:
        log = (base / "log").read_text() if (base / "log").exists() else ""
        _stop(prefix, pg_ctl, data, base, started)
        pytest.fail(f"could not start PostgreSQL: {exc} {getattr(exc, 'stderr', '')!r} {log}")
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=tidings_test"
    finally:
        _stop(prefix, pg_ctl, data, base, started)


def _stop(prefix: list[str], pg_ctl: str, data: Path, base: Path, started: bool) -> None:
    if started:
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
    shutil.rmtree(base, ignore_errors=True)
