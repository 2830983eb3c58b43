"""Running one leased job: call its handler and write the outcome under the lease's fence.

This is the per-job step of the worker pool (:mod:`tether.entrypoints.worker`), kept apart so
that the test kit's :func:`tether.testing.drain` runs jobs through exactly the same code:

- no handler registered for the job type in this process: the job is given back (``snooze``:
  ``queued``, due again in :data:`UNKNOWN_TYPE_SNOOZE` seconds, the attempt given back), never
  sent to ``dead``: during a rolling deploy a worker without the new handler leaves the job to
  one that has it;
- its cancellation was requested before the handler started (a prefetched job): the handler is
  not run, and the job is handed back, which records ``cancelled``;
- the handler returns: ``complete``;
- the handler raises :class:`~tether.domain.snooze.Snooze`: ``snooze`` (``queued``, due that many
  seconds later, the attempt given back, ``last_error`` kept);
- the handler raises :class:`~tether.domain.errors.PermanentError`: ``dead`` at once; so does a
  handler that returns a generator instead of running (a plain wrapper around a generator
  function, which registration could not see: :func:`~tether.entrypoints.handlers.is_coroutine_handler`);
  a plain wrapper that returns a coroutine has it run to its end like an ``async def`` handler's;
- the handler raises anything else (even an exception that cannot be printed, case C18):
  ``fail`` with ``retry_at`` from the retry policy (backoff + jitter,
  :func:`tether.domain.transitions.next_retry_at`); the repository makes it ``retrying``, or
  ``dead`` when the attempts are used up.  ``last_error`` is
  :func:`~tether.domain.failure.describe_failure` of the exception.
- after a failure is persisted the handler's ``on_failure(job, exc)`` hook runs; its errors are
  logged and swallowed (case C17).

Every one of these writes records ``cancelled`` instead when an operator asked to cancel the job
while it ran (the repository decides, on the row as it is): the execution's outcome is then
:attr:`Outcome.CANCELLED`.

How a write is attempted (retries on storage trouble, what a refused fence means) and whether the
outcome may still be written at all (shutdown released the job, the lease was lost) belong to the
caller, through an :class:`OutcomeWriter`.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import random
import types
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, Protocol

import attrs
from tether.domain import transitions
from tether.domain.errors import PermanentError
from tether.domain.failure import describe_failure, sanitize_text
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints.context import JobContext
from tether.entrypoints.handlers import HandlerSpec
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")


#: Seconds after which a job this process has no handler for is due again (given back, not failed).
UNKNOWN_TYPE_SNOOZE = 5.0


class Outcome(str, enum.Enum):
    """What one execution wrote."""

    COMPLETED = "completed"
    RETRYING = "retrying"
    DEAD = "dead"
    #: An operator cancelled the job while it ran; the outcome write recorded ``cancelled``.
    CANCELLED = "cancelled"
    #: The handler raised :class:`~tether.domain.snooze.Snooze`: ``queued``, due later.
    SNOOZED = "snoozed"
    #: No handler for the job type here: given back (``queued``, due in :data:`UNKNOWN_TYPE_SNOOZE` s).
    NO_HANDLER = "no_handler"
    #: Nothing was written: the job was released at shutdown, the lease was lost, or the write
    #: was refused or given up (the :class:`OutcomeWriter` decided).
    NOT_RECORDED = "not_recorded"


@attrs.frozen
class Execution:
    """The result of :func:`execute_job`.

    Attributes:
        job: the job as written (``completed``/``retrying``/``dead``/``cancelled``/``queued``), or
            as leased when nothing was recorded.
        outcome: see :class:`Outcome`.
        error: the failure text given to the repository (``last_error`` before sanitizing), or None.
        exception: what the handler raised, or None (also None for an unknown job type).
        permanent: True when the handler raised :class:`PermanentError`.
    """

    job: Job
    outcome: Outcome
    error: str | None = None
    exception: BaseException | None = attrs.field(default=None, eq=False)
    permanent: bool = False


class OutcomeWriter(Protocol):
    """How the caller lets :func:`execute_job` write an outcome."""

    def begin_finish(self) -> bool:
        """Claim the right to write the outcome now; False when it must not be written
        (released at shutdown, lease lost)."""
        ...

    def write(self, what: str, write: Callable[[], Job]) -> Job | None:
        """Run one fenced repository write (``what`` is ``complete``, ``fail``, ``dead_letter``,
        ``snooze`` or ``release``, for logs); return the job as written, or None when it was
        refused (LeaseLost) or given up."""
        ...


def unknown_type_error(job: Job, handlers: Mapping[str, HandlerSpec], worker_id: str) -> str:
    """Why a job whose type has no handler in this process was handed back (for logs)."""
    return (
        f"no handler is registered for job type {job.job_type!r} in worker {worker_id} "
        f"(it knows {sorted(handlers)[:20]}); the job is handed back, due again in {UNKNOWN_TYPE_SNOOZE:g} s, "
        f"for a worker that has it (register it with @app.handler({job.job_type!r}))"
    )


def _snooze(repository: JobRepository, clock: Clock, job: Job, ctx: JobContext, seconds: float) -> Callable[[], Job]:
    """The fenced write that gives ``job`` back, due ``seconds`` after the write's ``now``."""

    def write() -> Job:
        now = clock.now()
        return repository.snooze(job.id, ctx.token, now=now, until=now + timedelta(seconds=seconds))

    return write


