"""Operators' actions on stored jobs, part of :class:`~tether.entrypoints.service.Tether`: cancel,
retry, purge, reap, the worker registry and ``explain``.

Kept apart from the enqueue and read paths of :mod:`tether.entrypoints.service`; like them, every
job returned has ``lease_token=None`` (:func:`~tether.domain.lease.without_token`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tether.domain.errors import ConfigurationError
from tether.domain.explanation import DUE_AHEAD_LIMIT, Explanation, JobFacts, explain
from tether.domain.job import Job, JobStatus
from tether.domain.lease import without_token
from tether.domain.validation import validate_int
from tether.domain.workers import WorkerEntry
from tether.entrypoints.cancellation import cancel_matching
from tether.entrypoints.maintenance import Reaper, purge_finished
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository
from tether.ports.worker_registry import WorkerRegistry

#: Largest job id and offset: a signed 64-bit integer (the ``BIGINT`` of the SQL tables).
MAX_BIGINT = 2**63 - 1


def job_id_of(value: object) -> int:
    """``value`` as a job id (1 to 2**63 - 1).  Raises ValidationError(``job_id``)."""
    return validate_int(value, "job_id", 1, MAX_BIGINT)



class JobControl:
    """The operator's side of the ``Tether`` API (a mixin: ``Tether`` supplies the attributes)."""

    repository: JobRepository
    dispatcher: Dispatcher
    clock: Clock
    registry: WorkerRegistry | None

    def _notify_after_commit(self, connection: Any, jobs: Sequence[Job]) -> None:  # pragma: no cover - Tether's
        raise NotImplementedError

    def cancel(self, job_id: int) -> Job:
        """Cancel a job; returns it as it now is.

        A ``queued`` or ``retrying`` job is ``cancelled`` at once: it is never leased again and is
        purged like other finished jobs (its idempotency key stays held until then).  A ``running``
        job keeps running with a stored cancellation request: its handler sees ``ctx.cancelled``
        within one heartbeat interval, and whatever outcome its worker writes next (or the reaper,
        if the worker is gone) records ``cancelled``; the job returned is then still ``running``,
        with ``cancel_requested_at`` set.

        Raises:
            ValidationError: ``job_id`` is not a positive integer.
            JobNotFound: no such job.
            InvalidTransition: the job is completed, dead or cancelled already (``.status`` names
                it); nothing changed.
        """
        return without_token(self.repository.cancel(job_id_of(job_id), now=self.clock.now()))

    def cancel_matching(
        self,
        *,
        queue: str | None = None,
        statuses: Sequence[JobStatus | str] | None = None,
        job_type: str | None = None,
        everything: bool = False,
        batch_size: int = 1000,
    ) -> int:
        """Cancel, as :meth:`cancel` does, every job matching all the filters given: of ``queue``,
        in one of ``statuses`` (queued, retrying, running; default all three), of ``job_type``.
        Written in batches of ``batch_size`` jobs, one statement each.  Returns how many jobs were
        cancelled or got a cancellation request (jobs already cancelled, or running with a request
        already, are not counted again).

        Raises:
            ValidationError: no filter given and ``everything`` is not True (field ``filters``);
                a bad queue, job type or batch size; a status that is not one, or that cannot be
                cancelled (completed, dead, cancelled) (field ``statuses``).  Nothing written.
        """
        return cancel_matching(
            self.repository, self.clock, queue=queue, statuses=statuses, job_type=job_type, everything=everything,
            batch_size=batch_size,
        )

    def retry(self, job_id: int) -> Job:
        """Manual retry: a dead or cancelled job back to ``queued`` now, attempts reset to 0.

        Raises:
            JobNotFound; InvalidTransition: the job is neither dead nor cancelled.
        """
        job = self.repository.retry_dead(job_id_of(job_id), now=self.clock.now())
        self._notify_after_commit(None, [job])
        return without_token(job)

    def purge(self, older_than: datetime | timedelta) -> int:
        """Delete completed, dead and cancelled jobs that finished before ``older_than`` (an aware datetime,
        or a timedelta meaning that long ago); returns how many.  Their idempotency keys become
        free again.  Raises ValidationError for anything else."""
        return purge_finished(self.repository, self.clock, older_than)

    def workers(self) -> builtins.list[WorkerEntry]:
        """The worker registry: one :class:`~tether.domain.workers.WorkerEntry` per worker pool
        that is running or stopped without a clean stop in the last day, oldest start first, each
        with ``gone`` set (no refresh for a few heartbeat intervals; see
        :func:`~tether.domain.workers.is_gone`).  Information only.

        Raises:
            ConfigurationError: this app's store keeps no worker registry.
            StorageUnavailable: the store could not be reached.
        """
        if self.registry is None:
            raise ConfigurationError(f"workers: {type(self.repository).__name__} keeps no worker registry")
        return self.registry.list_workers(now=self.clock.now())

    def explain(self, job_id: int) -> Explanation:
        """Why the job is where it is, from the store alone: a one-line ``verdict`` (scheduled for
        later, its queue paused, no live worker handles it, its queue at its running limit, its
        concurrency key at the queue's per-key limit, running
        on a worker, waiting behind N due jobs, retrying, dead, completed ...) and the ``facts`` behind it (see :mod:`tether.domain.explanation`).
        Reads the job, the worker registry (if the store keeps one) and, for a due job, a count of
        the due jobs ahead of it (at most 10,000).  Never shows the lease token.

        Raises:
            JobNotFound; ValidationError: not a positive integer; StorageUnavailable.
        """
        job = self.repository.get(job_id_of(job_id))
        now = self.clock.now()
        workers = None
        if self.registry is not None and not job.status.is_terminal:
            workers = tuple(self.registry.list_workers(now=now))
        due_ahead = self.repository.count_due_ahead(job, now=now, limit=DUE_AHEAD_LIMIT) if job.is_due(now) else None
        state = queue_running = key_running = None
        if job.status.is_leasable:
            state = next((s for s in self.repository.queue_states() if s.name == job.queue), None)
            if state is not None and state.max_running is not None:
                queue_running = self.repository.count_by_status(queue=job.queue)[JobStatus.RUNNING]
            if state is not None and state.max_running_per_key is not None and job.concurrency_key is not None:
                key_running = self.repository.count_running_by_key(job.queue, job.concurrency_key, now=now)
        facts = JobFacts(job, now, workers, due_ahead, queue_state=state, queue_running=queue_running,
                         key_running=key_running)
        return explain(facts)

    def reap(self) -> builtins.list[Job]:
        """One reaper pass now: running jobs whose lease expired go to ``retrying`` (or ``dead``
        when out of attempts); returns them as written."""
        return [without_token(job) for job in Reaper(self.repository, self.clock, self.dispatcher).run_once()]

