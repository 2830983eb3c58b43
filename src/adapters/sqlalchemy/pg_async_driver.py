"""The async API's one-statement path on PostgreSQL: raw psycopg ``AsyncConnection``s of one event
loop (:class:`AsyncDriverPool`), and the single enqueue sent on them (:func:`enqueue_on_driver`).

Why: ``await app.aenqueue(...)`` is the async twin of the sync enqueue's one prepared ``INSERT``
(:mod:`.pg_driver`).  Run through SQLAlchemy's greenlet bridge, a call cost the loop about 0.4 ms
of CPU (the checkout, the autocommit switch, the execution context, two greenlet switches per
await), twice what psycopg needs for the statement itself; with many producers on one loop that
CPU is the loop's lag (each call in flight adds its share to every loop iteration).  Here the
statement is awaited directly on the psycopg connection, on the caller's loop.

The connections are **leased from the loop's own engine pool** (the one
:class:`~tether.adapters.sqlalchemy.pg_async.PgAsyncAccess` keeps per loop), so the loop never
has more connections than ``pool_size``, however its calls are split between this path and the
SQLAlchemy one:

- a connection leased here stays here (in autocommit) between calls, so back-to-back enqueues pay
  no checkout; a call that finds none free leases one more from the engine pool while fewer than
  ``limit`` are held here, else waits for one (first come, first served; ``timeout`` seconds, as
  the engine pool's own wait);
- a SQLAlchemy checkout of the same loop announces itself (:meth:`AsyncDriverPool.make_room`,
  :meth:`~AsyncDriverPool.lend_idle`): the idle connections go back to the engine pool at once,
  and busy ones as they finish, until that checkout got its connection, so neither path starves
  the other;
- a connection idle for more than :data:`~.pg_connections.PING_IF_IDLE` seconds is pinged before
  it is used (as the sync pool does), one that failed is invalidated, never reused.

Errors follow the sync enqueue's rules (:meth:`~.transactions.SqlTransactions._write_once`): a
failure before the statement was sent is retried with backoff (awaited, never blocking the loop);
a connection lost once it may have been sent raises the "may or may not have been stored"
StorageUnavailable; any other error is translated as the sync path translates it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn
from tether.adapters.sqlalchemy.enqueue import unknown_enqueue_error
from tether.adapters.sqlalchemy.mapping import inserted_job
from tether.adapters.sqlalchemy.pg_connections import PING_IF_IDLE
from tether.domain.errors import StorageUnavailable
from tether.domain.job import EnqueueResult, NewJob

if TYPE_CHECKING:
    from datetime import datetime

    from tether.adapters.sqlalchemy.postgres import PostgresJobRepository

#: What :func:`enqueue_on_driver` is doing, in its error messages (as the sync enqueue says).
DOING = "enqueue a job"


def _wrapped(error: psycopg.Error, broken: bool) -> sa_exc.DBAPIError:
    """A psycopg error as the matching SQLAlchemy DBAPIError (what the repository's rules read)."""
    return sa_exc.DBAPIError.instance(None, None, error, psycopg.Error, connection_invalidated=broken)  # type: ignore[return-value]


class _Leased:
    """A connection of the engine pool held by an :class:`AsyncDriverPool`."""

    __slots__ = ("cursor", "driver", "fairy", "idle_since")

    def __init__(self, fairy: PoolProxiedConnection) -> None:
        self.fairy = fairy
        self.driver: psycopg.AsyncConnection[Any] = fairy.driver_connection  # type: ignore[assignment]
        self.cursor = self.driver.cursor()  # one for every statement: a cursor per call costs ~30 us
        self.idle_since = time.monotonic()


class AsyncDriverPool:
    """Up to ``limit`` psycopg ``AsyncConnection``s of one event loop, leased from ``engine``'s pool
    (the sync face of that loop's async engine) and kept in autocommit (see the module docstring).

    Args:
        engine: the sync face of the loop's ``AsyncEngine`` (its pool lends the connections).
        limit: connections held at most (the engine pool's size).
        timeout: seconds a call waits for a connection before StorageUnavailable.
        label: names the database in error messages (its URL without password).

    Only the loop that created it may use it.
    """

    def __init__(self, engine: Engine, *, limit: int, timeout: float = 30.0, label: str = "PostgreSQL") -> None:
        self._engine = engine
        self._label = label
        self._limit = limit
        self._timeout = timeout
        self._free: list[_Leased] = []
        self._held = 0
        self._waiters: deque[asyncio.Future[_Leased | None]] = deque()
        self._demand = 0  # SQLAlchemy checkouts of this loop waiting for a connection
        self._closed = False
        self._watch: AsyncGenerator[None, None] | None = None

    @property
    def held(self) -> int:
        """Connections leased from the engine pool now (idle and busy)."""
        return self._held

    async def acquire(self) -> _Leased:
        """A connection in autocommit, idle-pinged; the caller must :meth:`release` it.

        Raises:
            sqlalchemy.exc.DBAPIError: a new connection (or the ping of an idle one) failed.
            StorageUnavailable: none was free within ``timeout`` seconds, or the pool is closed.
        """
        if self._watch is None:
            await self._watch_loop()
        deadline: float | None = None
        while True:
            if self._free:
                leased = self._free.pop()
                if time.monotonic() - leased.idle_since > PING_IF_IDLE:
                    await self._ping(leased)
                return leased
            if self._closed:
                raise StorageUnavailable(f"{self._label}: the async connections of this event loop were closed")
            if self._held < self._limit:
                return await self._lease()
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + self._timeout
            handed = await self._wait(loop, deadline)
            if handed is not None:
                return handed

    async def release(self, leased: _Leased, *, reusable: bool) -> None:
        """Give ``leased`` back: to the first waiting call, else kept idle; to the engine pool when
        a SQLAlchemy checkout waits or this pool is closed; closed and dropped if not ``reusable``."""
        if not reusable:
            self._held -= 1
            self._wake_one()
            await greenlet_spawn(_invalidate, leased.fairy)
            return
        if self._demand or self._closed:
            self._held -= 1
            self._wake_one()
            await self._give_back(leased)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(leased)
                return
        leased.idle_since = time.monotonic()
        self._free.append(leased)

    def make_room(self) -> Callable[[], None]:
        """A SQLAlchemy checkout of this loop is coming: until the function returned is called (once
        it got its connection or gave up; calling it again does nothing), every connection
        released here goes back to the engine pool.  Follow with :meth:`lend_idle`."""
        self._demand += 1
        done = False

        def made() -> None:
            nonlocal done
            if not done:
                done = True
                self._demand -= 1

        return made

    async def lend_idle(self) -> None:
        """Hand the idle connections back to the engine pool now."""
        if self._free:
            await self._give_back_idle()

    async def aclose(self) -> None:
        """Hand every idle connection back to the engine pool (its ``dispose`` then closes them);
        busy ones go back when released; later calls raise StorageUnavailable."""
        self._closed = True
        await self._give_back_idle()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def forget(self) -> None:
        """The loop is closed: drop the idle connections without awaiting anything (each is
        detached from the engine pool and its socket closed), as the engine pool drops its own."""
        self._closed = True
        idle, self._free = self._free, []
        self._held -= len(idle)
        for leased in idle:
            leased.fairy.detach()
            leased.driver.pgconn.finish()

    async def _watch_loop(self) -> None:
        """Start an async generator on this loop, so its end hands the idle connections back.

        ``asyncio.run`` (and the test frameworks' loop teardown) closes the loop's pending async
        generators (``shutdown_asyncgens``) before closing the loop: this one's ``finally`` then
        returns the idle connections to the engine pool, which leaves it as the SQLAlchemy path
        leaves it (every connection checked in) for :class:`~.pg_async.PgAsyncAccess` to drop."""

        async def watching() -> AsyncGenerator[None, None]:
            try:
                yield
            finally:
                await self.lend_idle()

        self._watch = watching()
        await self._watch.__anext__()

    # -- the engine pool ------------------------------------------------------------------------
    async def _lease(self) -> _Leased:
        self._held += 1
        try:
            fairy = await greenlet_spawn(self._engine.raw_connection)
        except BaseException as error:
            self._held -= 1
            self._wake_one()
            if isinstance(error, psycopg.Error):  # the pool's connect does not wrap driver errors
                raise _wrapped(error, broken=True) from error
            if isinstance(error, sa_exc.TimeoutError):
                raise StorageUnavailable(f"{self._label}: no connection of this event loop was free: {error}") from error
            raise
        leased = _Leased(fairy)
        try:
            await leased.driver.set_autocommit(True)
        except BaseException as error:
            await self.release(leased, reusable=False)
            if isinstance(error, psycopg.Error):
                raise _wrapped(error, broken=True) from error
            raise
        return leased

    async def _give_back_idle(self) -> None:
        idle, self._free = self._free, []
        for leased in idle:
            self._held -= 1
            await self._give_back(leased)
        for _ in idle:
            self._wake_one()

    async def _give_back(self, leased: _Leased) -> None:
        try:
            await leased.cursor.close()
            await leased.driver.set_autocommit(False)
        except Exception:  # noqa: BLE001 - whatever went wrong, the engine pool must not get it back as it is
            await greenlet_spawn(_invalidate, leased.fairy)
            return
        await greenlet_spawn(leased.fairy.close)

    async def _ping(self, leased: _Leased) -> None:
        try:
            await leased.driver.execute("SELECT 1")
        except BaseException as error:
            await self.release(leased, reusable=False)
            if isinstance(error, psycopg.Error):
                raise _wrapped(error, broken=True) from error
            raise

    # -- waiting ----------------------------------------------------------------------------------
    async def _wait(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Leased | None:
        """A connection handed over by a release, or None when room to lease one was made."""
        waiter: asyncio.Future[_Leased | None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            handed = await waiter
        except asyncio.CancelledError:
            handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if isinstance(handed, _Leased):
                await self.release(handed, reusable=True)  # handed over as we were cancelled
            elif self._held < self._limit:
                self._wake_one()  # the room we were woken for goes to the next
            raise
        finally:
            timer.cancel()
        if handed is _EXPIRED:
            raise StorageUnavailable(f"{self._label}: no connection of this event loop was free within {self._timeout:g} s")
        return handed

    def _wake_one(self) -> None:
        """Room to lease a connection: the first waiting call tries."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


_EXPIRED: Any = object()


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(_EXPIRED)


def _invalidate(fairy: PoolProxiedConnection) -> None:
    """Close a failed connection and tell its pool never to hand it out again."""
    try:
        fairy.invalidate()
    finally:
        fairy.close()


async def enqueue_on_driver(
    repository: PostgresJobRepository, pool: AsyncDriverPool, new_job: NewJob, now: datetime
) -> EnqueueResult:
    """Store ``new_job`` (no idempotency key, no caller's transaction) with the sync enqueue's one
    statement (:meth:`~.pg_enqueue.PgEnqueue.single_insert`), awaited on a connection of ``pool``.

    Raises:
        ValidationError: a naive ``now`` or ``scheduled_at``.
        StorageUnavailable: the repository is closed; the database could not be reached (after
            the retries); the connection was lost once the statement may have been sent (the
            job may or may not be stored); any other database error (StorageRowError when a row
            caused it, ConfigurationError when the table is missing), as the sync enqueue says.
    """
    now, sql, params = repository.single_insert(new_job, now)
    attempts = repository.retry_attempts
    for attempt in range(attempts):
        if repository._closed:
            raise StorageUnavailable(f"{repository.safe_url}: the repository was closed")
        try:
            leased = await pool.acquire()
        except sa_exc.DBAPIError as error:  # nothing was sent: safe to try again
            if not repository._is_transient(error):
                raise repository._translate(error, DOING) from error
            if attempt + 1 >= attempts:
                raise repository._unavailable(error, DOING) from error
            await asyncio.sleep(repository._backoff(attempt))
            continue
        reusable = False
        try:
            cursor = leased.cursor
            await cursor.execute(sql, params, prepare=True)
            row = await cursor.fetchone()
            reusable = True
        except psycopg.Error as error:
            driver = leased.driver
            broken = bool(driver.closed or driver.broken)
            reusable = not broken and driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            wrapped = _wrapped(error, broken)
            if not repository._is_transient(wrapped):
                raise repository._translate(wrapped, DOING) from wrapped
            raise unknown_enqueue_error(repository.safe_url) from wrapped
        finally:
            await pool.release(leased, reusable=reusable)
        if row is None:
            raise StorageUnavailable(f"{repository.safe_url}: could not {DOING}: the insert returned no row")
        return EnqueueResult(inserted_job(new_job, int(row[0]), now), created=True)
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["AsyncDriverPool", "enqueue_on_driver"]
