"""Cancelling every job a filter matches, in batches: :func:`cancel_matching` (``app.cancel_matching``,
``tether jobs cancel --queue/--status/--job-type``).

Each batch is one statement of the repository (:meth:`~tether.ports.repository.JobRepository.cancel_many`),
so a large backlog is cancelled without one long transaction holding its rows: the batches walk
the jobs by ascending id, each starting after the last id the previous one wrote, until one
writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.validation import (
    CANCEL_BATCH_LIMIT,
    validate_cancel_statuses,
    validate_int,
    validate_job_type,
    validate_queue,
)
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

#: Jobs cancelled per statement unless the caller says otherwise.
DEFAULT_CANCEL_BATCH = 1000


def cancel_matching(
    repository: JobRepository,
    clock: Clock,
    *,
    queue: str | None = None,
    statuses: Sequence[JobStatus | str] | None = None,
    job_type: str | None = None,
    everything: bool = False,
    batch_size: int = DEFAULT_CANCEL_BATCH,
) -> int:
    """Cancel every job of ``queue``, in one of ``statuses``, of ``job_type`` (the filters given,
    all of them), in batches of ``batch_size``; returns how many were cancelled or got a request.

    Every filter is validated before anything is written.

    Raises:
        ValidationError: no filter and not ``everything`` (field ``filters``); a bad ``queue``,
            ``job_type`` or ``batch_size``; a ``statuses`` entry that is not a status or cannot be
            cancelled.
    """
    wanted = validate_cancel_statuses(statuses) if statuses is not None else None
    queues = [validate_queue(queue)] if queue is not None else None
    job_types = [validate_job_type(job_type)] if job_type is not None else None
    batch_size = validate_int(batch_size, "batch_size", 1, CANCEL_BATCH_LIMIT)
    if queues is None and wanted is None and job_types is None and everything is not True:
        raise ValidationError("filters", "name a queue, a status or a job type, or pass everything=True")
    total, after = 0, 0
    while True:
        done = repository.cancel_many(
            now=clock.now(), queues=queues, statuses=wanted, job_types=job_types, after_id=after, limit=batch_size
        )
        if not done:  # a short batch is not the end: rows that stopped matching under its locks are left out
            return total
        total += len(done)
        after = done[-1].id


__all__ = ["DEFAULT_CANCEL_BATCH", "cancel_matching"]
