"""Running one leased job: call its handler and write the outcome under the lease's fence.

This is the per-job step of the worker pool (:mod:`tether.entrypoints.worker`), kept apart so
that the test kit's :func:`tether.testing.drain` runs jobs through exactly the same code:

- no handler registered for the job type: ``dead`` at once with an ``UnknownJobType`` error;
- the handler returns: ``complete``;
- the handler raises :class:`~tether.domain.errors.PermanentError`: ``dead`` at once;
- the handler raises anything else (even an exception that cannot be printed, case C18):
  ``fail`` with ``retry_at`` from the retry policy (backoff + jitter,
  :func:`tether.domain.transitions.next_retry_at`); the repository makes it ``retrying``, or
  ``dead`` when the attempts are used up.  ``last_error`` is
  :func:`~tether.domain.failure.describe_failure` of the exception.
- after a failure is persisted the handler's ``on_failure(job, exc)`` hook runs; its errors are
  logged and swallowed (case C17).

How a write is attempted (retries on storage trouble, what a refused fence means) and whether the
outcome may still be written at all (shutdown released the job, the lease was lost) belong to the
caller, through an :class:`OutcomeWriter`.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

import attrs
from tether.domain import transitions
from tether.domain.errors import PermanentError
from tether.domain.failure import describe_failure, sanitize_text
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.handlers import HandlerSpec
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")


class Outcome(str, enum.Enum):
    """What one execution wrote."""

    COMPLETED = "completed"
    RETRYING = "retrying"
    DEAD = "dead"
    #: Nothing was written: the job was released at shutdown, the lease was lost, or the write
    #: was refused or given up (the :class:`OutcomeWriter` decided).
    NOT_RECORDED = "not_recorded"


@attrs.frozen
class Execution:
    """The result of :func:`execute_job`.

    Attributes:
        job: the job as written (``completed``/``retrying``/``dead``), or as leased when nothing
            was recorded.
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
        """Run one fenced repository write (``what`` is ``complete``, ``fail`` or
        ``dead_letter``, for logs); return the job as written, or None when it was refused
        (LeaseLost) or given up."""
        ...


def unknown_type_error(job: Job, handlers: Mapping[str, HandlerSpec], worker_id: str) -> str:
    """The ``last_error`` of a job whose type has no handler in this process."""
    return (
        f"UnknownJobType: no handler is registered for job type {job.job_type!r} in worker {worker_id} "
        f"(it knows {sorted(handlers)[:20]}); register it with @app.handler({job.job_type!r}) and "
        f"retry the job"
    )


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

    Returns:
        the :class:`Execution`.  Never raises for a handler's error; an error the ``writer``
        lets through propagates.
    """
    spec = handlers.get(job.job_type)
    if spec is None:
        error = unknown_type_error(job, handlers, worker_id)
        if not writer.begin_finish():
            return Execution(job, Outcome.NOT_RECORDED, error)
        written = writer.write(
            "dead_letter", lambda: repository.dead_letter(job.id, ctx.token, now=clock.now(), error=error)
        )
        if written is None:
            return Execution(job, Outcome.NOT_RECORDED, error)
        logger.error("worker %s: job %s sent to dead: %s", worker_id, job.id, error)
        return Execution(written, Outcome.DEAD, error)

    try:
        payload = job.payload
        if spec.takes_context:
            spec.func(payload, ctx)
        else:
            spec.func(payload)
    except BaseException as exc:  # noqa: BLE001 - any handler error is the job's failure
        return _failed(job, ctx, spec, exc, repository=repository, clock=clock, retry_policy=retry_policy,
                       writer=writer, worker_id=worker_id, rand=rand)
    if not writer.begin_finish():
        logger.info("worker %s: job %s returned after it was released, lost or timed out; result not recorded", worker_id, job.id)
        return Execution(job, Outcome.NOT_RECORDED)
    written = writer.write("complete", lambda: repository.complete(job.id, ctx.token, now=clock.now()))
    if written is None:
        return Execution(job, Outcome.NOT_RECORDED)
    return Execution(written, Outcome.COMPLETED)


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
) -> Execution:
    if not writer.begin_finish():
        error = describe_failure(exc)
        logger.info("worker %s: job %s failed after it was released, lost or timed out; not recorded: %s",
                    worker_id, job.id, error[:500])
        return Execution(job, Outcome.NOT_RECORDED, error, exc, isinstance(exc, PermanentError))
    return record_failure(job, ctx, spec, exc, repository=repository, clock=clock, retry_policy=retry_policy,
                          writer=writer, worker_id=worker_id, rand=rand)


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
) -> Execution:
    """Write the failed attempt of ``job`` (the right to write was claimed already: no
    ``begin_finish`` here): ``fail`` with the retry time from ``retry_policy``, or ``dead`` for a
    :class:`PermanentError` or when attempts are used up; then ``spec``'s ``on_failure`` hook.
    Also how a worker writes a :class:`~tether.domain.errors.JobTimeout`.

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
            spec.on_failure(written, exc)
        except BaseException:  # a hook can never stop the worker (C17)
            logger.exception("worker %s: on_failure hook of %s raised for job %s (ignored)", worker_id, spec.name, job.id)
    return Execution(written, outcome, error, exc, permanent)


__all__ = ["Execution", "Outcome", "OutcomeWriter", "execute_job", "record_failure", "unknown_type_error"]
