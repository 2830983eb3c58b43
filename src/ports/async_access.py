"""The async access port: how the async API (``await app.aenqueue(...)``) runs the repository's
calls without blocking the caller's event loop, and its default on a worker thread.

The async API never has a second copy of the repository's rules: each ``a...`` method runs the
matching sync method through :meth:`AsyncAccess.run`, which decides *where* it runs; a single
enqueue outside a caller's transaction is validated as the sync one is and stored through
:meth:`AsyncAccess.enqueue`, the repository's own ``enqueue``.  The default,
:class:`ThreadedAsyncAccess`, runs them on a worker thread (the in-memory store, SQLite); the
PostgreSQL adapter runs the same statements on a native async connection of the caller's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from tether.domain.job import EnqueueResult, NewJob
from tether.ports.repository import JobRepository

T = TypeVar("T")


@runtime_checkable
class AsyncAccess(Protocol):
    """Runs repository work for the async API off the caller's event loop."""

    async def run(self, call: Callable[[Any], T], connection: Any = None, *, single: bool = False) -> T:
        """Run ``call(handle)`` without blocking the running loop and return (or raise) what it does.

        Args:
            call: sync work on the repository; ``handle`` is what it passes as ``connection=``.
            connection: the caller's transaction (``connection=`` of the async API): an
                :meth:`transaction` handle, or whatever the adapter accepts (SQLAlchemy's
                ``AsyncConnection``/``AsyncSession`` for SQL stores); None: the adapter's own.
            single: ``call`` sends one statement (a single enqueue, a read), so no transaction
                of its own is needed.

        Raises:
            ValidationError (field ``connection``): a connection of an unsupported kind.
        """
        ...

    async def enqueue(self, new_job: NewJob, *, now: datetime) -> EnqueueResult:
        """``repository.enqueue(new_job, now=now)`` (no caller's transaction) without blocking the
        running loop: the same result and errors.

        Raises:
            ValidationError: a naive ``now`` or ``scheduled_at``.
            StorageUnavailable: the store could not be reached (see the repository's ``enqueue``).
        """
        ...

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """``async with access.transaction() as tx``: one unit of work whose handle goes to
        :meth:`run` as ``connection``; commits when the block ends normally, rolls back if it raises."""
        ...

    async def aclose(self) -> None:
        """Release the resources of the running loop, then the others (as :meth:`close`)."""
        ...

    def close(self) -> None:
        """Release every resource (connections of every event loop); idempotent."""
        ...


class ThreadTransaction:
    """A sync repository transaction driven from async code: every step on one thread of its own.

    Attributes:
        handle: what the repository's ``transaction()`` yielded.
        executor: the one thread every step of this transaction runs on.
    """

    def __init__(self, handle: Any, executor: ThreadPoolExecutor) -> None:
        self.handle = handle
        self.executor = executor


class ThreadedAsyncAccess(AsyncAccess):
    """The default :class:`AsyncAccess`: each call on a worker thread (``asyncio.to_thread``); a
    transaction's steps on one thread of their own, since a sync transaction belongs to its thread.

    Args:
        repository: whose ``transaction()`` :meth:`transaction` drives.
    """

    def __init__(self, repository: JobRepository) -> None:
        self._repository = repository

    async def run(self, call: Callable[[Any], T], connection: Any = None, *, single: bool = False) -> T:
        if isinstance(connection, ThreadTransaction):
            return await asyncio.get_running_loop().run_in_executor(connection.executor, call, connection.handle)
        return await asyncio.to_thread(call, connection)

    async def enqueue(self, new_job: NewJob, *, now: datetime) -> EnqueueResult:
        return await asyncio.to_thread(self._repository.enqueue, new_job, now=now)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ThreadTransaction]:
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(1, thread_name_prefix="tether-atransaction")
        try:
            manager = self._repository.transaction()
            handle = await loop.run_in_executor(executor, manager.__enter__)
            try:
                yield ThreadTransaction(handle, executor)
            except BaseException as exc:
                await loop.run_in_executor(executor, manager.__exit__, type(exc), exc, exc.__traceback__)
                raise
            await loop.run_in_executor(executor, manager.__exit__, None, None, None)
        finally:
            executor.shutdown(wait=False)

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None


__all__ = ["AsyncAccess", "ThreadTransaction", "ThreadedAsyncAccess"]
