"""Joining a transaction held on a raw driver connection: a psycopg 3 ``Connection`` or a ``sqlite3.Connection``.

Frameworks that are not built on SQLAlchemy (Django, hand-written psycopg or sqlite3 code) hold
their transaction on the driver's own connection.  ``connection=`` accepts such a connection, and
the job's INSERT runs on it, inside the caller's current transaction: the caller commits it or
rolls it back, and a rollback leaves no job.

One SQL layer: the repository's own SQLAlchemy Core statements run on the driver connection
through a SQLAlchemy :class:`~sqlalchemy.engine.Connection` of a second engine (one per
repository, same URL and dialect) whose only "DBAPI connection" is a :class:`_Borrowed` stand-in.
It passes every call to the connection the current thread lent (:meth:`DriverConnections.borrow`)
and turns ``commit``, ``rollback`` and ``close`` into no-ops, so SQLAlchemy never ends or closes
the caller's transaction or connection.  The dialect's one-time set-up (server version, a notice
handler on psycopg) runs on the first connection lent.

Before the first statement on a connection, it is checked to be on the repository's database:

- PostgreSQL: the same ``current_database()``, server port and postmaster start time (which tell
  two servers apart even when host names differ), and the jobs table visible there;
- SQLite: the same database file (``PRAGMA database_list``); an in-memory database is never shared.

A mismatch raises :class:`~tether.domain.errors.ValidationError` naming ``connection``.

A psycopg ``AsyncConnection`` is joined from the async API, the same way on the caller's event
loop: :mod:`.async_driver_connections`.

Driver connections offer no hook that runs after their COMMIT, so a job enqueued on one is not
announced to the dispatcher: the next poll or sweep finds it (an integration that has its own
commit hook, such as Django's ``transaction.on_commit``, can announce it there).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool
from tether.domain.errors import ValidationError

#: The driver each dialect's raw connections come from.
_DRIVER_OF_DIALECT = {"postgresql": "psycopg", "sqlite": "sqlite3"}

_PG_IDENTITY = text("SELECT current_database(), current_setting('port'), pg_postmaster_start_time()")
_PG_TABLE_VISIBLE = text("SELECT to_regclass(:name) IS NOT NULL")


def driver_of(connection: Any) -> str | None:
    """``"psycopg"`` or ``"sqlite3"`` when ``connection`` is such a driver connection, else None.

    A psycopg ``AsyncConnection`` is not accepted here (it is None): its statements need an event loop.
    """
    if isinstance(connection, sqlite3.Connection):
        return "sqlite3"
    if isinstance(connection, psycopg.Connection):
        return "psycopg"
    return None


class _Borrowed:
    """The stand-in DBAPI connection: every call goes to the connection the current thread lent,
    except ``commit``, ``rollback`` and ``close``, which belong to the caller and do nothing here."""

    def __init__(self, lent: threading.local) -> None:
        self._lent = lent

    def _target(self) -> Any:
        target = getattr(self._lent, "connection", None)
        if target is None:
            raise RuntimeError("no driver connection is lent to this thread")
        return target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        """A cursor of the lent connection that returns plain tuples, whatever row factory the
        caller set on the connection (SQLAlchemy reads rows by position)."""
        target = self._target()
        if isinstance(target, sqlite3.Connection):
            cursor = target.cursor(*args, **kwargs)
            cursor.row_factory = None
            return cursor
        return target.cursor(*args, row_factory=tuple_row, **kwargs)

    def commit(self) -> None:
        """The caller commits its own transaction."""

    def rollback(self) -> None:
        """The caller rolls back its own transaction."""

    def close(self) -> None:
        """The caller closes its own connection."""


class DriverConnections:
    """Runs a repository's statements on driver connections that callers lend.

    Args:
        engine: the repository's engine (its URL and dialect are reused; it is never used to run
            the caller's statements).
        table_name: the jobs table as PostgreSQL's ``to_regclass`` reads it (``"schema.tether_jobs"``).
        sqlite_path: the repository's SQLite file (absolute; None for an in-memory database).
    """

    def __init__(self, engine: Engine, *, table_name: str, sqlite_path: str | None = None) -> None:
        self._engine = engine
        self._table_name = table_name
        self._sqlite_path = sqlite_path
        self._lent = threading.local()
        self._borrowing: Engine | None = None
        self._lock = threading.Lock()
        self._our_identity: tuple[Any, ...] | None = None
        #: psycopg connections already checked (weak: a closed, dropped connection is forgotten).
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    def _borrowing_engine(self) -> Engine:
        with self._lock:
            if self._borrowing is None:
                stand_in = _Borrowed(self._lent)
                # psycopg's hstore look-up insists on a real psycopg Connection; Tether uses no hstore.
                extra = {"use_native_hstore": False} if self._engine.dialect.name == "postgresql" else {}
                self._borrowing = create_engine(self._engine.url, creator=lambda: stand_in, poolclass=StaticPool, **extra)
            return self._borrowing

    @contextmanager
    def borrow(self, connection: Any) -> Iterator[Connection]:
        """A SQLAlchemy Connection running on ``connection`` (a driver connection) in its current
        transaction; leaving the block neither commits, rolls back nor closes anything.

        Raises:
            ValidationError: ``connection`` is closed, of the other database kind, or on another
                database (named ``connection``).
        """
        driver = driver_of(connection)
        dialect = self._engine.dialect.name
        if driver is None or _DRIVER_OF_DIALECT.get(dialect) != driver:
            raise ValidationError(
                "connection",
                f"a {type(connection).__module__}.{type(connection).__name__} cannot reach this repository's "
                f"{dialect} database (pass a {_DRIVER_OF_DIALECT.get(dialect, 'SQLAlchemy')} connection to it)",
            )
        if driver == "psycopg" and connection.closed:
            raise ValidationError("connection", "that psycopg connection is closed")
        previous = getattr(self._lent, "connection", None)
        self._lent.connection = connection
        try:
            with self._borrowing_engine().connect() as conn:
                self._check_same_database(conn, connection, driver)
                yield conn
        finally:
            self._lent.connection = previous

    # -- the same database ---------------------------------------------------------------------
    def _check_same_database(self, conn: Connection, raw: Any, driver: str) -> None:
        if driver == "sqlite3":
            self._check_sqlite(conn)
        elif raw not in self._checked:
            self.check_postgres(conn)
            self._checked.add(raw)

    def _check_sqlite(self, conn: Connection) -> None:
        files = {row[1]: row[2] for row in conn.exec_driver_sql("PRAGMA database_list")}
        theirs = files.get("main") or ""
        if self._sqlite_path is None or not theirs:
            raise ValidationError(
                "connection", "an in-memory SQLite database is private to its connection; use a database file"
            )
        if os.path.realpath(theirs) != os.path.realpath(self._sqlite_path):
            raise ValidationError(
                "connection", f"is on the SQLite file {theirs}, not on this repository's {self._sqlite_path}"
            )

    @property
    def url(self) -> Any:
        """The repository's URL (a SQLAlchemy ``URL``)."""
        return self._engine.url

    def our_identity(self) -> tuple[Any, ...]:
        """The repository's database as :data:`_PG_IDENTITY` reads it (read once, on a connection of its own)."""
        if self._our_identity is None:
            with self._engine.connect() as ours:
                self._our_identity = tuple(ours.execute(_PG_IDENTITY).one())
        return self._our_identity

    def check_postgres(self, conn: Connection) -> None:
        """``conn`` (a caller's connection) is on the repository's PostgreSQL database and sees its
        jobs table; else :class:`ValidationError` naming ``connection``."""
        theirs = tuple(conn.execute(_PG_IDENTITY).one())
        if theirs != self.our_identity():
            database, port, _ = theirs
            raise ValidationError(
                "connection",
                f"is on database {database!r} of the server on port {port}, not on this repository's database "
                f"{self._engine.url.render_as_string(hide_password=True)}",
            )
        if not conn.execute(_PG_TABLE_VISIBLE, {"name": self._table_name}).scalar_one():
            raise ValidationError(
                "connection",
                f"cannot see the jobs table {self._table_name} (create the schema with `tether db upgrade`)",
            )

    def close(self) -> None:
        """Drop the borrowing engine (never closes a caller's connection)."""
        with self._lock:
            if self._borrowing is not None:
                self._borrowing.dispose(close=False)
                self._borrowing = None


__all__ = ["DriverConnections", "driver_of"]