def _given_back(written: Job, outcome: Outcome) -> Outcome:
    """``outcome`` of a write that gives the job back, or CANCELLED when the write recorded that."""
    return Outcome.CANCELLED if written.status is JobStatus.CANCELLED else outcome


def run_to_end(awaitable: Awaitable[Any]) -> Any:
    """Run ``awaitable`` to its end from synchronous code and return its result: on a new event
    loop in this thread, or, when a loop already runs in this thread, on a new loop in a short-lived
    thread (so an async handler or hook also runs under ``drain()`` called from async code)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with ThreadPoolExecutor(1, thread_name_prefix="tether-run-async") as executor:
        return executor.submit(asyncio.run, wait()).result()


def run_handler(
    spec: HandlerSpec, job: Job, ctx: JobContext, run_coroutine: Callable[[Awaitable[Any]], Any] | None = None
) -> None:
    """Call ``spec``'s function with the job's payload (and ``ctx`` when it takes one); an async
    handler's coroutine is run to its end by ``run_coroutine`` (default :func:`run_to_end`).
    Raises whatever the handler raises."""
    result = spec.func(job.payload, ctx) if spec.takes_context else spec.func(job.payload)
    if spec.is_async or isinstance(result, types.CoroutineType):  # also a plain wrapper of an async def
        (run_coroutine or run_to_end)(result)
    elif result is not None and isinstance(result, _UNRUN_BODIES):
        raise _unrun_body(spec, result)


def start_job(
    job: Job,
    ctx: JobContext,
    *,
    handlers: Mapping[str, HandlerSpec],
    repository: JobRepository,
    clock: Clock,
    writer: OutcomeWriter,
    worker_id: str,
) -> Execution | None:
    """What happens before a handler runs: None when its handler should run now; else the
    :class:`Execution` of a job that is not run (no handler here: handed back; cancellation
    requested before it started: released, which records ``cancelled``)."""
    if job.job_type not in handlers:
        reason = unknown_type_error(job, handlers, worker_id)
        if not writer.begin_finish():
            return Execution(job, Outcome.NOT_RECORDED, reason)
        written = writer.write("snooze", _snooze(repository, clock, job, ctx, UNKNOWN_TYPE_SNOOZE))
        if written is None:
            return Execution(job, Outcome.NOT_RECORDED, reason)
        logger.info("worker %s: job %s handed back: %s", worker_id, job.id, reason)
        return Execution(written, _given_back(written, Outcome.NO_HANDLER), reason)

    if ctx.cancel_requested:  # cancelled while it waited for a slot: never start it
        if not writer.begin_finish():
            return Execution(job, Outcome.NOT_RECORDED)
        written = writer.write("release", lambda: repository.release(job.id, ctx.token, now=clock.now()))
        if written is None:
            return Execution(job, Outcome.NOT_RECORDED)
        return Execution(written, _given_back(written, Outcome.NOT_RECORDED))
    return None


def execute_job(
    job: Job,
    ctx: JobContext,
    *,
    handlers: Mapping[str, HandlerSpec],
    repository: JobRepository,
    clock: Clock,
    retry_policy: RetryPolicy,
    writer: OutcomeWriter,
    worker_id: str,
    rand: Callable[[], float] = random.random,
    run_coroutine: Callable[[Awaitable[Any]], Any] | None = None,
) -> Execution:
    """Run ``job`` (leased, token in ``ctx``) with its handler from ``handlers`` and write the outcome.

    Args:
        job: the job as leased (``running``, with a lease token).
        ctx: its :class:`JobContext` (passed to handlers declared ``(payload, ctx)``).
        handlers: job type -> registration (looked up now, so later registrations count).
        repository, clock: where and when outcomes are written.
        retry_policy: backoff of a failed attempt.
        writer: the caller's rules for writing (see :class:`OutcomeWriter`).
        worker_id: for error texts and logs.
        rand: uniform [0, 1) source of the retry jitter.
        run_coroutine: runs an async handler's (or hook's) coroutine to its end, from this
            thread; default :func:`run_to_end` (a fresh event loop).

    Returns:
        the :class:`Execution`.  Never raises for a handler's error; an error the ``writer``
        lets through propagates.
    """
    early = start_job(job, ctx, handlers=handlers, repository=repository, clock=clock, writer=writer, worker_id=worker_id)
    if early is not None:
        return early
    spec = handlers[job.job_type]
    raised: BaseException | None = None
    try:
        run_handler(spec, job, ctx, run_coroutine)
    except BaseException as exc:  # noqa: BLE001 - any handler error is the job's failure
        raised = exc
    return finish_job(job, ctx, spec, raised, repository=repository, clock=clock, retry_policy=retry_policy,
                      writer=writer, worker_id=worker_id, rand=rand, run_coroutine=run_coroutine)


def finish_job(
    job: Job,
    ctx: JobContext,
    spec: HandlerSpec,
    raised: BaseException | None,
    *,
    repository: JobRepository,
    clock: Clock,
    retry_policy: RetryPolicy,
    writer: OutcomeWriter,
    worker_id: str,
    rand: Callable[[], float] = random.random,
    run_coroutine: Callable[[Awaitable[Any]], Any] | None = None,
) -> Execution:
    """Write the outcome of a handler run that returned (``raised`` None) or raised ``raised``:
    ``complete``, ``snooze`` for a :class:`Snooze`, else the failure (:func:`record_failure`).
    The async runner calls it once its task ended; :func:`execute_job` right after the call."""
    if raised is None:
        if not writer.begin_finish():
            logger.info("worker %s: job %s returned after it was released, lost or timed out; result not recorded", worker_id, job.id)
            return Execution(job, Outcome.NOT_RECORDED)
        written = writer.write("complete", lambda: repository.complete(job.id, ctx.token, now=clock.now()))
        if written is None:
            return Execution(job, Outcome.NOT_RECORDED)
        return Execution(written, _given_back(written, Outcome.COMPLETED))
    if isinstance(raised, Snooze):
        return _snoozed(job, ctx, raised, repository=repository, clock=clock, writer=writer, worker_id=worker_id)
    return _failed(job, ctx, spec, raised, repository=repository, clock=clock, retry_policy=retry_policy,
                   writer=writer, worker_id=worker_id, rand=rand, run_coroutine=run_coroutine)


#: What a handler returns when its call did not run its body (a wrapper around an ``async def``).
_UNRUN_BODIES = (types.GeneratorType, types.AsyncGeneratorType)


def _unrun_body(spec: HandlerSpec, result: object) -> PermanentError:
    """The failure of a handler that returned a coroutine or generator instead of running: the
    object is closed unrun, and the job goes ``dead`` (running it again would do the same)."""
    close = getattr(result, "close", None)
    if callable(close):
        close()  # no "never awaited" warning; the body never starts
    kind = type(result).__name__
    return PermanentError(
        f"handler {spec.name!r} returned a {kind} instead of running: a handler is a plain or async def "
        "function (generator and async generator handlers are not supported)"
    )


def _snoozed(
    job: Job, ctx: JobContext, snooze: Snooze, *, repository: JobRepository, clock: Clock, writer: OutcomeWriter,
    worker_id: str,
) -> Execution:
    if not writer.begin_finish():
        logger.info("worker %s: job %s snoozed after it was released or lost; not recorded", worker_id, job.id)
        return Execution(job, Outcome.NOT_RECORDED, exception=snooze)
    written = writer.write("snooze", _snooze(repository, clock, job, ctx, snooze.seconds))
    if written is None:
        return Execution(job, Outcome.NOT_RECORDED, exception=snooze)
    return Execution(written, _given_back(written, Outcome.SNOOZED), exception=snooze)


def _failed(
    job: Job,
    ctx: JobContext,
    spec: HandlerSpec,
    exc: BaseException,
    *,
    repository: JobRepository,
    clock: Clock,
    retry_policy: RetryPolicy,
    writer: OutcomeWriter,
    worker_id: str,
    rand: Callable[[], float],
    run_coroutine: Callable[[Awaitable[Any]], Any] | None = None,
) -> Execution:
    if not writer.begin_finish():
        error = describe_failure(exc)
        logger.info("worker %s: job %s failed after it was released, lost or timed out; not recorded: %s",
                    worker_id, job.id, error[:500])
        return Execution(job, Outcome.NOT_RECORDED, error, exc, isinstance(exc, PermanentError))
    return record_failure(job, ctx, spec, exc, repository=repository, clock=clock, retry_policy=retry_policy,
                          writer=writer, worker_id=worker_id, rand=rand, run_coroutine=run_coroutine)


def record_failure(
    job: Job,
    ctx: JobContext,
    spec: HandlerSpec | None,
    exc: BaseException,
    *,
    repository: JobRepository,
    clock: Clock,
    retry_policy: RetryPolicy,
    writer: OutcomeWriter,
    worker_id: str,
    rand: Callable[[], float] = random.random,
    run_coroutine: Callable[[Awaitable[Any]], Any] | None = None,
) -> Execution:
    """Write the failed attempt of ``job`` (the right to write was claimed already: no
    ``begin_finish`` here): ``fail`` with the retry time from ``retry_policy``, or ``dead`` for a
    :class:`PermanentError` or when attempts are used up; then ``spec``'s ``on_failure`` hook (an
    async hook's coroutine run to its end by ``run_coroutine``, default :func:`run_to_end`).  Also how a worker writes a :class:`~tether.domain.errors.JobTimeout`.

    Returns:
        the :class:`Execution` (``RETRYING``, ``DEAD``, or ``NOT_RECORDED`` when the writer
        refused or gave up the write).
    """
    error = describe_failure(exc)
    permanent = isinstance(exc, PermanentError)
    now = clock.now()
    retry_at: datetime | None = transitions.next_retry_at(job, now=now, policy=retry_policy, r=rand(), permanent=permanent)
    written = writer.write(
        "fail", lambda: repository.fail(job.id, ctx.token, now=clock.now(), error=error, retry_at=retry_at)
    )
    if written is None:
        return Execution(job, Outcome.NOT_RECORDED, error, exc, permanent)
    if written.status is JobStatus.CANCELLED:  # cancelled while it ran: no retry, no failure hook
        logger.info("worker %s: job %s (%s) failed after it was cancelled; recorded as cancelled: %s",
                    worker_id, job.id, job.job_type, sanitize_text(error, 500))
        return Execution(written, Outcome.CANCELLED, error, exc, permanent)
    if written.status is JobStatus.DEAD:
        outcome = Outcome.DEAD
        logger.warning(
            "worker %s: job %s (%s) is dead after attempt %d/%d%s: %s",
            worker_id, job.id, job.job_type, written.attempts, written.max_attempts,
            " (permanent error)" if permanent else "", sanitize_text(error, 500),
        )
    else:
        outcome = Outcome.RETRYING
        logger.info(
            "worker %s: job %s (%s) failed attempt %d/%d, retrying at %s: %s",
            worker_id, job.id, job.job_type, written.attempts, written.max_attempts,
            written.scheduled_at.isoformat(), sanitize_text(error, 500),
        )
    if spec is not None and spec.on_failure is not None:
        try:
            returned = spec.on_failure(written, exc)
            if inspect.isawaitable(returned):
                (run_coroutine or run_to_end)(returned)
        except BaseException:  # a hook can never stop the worker (C17)
            logger.exception("worker %s: on_failure hook of %s raised for job %s (ignored)", worker_id, spec.name, job.id)
    return Execution(written, outcome, error, exc, permanent)


__all__ = [
    "UNKNOWN_TYPE_SNOOZE",
    "Execution",
    "Outcome",
    "OutcomeWriter",
    "execute_job",
    "finish_job",
    "record_failure",
    "run_handler",
    "run_to_end",
    "start_job",
    "unknown_type_error",
]
