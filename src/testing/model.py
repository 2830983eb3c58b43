"""A pure model of the job state machine: the independent oracle the state machines check against.

It is written from ``shared/DESIGN.md`` in plain dicts and dataclasses and deliberately shares no
code with :mod:`tether.domain` (not the transitions, not the statuses), so a bug there cannot hide
itself by being in the oracle too.  Jobs are numbered 1, 2, 3 ... in enqueue order (``ordinal``);
the caller maps ordinals to the ids a repository assigns.  Fencing tokens come from the repository
and are recorded here.

The rules, restated:
- enqueue: ``queued``, attempts 0; an idempotency key held by a stored job returns that job.
- lease: due jobs (queued/retrying, ``scheduled_at <= now``) in order priority DESC,
  scheduled_at ASC, id ASC; attempts + 1; the lease expires ``lease_timeout`` seconds later.
- holder writes need the job ``running`` under exactly that token, else "lease lost":
  complete -> completed; fail -> retrying at ``retry_at`` if given and attempts < max, else dead;
  dead letter -> dead; heartbeat -> expiry ``max(old, now + timeout)``; release -> queued, due now,
  attempts - 1, the last error (or none) kept.
- snooze: like release, but due at the time the holder names.
- reap: running jobs whose expiry <= now -> retrying due now (attempts < max) or dead.
- cancel (an operator): queued/retrying -> cancelled now (finished now, request time now);
  running -> stays running, the request time recorded (the first one kept); completed, dead or
  cancelled -> refused ("invalid"), unknown -> "not found".
- once a running job carries a cancel request, whatever its holder writes (complete, fail, dead
  letter, release, snooze) and the reaper make it cancelled, finished now, attempts unchanged,
  the error set by a failure or the reaper (else kept).  A heartbeat keeps the request.
- pause (an operator) of a queue: none of its jobs is leased until it is resumed; it needs no
  job; nothing else about its jobs changes (enqueue, holder writes, reap, cancel go on).
- retry_dead: dead or cancelled -> queued, attempts 0, due now, no request.  purge:
  completed/dead/cancelled with finished_at < cutoff are deleted and free their keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

QUEUED, RUNNING, RETRYING, COMPLETED, DEAD, CANCELLED = (
    "queued", "running", "retrying", "completed", "dead", "cancelled"
)
STATUSES = (QUEUED, RUNNING, RETRYING, COMPLETED, DEAD, CANCELLED)
#: Statuses nothing but purge (and a manual retry of dead or cancelled jobs) moves a job out of.
FINISHED = (COMPLETED, DEAD, CANCELLED)


class ModelLeaseLost(Exception):
    """The model's verdict: this holder write must be refused (the repository raises LeaseLost)."""


class ModelInvalid(Exception):
    """The model's verdict: the move is not allowed (the repository raises InvalidTransition)."""


class ModelNotFound(Exception):
    """The model's verdict: no such job (the repository raises JobNotFound)."""


@dataclass
class ModelJob:
    """The model's view of one job (``has_error``: whether ``last_error`` is set)."""

    ordinal: int
    queue: str
    priority: int
    max_attempts: int
    scheduled_at: datetime
    key: str | None
    payload: object
    status: str = QUEUED
    attempts: int = 0
    token: str | None = None
    worker: str | None = None
    lease_expires_at: datetime | None = None
    has_error: bool = False
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None

    def due(self, now: datetime) -> bool:
        return self.status in (QUEUED, RETRYING) and self.scheduled_at <= now

    def order(self) -> tuple[int, datetime, int]:
        return (-self.priority, self.scheduled_at, self.ordinal)

    def _drop_lease(self) -> None:
        self.token = None
        self.worker = None
        self.lease_expires_at = None

    def _end_cancelled(self, now: datetime, *, error: bool) -> ModelJob:
        """The outcome of any write on a running job whose cancellation was requested."""
        self.status, self.finished_at = CANCELLED, now
        if error:
            self.has_error = True
        self._drop_lease()
        return self


