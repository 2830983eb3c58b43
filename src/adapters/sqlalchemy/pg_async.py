"""The async API on PostgreSQL: native async I/O (psycopg 3's async connections through
SQLAlchemy's asyncio extension) on the caller's own event loop: :class:`PgAsyncAccess`.

Every call of the async API runs the repository's own statements (no second SQL layer) on the
sync face of an async connection, in one greenlet (SQLAlchemy's ``greenlet_spawn``, what
``AsyncConnection.run_sync`` uses; the connection bound by
:func:`~tether.adapters.sqlalchemy.transactions.run_bound`): the checkout, the statements, the
commit and the checkin are one hop onto the loop's I/O, and the network I/O is the async driver's,
awaited on the caller's loop, so nothing blocks it.

Async connections belong to the event loop that opened them, so the engine is **per loop**: the
first call on a loop creates one (a pool of the repository's size, no overflow: calls beyond it
wait for a connection, so the loop never has more than that many of them ready at once), and an engine whose loop was
closed (``asyncio.run`` ended, a test's loop torn down) is dropped the next time a new loop
creates one, and at :meth:`PgAsyncAccess.close`.  One app therefore works across successive
``asyncio.run`` calls and under test frameworks that give each test its own loop.

A one-statement call (a single enqueue, a read) runs in autocommit: one round trip, no
``BEGIN``/``COMMIT``.  After-commit callbacks (the dispatcher's notification) of a call on a
connection of its own run once it committed; on the caller's connection, once the caller's
transaction commits; the async API hands them to a thread either way.

A caller's raw psycopg ``AsyncConnection`` is joined too, on the caller's loop, in the caller's
transaction (:mod:`.async_driver_connections`); it has no commit hook, so the next poll or sweep
finds the job once the caller committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.util import greenlet_spawn
from tether.adapters.sqlalchemy.async_access import run_on_caller
from tether.adapters.sqlalchemy.async_driver_connections import AsyncDriverConnections
from tether.adapters.sqlalchemy.commit_hooks import run_safely
from tether.adapters.sqlalchemy.postgres import PostgresJobRepository
from tether.adapters.sqlalchemy.transactions import run_bound
from tether.domain.errors import StorageUnavailable
from tether.ports.async_access import AsyncAccess

log = logging.getLogger("tether.adapters.sqlalchemy")

T = TypeVar("T")

#: Seconds a close waits for the engine of a loop running in another thread to be disposed.
DISPOSE_WAIT_SECONDS = 5.0


class PgAsyncAccess(AsyncAccess):
    """:class:`~tether.ports.async_access.AsyncAccess` on PostgreSQL with an async engine per loop.

    Args:
        repository: the repository whose statements run (its URL, schema and pool size are used).
        application_name: shows in ``pg_stat_activity`` for the async connections.
    """

    def __init__(self, repository: PostgresJobRepository, *, application_name: str = "tether-async") -> None:
        self._repository = repository
        self._application_name = application_name
        self._engines: dict[int, tuple[asyncio.AbstractEventLoop, AsyncEngine, AsyncEngine]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._drivers = AsyncDriverConnections(repository._drivers)  # a caller's psycopg AsyncConnection

    def engine(self) -> AsyncEngine:
        """The async engine of the running loop (created at its first use).

        Raises:
            StorageUnavailable: this access (its app) was closed.
        """
        return self.engines()[0]

    def engines(self) -> tuple[AsyncEngine, AsyncEngine]:
        """The async engine of the running loop, and its autocommit face (one pool for both).

        Raises:
            StorageUnavailable: this access (its app) was closed.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise StorageUnavailable(f"{self._repository.safe_url}: the repository was closed")
            known = self._engines.get(id(loop))
            if known is not None and known[0] is loop:
                return known[1], known[2]
            # A closed loop's engine is dropped; so is one whose loop's id a new loop reuses.
            stale = [key for key, (other, _, _) in self._engines.items() if other.is_closed() or key == id(loop)]
            dropped = [self._engines.pop(key)[1] for key in stale]
            sync_engine = self._repository.engine
            size = sync_engine.pool.size() if hasattr(sync_engine.pool, "size") else 5
            engine = create_async_engine(
                sync_engine.url,
                pool_size=size,
                max_overflow=0,  # a bounded number of calls in flight bounds the callbacks ready at once
                pool_timeout=30,
                connect_args={"connect_timeout": 10, "application_name": self._application_name},
            )
            autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
            self._engines[id(loop)] = (loop, engine, autocommit)
        for old in dropped:  # their loop is closed: nothing can await their connections any more
            old.sync_engine.dispose(close=False)
        return engine, autocommit

    async def run(self, call: Callable[[Any], T], connection: Any = None, *, single: bool = False) -> T:
        if connection is not None:
            if isinstance(connection, psycopg.AsyncConnection):
                return await self._drivers.run(connection, call)
            if not isinstance(connection, AsyncConnection | AsyncSession):
                return await asyncio.to_thread(call, connection)  # a sync Connection/Session: theirs to share
            return await run_on_caller(self._repository, connection, call)
        engine, autocommit = self.engines()
        committed: list[Callable[[], None]] = []

        def work() -> T:  # in one greenlet: checkout, statements, commit and checkin, each I/O awaited
            if single:  # one statement: no BEGIN/COMMIT round trips
                with autocommit.sync_engine.connect() as conn:
                    return run_bound(conn, lambda: call(None), committed)
            with engine.sync_engine.begin() as conn:
                return run_bound(conn, lambda: call(None), committed)

        result = await greenlet_spawn(work)
        for callback in committed:  # the work is committed: its notifications (handed off the loop)
            run_safely(callback)
        return result

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine().begin() as conn:
            yield conn

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._engines.pop(id(loop), None)
        if mine is not None and mine[0] is loop:
            await mine[1].dispose()
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            engines, self._engines = list(self._engines.values()), {}
        self._drivers.close()
        for loop, engine, _ in engines:
            try:
                _dispose(loop, engine)
            except Exception:  # closing must get through every engine
                log.warning("could not close the async connections of an event loop", exc_info=True)


def _dispose(loop: asyncio.AbstractEventLoop, engine: AsyncEngine) -> None:
    """Close ``engine``'s connections on their loop where it can still run them; else drop them."""
    if loop.is_closed():
        engine.sync_engine.dispose(close=False)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop.is_running():
        if running is loop:  # closing from inside the loop itself: dispose in the background
            loop.create_task(engine.dispose())
        else:
            asyncio.run_coroutine_threadsafe(engine.dispose(), loop).result(DISPOSE_WAIT_SECONDS)
        return
    loop.run_until_complete(engine.dispose())


__all__ = ["DISPOSE_WAIT_SECONDS", "PgAsyncAccess"]
