"""Joining a transaction held on a raw psycopg 3 ``AsyncConnection``, from the async API.

``await app.aenqueue(..., connection=conn)`` with a psycopg ``AsyncConnection`` runs the job's
INSERT on that connection, inside the caller's current transaction, awaited on the caller's event
loop: the caller commits it or rolls it back, and a rollback leaves no job.  It is the async twin
of :mod:`.driver_connections` (the sync psycopg ``Connection``), built the same way:

- **One SQL layer**: the repository's own SQLAlchemy Core statements run on the sync face of an
  ``AsyncConnection`` of a second async engine (one per repository, same URL), whose connections
  are :class:`_AsyncBorrowed` stand-ins made by its ``async_creator`` around the connection the
  current task lent (:meth:`AsyncDriverConnections.run`).  A stand-in passes every call to the
  caller's connection, makes cursors that return plain tuples (whatever row factory the caller
  set), and turns ``commit``, ``rollback``, ``close`` and notice handlers into no-ops, so
  SQLAlchemy never ends, closes or changes the caller's transaction or connection.  The engine
  pools nothing (``NullPool``): a stand-in lives for one call.
- **The same database**: before the first statement on a connection it is checked as a sync one
  is (:meth:`.DriverConnections.check_postgres`: ``current_database()``, server port, postmaster
  start time, the jobs table visible); a mismatch raises
  :class:`~tether.domain.errors.ValidationError` naming ``connection``, before anything is written.
- **No commit hook**: a driver connection tells nobody when it commits, so the dispatcher is not
  told of the job; the next poll or sweep finds it once the caller committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from tether.adapters.sqlalchemy.driver_connections import DriverConnections
from tether.adapters.sqlalchemy.transactions import run_bound
from tether.domain.errors import StorageUnavailable, ValidationError

log = logging.getLogger("tether.adapters.sqlalchemy")

T = TypeVar("T")

#: The caller's connection while a call of :meth:`AsyncDriverConnections.run` is under way (a task's own).
_LENT: ContextVar[psycopg.AsyncConnection[Any] | None] = ContextVar("tether_lent_async_connection", default=None)


class _AsyncBorrowed:
    """The stand-in asyncio driver connection around the caller's ``AsyncConnection``: every call
    goes to it, except those that would end, close or change what belongs to the caller."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._connection = connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        """A cursor of the caller's connection that returns plain tuples (SQLAlchemy reads rows by position)."""
        return self._connection.cursor(*args, row_factory=tuple_row, **kwargs)

    def add_notice_handler(self, handler: Any) -> None:
        """The caller's notices are the caller's: no handler is added to their connection."""

    async def commit(self) -> None:
        """The caller commits its own transaction."""

    async def rollback(self) -> None:
        """The caller rolls back its own transaction."""

    async def close(self) -> None:
        """The caller closes its own connection."""


class AsyncDriverConnections:
    """Runs a PostgreSQL repository's statements on psycopg ``AsyncConnection``\\ s that callers lend.

    Args:
        drivers: the repository's :class:`.DriverConnections` (its URL, and its check of the database).
    """

    def __init__(self, drivers: DriverConnections) -> None:
        self._drivers = drivers
        self._engine: AsyncEngine | None = None
        self._lock = threading.Lock()
        self._closed = False
        #: connections already checked (weak: a closed, dropped connection is forgotten)
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    def _borrowing_engine(self) -> AsyncEngine:
        with self._lock:
            if self._closed:
                raise StorageUnavailable("the repository was closed")
            if self._engine is None:

                async def lent() -> _AsyncBorrowed:
                    connection = _LENT.get()
                    if connection is None:  # pragma: no cover - connect() runs only inside run()
                        raise RuntimeError("no psycopg AsyncConnection is lent to this task")
                    return _AsyncBorrowed(connection)

                # psycopg's hstore look-up insists on a real connection; Tether uses no hstore.
                self._engine = create_async_engine(
                    self._drivers.url, async_creator=lent, poolclass=NullPool, use_native_hstore=False
                )
            return self._engine

    async def run(self, connection: psycopg.AsyncConnection[Any], call: Callable[[Any], T]) -> T:
        """``call(None)`` with every statement of the repository on ``connection``, in its current
        transaction (bound by :func:`~tether.adapters.sqlalchemy.transactions.run_bound`, whose
        after-commit callbacks are dropped: a driver connection has no commit hook).

        Raises:
            ValidationError (field ``connection``): ``connection`` is closed or on another
                database than the repository's (or cannot see its jobs table); nothing is written.
            StorageUnavailable: the repository was closed.
        """
        if connection.closed:
            raise ValidationError("connection", "that psycopg AsyncConnection is closed")
        engine = self._borrowing_engine()
        check = connection not in self._checked
        if check:
            await asyncio.to_thread(self._drivers.our_identity)  # its one look-up never blocks the loop

        def work(sync: Connection) -> T:
            if check:
                self._drivers.check_postgres(sync)
            dropped: list[Callable[[], None]] = []
            result = run_bound(sync, lambda: call(None), dropped)
            if dropped:
                log.debug("no commit hook on a psycopg AsyncConnection: the next poll or sweep finds the job")
            return result

        token = _LENT.set(connection)
        try:
            async with engine.connect() as conn:
                result = await conn.run_sync(work)
        finally:
            _LENT.reset(token)
        if check:
            self._checked.add(connection)
        return result

    def close(self) -> None:
        """Drop the borrowing engine (it pools nothing; never closes a caller's connection)."""
        with self._lock:
            self._closed = True
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.sync_engine.dispose(close=False)


__all__ = ["AsyncDriverConnections"]
