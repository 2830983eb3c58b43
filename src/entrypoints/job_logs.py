"""Which job a log record is about: the ``job_id``, ``job_type``, ``queue``, ``attempt`` and
``worker_id`` record attributes, and the optional per-job start and finish lines.

While a worker pool works on a job (its handler runs, its outcome is written, its heartbeat is
refused, it is released at shutdown or timed out) the pool enters :func:`job_scope` for it.
:class:`JobFieldsFilter`, installed on the ``tether`` loggers that speak of jobs, then sets those
five attributes on each record made in the scope.  Put the filter on a *handler* too (as
``tether worker`` does) and every record made in the scope gets them, the handler's own
``logging.getLogger(__name__).info(...)`` included::

    handler = logging.StreamHandler()
    handler.addFilter(JobFieldsFilter())

A formatter can then print them (``%(job_id)s``), and a JSON formatter
(:mod:`tether.entrypoints.observability.json_logs`) writes them as fields.  Outside a scope a
record gets none of them (``getattr(record, "job_id", None)``).

Entering a scope costs one context-variable set and reset per job; nothing is formatted unless a
record is made.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from tether.domain.job import Job
from tether.entrypoints.durations import format_duration
from tether.entrypoints.execution import Outcome

#: The record attributes a job's log records carry, in this order.
JOB_FIELDS = ("job_id", "job_type", "queue", "attempt", "worker_id")

_CURRENT: ContextVar[tuple[Job, str] | None] = ContextVar("tether_current_job", default=None)

#: Loggers whose records may speak of a job: the filter is installed on each.
JOB_LOGGERS = ("tether.worker", "tether.jobs")

jobs_logger = logging.getLogger("tether.jobs")


def job_fields(job: Job, worker_id: str | None) -> dict[str, object]:
    """The five attributes of a record about ``job`` in ``worker_id`` (None when no worker works
    on it: the reaper's lines): ``attempt`` is ``job.attempts``, for a leased job the attempt its
    lease started (1 for the first)."""
    return {"job_id": job.id, "job_type": job.job_type, "queue": job.queue, "attempt": job.attempts,
            "worker_id": worker_id}


@contextmanager
def job_scope(job: Job, worker_id: str) -> Iterator[None]:
    """Records made in this block (on this thread or context) are about ``job``."""
    token = _CURRENT.set((job, worker_id))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def enter_job(job: Job, worker_id: str) -> Token[tuple[Job, str] | None]:
    """:func:`job_scope` without the context manager, for the worker's per-job path: records
    made until :func:`leave_job` of the returned token are about ``job``."""
    return _CURRENT.set((job, worker_id))


def leave_job(token: Token[tuple[Job, str] | None]) -> None:
    """End what :func:`enter_job` began."""
    _CURRENT.reset(token)


class JobFieldsFilter(logging.Filter):
    """Sets :data:`JOB_FIELDS` on each record made in a :func:`job_scope` (attributes a caller
    passed in ``extra`` are kept); lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _CURRENT.get()
        if current is not None and not hasattr(record, "job_id"):
            for name, value in job_fields(*current).items():
                setattr(record, name, value)
        return True


def install_filter() -> None:
    """Put one :class:`JobFieldsFilter` on each of :data:`JOB_LOGGERS` (once)."""
    for name in JOB_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, JobFieldsFilter) for f in target.filters):
            target.addFilter(JobFieldsFilter())


class JobLogObserver:
    """A :class:`~tether.entrypoints.worker.observers.JobObserver` that logs one INFO line on the
    ``tether.jobs`` logger when a job's handler starts and one when its outcome is recorded
    (``tether worker --log-jobs``).  The lines carry :data:`JOB_FIELDS`, and the finish line
    ``outcome`` and ``duration_seconds`` too; its text says how long the attempt ran
    (``job 4 (flaky) failed after 6 ms, retrying``), in the words of
    :func:`~tether.entrypoints.durations.format_duration`."""

    def pool_started(self, pool: object) -> None:
        """Nothing to do."""

    def job_started(self, job: Job, worker_id: str) -> object:
        jobs_logger.info("job %s (%s) started, attempt %d/%d", job.id, job.job_type, job.attempts, job.max_attempts,
                         extra=job_fields(job, worker_id))
        return worker_id

    def handler_returned(self, job: Job, state: object, execution: object) -> None:
        """Nothing to do: the finish line waits for the recorded outcome."""

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        level = logging.WARNING if outcome is Outcome.DEAD else logging.INFO
        extra = job_fields(job, job.leased_by or "")  # the job as leased: leased_by is this worker
        extra.update(outcome=outcome.value, duration_seconds=round(seconds, 6))
        finish = _FINISH.get(outcome, outcome.value + " after {took}")
        jobs_logger.log(level, "job %s (%s) %s", job.id, job.job_type, finish.format(took=format_duration(seconds)),
                        extra=extra)


#: What became of the attempt, and how long it ran (``{took}``): never how long until a retry
#: (the observer is told the job as leased, not as written; ``tether.worker`` logs the retry's time).
_FINISH = {
    Outcome.COMPLETED: "completed in {took}",
    Outcome.RETRYING: "failed after {took}, retrying",
    Outcome.DEAD: "failed after {took}, now dead",
    Outcome.CANCELLED: "cancelled after running {took}",
    Outcome.SNOOZED: "snoozed after running {took}",
    Outcome.NO_HANDLER: "handed back after {took} (no handler here)",
}


__all__ = ["JOB_FIELDS", "JOB_LOGGERS", "JobFieldsFilter", "JobLogObserver", "enter_job", "install_filter", "job_fields",
           "job_scope", "leave_job"]
