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
- a running limit ``max_running`` of a queue: a lease takes at most ``max_running - n`` of its
  jobs, ``n`` the queue's running jobs whose lease expires after now (an expired lease frees its
  slot before the reaper writes the job); the jobs a limit cuts from a batch are the queue's
  later ones in lease order.  Clearing the limit lifts it; ``due_jobs`` ignores it.  Across
  queues, a store that leases limited queues last (SQLite, PostgreSQL: the unlimited queues'
  jobs first, then the limited queue's) is modelled with ``limited_last``.
- a rate limit ``(starts, per)`` of a queue: windows of ``per`` seconds aligned to the Unix
  epoch (in whole microseconds); a lease takes at most ``starts`` less the leases of the queue
  in the current window (every lease counts, also by id); with a running limit the smaller
  room wins.  Setting or clearing a rate starts its count afresh.
- a per-key limit ``max_running_per_key`` of a queue: a lease takes no job whose concurrency key
  already has that many jobs of the queue running under unexpired leases, counting the jobs the
  same lease took; it passes over such a job to the ones behind it.  Jobs without a key are not
  limited by it, nor is ``due_jobs``.  A store that leases limited queues last reads a window:
  the first (lease limit less the jobs it already took) due jobs of the queue whose key was not
  at its limit before the lease; the key rule and the queue's room then cut that window.
- retry_dead: dead or cancelled -> queued, attempts 0, due now, no request.  purge:
  completed/dead/cancelled with finished_at < cutoff are deleted and free their keys.
- schedules: a declaration stores a fingerprint (a new schedule has no mark; a different
  fingerprint sets the mark to now, except for a refresh, which leaves both as they were).  A tick enqueues its job only when the schedule exists and
  its mark is absent or before the tick, and, overlap off, its last tick's job is not queued,
  retrying or running (a purged one does not hold it back); the mark then becomes the tick and
  the last job the tick's job (an existing holder of its key included).  Purge leaves schedules alone.
- history: every write that takes a job out of running (the holder's complete, fail, dead
  letter, release, snooze; the reaper) appends one entry (attempt number, worker, lease start,
  now, outcome, whether it has an error) and the newest 20 are kept.  The outcome: cancelled
  when a cancel was requested; else complete -> completed; a failure -> timed_out when its error
  is a time limit's, else failed when the job retries and dead when it does not; release ->
  released; snooze -> snoozed; reaper -> lease_lost.  Only failures and the reaper give an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tether.testing.model_schedules import ModelSchedule, ScheduleModel

QUEUED, RUNNING, RETRYING, COMPLETED, DEAD, CANCELLED = (
    "queued", "running", "retrying", "completed", "dead", "cancelled"
)
STATUSES = (QUEUED, RUNNING, RETRYING, COMPLETED, DEAD, CANCELLED)
#: Attempts a job's history keeps (the newest).
HISTORY_KEPT = 20
#: One history entry: (attempt number, worker, lease start, end, outcome, has an error).
Entry = tuple[int, str | None, datetime | None, datetime, str, bool]

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
    leased_at: datetime | None = None
    history: list[Entry] = field(default_factory=list)
    limit_key: str | None = None
    job_type: str = "machine.job"

    def due(self, now: datetime) -> bool:
        return self.status in (QUEUED, RETRYING) and self.scheduled_at <= now

    def order(self) -> tuple[int, datetime, int]:
        return (-self.priority, self.scheduled_at, self.ordinal)

    def _drop_lease(self) -> None:
        self.token = None
        self.worker = None
        self.lease_expires_at = None
        self.leased_at = None

    def _end_attempt(self, now: datetime, outcome: str, *, error: bool) -> None:
        """Record how the running attempt ended, then drop the lease."""
        self.history.append((self.attempts, self.worker, self.leased_at, now, outcome, error))
        del self.history[:-HISTORY_KEPT]
        self._drop_lease()

    def _end_cancelled(self, now: datetime, *, error: bool) -> ModelJob:
        """The outcome of any write on a running job whose cancellation was requested."""
        self.status, self.finished_at = CANCELLED, now
        if error:
            self.has_error = True
        self._end_attempt(now, CANCELLED, error=error)
        return self


class JobModel(ScheduleModel):
    """All jobs the model knows, by ordinal; purged ones are removed.  And the schedules, by name."""

    def __init__(self) -> None:
        self.jobs: dict[int, ModelJob] = {}
        self.keys: dict[str, int] = {}
        self.enqueued = 0
        self.tokens: set[str] = set()
        self.schedules: dict[str, ModelSchedule] = {}
        self.paused: set[str] = set()
        self.max_running: dict[str, int] = {}
        self.per_key: dict[str, int] = {}  # queue -> max_running_per_key
        self.rates: dict[str, tuple[int, int]] = {}  # queue -> (starts, period in µs)
        self.windows: dict[str, tuple[int, int]] = {}  # queue -> (window start in µs, starts in it)

    # -- queue pause -------------------------------------------------------------------------
    def pause(self, queue: str) -> None:
        self.paused.add(queue)

    def resume(self, queue: str) -> None:
        self.paused.discard(queue)

    # -- running limits ----------------------------------------------------------------------
    def set_limit(self, queue: str, max_running: int | None) -> None:
        """Set (an int >= 1) or clear (None) the running limit of ``queue``."""
        if max_running is None:
            self.max_running.pop(queue, None)
        else:
            self.max_running[queue] = max_running

    def set_rate(self, queue: str, starts: int | None, per: float | None) -> None:
        """Set (``starts`` >= 1 per ``per`` seconds) or clear (None) the rate limit of ``queue``."""
        self.windows.pop(queue, None)
        if starts is None or per is None:
            self.rates.pop(queue, None)
        else:
            self.rates[queue] = (starts, round(per * 1_000_000))

    def set_key_limit(self, queue: str, per_key: int | None) -> None:
        """Set (an int >= 1) or clear (None) the per-key running limit of ``queue``."""
        if per_key is None:
            self.per_key.pop(queue, None)
        else:
            self.per_key[queue] = per_key

    def limited(self, queue: str) -> bool:
        return queue in self.max_running or queue in self.rates or queue in self.per_key

    def key_holds(self, queue: str, now: datetime) -> dict[str, int]:
        """Per concurrency key, the jobs of ``queue`` running under a lease that expires after ``now``."""
        running = [j.limit_key for j in self.jobs.values() if j.queue == queue and j.limit_key is not None
                   and j.status == RUNNING and j.lease_expires_at is not None and j.lease_expires_at > now]
        return {k: running.count(k) for k in set(running)}

    def _window(self, queue: str, now: datetime) -> int:
        period = self.rates[queue][1]
        since = now - datetime(1970, 1, 1, tzinfo=now.tzinfo)
        micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
        return micros // period * period

    def room(self, queue: str, now: datetime) -> int | None:
        """How many jobs of ``queue`` a lease may take at ``now`` (None: no limit)."""
        rooms = []
        limit = self.max_running.get(queue)
        if limit is not None:
            holding = sum(
                1 for j in self.jobs.values()
                if j.queue == queue and j.status == RUNNING and j.lease_expires_at is not None
                and j.lease_expires_at > now
            )
            rooms.append(limit - holding)
        if queue in self.rates:
            window, started = self.windows.get(queue, (None, 0))
            rooms.append(self.rates[queue][0] - (started if window == self._window(queue, now) else 0))
        return max(min(rooms), 0) if rooms else None

    # -- enqueue -----------------------------------------------------------------------------
    def enqueue(
        self, *, queue: str, priority: int, max_attempts: int, scheduled_at: datetime, key: str | None, payload: object,
        limit_key: str | None = None, job_type: str = "machine.job",
    ) -> tuple[int, bool]:
        """Returns ``(ordinal, created)``; an existing key returns the holder's ordinal, False."""
        if key is not None and key in self.keys:
            return self.keys[key], False
        self.enqueued += 1
        self.jobs[self.enqueued] = ModelJob(
            self.enqueued, queue, priority, max_attempts, scheduled_at, key, payload, limit_key=limit_key, job_type=job_type
        )
        if key is not None:
            self.keys[key] = self.enqueued
        return self.enqueued, True

    # -- leases ------------------------------------------------------------------------------
    def next_leases(
        self, *, now: datetime, queues: tuple[str, ...] | None, limit: int, listed_order: bool = False,
        limits: bool = True, limited_last: bool = False, job_types: tuple[str, ...] | None = None,
    ) -> list[int]:
        """Ordinals a lease of up to ``limit`` jobs takes, in lease order; with ``listed_order``
        (and queues named) queue by queue in the order listed, each in lease order.  Nothing of a
        paused queue, and with ``job_types`` nothing of another type (the others are passed
        over, not counted: a filtered lease takes the same jobs as an unfiltered lease would if
        only those types existed).  With ``limits`` (a lease; ``due_jobs`` has none) no more of a
        queue than its running limit's room; with ``limited_last`` the jobs of queues with a
        running limit come after every other queue's (exact with at most one such queue: a store
        that leases several limited queues in turn may start at any of them)."""
        due = [
            j for j in self.jobs.values()
            if j.due(now) and j.queue not in self.paused and (queues is None or j.queue in queues)
            and (job_types is None or j.job_type in job_types)
        ]

        def key(j: ModelJob) -> tuple[object, ...]:
            listed = queues.index(j.queue) if listed_order and queues is not None else 0
            last = limits and limited_last and self.limited(j.queue)
            return (last, listed, *j.order())

        rooms = {q: self.room(q, now) for q in {j.queue for j in due}} if limits else {}
        holds = {q: self.key_holds(q, now) for q in {j.queue for j in due} if q in self.per_key} if limits else {}
        full = {q: {k for k, n in held.items() if n >= self.per_key[q]} for q, held in holds.items()}
        window: dict[str, int] = {}  # limited_last: what is left of a per-key queue's window
        chosen: list[int] = []
        for job in sorted(due, key=key):
            if len(chosen) == limit:
                break
            held = holds.get(job.queue)
            if held is not None:
                if job.limit_key in full[job.queue]:
                    continue
                if limited_last:
                    left = window.setdefault(job.queue, limit - len(chosen))
                    if left == 0:
                        continue
                    window[job.queue] = left - 1
                if job.limit_key is not None and held.get(job.limit_key, 0) >= self.per_key[job.queue]:
                    continue
            room = rooms.get(job.queue)
            if room is not None:
                if room == 0:
                    continue
                rooms[job.queue] = room - 1
            if held is not None and job.limit_key is not None:
                held[job.limit_key] = held.get(job.limit_key, 0) + 1
            chosen.append(job.ordinal)
        return chosen

    def can_lease(self, ordinal: int, now: datetime) -> bool:
        job = self.jobs.get(ordinal)
        return (
            job is not None and job.due(now) and job.attempts < job.max_attempts and job.queue not in self.paused
            and self.room(job.queue, now) != 0
            and not (job.queue in self.per_key and job.limit_key is not None
                     and self.key_holds(job.queue, now).get(job.limit_key, 0) >= self.per_key[job.queue])
        )

    def record_lease(self, ordinal: int, *, token: str, worker: str, now: datetime, lease_timeout: float) -> ModelJob:
        """Apply a lease the repository granted; the token must be new."""
        if token in self.tokens:
            raise AssertionError(f"lease token {token!r} was handed out before")
        job = self.jobs[ordinal]
        if not job.due(now) or job.attempts >= job.max_attempts:
            raise AssertionError(f"job #{ordinal} was leased though the model says it is not leasable")
        self.tokens.add(token)
        if job.queue in self.rates:
            window = self._window(job.queue, now)
            current, started = self.windows.get(job.queue, (window, 0))
            self.windows[job.queue] = (window, started + 1 if current == window else 1)
        job.status = RUNNING
        job.attempts += 1
        job.token = token
        job.worker = worker
        job.leased_at = now
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
        job._end_attempt(now, COMPLETED, error=False)
        return job

    def fail(
        self, ordinal: int, token: str, *, now: datetime, retry_at: datetime | None, timed_out: bool = False
    ) -> ModelJob:
        """``timed_out``: the error is a time limit's (``JobTimeout: ...``)."""
        job = self._holder(ordinal, token)
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=True)
        job.has_error = True
        if retry_at is not None and job.attempts < job.max_attempts:
            job._end_attempt(now, "timed_out" if timed_out else "failed", error=True)
            job.status, job.scheduled_at = RETRYING, retry_at
        else:
            job._end_attempt(now, "timed_out" if timed_out else DEAD, error=True)
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
        return self._give_back(ordinal, token, now=now, until=now, outcome="released")

    def snooze(self, ordinal: int, token: str, *, now: datetime, until: datetime) -> ModelJob:
        return self._give_back(ordinal, token, now=now, until=until, outcome="snoozed")

    def _give_back(self, ordinal: int, token: str, *, now: datetime, until: datetime, outcome: str) -> ModelJob:
        job = self._holder(ordinal, token)
        if job.cancel_requested_at is not None:
            return job._end_cancelled(now, error=False)
        job._end_attempt(now, outcome, error=False)
        job.status, job.scheduled_at = QUEUED, until
        job.attempts -= 1  # has_error unchanged: giving a job back is not a failure
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
        job._end_attempt(now, "lease_lost", error=True)
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

    def queue_summaries(self, now: datetime) -> list[tuple[str, int, int, int, int, datetime | None]]:
        """``(queue, queued, running, retrying, due, oldest due scheduled_at)`` of each queue holding
        a live job, by name (what ``JobOverview.queue_summaries`` must report)."""
        live: dict[str, list[ModelJob]] = {}
        for job in self.jobs.values():
            if job.status in (QUEUED, RUNNING, RETRYING):
                live.setdefault(job.queue, []).append(job)
        summaries = []
        for queue, jobs in sorted(live.items()):
            due = [job.scheduled_at for job in jobs if job.due(now)]
            summaries.append((queue, sum(j.status == QUEUED for j in jobs), sum(j.status == RUNNING for j in jobs),
                              sum(j.status == RETRYING for j in jobs), len(due), min(due) if due else None))
        return summaries

    def running(self) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.status == RUNNING]


__all__ = [
    "FINISHED", "HISTORY_KEPT", "STATUSES", "Entry", "JobModel", "ModelInvalid", "ModelJob", "ModelLeaseLost",
    "ModelNotFound", "ModelSchedule",
]
