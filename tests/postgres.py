"""Throwaway PostgreSQL servers: one for the session (the `postgres_dsn` fixture, shared by the
store tests and the streaming FT tests), and private ones a test may stop and restart (the
`private_postgres` fixture)."""

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


class PgServer:
    """A private PostgreSQL cluster (initdb, pg_ctl) on a free port of 127.0.0.1, with a
    database ``tidings_test``; :meth:`restart`, :meth:`stop` and :meth:`start` drive it as an
    administrator does. Skips the test when PostgreSQL cannot be run here."""

    def __init__(self) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            pytest.skip("psycopg is not installed: pip install 'psycopg[binary]'")
        bindir = _pg_bindir()
        if bindir is None:
            pytest.skip("PostgreSQL server programs not found in /usr/lib/postgresql/*/bin")
        self.prefix: list[str] = []
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
            self.prefix = [runuser, "-u", "postgres", "--"]
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="tidings-pg-"))
        if owner is not None:
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        self.data = self.base / "data"
        self.logfile = self.base / "log"
        self.port = _free_port()
        self.running = False
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=tidings_test"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=60)

    def _pg_ctl(self, *args: str) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), *args)

    def create(self) -> None:
        """initdb, start, create the test database."""
        import psycopg

        try:
            self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust",
                      "-U", "postgres", "--no-sync")
            self._start_on_a_free_port()
            admin = self.dsn.replace("dbname=tidings_test", "dbname=postgres")
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("CREATE DATABASE tidings_test")
        except (subprocess.SubprocessError, psycopg.Error) as exc:
            log = self.log()
            self.destroy()
            pytest.fail(f"could not start PostgreSQL: {exc} {getattr(exc, 'stderr', '')!r} {log}")

    def _start_on_a_free_port(self, tries: int = 3) -> None:
        """Start; when another process took the free port first, start on another one."""
        for attempt in range(tries):
            try:
                self.start()
                return
            except subprocess.CalledProcessError:
                if attempt == tries - 1 or "Address already in use" not in self.log():
                    raise
                self.logfile.unlink()
                self.port = _free_port()
                self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=tidings_test"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c full_page_writes=off")
        self._pg_ctl("-l", str(self.logfile), "-w", "-t", "30", "-o", options, "start")
        self.running = True

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: every session is ended, the server is down when it returns."""
        self._pg_ctl("-m", "fast", "-w", "stop")
        self.running = False

    def restart(self) -> None:
        """`pg_ctl restart -m fast`, as an upgrade or a managed failover does."""
        self._pg_ctl("-l", str(self.logfile), "-m", "fast", "-w", "-t", "30", "restart")
        self.running = True

    def log(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def destroy(self) -> None:
        if self.running:
            subprocess.run(
                [*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                 "-w", "stop"],
                capture_output=True, timeout=60,
            )
            self.running = False
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a database on a private PostgreSQL server, started once per session."""
    server = PgServer()
    server.create()
    try:
        yield server.dsn
    finally:
        server.destroy()


@pytest.fixture
def private_postgres() -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own, which it may stop and restart."""
    server = PgServer()
    server.create()
    try:
        yield server
    finally:
        server.destroy()