class JobModel:
    """All jobs the model knows, by ordinal; purged ones are removed."""

    def __init__(self) -> None:
        self.jobs: dict[int, ModelJob] = {}
        self.keys: dict[str, int] = {}
        self.enqueued = 0
        self.tokens: set[str] = set()
        self.paused: set[str] = set()

    # -- queue pause -------------------------------------------------------------------------
    def pause(self, queue: str) -> None:
        self.paused.add(queue)

    def resume(self, queue: str) -> None:
        self.paused.discard(queue)

    # -- enqueue -----------------------------------------------------------------------------
    def enqueue(
        self, *, queue: str, priority: int, max_attempts: int, scheduled_at: datetime, key: str | None, payload: object
    ) -> tuple[int, bool]:
        """Returns ``(ordinal, created)``; an existing key returns the holder's ordinal, False."""
        if key is not None and key in self.keys:
            return self.keys[key], False
        self.enqueued += 1
        self.jobs[self.enqueued] = ModelJob(self.enqueued, queue, priority, max_attempts, scheduled_at, key, payload)
        if key is not None:
            self.keys[key] = self.enqueued
        return self.enqueued, True

    # -- leases ------------------------------------------------------------------------------
    def next_leases(self, *, now: datetime, queues: tuple[str, ...] | None, limit: int) -> list[int]:
        """Ordinals a lease of up to ``limit`` jobs takes, in lease order."""
        due = [
            j for j in self.jobs.values()
            if j.due(now) and j.queue not in self.paused and (queues is None or j.queue in queues)
        ]
        return [j.ordinal for j in sorted(due, key=ModelJob.order)[:limit]]

    def can_lease(self, ordinal: int, now: datetime) -> bool:
        job = self.jobs.get(ordinal)
        return job is not None and job.due(now) and job.attempts < job.max_attempts and job.queue not in self.paused

    def record_lease(self, ordinal: int, *, token: str, worker: str, now: datetime, lease_timeout: float) -> ModelJob:
        """Apply a lease the repository granted; the token must be new."""
        if token in self.tokens:
            raise AssertionError(f"lease token {token!r} was handed out before")
        job = self.jobs[ordinal]
        if not job.due(now) or job.attempts >= job.max_attempts:
            raise AssertionError(f"job #{ordinal} was leased though the model says it is not leasable")
        self.tokens.add(token)
        job.status = RUNNING
        job.attempts += 1
        job.token = token
        job.worker = worker
        job.lease_expires_at = now + timedelta(seconds=lease_timeout)
        return job

    def _holder(self, ordinal: int, token: str) -> ModelJob:
        job = self.jobs.get(ordinal)
        if job is None or job.status != RUNNING or job.token != token:
            raise ModelLeaseLost(ordinal)
        return job

    # -- holder writes -----------------------------------------------------------------------
    def complete(self, ordinal: int, token: str, *, now: datetime) -> ModelJob:
        job = self._holder(ordinal, token)
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=False)
        job.status, job.finished_at = COMPLETED, now
        job._drop_lease()
        return job

    def fail(self, ordinal: int, token: str, *, now: datetime, retry_at: datetime | None) -> ModelJob:
        job = self._holder(ordinal, token)
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=True)
        job.has_error = True
        job._drop_lease()
        if retry_at is not None and job.attempts < job.max_attempts:
            job.status, job.scheduled_at = RETRYING, retry_at
        else:
            job.status, job.finished_at = DEAD, now
        return job

    def dead_letter(self, ordinal: int, token: str, *, now: datetime) -> ModelJob:
        return self.fail(ordinal, token, now=now, retry_at=None)

    def heartbeat(self, ordinal: int, token: str, *, now: datetime, lease_timeout: float) -> ModelJob:
        job = self._holder(ordinal, token)
        assert job.lease_expires_at is not None
        job.lease_expires_at = max(job.lease_expires_at, now + timedelta(seconds=lease_timeout))
        return job

    def release(self, ordinal: int, token: str, *, now: datetime) -> ModelJob:
        return self.snooze(ordinal, token, now=now, until=now)

    def snooze(self, ordinal: int, token: str, *, now: datetime, until: datetime) -> ModelJob:
        job = self._holder(ordinal, token)
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=False)
        job.status, job.scheduled_at = QUEUED, until
        job.attempts -= 1  # has_error unchanged: giving a job back is not a failure
        job._drop_lease()
        return job

    # -- operators ---------------------------------------------------------------------------
    def cancel(self, ordinal: int, *, now: datetime) -> ModelJob:
        job = self.jobs.get(ordinal)
        if job is None:
            raise ModelNotFound(ordinal)
        if job.status in (QUEUED, RETRYING):
            job.status, job.finished_at, job.cancel_requested_at = CANCELLED, now, now
        elif job.status == RUNNING:
            if job.cancel_requested_at is None:
                job.cancel_requested_at = now
        else:
            raise ModelInvalid(ordinal)
        return job

    def cancel_many(self, *, now: datetime, queues: tuple[str, ...] | None, limit: int) -> list[ModelJob]:
        """Cancel the first ``limit`` jobs by ordinal of these queues that a cancel still changes
        (queued, retrying, or running without a request yet)."""
        chosen = [
            j for j in sorted(self.jobs.values(), key=lambda j: j.ordinal)
            if (queues is None or j.queue in queues)
            and (j.status in (QUEUED, RETRYING) or (j.status == RUNNING and j.cancel_requested_at is None))
        ][:limit]
        return [self.cancel(j.ordinal, now=now) for j in chosen]

    # -- maintenance -------------------------------------------------------------------------
    def expired(self, now: datetime) -> list[int]:
        return sorted(
            j.ordinal
            for j in self.jobs.values()
            if j.status == RUNNING and j.lease_expires_at is not None and j.lease_expires_at <= now
        )

    def reap(self, ordinal: int, *, now: datetime) -> ModelJob:
        job = self.jobs[ordinal]
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=True)
        job.has_error = True
        job._drop_lease()
        if job.attempts < job.max_attempts:
            job.status, job.scheduled_at = RETRYING, now
        else:
            job.status, job.finished_at = DEAD, now
        return job

    def retry_dead(self, ordinal: int, *, now: datetime) -> ModelJob:
        job = self.jobs.get(ordinal)
        if job is None:
            raise ModelNotFound(ordinal)
        if job.status not in (DEAD, CANCELLED):
            raise ModelInvalid(ordinal)
        job.status, job.attempts, job.scheduled_at, job.finished_at = QUEUED, 0, now, None
        job.cancel_requested_at = None
        return job

    def purge(self, *, older_than: datetime) -> list[int]:
        doomed = [
            j.ordinal
            for j in self.jobs.values()
            if j.status in FINISHED and j.finished_at is not None and j.finished_at < older_than
        ]
        for ordinal in doomed:
            job = self.jobs.pop(ordinal)
            if job.key is not None and self.keys.get(job.key) == ordinal:
                del self.keys[job.key]
        return doomed

    # -- views -------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for job in self.jobs.values():
            counts[job.status] += 1
        return counts

    def running(self) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.status == RUNNING]


__all__ = ["FINISHED", "STATUSES", "JobModel", "ModelInvalid", "ModelJob", "ModelLeaseLost", "ModelNotFound"]
