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

The hottest call, a single enqueue without an idempotency key outside a caller's transaction
(:meth:`PgAsyncAccess.enqueue`), skips the greenlet and SQLAlchemy's execution altogether: the
sync enqueue's own statement is awaited on a raw psycopg connection that the loop's driver pool
(:mod:`.pg_async_driver`) leases from the same engine pool, so a loop still holds at most
``pool_size`` connections.

A caller's raw psycopg ``AsyncConnection`` is joined too, on the caller's loop, in the caller's
transaction (:mod:`.async_driver_connections`); it has no commit hook, so the next poll or sweep
finds the job once the caller committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.util import greenlet_spawn
from tether.adapters.sqlalchemy.async_access import run_on_caller
from tether.adapters.sqlalchemy.async_driver_connections import AsyncDriverConnections
from tether.adapters.sqlalchemy.commit_hooks import run_safely
from tether.adapters.sqlalchemy.pg_async_driver import AsyncDriverPool, enqueue_on_driver
from tether.adapters.sqlalchemy.pg_connections import utc_sessions
from tether.adapters.sqlalchemy.postgres import PostgresJobRepository
from tether.adapters.sqlalchemy.transactions import run_bound
from tether.domain.errors import StorageUnavailable
from tether.domain.job import EnqueueResult, NewJob
from tether.ports.async_access import AsyncAccess

log = logging.getLogger("tether.adapters.sqlalchemy")

T = TypeVar("T")

#: Seconds a close waits for the engine of a loop running in another thread to be disposed.
DISPOSE_WAIT_SECONDS = 5.0
#: Seconds a call waits for a connection of its loop (the engine pool's ``pool_timeout``).
POOL_TIMEOUT = 30.0


class LoopEngine(NamedTuple):
    """What one event loop's async calls run on."""

    loop: asyncio.AbstractEventLoop
    engine: AsyncEngine
    autocommit: AsyncEngine  # the same pool, each connection in autocommit while checked out
    drivers: AsyncDriverPool  # raw connections leased from that pool (the single enqueue)


