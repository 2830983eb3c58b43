"""Reading stored jobs, part of :class:`~tether.entrypoints.service.Tether`: ``get``, ``list``,
``counts``, ``queue_summaries`` and ``find_by_key``.

Like every read of the API, each job returned has ``lease_token=None``
(:func:`~tether.domain.lease.without_token`): the token is the lease holder's alone.
"""

from __future__ import annotations

import builtins

from tether.domain.errors import ValidationError, shown
from tether.domain.job import Job, JobStatus
from tether.domain.lease import without_token
from tether.domain.overview import QueueSummary
from tether.domain.validation import validate_idempotency_key, validate_int, validate_queue
from tether.entrypoints.job_control import MAX_BIGINT, job_id_of
from tether.ports.clock import Clock
from tether.ports.overview import queue_summaries_of
from tether.ports.repository import JobRepository


class JobReads:
    """The read side of the ``Tether`` API (a mixin: ``Tether`` supplies the attributes)."""

    repository: JobRepository
    clock: Clock

    def get(self, job_id: int) -> Job:
        """The job with this id (its ``lease_token`` hidden: None, as in every job this API returns).
        Raises JobNotFound, ValidationError (not a positive integer)."""
        return without_token(self.repository.get(job_id_of(job_id)))

    def list(
        self,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job]:
        """Jobs by ascending id, filtered by status (a JobStatus or its value) and queue.

        Raises:
            ValidationError: an unknown status, a bad queue name, limit outside 0-10,000, offset < 0.
        """
        jobs = self.repository.list_jobs(
            status=_status(status),
            queue=validate_queue(queue) if queue is not None else None,
            limit=validate_int(limit, "limit", 0, 10_000),
            offset=validate_int(offset, "offset", 0, MAX_BIGINT),
        )
        return [without_token(job) for job in jobs]

    def counts(self, queue: str | None = None) -> dict[JobStatus, int]:
        """How many jobs are in each status (every status present), in one queue or all.
        Raises ValidationError for a bad queue name."""
        return self.repository.count_by_status(queue=validate_queue(queue) if queue is not None else None)

    def queue_summaries(self) -> builtins.list[QueueSummary]:
        """Each queue holding live jobs, by name, now: its ``queued``/``retrying``/``running``
        counts, how many are due, and its oldest due job (``summary.latency(now)``: seconds, None
        when none is due).  One read of the live jobs (:func:`~tether.ports.overview.queue_summaries_of`);
        what the dashboard's queues and ``tether.metrics.StoreCollector`` show.

        Raises:
            StorageUnavailable: the repository could not be reached.
        """
        return queue_summaries_of(self.repository, now=self.clock.now())

    def find_by_key(self, idempotency_key: str) -> Job | None:
        """The job holding this idempotency key, or None.  Raises ValidationError for a bad key."""
        key = validate_idempotency_key(idempotency_key)
        if key is None:
            raise ValidationError("idempotency_key", "must be a string of 1-255 characters, got None")
        job = self.repository.find_by_key(key)
        return None if job is None else without_token(job)


def _status(value: JobStatus | str | None) -> JobStatus | None:
    if value is None or isinstance(value, JobStatus):
        return value
    try:
        return JobStatus(value)
    except ValueError:
        raise ValidationError("status", f"{shown(value)} is not one of {[s.value for s in JobStatus]}") from None


__all__ = ["JobReads"]
