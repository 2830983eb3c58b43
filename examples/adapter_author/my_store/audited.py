"""A job repository that wraps another one and keeps an audit trail of every state change.

It stands in for any third-party adapter: it implements the whole
:class:`tether.ports.repository.JobRepository` port (by delegating to the repository it wraps)
and adds behaviour of its own, so it must prove it still honours the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob
from tether.domain.queues import QueueState
from tether.ports.repository import JobRepository


class AuditedJobRepository(JobRepository):
    """Every write is delegated to ``inner``; each job it returns is recorded in ``trail``
    as ``(job id, status, now)``."""

    def __init__(self, inner: JobRepository) -> None:
        self.inner = inner
        self.trail: list[tuple[int, str, datetime]] = []

    def _audit(self, jobs: Sequence[Job], now: datetime) -> None:
        self.trail.extend((job.id, job.status.value, now) for job in jobs)

    def _one(self, job: Job, now: datetime) -> Job:
        self._audit([job], now)
        return job

    # writes: delegated, then recorded
    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        result = self.inner.enqueue(new_job, now=now, connection=connection)
        self._audit([result.job] if result.created else [], now)
        return result

    def enqueue_many(self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None) -> list[EnqueueResult]:
        results = self.inner.enqueue_many(new_jobs, now=now, connection=connection)
        self._audit([r.job for r in results if r.created], now)
        return results

    def lease(self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float,
              limit: int = 1, listed_order: bool = False, job_types: Sequence[str] | None = None) -> list[Job]:
        jobs = self.inner.lease(queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit,
                                listed_order=listed_order, job_types=job_types)
        self._audit(jobs, now)
        return jobs

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        job = self.inner.lease_job(job_id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
        return None if job is None else self._one(job, now)

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        return self._one(self.inner.complete(job_id, token, now=now), now)

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        return self._one(self.inner.fail(job_id, token, now=now, error=error, retry_at=retry_at), now)

    def dead_letter(self, job_id: int, token: str, *, now: datetime, error: str) -> Job:
        return self._one(self.inner.dead_letter(job_id, token, now=now, error=error), now)

    def heartbeat(self, job_id: int, token: str, *, now: datetime, lease_timeout: float) -> Job:
        return self._one(self.inner.heartbeat(job_id, token, now=now, lease_timeout=lease_timeout), now)

    def release(self, job_id: int, token: str, *, now: datetime) -> Job:
        return self._one(self.inner.release(job_id, token, now=now), now)

    def snooze(self, job_id: int, token: str, *, now: datetime, until: datetime) -> Job:
        return self._one(self.inner.snooze(job_id, token, now=now, until=until), now)

    def cancel(self, job_id: int, *, now: datetime) -> Job:
        return self._one(self.inner.cancel(job_id, now=now), now)

    def cancel_many(self, *, now: datetime, queues: Sequence[str] | None = None,
                    statuses: Sequence[JobStatus] | None = None, job_types: Sequence[str] | None = None,
                    after_id: int = 0, limit: int = 1000) -> list[Job]:
        jobs = self.inner.cancel_many(now=now, queues=queues, statuses=statuses, job_types=job_types,
                                      after_id=after_id, limit=limit)
        self._audit(jobs, now)
        return jobs

    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        jobs = self.inner.reap(now=now, limit=limit)
        self._audit(jobs, now)
        return jobs

    def retry_dead(self, job_id: int, *, now: datetime) -> Job:
        return self._one(self.inner.retry_dead(job_id, now=now), now)

    def purge(self, *, older_than: datetime) -> int:
        return self.inner.purge(older_than=older_than)

    # everything else: delegated as is
    def transaction(self) -> AbstractContextManager[Any]:
        return self.inner.transaction()

    def on_commit(self, connection: Any, callback: Callable[[], None]) -> None:
        self.inner.on_commit(connection, callback)

    def get(self, job_id: int) -> Job:
        return self.inner.get(job_id)

    def list_jobs(self, *, status: JobStatus | None = None, queue: str | None = None, limit: int = 100,
                  offset: int = 0) -> list[Job]:
        return self.inner.list_jobs(status=status, queue=queue, limit=limit, offset=offset)

    def find_by_key(self, idempotency_key: str) -> Job | None:
        return self.inner.find_by_key(idempotency_key)

    def count_by_status(self, *, queue: str | None = None,
                        job_types: Sequence[str] | None = None) -> dict[JobStatus, int]:
        return self.inner.count_by_status(queue=queue, job_types=job_types)

    def due_jobs(self, *, now: datetime, queues: Sequence[str] | None, limit: int) -> list[Job]:
        return self.inner.due_jobs(now=now, queues=queues, limit=limit)

    def set_queue_paused(self, queue: str, paused: bool, *, now: datetime) -> QueueState:
        return self.inner.set_queue_paused(queue, paused, now=now)

    def set_queue_limit(self, queue: str, max_running: int | None, *, now: datetime) -> QueueState:
        return self.inner.set_queue_limit(queue, max_running, now=now)

    def set_queue_key_limit(self, queue: str, max_running_per_key: int | None, *, now: datetime) -> QueueState:
        return self.inner.set_queue_key_limit(queue, max_running_per_key, now=now)

    def count_running_by_key(self, queue: str, concurrency_key: str, *, now: datetime) -> int:
        return self.inner.count_running_by_key(queue, concurrency_key, now=now)

    def set_queue_rate(self, queue: str, rate_limit: int | None, rate_period: float | None, *,
                       now: datetime) -> QueueState:
        return self.inner.set_queue_rate(queue, rate_limit, rate_period, now=now)

    def queue_states(self) -> list[QueueState]:
        return self.inner.queue_states()

    def count_by_queue(self, *, job_types: Sequence[str] | None = None) -> dict[str, dict[JobStatus, int]]:
        return self.inner.count_by_queue(job_types=job_types)

    def close(self) -> None:
        self.inner.close()
