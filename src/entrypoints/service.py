"""The embeddable API: :class:`Tether`, the one object an application uses.

It holds the handler registry, enqueues (alone, in bulk, or inside the caller's transaction),
reads and administers jobs, and builds worker pools.  It depends on the ports only; the
composition root (``tether.connect``) or a test wires concrete adapters into it::

    app = Tether(InMemoryJobRepository(), PollingDispatcher(repo, clock), SystemClock())

Enqueue validates everything first (:func:`tether.domain.validation.prepare_job`), writes through
the repository, and tells the dispatcher only after the write commits
(``repository.on_commit``); a dispatcher failure is logged and never fails the enqueue, because
the repository is the truth and every poll or sweep finds the job (DESIGN.md, "Dispatch").

Every :class:`~tether.domain.job.Job` this API returns has ``lease_token=None``: the token is the
lease holder's alone (the repository port and the running handler's ``ctx.token`` carry it), so
nothing read through the API can write for a lease (:func:`~tether.domain.lease.without_token`,
applied on the way out).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from types import MappingProxyType, TracebackType
from typing import Any, Self, TypeVar, overload

from tether.domain.errors import ConfigurationError, ValidationError
from tether.domain.job import EnqueueResult, Job, NewJob
from tether.domain.lease import without_token
from tether.domain.payload import DEFAULT_MAX_PAYLOAD_BYTES
from tether.domain.retry import DEFAULT_MAX_ATTEMPTS, RetryPolicy
from tether.domain.schedules import Schedule
from tether.domain.validation import (
    DEFAULT_QUEUE,
    MAX_ATTEMPTS_LIMIT,
    prepare_job,
    validate_int,
    validate_queue,
)
from tether.entrypoints.async_api import AsyncApi
from tether.entrypoints.context import JobContext
from tether.entrypoints.handlers import FailureHook, HandlerSpec, make_spec
from tether.entrypoints.job_control import JobControl
from tether.entrypoints.job_reads import JobReads
from tether.entrypoints.periodic import PeriodicSchedules, decoded_payload, tick_job
from tether.entrypoints.queue_control import QueueControl
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.send_observer import SendObserver
from tether.entrypoints.settings import DEFAULT_LEASE_TIMEOUT, DEFAULT_REAP_INTERVAL
from tether.entrypoints.worker import WorkerPool, WorkerStats
from tether.entrypoints.worker.observers import JobObserver
from tether.ports.async_access import AsyncAccess, ThreadedAsyncAccess
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository
from tether.ports.schedule_store import ScheduleStore
from tether.ports.worker_registry import WorkerRegistry

logger = logging.getLogger("tether.service")

F = TypeVar("F", bound=Callable[..., Any])


class Tether(JobReads, JobControl, QueueControl, PeriodicSchedules, AsyncApi):
    """A Tether application: handlers, enqueue, periodic schedules, queue controls, administration, workers.

    Args:
        repository: the job store (any :class:`~tether.ports.repository.JobRepository`).
        dispatcher: how workers get leases and learn of new jobs.
        clock: the time source for every ``now`` this object passes down.
        retry_policy: backoff of failed attempts (default: 1 s doubling, +0-25 % jitter, never more than 300 s).
        max_payload_bytes: limit on a payload's canonical UTF-8 JSON, in bytes (default 65,536).
        default_queue: queue of jobs whose type has no registered queue and that name none.
        default_max_attempts: ``max_attempts`` when neither the call nor the handler gives one.
        registry: where worker pools record themselves (:meth:`workers`); default: the
            repository when it is a :class:`~tether.ports.worker_registry.WorkerRegistry` too (all of
            Tether's are), else none.
        async_access: how the async API (``aenqueue`` ...) reaches the repository without
            blocking the event loop (see :mod:`tether.ports.async_access`); default: a worker
            thread per call.  ``tether.connect`` gives PostgreSQL its native async path.

    The repository keeps the periodic schedules too when it is a
    :class:`~tether.ports.schedule_store.ScheduleStore` (all of Tether's are); with one that is
    not, ``app.periodic`` registers but no pool ticks.

    Raises:
        ValidationError: a bad default.
    """

    def __init__(
        self,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        *,
        retry_policy: RetryPolicy | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_queue: str = DEFAULT_QUEUE,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        registry: WorkerRegistry | None = None,
        async_access: AsyncAccess | None = None,
    ) -> None:
        self.repository = repository
        self.async_access = async_access if async_access is not None else ThreadedAsyncAccess(repository)
        self._notify_executor = None
        self._notify_lock = threading.Lock()
        self._notify_queue: list[Callable[[], None]] = []
        self._notify_scheduled = False
        if registry is None and isinstance(repository, WorkerRegistry):
            registry = repository
        self.registry = registry
        self.dispatcher = dispatcher
        self.clock = clock
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ValidationError("retry_policy", f"must be a RetryPolicy, got {type(retry_policy).__name__}")
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.max_payload_bytes = validate_int(max_payload_bytes, "max_payload_bytes", 2, 2**31 - 1)
        self.default_queue = validate_queue(default_queue, "default_queue")
        self.default_max_attempts = validate_int(default_max_attempts, "default_max_attempts", 1, MAX_ATTEMPTS_LIMIT)
        self._handlers: dict[str, HandlerSpec] = {}
        self._handlers_lock = threading.Lock()
        self.schedule_store: ScheduleStore | None = repository if isinstance(repository, ScheduleStore) else None
        self._schedules: dict[str, Schedule] = {}
        self._schedules_lock = threading.Lock()
        # Pools built here, for close() to stop; weak, so a stopped pool nobody holds is freed (a
        # running pool is held by its own threads).
        self._pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
        self._closed = False
        #: Observers every worker pool of this app gets, before those given to :meth:`worker`
        #: (``tether.tracing.instrument`` adds its tracer here).
        self.observers: list[JobObserver] = []
        #: Watches each enqueue (a tracer's ``send`` span), or None: no call at all.
        self.send_observer: SendObserver | None = None

    # -- handlers ----------------------------------------------------------------------------
    @overload
    def handler(self, name: F) -> F: ...

    @overload
    def handler(
        self,
        name: str | None = None,
        *,
        queue: str | None = None,
        max_attempts: int | None = None,
        on_failure: FailureHook | None = None,
        timeout: float | None = None,
    ) -> Callable[[F], F]: ...

    def handler(
        self,
        name: Any = None,
        *,
        queue: str | None = None,
        max_attempts: int | None = None,
        on_failure: FailureHook | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Register the decorated function as the handler of job type ``name``.

        ``@app.handler("emails.send")``, ``@app.handler()`` or bare ``@app.handler`` (the name is
        then the function's ``__name__``).  The function is returned unchanged.

        Args:
            name: the job type (1-200 of letters, digits, ``_ . : -``).
            queue: default queue of enqueues of this type.
            max_attempts: default ``max_attempts`` of enqueues of this type.
            on_failure: ``hook(job, exc)`` run after each failed attempt is persisted (``job`` as
                written: ``retrying`` or ``dead``); its errors are logged and ignored.
            timeout: seconds a run of this handler may take (a finite number > 0); past it the
                job's context is cancelled and the attempt fails with :class:`~tether.JobTimeout`
                (see :mod:`tether.entrypoints.worker.timeouts`).  None: the worker's ``job_timeout``.

        Raises:
            ValidationError: a bad name/queue/max_attempts/hook/timeout, a function that is not
                ``f(payload)`` or ``f(payload, ctx)``, or a name registered already; nothing is
                registered then.
        """
        if callable(name) and not isinstance(name, str):
            self.register(name.__name__, name)
            return name

        def decorate(func: F) -> F:
            job_type = name if name is not None else getattr(func, "__name__", None)
            self.register(job_type, func, queue=queue, max_attempts=max_attempts, on_failure=on_failure, timeout=timeout)
            return func

        return decorate

    def register(
        self,
        name: Any,
        func: Callable[..., Any],
        *,
        queue: str | None = None,
        max_attempts: int | None = None,
        on_failure: FailureHook | None = None,
        timeout: float | None = None,
    ) -> HandlerSpec:
        """The non-decorator form of :meth:`handler`; returns the registration.  Same errors."""
        spec = make_spec(name, func, queue=queue, max_attempts=max_attempts, on_failure=on_failure, timeout=timeout)
        with self._handlers_lock:
            if spec.name in self._handlers:
                raise ValidationError(
                    "job_type", f"{spec.name!r} already has a handler ({self._handlers[spec.name].func!r})"
                )
            self._handlers[spec.name] = spec
        return spec

    @property
    def handlers(self) -> Mapping[str, HandlerSpec]:
        """Registered handlers by job type (read-only view)."""
        return MappingProxyType(self._handlers)

    def _find_handler_name(self, func: Callable[..., Any]) -> str | None:
        """The job type ``func`` is registered as the handler of, if any."""
        for name, spec in list(self._handlers.items()):
            if spec.func is func:
                return name
        return None

    # -- enqueue -----------------------------------------------------------------------------
    def _prepare_tick(self, schedule: Schedule, tick: datetime, now: datetime) -> NewJob:
        """The job of ``schedule``'s tick at ``tick``: the app's defaults, due at the tick, keyed."""
        request = EnqueueRequest(schedule.job_type, decoded_payload(schedule), schedule.queue, schedule.priority, run_at=tick)
        return tick_job(self._prepare(request, now), schedule, tick)

    def _prepare(self, request: EnqueueRequest, now: datetime) -> NewJob:
        spec = self._handlers.get(request.job_type) if isinstance(request.job_type, str) else None
        queue = request.queue if request.queue is not None else (spec.queue if spec and spec.queue else self.default_queue)
        max_attempts = request.max_attempts
        if max_attempts is None:
            max_attempts = spec.max_attempts if spec and spec.max_attempts is not None else self.default_max_attempts
        return prepare_job(
            request.job_type,
            request.payload,
            now=now,
            queue=queue,
            priority=request.priority,
            run_at=request.run_at,
            delay=request.delay,
            max_attempts=max_attempts,
            idempotency_key=request.idempotency_key,
            max_payload_bytes=self.max_payload_bytes,
            concurrency_key=request.concurrency_key,
        )

    def _notify_after_commit(self, connection: Any, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        jobs = list(jobs)

        def notify() -> None:
            try:
                self.dispatcher.notify(jobs)
            except Exception:  # the job is committed; a poll or sweep will find it
                logger.exception(
                    "dispatcher notify failed for %d job(s) (ids %s...); they are stored and will be found by the next poll or sweep",
                    len(jobs), [j.id for j in jobs[:5]],
                )

        self.repository.on_commit(connection, lambda: self._off_loop(notify))

    def enqueue(
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
        """Store one job and tell the dispatcher after commit.

        Args:
            job_type: handler name; need not be registered in this process (producers and
                workers may be different programs).
            payload: JSON-able arguments: canonical UTF-8 JSON of at most ``max_payload_bytes``
                bytes; no NaN/Infinity, no NUL, no non-JSON types.
            queue: default: the handler's queue if registered here, else ``default_queue``.
            priority: 32-bit integer; higher runs first.
            run_at: aware datetime to run at (naive is rejected); or ``delay`` in seconds (or a
                timedelta) from now; not both.  Default: now.
            max_attempts: 1-10,000; default: the handler's, else ``default_max_attempts``.
            idempotency_key: 1-255 characters; an existing job with this key is returned
                unchanged with ``created=False``.
            concurrency_key: 1-255 characters: the key the queue's per-key running limit
                (``limit_queue(name, max_running_per_key=N)``) counts the job under, e.g. a
                customer id; None: not limited by it.
            connection: join this transaction (``app.transaction()``'s handle; for SQL
                repositories a SQLAlchemy ``Connection``, ``Session`` or ``scoped_session``, or a
                psycopg 3 ``Connection`` / ``sqlite3.Connection`` on the repository's database);
                the dispatcher hears of the job only after it commits, and a rollback leaves
                nothing.  A driver connection has no commit hook: its jobs are found by the next
                poll or sweep instead of an immediate wake-up.

        Returns:
            :class:`~tether.domain.job.EnqueueResult` (``.job``, ``.created``).

        Raises:
            ValidationError / PayloadError: naming the bad field; nothing written or published.
            StorageUnavailable: the repository could not be reached; nothing written.
        """
        request = EnqueueRequest(job_type, payload, queue, priority, run_at, delay, max_attempts, idempotency_key,
                                 concurrency_key)
        now = self.clock.now()
        new_job = self._prepare(request, now)
        observer = self.send_observer
        if observer is None:
            result = self.repository.enqueue(new_job, now=now, connection=connection)
        else:
            with observer.send([new_job]) as sending:
                result = self.repository.enqueue(sending.jobs[0], now=now, connection=connection)
                sending.stored([result])
        return self._accepted(result, connection)

    def _accepted(self, result: EnqueueResult, connection: Any) -> EnqueueResult:
        """What ``enqueue`` answers once ``result`` was written: the dispatcher is told of a created
        job after ``connection`` commits, and the job goes out without its lease token."""
        if result.created:
            self._notify_after_commit(connection, [result.job])
        return _public_result(result)

    def enqueue_many(self, requests: Iterable[EnqueueRequest], *, connection: Any = None) -> list[EnqueueResult]:
        """Store several jobs, all or none; results in input order.

        Every request is validated before anything is written; a bad one raises with the field
        named ``requests[i].<field>``.  Idempotency keys work as in :meth:`enqueue` (a key repeated
        inside the batch yields the first job, ``created=False``).  One notification after commit.

        Raises:
            ValidationError / PayloadError, StorageUnavailable: as :meth:`enqueue`.
        """
        requests = list(requests)
        now = self.clock.now()
        new_jobs: list[NewJob] = []
        for i, request in enumerate(requests):
            if not isinstance(request, EnqueueRequest):
                raise ValidationError(f"requests[{i}]", f"must be an EnqueueRequest, got {type(request).__name__}")
            try:
                new_jobs.append(self._prepare(request, now))
            except ValidationError as exc:
                raise type(exc)(f"requests[{i}].{exc.field}", exc.problem) from None
        if not new_jobs:
            return []
        observer = self.send_observer
        if observer is None:
            results = self.repository.enqueue_many(new_jobs, now=now, connection=connection)
        else:
            with observer.send(new_jobs) as sending:
                results = self.repository.enqueue_many(sending.jobs, now=now, connection=connection)
                sending.stored(results)
        self._notify_after_commit(connection, [r.job for r in results if r.created])
        return [_public_result(result) for result in results]

    def transaction(self) -> AbstractContextManager[Any]:
        """The repository's own unit of work: ``with app.transaction() as tx: app.enqueue(..., connection=tx)``.
        Commits when the block ends normally; rolls back (nothing stored, nothing notified) if it raises."""
        return self.repository.transaction()

    # -- workers -----------------------------------------------------------------------------
    def worker(
        self,
        concurrency: int = 4,
        queues: Sequence[str] | None = None,
        lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
        heartbeat_interval: float | None = None,
        reap_interval: float = DEFAULT_REAP_INTERVAL,
        drain_timeout: float = 30.0,
        worker_id: str | None = None,
        max_wait: float = 1.0,
        prefetch: int | None = None,
        job_timeout: float | None = None,
        observers: Sequence[JobObserver] | None = None,
        async_concurrency: int = 100,
    ) -> WorkerPool:
        """A worker pool running this app's handlers (see :class:`~tether.entrypoints.worker.WorkerPool`
        for every argument).  Call ``.run()`` to block (SIGINT/SIGTERM stop it gracefully) or
        ``.start()`` / ``.stop()`` to run it in the background.  ``observers`` watch its jobs
        (``tether.metrics.WorkerMetrics()``, ``tether.entrypoints.job_logs.JobLogObserver()``),
        after the app's own :attr:`observers`.

        Raises:
            ValidationError: a bad argument.
            ConfigurationError: this app was closed (its repository and dispatcher are gone; a
                pool on them would only retry "the repository was closed" forever).
        """
        if self._closed:
            raise ConfigurationError("this Tether app was closed; build a new one (tether.connect) to run workers")
        pool = WorkerPool(
            repository=self.repository,
            dispatcher=self.dispatcher,
            clock=self.clock,
            handlers=self.handlers,
            retry_policy=self.retry_policy,
            concurrency=concurrency,
            queues=queues,
            lease_timeout=lease_timeout,
            heartbeat_interval=heartbeat_interval,
            reap_interval=reap_interval,
            drain_timeout=drain_timeout,
            worker_id=worker_id,
            max_wait=max_wait,
            prefetch=prefetch,
            registry=self.registry,
            job_timeout=job_timeout,
            schedules=self._schedules,
            schedule_store=self.schedule_store,
            prepare_tick=self._prepare_tick,
            observers=[*self.observers, *(observers or ())],
            async_concurrency=async_concurrency,
        )
        self._pools.add(pool)
        return pool

    def close(self) -> None:
        """Stop this app's running worker pools (with their drain timeouts), then close the
        dispatcher and the repository.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        for pool in list(self._pools):
            pool.stop()
        self._close_notifier()
        for close in (self.async_access.close, self.dispatcher.close, self.repository.close):
            try:
                close()
            except Exception:  # closing must get through every resource
                logger.exception("error while closing %r", close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _public_result(result: EnqueueResult) -> EnqueueResult:
    """``result`` with its job's lease token hidden (a key's existing job may be running)."""
    job = without_token(result.job)
    return result if job is result.job else EnqueueResult(job, result.created)


__all__ = ["EnqueueRequest", "JobContext", "Tether", "WorkerPool", "WorkerStats"]