class PgAsyncAccess(AsyncAccess):
    """:class:`~tether.ports.async_access.AsyncAccess` on PostgreSQL with an async engine per loop.

    Args:
        repository: the repository whose statements run (its URL, schema and pool size are used).
        application_name: shows in ``pg_stat_activity`` for the async connections.
    """

    def __init__(self, repository: PostgresJobRepository, *, application_name: str = "tether-async") -> None:
        self._repository = repository
        self._application_name = application_name
        self._engines: dict[int, LoopEngine] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._drivers = AsyncDriverConnections(repository._drivers)  # a caller's psycopg AsyncConnection

    def engine(self) -> AsyncEngine:
        """The async engine of the running loop (created at its first use).

        Raises:
            StorageUnavailable: this access (its app) was closed.
        """
        return self.loop_engine().engine

    def engines(self) -> tuple[AsyncEngine, AsyncEngine]:
        """The async engine of the running loop, and its autocommit face (one pool for both).

        Raises:
            StorageUnavailable: this access (its app) was closed.
        """
        mine = self.loop_engine()
        return mine.engine, mine.autocommit

    def loop_engine(self) -> LoopEngine:
        """The engine, autocommit face and driver pool of the running loop (made at its first use).

        Raises:
            StorageUnavailable: this access (its app) was closed.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise StorageUnavailable(f"{self._repository.safe_url}: the repository was closed")
            known = self._engines.get(id(loop))
            if known is not None and known.loop is loop:
                return known
            # A closed loop's engine is dropped; so is one whose loop's id a new loop reuses.
            stale = [key for key, other in self._engines.items() if other.loop.is_closed() or key == id(loop)]
            dropped = [self._engines.pop(key) for key in stale]
            sync_engine = self._repository.engine
            size = sync_engine.pool.size() if hasattr(sync_engine.pool, "size") else 5
            engine = create_async_engine(
                sync_engine.url,
                pool_size=size,
                max_overflow=0,  # a bounded number of calls in flight bounds the callbacks ready at once
                pool_timeout=POOL_TIMEOUT,
                connect_args={"connect_timeout": 10, "application_name": self._application_name},
            )
            utc_sessions(engine.sync_engine)  # as the sync engine's: rows come back in UTC, no conversion
            autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
            drivers = AsyncDriverPool(engine.sync_engine, limit=size, timeout=POOL_TIMEOUT,
                                      label=self._repository.safe_url)
            known = self._engines[id(loop)] = LoopEngine(loop, engine, autocommit, drivers)
        for old in dropped:  # their loop is closed: nothing can await their connections any more
            _forget(old)
        return known

    async def enqueue(self, new_job: NewJob, *, now: datetime) -> EnqueueResult:
        """The repository's ``enqueue(new_job, now=now)`` on the running loop: without an
        idempotency or concurrency key, its one statement awaited on a driver connection of the loop
        (:func:`~.pg_async_driver.enqueue_on_driver`); with one, as :meth:`run` runs any call."""
        if new_job.idempotency_key is not None or new_job.concurrency_key is not None:
            return await self.run(lambda _: self._repository.enqueue(new_job, now=now), single=True)
        return await enqueue_on_driver(self._repository, self.loop_engine().drivers, new_job, now)

    async def run(self, call: Callable[[Any], T], connection: Any = None, *, single: bool = False) -> T:
        if connection is not None:
            if isinstance(connection, psycopg.AsyncConnection):
                return await self._drivers.run(connection, call)
            if not isinstance(connection, AsyncConnection | AsyncSession):
                return await asyncio.to_thread(call, connection)  # a sync Connection/Session: theirs to share
            return await run_on_caller(self._repository, connection, call)
        mine = self.loop_engine()
        committed: list[Callable[[], None]] = []
        made = mine.drivers.make_room()  # the driver pool lends its connections back meanwhile

        def work() -> T:  # in one greenlet: checkout, statements, commit and checkin, each I/O awaited
            try:
                opened = mine.autocommit.sync_engine.connect() if single else mine.engine.sync_engine.begin()
            finally:
                made()
            with opened as conn:  # single: one statement, no BEGIN/COMMIT round trips
                return run_bound(conn, lambda: call(None), committed)

        try:
            await mine.drivers.lend_idle()
            result = await greenlet_spawn(work)
        finally:
            made()
        for callback in committed:  # the work is committed: its notifications (handed off the loop)
            run_safely(callback)
        return result

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        mine = self.loop_engine()
        async with AsyncExitStack() as stack:
            made = mine.drivers.make_room()
            try:
                await mine.drivers.lend_idle()
                conn = await stack.enter_async_context(mine.engine.begin())
            finally:
                made()
            yield conn

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._engines.pop(id(loop), None)
        if mine is not None and mine.loop is loop:
            await mine.drivers.aclose()
            await mine.engine.dispose()
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            engines, self._engines = list(self._engines.values()), {}
        self._drivers.close()
        for mine in engines:
            try:
                _dispose(mine)
            except Exception:  # closing must get through every engine
                log.warning("could not close the async connections of an event loop", exc_info=True)


def _forget(mine: LoopEngine) -> None:
    """Drop the connections of a closed loop without awaiting (none can be awaited any more)."""
    mine.drivers.forget()
    mine.engine.sync_engine.dispose(close=False)


async def _release(mine: LoopEngine) -> None:
    await mine.drivers.aclose()
    await mine.engine.dispose()


def _dispose(mine: LoopEngine) -> None:
    """Close ``mine``'s connections on their loop where it can still run them; else drop them."""
    loop = mine.loop
    if loop.is_closed():
        _forget(mine)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop.is_running():
        if running is loop:  # closing from inside the loop itself: dispose in the background
            loop.create_task(_release(mine))
        else:
            asyncio.run_coroutine_threadsafe(_release(mine), loop).result(DISPOSE_WAIT_SECONDS)
        return
    loop.run_until_complete(_release(mine))


__all__ = ["DISPOSE_WAIT_SECONDS", "POOL_TIMEOUT", "LoopEngine", "PgAsyncAccess"]
