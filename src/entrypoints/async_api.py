"""The async API of :class:`~tether.entrypoints.service.Tether`: ``await app.aenqueue(...)`` and
its siblings, and ``async with app.atransaction() as tx`` (a mixin, as
:mod:`~tether.entrypoints.job_control` is).

Each ``a...`` method runs its sync namesake through the app's
:class:`~tether.ports.async_access.AsyncAccess`, so it validates, writes and answers exactly as
the sync call does (the same errors, the same jobs) without blocking the caller's event loop: on
PostgreSQL the statements run on a native async connection of the running loop; on SQLite and in
memory on a worker thread.  ``aenqueue`` outside a caller's transaction takes the sync enqueue's
steps itself, on the loop (validation and encoding are microseconds), and awaits only the write,
:meth:`AsyncAccess.enqueue <tether.ports.async_access.AsyncAccess.enqueue>` (on PostgreSQL without
an idempotency key: the sync enqueue's one statement awaited on a raw psycopg connection of the
loop).  ``connection=`` takes what the sync call takes, and also SQLAlchemy's
``AsyncConnection`` and ``AsyncSession`` (the job joins that transaction, is published only after
it commits, and a rollback leaves nothing), or the handle of :meth:`AsyncApi.atransaction`.

The dispatcher's notification after commit (with Redis Streams an ``XADD``) never blocks an event
loop: from a thread running one it is handed to the ``tether-notify`` thread, unless the
dispatcher says it does no I/O (``notify_blocks = False``: polling only wakes this process's
workers).  A thread woken per job would cost the loop the GIL at each of its I/O waits.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tether.domain.job import EnqueueResult, Job, JobStatus
from tether.entrypoints.requests import EnqueueRequest
from tether.ports.async_access import AsyncAccess

logger = logging.getLogger("tether.service")

T = TypeVar("T")


class AsyncApi:
    """The ``a...`` methods of ``Tether`` (a mixin: ``Tether`` supplies the sync methods and
    :attr:`async_access`)."""

    async_access: AsyncAccess
    _notify_executor: ThreadPoolExecutor | None
    _notify_lock: threading.Lock
    _notify_queue: builtins.list[Callable[[], None]]
    _notify_scheduled: bool

    @property
    def _sync(self) -> Any:
        """This app, as the owner of the sync methods the ``a...`` methods run."""
        return self

    async def aenqueue(
        self,
        job_type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        connection: Any = None,
        concurrency_key: str | None = None,
    ) -> EnqueueResult:
        """:meth:`~tether.entrypoints.service.Tether.enqueue` without blocking the event loop; same
        arguments, result and errors.  ``connection`` may also be a SQLAlchemy ``AsyncConnection``
        or ``AsyncSession``, the handle of :meth:`atransaction`, or (on PostgreSQL) a raw psycopg 3
        ``AsyncConnection``, joined in its current transaction: the job exists once the caller
        commits, and, a driver connection having no commit hook, is found by the next poll or sweep.

        Raises:
            ValidationError / PayloadError: naming the bad field (``connection`` for a connection
                of an unsupported kind or on another database); nothing written or published.
            StorageUnavailable: the store could not be reached; nothing written.
        """

        if connection is not None:

            def call(handle: Any) -> EnqueueResult:
                return self._sync.enqueue(
                    job_type, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                    max_attempts=max_attempts, idempotency_key=idempotency_key, connection=handle,
                    concurrency_key=concurrency_key,
                )

            return await self.async_access.run(call, connection, single=True)
        # The sync enqueue's steps, its write awaited: validation and encoding take microseconds
        # of the loop's time, a thread hop or a greenlet would cost more than they do.
        sync = self._sync
        request = EnqueueRequest(job_type, payload, queue, priority, run_at, delay, max_attempts, idempotency_key,
                                 concurrency_key=concurrency_key)
        now = sync.clock.now()
        new_job = sync._prepare(request, now)
        observer = sync.send_observer
        if observer is None:
            result = await self.async_access.enqueue(new_job, now=now)
        else:
            with observer.send([new_job]) as sending:
                result = await self.async_access.enqueue(sending.jobs[0], now=now)
                sending.stored([result])
        return sync._accepted(result, None)  # type: ignore[no-any-return]

    async def aenqueue_many(
        self, requests: Iterable[EnqueueRequest], *, connection: Any = None
    ) -> builtins.list[EnqueueResult]:
        """:meth:`~tether.entrypoints.service.Tether.enqueue_many` without blocking the event loop
        (all or none; results in input order); same errors."""
        requests = builtins.list(requests)
        return await self.async_access.run(lambda handle: self._sync.enqueue_many(requests, connection=handle), connection)

    def atransaction(self) -> AbstractAsyncContextManager[Any]:
        """``async with app.atransaction() as tx: await app.aenqueue(..., connection=tx)``: one unit
        of work; commits when the block ends normally, rolls back (nothing stored, nothing
        notified) if it raises.  On PostgreSQL ``tx`` is an ``AsyncConnection`` of the running loop."""
        return self.async_access.transaction()

    async def aget(self, job_id: int) -> Job:
        """:meth:`~tether.entrypoints.service.Tether.get` without blocking the loop (JobNotFound, ValidationError)."""
        return await self.async_access.run(lambda _: self._sync.get(job_id), single=True)

    async def alist(
        self, status: JobStatus | str | None = None, queue: str | None = None, limit: int = 100, offset: int = 0
    ) -> builtins.list[Job]:
        """:meth:`~tether.entrypoints.service.Tether.list` without blocking the loop; same errors."""
        return await self.async_access.run(lambda _: self._sync.list(status, queue, limit, offset), single=True)

    async def acounts(self, queue: str | None = None) -> dict[JobStatus, int]:
        """:meth:`~tether.entrypoints.service.Tether.counts` without blocking the loop; same errors."""
        return await self.async_access.run(lambda _: self._sync.counts(queue), single=True)

    async def afind_by_key(self, idempotency_key: str) -> Job | None:
        """:meth:`~tether.entrypoints.service.Tether.find_by_key` without blocking the loop."""
        return await self.async_access.run(lambda _: self._sync.find_by_key(idempotency_key), single=True)

    async def acancel(self, job_id: int) -> Job:
        """:meth:`~tether.entrypoints.job_control.JobControl.cancel` without blocking the loop;
        same errors (JobNotFound, InvalidTransition, ValidationError)."""
        return await self.async_access.run(lambda _: self._sync.cancel(job_id))

    async def aretry(self, job_id: int) -> Job:
        """:meth:`~tether.entrypoints.job_control.JobControl.retry` without blocking the loop; the
        dispatcher hears of the job after the write commits.  Same errors."""
        return await self.async_access.run(lambda _: self._sync.retry(job_id))

    async def aclose(self) -> None:
        """Close the app (as ``close``), releasing first the async connections of the running
        loop on that loop; the worker pools' drains run on a thread."""
        await self.async_access.aclose()
        await asyncio.to_thread(self._sync.close)

    # -- notifications off the loop ----------------------------------------------------------
    def _off_loop(self, notify: Callable[[], None]) -> None:
        """Run ``notify`` here, unless an event loop runs here and the dispatcher's notification
        blocks (does I/O): then on the ``tether-notify`` thread, which runs every notification
        queued meanwhile in one wake-up (one thread switch per burst, not per job)."""
        if asyncio._get_running_loop() is None or not getattr(self._dispatcher_of_app, "notify_blocks", True):
            notify()
            return
        with self._notify_lock:
            self._notify_queue.append(notify)
            if self._notify_scheduled:
                return
            self._notify_scheduled = True
            if self._notify_executor is None:
                self._notify_executor = ThreadPoolExecutor(1, thread_name_prefix="tether-notify")
            executor = self._notify_executor
        try:
            executor.submit(self._run_notifications)
        except RuntimeError:  # shut down with the app: a poll or sweep finds the jobs
            logger.warning("the app is closed; notifications after commit were dropped (the jobs are stored)")

    def _run_notifications(self) -> None:
        while True:
            with self._notify_lock:
                queued, self._notify_queue = self._notify_queue, []
                if not queued:
                    self._notify_scheduled = False
                    return
            for notify in queued:
                notify()  # each logs its own failure

    @property
    def _dispatcher_of_app(self) -> Any:
        return self._sync.dispatcher

    def _close_notifier(self) -> None:
        with self._notify_lock:
            executor, self._notify_executor = self._notify_executor, None
        if executor is not None:
            executor.shutdown(wait=True)


__all__ = ["AsyncApi"]
