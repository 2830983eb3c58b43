"""The async API on a SQL repository: the caller's ``AsyncConnection``/``AsyncSession`` joined
through ``run_sync``, and the repository's own work on a worker thread (SQLite).

A caller's ``AsyncConnection`` or ``AsyncSession`` (``connection=`` of ``await app.aenqueue``) is
joined as a sync ``Connection``/``Session`` is: the repository's statements run on its sync face
(``run_sync``, SQLAlchemy's greenlet bridge: the I/O itself is the async driver's, on the caller's
loop), in the caller's transaction (:func:`~tether.adapters.sqlalchemy.transactions.run_bound`),
checked to be on the repository's database; the dispatcher hears of the job only after that
transaction commits, and a rollback leaves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session
from tether.adapters.sqlalchemy.repository import SqlAlchemyJobRepository
from tether.adapters.sqlalchemy.transactions import run_bound
from tether.domain.errors import ValidationError
from tether.ports.async_access import ThreadedAsyncAccess

T = TypeVar("T")


async def run_on_caller(
    repository: SqlAlchemyJobRepository, connection: AsyncConnection | AsyncSession, call: Callable[[Any], T]
) -> T:
    """``call(handle)`` on the sync face of the caller's ``AsyncConnection`` (``handle``: its sync
    ``Connection``) or ``AsyncSession`` (``handle``: its sync ``Session``), with that connection
    bound (:func:`~tether.adapters.sqlalchemy.transactions.run_bound`).

    Raises:
        ValidationError (field ``connection``): the connection is closed, not started, or on
            another database than ``repository``'s; nothing is sent then.
    """
    if isinstance(connection, AsyncSession):

        def on_session(session: Session) -> T:
            joined = repository._caller_connection(session)  # checks the database
            assert joined is not None
            with joined as conn:
                return run_bound(conn, lambda: call(session))

        return await connection.run_sync(on_session)
    if connection.closed or connection.sync_connection is None:
        raise ValidationError("connection", "that AsyncConnection is closed or was never started")

    def on_connection(sync: Connection) -> T:
        joined = repository._caller_connection(sync)  # checks the database
        assert joined is not None
        with joined as conn:
            return run_bound(conn, lambda: call(conn))

    return await connection.run_sync(on_connection)


class SqlAlchemyAsyncAccess(ThreadedAsyncAccess):
    """:class:`~tether.ports.async_access.AsyncAccess` of a SQL repository without a native async
    path of its own (SQLite): the caller's async connections joined (:func:`run_on_caller`), the
    rest on a worker thread."""

    def __init__(self, repository: SqlAlchemyJobRepository) -> None:
        super().__init__(repository)
        self._repository: SqlAlchemyJobRepository = repository

    async def run(self, call: Callable[[Any], T], connection: Any = None, *, single: bool = False) -> T:
        if isinstance(connection, AsyncConnection | AsyncSession):
            return await run_on_caller(self._repository, connection, call)
        if isinstance(connection, psycopg.AsyncConnection):
            raise ValidationError(
                "connection",
                f"a psycopg AsyncConnection cannot reach this repository's {self._repository.engine.dialect.name} database",
            )
        return await super().run(call, connection, single=single)


__all__ = ["SqlAlchemyAsyncAccess", "run_on_caller"]
