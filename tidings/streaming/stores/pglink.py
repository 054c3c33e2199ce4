"""How the SQL store reaches PostgreSQL, and reaches it again after losing the connection.

A store's session holds a session advisory lock keyed on the database and schema (one server
per store). The lock ends with the session, so a connection lost to a database restart, a
failover or a terminated backend loses it too. To go on serving, the store opens a new session
and takes the lock again. It also checks that no other server held the store while it was
away: when a server opens the store it writes a random owner token into ``tidings_lock``, and
a reconnecting store finds its own token there only if nobody else opened the store
meanwhile. If someone did, that server's writes are not in this one's memory, and writing on
would corrupt the store, so the store refuses every write from then on
(:class:`StoreTakenOverError`).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from .base import StoreLockedError

PG_APP = "tidings streaming"
LOCK_CLASS = 0x7469_6469  # "tidi": the first key of the advisory lock
CONNECT_TIMEOUT = 10  # seconds a (re)connection may take, unless the DSN says otherwise


class PgLockedError(StoreLockedError):
    """Another session holds the store's advisory lock; ``holder`` is its server's pid (or
    ``backend N`` when it is not a tidings server)."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class StoreTakenOverError(StoreLockedError):
    """Another server opened the store while this one's connection was lost."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


class PgLink:
    """Opens the sessions of one PostgreSQL store: the first, and the ones after a loss."""

    def __init__(self, dsn: str, *, schema: str | None = None, sync: str = "batch") -> None:
        self.dsn = dsn
        self.schema = schema
        self.sync = sync
        self.owner = uuid.uuid4().hex  # this store's token in tidings_lock
        self.app = f"{PG_APP} pid {os.getpid()}"

    def open(self, *, again: bool = False) -> Any:
        """A session with the schema and sync policy set and the lock held: the first one
        claims the store, ``again`` verifies the claim still stands (else
        :class:`StoreTakenOverError`, also while another server holds the lock).
        :class:`PgLockedError` if another session has the lock (``again``: one that has not
        claimed the store, most likely the lost session, not yet ended by the server)."""
        import psycopg

        conn = psycopg.connect(self.dsn, **self._connect_args())
        try:
            self._setup(conn)
            try:
                take_lock(conn)
            except PgLockedError:
                if again:  # held by a server that claimed the store, or not (yet)?
                    self._verify(conn)
                raise
            if again:
                self._verify(conn)
            else:
                self._claim(conn)
            return conn
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def close(conn: Any) -> None:
        """Release the lock, then close: the server ends a closed session only a moment
        later, and a store opened again at once would find the lock still held."""
        try:
            if not conn.closed:
                conn.rollback()
                conn.execute("SELECT pg_advisory_unlock_all()")
                conn.commit()
        except Exception:  # noqa: S110 - the session is going anyway
            pass
        finally:
            conn.close()

    @staticmethod
    def broken(conn: Any) -> bool:
        """Whether ``conn`` is gone (psycopg closes a connection whose server went away)."""
        return bool(conn.closed)

    def _connect_args(self) -> dict[str, Any]:
        import psycopg

        args: dict[str, Any] = {"application_name": self.app}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.dsn):
            args["connect_timeout"] = CONNECT_TIMEOUT
        return args

    def _setup(self, conn: Any) -> None:
        import psycopg

        with conn.cursor() as cur:
            if self.schema:
                ident = psycopg.sql.Identifier(self.schema)
                cur.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
                cur.execute(psycopg.sql.SQL("SET search_path TO {}").format(ident))
            if self.sync != "batch":
                cur.execute("SET synchronous_commit TO off")
        conn.commit()

    def _claim(self, conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS tidings_lock ("
                        "id INTEGER PRIMARY KEY, owner TEXT NOT NULL)")
            cur.execute("INSERT INTO tidings_lock (id, owner) VALUES (1, %s) "
                        "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner", (self.owner,))
        conn.commit()

    def _verify(self, conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT owner FROM tidings_lock WHERE id = 1")
            row = cur.fetchone()
        conn.commit()
        if row is None or row[0] != self.owner:
            raise StoreTakenOverError(
                "another server opened the postgres store while the connection was lost: "
                "this server's state is stale, it writes no more (restart it)"
            )


def take_lock(conn: Any) -> None:
    """Hold a session advisory lock on the store's schema, or raise :class:`PgLockedError`.

    The key is derived from the schema the tables live in, so stores in different schemas
    of one database do not exclude each other; the lock ends with the connection.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(current_database() || '.' || "
            "current_schema())), current_database(), current_schema()",
            (LOCK_CLASS,),
        )
        got, db, schema = cur.fetchone()
        owner = "unknown"
        if not got:
            owner = _lock_holder(cur)
    conn.commit()
    if not got:
        raise PgLockedError(
            f"postgres store (database {db}, schema {schema}) is in use by another server "
            f"(pid {owner})",
            owner,
        )


def _lock_holder(cur: Any) -> str:
    """The pid of the tidings server whose session holds the lock (``backend N`` if not one)."""
    cur.execute(
        "SELECT a.application_name, a.pid FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.granted AND l.objsubid = 2 AND l.classid = %s AND l.objid = "
        "hashtext(current_database() || '.' || current_schema())::oid",
        (LOCK_CLASS,),
    )
    row = cur.fetchone()
    if row is None:
        return "unknown"
    app, backend = row
    prefix = f"{PG_APP} pid "
    return app[len(prefix):] if app.startswith(prefix) else f"backend {backend}"
