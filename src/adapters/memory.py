"""The in-memory job repository: thread-safe, public, and the fake for downstream tests.

It applies the same rules as the SQL repositories (it runs the same contract suite): arguments are
checked as they check them (a ``lease_timeout`` of 0 or over 100 years, a worker id that is not
1-200 printable characters: ValidationError); payloads are stored in their encoded form, so a
caller mutating its dict after enqueue changes nothing stored; idempotency keys are unique across
stored jobs; ``transaction()`` gives a unit of work whose jobs appear only on commit and vanish
on rollback; an enqueue with a key held by another open transaction waits for that transaction to
end, as a unique index would.

Leasing is O(log n) per job: per-queue heaps of due jobs in lease order, fed from heaps of jobs
waiting for their ``scheduled_at``; stale heap entries are skipped when popped.

It is also a :class:`~tether.ports.worker_registry.WorkerRegistry` (one entry per worker pool),
a :class:`~tether.ports.schedule_store.ScheduleStore` (:mod:`.memory_schedules`) and a
:class:`~tether.ports.overview.JobOverview` (:mod:`.memory_overview`), under the same lock; its
queue controls live in :mod:`tether.adapters.memory_queues`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import attrs
from tether.adapters.memory_overview import MemoryOverview
from tether.adapters.memory_queues import MemoryQueueControls
from tether.adapters.memory_schedules import MemorySchedules
from tether.adapters.memory_workers import MemoryWorkerRegistry
from tether.domain import transitions
from tether.domain.errors import JobNotFound, LeaseLost, ValidationError
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob, lease_order_key
from tether.domain.lease import holds_lease, new_lease_token
from tether.domain.schedules import ScheduleState
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import (
    CANCEL_BATCH_LIMIT,
    CANCELLABLE_STATUSES,
    validate_cancel_statuses,
    validate_int,
    validate_job_types,
    validate_seconds,
    validate_worker_id,
)
from tether.domain.workers import WorkerEntry
from tether.ports.repository import JobRepository


class MemoryTransaction:
    """A unit of work of :class:`InMemoryJobRepository`; pass it as ``connection=``."""

    def __init__(self, repository: InMemoryJobRepository) -> None:
        self.repository = repository
        self.staged: list[Job] = []
        self.callbacks: list[Callable[[], None]] = []
        self.open = True


class InMemoryJobRepository(MemorySchedules, MemoryOverview, MemoryQueueControls, MemoryWorkerRegistry, JobRepository):
    """A complete :class:`~tether.ports.repository.JobRepository` (and
    :class:`~tether.ports.worker_registry.WorkerRegistry`) held in process memory.

    Thread-safe (one lock).  Nothing survives the process: use it for tests, demos and as the
    fake in downstream test suites (see ``tether.testing``).
    """

    def __init__(self) -> None:
        self._lock = threading.Condition(threading.RLock())
        self._jobs: dict[int, Job] = {}
        self._keys: dict[str, int] = {}
        self._pending_keys: dict[str, MemoryTransaction] = {}
        self._ids = itertools.count(1)
        # queue -> heap of (scheduled_at, id) for leasable jobs not yet due
        self._waiting: dict[str, list[tuple[datetime, int]]] = {}
        # queue -> heap of (-priority, scheduled_at, id) for leasable jobs that are due
        self._ready: dict[str, list[tuple[int, datetime, int]]] = {}
        self._running: set[int] = set()
        self._workers: dict[str, WorkerEntry] = {}
        self._schedules: dict[str, ScheduleState] = {}
        self._init_queue_controls()

    def __repr__(self) -> str:
        return f"InMemoryJobRepository(jobs={len(self._jobs)})"

    # -- internals ---------------------------------------------------------------------------
    def _store(self, job: Job) -> None:
        """Write ``job`` and keep the indexes in step (called with the lock held)."""
        self._jobs[job.id] = job
        if job.status is JobStatus.RUNNING:
            self._running.add(job.id)
        else:
            self._running.discard(job.id)
        if job.status.is_leasable:
            heapq.heappush(self._waiting.setdefault(job.queue, []), (job.scheduled_at, job.id))

    def _promote(self, queue: str, now: datetime) -> None:
        waiting = self._waiting.get(queue)
        ready = self._ready.setdefault(queue, [])
        while waiting and waiting[0][0] <= now:
            scheduled_at, job_id = heapq.heappop(waiting)
            job = self._jobs.get(job_id)
            if job is not None and job.status.is_leasable and job.scheduled_at == scheduled_at:
                heapq.heappush(ready, lease_order_key(job))

    def _first_of_types(
        self, ready: list[tuple[int, datetime, int]], types: frozenset[str], now: datetime,
        holds: dict[str, int] | None = None,
    ) -> tuple[int, datetime, int] | None:
        """The first entry of ``ready`` in lease order whose job is of ``types``, due at ``now``
        and, under a per-key limit (``holds``: key -> slots held), of a key with room (a scan of
        the queue's ready jobs: the in-memory store keeps no index by type)."""
        return min(
            (e for e in ready if self._valid_ready(e) and self._jobs[e[2]].job_type in types and self._jobs[e[2]].is_due(now)
             and not self._key_full(self._jobs[e[2]].queue, self._jobs[e[2]], holds)),
            default=None,
        )

    def _valid_ready(self, entry: tuple[int, datetime, int]) -> bool:
        job = self._jobs.get(entry[2])
        return job is not None and job.status.is_leasable and lease_order_key(job) == entry

    def _fenced(self, job_id: int, token: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None or not holds_lease(job, token):
            raise LeaseLost(job_id, token)
        return job

    def _insert(self, new_job: NewJob, now: datetime, tx: MemoryTransaction | None) -> EnqueueResult:
        scheduled_at = ensure_utc(new_job.scheduled_at, "scheduled_at")
        if scheduled_at is not new_job.scheduled_at:
            new_job = attrs.evolve(new_job, scheduled_at=scheduled_at)
        key = new_job.idempotency_key
        if key is not None:
            while True:
                if key in self._keys:
                    return EnqueueResult(self._jobs[self._keys[key]], created=False)
                owner = self._pending_keys.get(key)
                if owner is None:
                    break
                if owner is tx:
                    staged = next(j for j in tx.staged if j.idempotency_key == key)
                    return EnqueueResult(staged, created=False)
                self._lock.wait()  # another open transaction holds the key: wait for it to end
        job = transitions.create(new_job, job_id=next(self._ids), now=now)
        if tx is None:
            self._store(job)
            if key is not None:
                self._keys[key] = job.id
        else:
            tx.staged.append(job)
            if key is not None:
                self._pending_keys[key] = tx
        return EnqueueResult(job, created=True)

    def _tx(self, connection: Any) -> MemoryTransaction | None:
        if connection is None:
            return None
        if not isinstance(connection, MemoryTransaction) or connection.repository is not self:
            raise ValidationError("connection", "must come from this repository's transaction()")
        if not connection.open:
            raise ValidationError("connection", "that transaction has already ended")
        return connection

    # -- enqueue -----------------------------------------------------------------------------
    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        now = ensure_utc(now, "now")
        with self._lock:
            return self._insert(new_job, now, self._tx(connection))

    def enqueue_many(self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None) -> list[EnqueueResult]:
        now = ensure_utc(now, "now")
        if connection is not None:
            with self._lock:
                tx = self._tx(connection)
                return [self._insert(n, now, tx) for n in new_jobs]
        with self.transaction() as tx:  # all or none
            return self.enqueue_many(new_jobs, now=now, connection=tx)

    @contextmanager
    def transaction(self) -> Iterator[MemoryTransaction]:
        tx = MemoryTransaction(self)
        try:
            yield tx
        except BaseException:
            with self._lock:
                tx.open = False
                for job in tx.staged:
                    if job.idempotency_key is not None:
                        self._pending_keys.pop(job.idempotency_key, None)
                self._lock.notify_all()
            raise
        with self._lock:
            tx.open = False
            for job in tx.staged:
                self._store(job)
                if job.idempotency_key is not None:
                    self._pending_keys.pop(job.idempotency_key, None)
                    self._keys[job.idempotency_key] = job.id
            self._lock.notify_all()
        for callback in tx.callbacks:
            callback()

    def on_commit(self, connection: Any, callback: Callable[[], None]) -> None:
        tx = self._tx(connection)
        if tx is None:
            callback()
        else:
            tx.callbacks.append(callback)

    # -- reading -----------------------------------------------------------------------------
    def get(self, job_id: int) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def find_by_key(self, idempotency_key: str) -> Job | None:
        with self._lock:
            job_id = self._keys.get(idempotency_key)
            return None if job_id is None else self._jobs.get(job_id)

    def list_jobs(
        self, *, status: JobStatus | None = None, queue: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        with self._lock:
            jobs = [
                j for j in self._jobs.values() if (status is None or j.status is status) and (queue is None or j.queue == queue)
            ]
        jobs.sort(key=lambda j: j.id)
        return jobs[offset : offset + limit]

    def count_by_status(
        self, *, queue: str | None = None, job_types: Sequence[str] | None = None
    ) -> dict[JobStatus, int]:
        counts = {s: 0 for s in JobStatus}
        types = None if job_types is None else set(job_types)
        with self._lock:
            for job in self._jobs.values():
                if (queue is None or job.queue == queue) and (types is None or job.job_type in types):
                    counts[job.status] += 1
        return counts

    def due_jobs(self, *, now: datetime, queues: Sequence[str] | None, limit: int) -> list[Job]:
        """The first ``limit`` due jobs in lease order, read from the ready heaps best first
        (O(limit log n) plus the stale entries met on the way), without leasing them."""
        now = ensure_utc(now, "now")
        due: list[Job] = []
        with self._lock:
            names = list(self._waiting.keys() | self._ready.keys()) if queues is None else list(queues)
            names = [n for n in names if not self._is_paused(n)]
            frontier: list[tuple[tuple[int, datetime, int], str, int]] = []
            for name in names:
                self._promote(name, now)
                ready = self._ready.get(name)
                if ready:
                    frontier.append((ready[0], name, 0))
            heapq.heapify(frontier)
            seen: set[int] = set()
            while frontier and len(due) < limit:
                entry, name, index = heapq.heappop(frontier)
                ready = self._ready[name]
                for child in (2 * index + 1, 2 * index + 2):  # a heap's children are never better than it
                    if child < len(ready):
                        heapq.heappush(frontier, (ready[child], name, child))
                if entry[2] not in seen and self._valid_ready(entry) and self._jobs[entry[2]].is_due(now):
                    seen.add(entry[2])
                    due.append(self._jobs[entry[2]])
        return due

    def count_due_ahead(self, job: Job, *, now: datetime, limit: int) -> int:
        now = ensure_utc(now, "now")
        key = lease_order_key(job)
        with self._lock:
            ahead = sum(
                1
                for other in self._jobs.values()
                if other.queue == job.queue and other.id != job.id and other.is_due(now) and lease_order_key(other) < key
            )
        return max(min(ahead, limit), 0)

    # -- leases ------------------------------------------------------------------------------
    def lease(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int = 1,
        listed_order: bool = False, job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        types = None if job_types is None else frozenset(validate_job_types(job_types) or ())
        leased: list[Job] = []
        if types is not None and not types:
            return leased
        with self._lock:
            names = list(self._waiting.keys() | self._ready.keys()) if queues is None else list(queues)
            rooms: dict[str, int | None] = {}
            holds: dict[str, dict[str, int] | None] = {}  # per-key limited queue -> key -> jobs holding a slot
            passed: list[tuple[str, tuple[int, datetime, int]]] = []  # due entries whose key is at its limit
            for name in names:
                self._promote(name, now)
                rooms[name] = self._room(name, now)
                holds[name] = self._key_holds(name, now)
            while len(leased) < limit:
                best: tuple[int, datetime, int] | None = None
                best_queue = ""
                for name in names:
                    if rooms[name] == 0:
                        continue
                    ready = self._ready.get(name)
                    while ready:
                        if not (self._valid_ready(ready[0]) and self._jobs[ready[0][2]].is_due(now)):
                            entry = heapq.heappop(ready)
                            if self._valid_ready(entry):  # made due by a caller with a later now: waits again
                                heapq.heappush(self._waiting.setdefault(name, []), (self._jobs[entry[2]].scheduled_at, entry[2]))
                        elif self._key_full(name, self._jobs[ready[0][2]], holds[name]):
                            passed.append((name, heapq.heappop(ready)))  # put back after this lease
                        else:
                            break
                    head = ready[0] if ready else None
                    if ready and types is not None:  # the best due job of the types asked whose key has room
                        head = self._first_of_types(ready, types, now, holds[name])
                    if head is not None and (best is None or head < best):
                        best, best_queue = head, name
                        if listed_order and queues is not None:  # the first listed queue with a due job
                            break
                if best is None:
                    break
                if types is None:
                    heapq.heappop(self._ready[best_queue])
                else:
                    ready = self._ready[best_queue]
                    ready.remove(best)
                    heapq.heapify(ready)
                self._hold_key(self._jobs[best[2]], holds[best_queue])
                room = rooms[best_queue]
                if room is not None:
                    rooms[best_queue] = room - 1
                    self._started(best_queue, now)
                job = transitions.lease(
                    self._jobs[best[2]], now=now, token=new_lease_token(), worker_id=worker_id, lease_timeout=lease_timeout
                )
                self._store(job)
                leased.append(job)
            for name, entry in passed:
                heapq.heappush(self._ready[name], entry)
        return leased

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not job.is_due(now) or job.attempts >= job.max_attempts or self._room(job.queue, now) == 0:
                return None
            if self._key_full(job.queue, job, self._key_holds(job.queue, now)):
                return None
            self._started(job.queue, now)
            job = transitions.lease(job, now=now, token=new_lease_token(), worker_id=worker_id, lease_timeout=lease_timeout)
            self._store(job)
            return job

    def _apply(self, job_id: int, token: str, change: Callable[[Job], Job]) -> Job:
        with self._lock:
            job = change(self._fenced(job_id, token))
            self._store(job)
            return job

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        now = ensure_utc(now, "now")
        return self._apply(job_id, token, lambda j: transitions.complete(j, token=token, now=now))

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        now = ensure_utc(now, "now")
        retry_at = None if retry_at is None else ensure_utc(retry_at, "retry_at")
        return self._apply(job_id, token, lambda j: transitions.fail(j, token=token, now=now, error=error, retry_at=retry_at))

    def dead_letter(self, job_id: int, token: str, *, now: datetime, error: str) -> Job:
        now = ensure_utc(now, "now")
        return self._apply(job_id, token, lambda j: transitions.dead_letter(j, token=token, now=now, error=error))

    def heartbeat(self, job_id: int, token: str, *, now: datetime, lease_timeout: float) -> Job:
        now = ensure_utc(now, "now")
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        return self._apply(
            job_id, token, lambda j: transitions.heartbeat(j, token=token, now=now, lease_timeout=lease_timeout)
        )

    def release(self, job_id: int, token: str, *, now: datetime) -> Job:
        now = ensure_utc(now, "now")
        return self._apply(job_id, token, lambda j: transitions.release(j, token=token, now=now))

    def snooze(self, job_id: int, token: str, *, now: datetime, until: datetime) -> Job:
        now = ensure_utc(now, "now")
        until = ensure_utc(until, "until")
        return self._apply(job_id, token, lambda j: transitions.snooze(j, token=token, now=now, until=until))

    # -- operators ---------------------------------------------------------------------------
    def cancel(self, job_id: int, *, now: datetime) -> Job:
        now = ensure_utc(now, "now")
        with self._lock:
            job = transitions.cancel(self.get(job_id), now=now)
            self._store(job)
            return job

    def cancel_many(
        self,
        *,
        now: datetime,
        queues: Sequence[str] | None = None,
        statuses: Sequence[JobStatus] | None = None,
        job_types: Sequence[str] | None = None,
        after_id: int = 0,
        limit: int = 1000,
    ) -> list[Job]:
        now = ensure_utc(now, "now")
        wanted = validate_cancel_statuses(statuses) or CANCELLABLE_STATUSES
        limit = validate_int(limit, "limit", 1, CANCEL_BATCH_LIMIT)
        cancelled: list[Job] = []
        with self._lock:
            for job_id in sorted(i for i in self._jobs if i > after_id):
                job = self._jobs[job_id]
                if (
                    job.status in wanted
                    and job.cancel_requested_at is None
                    and (queues is None or job.queue in queues)
                    and (job_types is None or job.job_type in job_types)
                ):
                    job = transitions.cancel(job, now=now)
                    self._store(job)
                    cancelled.append(job)
                    if len(cancelled) >= limit:
                        break
        return cancelled

    # -- maintenance -------------------------------------------------------------------------
    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        now = ensure_utc(now, "now")
        reaped: list[Job] = []
        if limit < 1:
            return reaped
        with self._lock:
            expired = sorted(
                (j for j in (self._jobs[i] for i in self._running) if j.lease_expired(now)),
                key=lambda j: (j.lease_expires_at, j.id),
            )
            for job in expired[:limit]:
                assert job.lease_token is not None
                job = transitions.reap(job, now=now, token=job.lease_token)
                self._store(job)
                reaped.append(job)
        return reaped

    def retry_dead(self, job_id: int, *, now: datetime) -> Job:
        now = ensure_utc(now, "now")
        with self._lock:
            job = self.get(job_id)
            job = transitions.retry_dead(job, now=now)
            self._store(job)
            return job

    def purge(self, *, older_than: datetime) -> int:
        older_than = ensure_utc(older_than, "older_than")
        with self._lock:
            doomed = [
                j
                for j in self._jobs.values()
                if j.status.is_terminal and j.finished_at is not None and j.finished_at < older_than
            ]
            for job in doomed:
                del self._jobs[job.id]
                if job.idempotency_key is not None and self._keys.get(job.idempotency_key) == job.id:
                    del self._keys[job.idempotency_key]
        return len(doomed)

    def close(self) -> None:
        """Nothing to release."""


__all__ = ["InMemoryJobRepository", "MemoryTransaction"]
