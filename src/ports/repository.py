"""The job repository port: durable storage of jobs and the only place their state changes.

Every method that changes a running job is a compare-and-set on (job id, status ``running``,
lease token) and raises :class:`~tether.domain.errors.LeaseLost` when zero rows match; the job is
then unchanged.  Times are timezone-aware UTC and come in as ``now`` from the clock port, so one
time source rules every stored time and comparison.

Transient storage trouble (lock timeouts, lost connections) is retried inside the adapter where
that is safe and otherwise raised as :class:`~tether.domain.errors.StorageUnavailable`; it is
never reported as "no job".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from tether.domain.errors import LeaseLost, StorageUnavailable
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob, lease_order_key
from tether.domain.queues import QueueState
from tether.domain.validation import validate_job_types


@runtime_checkable
class JobRepository(Protocol):
    """Stores jobs and applies the state machine of :mod:`tether.domain.transitions` atomically."""

    # -- enqueue -----------------------------------------------------------------------------
    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        """Store one job (``queued``, ``created_at = now``).

        With an idempotency key that a stored job already has, store nothing and return that job
        with ``created=False``; race-free under concurrency and rollback (case C10).
        ``connection`` joins the caller's transaction (a handle from :meth:`transaction`, or for
        SQL repositories a SQLAlchemy ``Connection``/``Session``); nothing is visible before it
        commits and nothing remains if it rolls back.
        """
        ...

    def enqueue_many(
        self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None
    ) -> list[EnqueueResult]:
        """Store several jobs at once, all or none; results in input order (keys as in :meth:`enqueue`;
        a key repeated within the batch yields the first job, ``created=False`` for the repeats)."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A unit of work of the repository's own: ``with repo.transaction() as tx: repo.enqueue(..., connection=tx)``.

        Commits when the block exits normally, rolls back if it raises."""
        ...

    def on_commit(self, connection: Any, callback: Callable[[], None]) -> None:
        """Run ``callback`` once ``connection``'s transaction commits (at once if ``connection`` is
        None or not in a transaction); never if it rolls back.  Used to notify dispatchers."""
        ...

    # -- reading -----------------------------------------------------------------------------
    def get(self, job_id: int) -> Job:
        """The job with this id.  Raises :class:`~tether.domain.errors.JobNotFound`."""
        ...

    def find_by_key(self, idempotency_key: str) -> Job | None:
        """The stored job holding this idempotency key, or None (never enqueued, or purged)."""
        ...

    def list_jobs(
        self,
        *,
        status: JobStatus | None = None,
        queue: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job]:
        """Jobs filtered by status and queue, by ascending id."""
        ...

    def count_by_status(
        self, *, queue: str | None = None, job_types: Sequence[str] | None = None
    ) -> dict[JobStatus, int]:
        """How many jobs are in each status (every status present, zero included), of one queue
        (None: all) and of these job types (None: all; an empty list counts nothing)."""
        ...

    def due_jobs(self, *, now: datetime, queues: Sequence[str] | None, limit: int) -> list[Job]:
        """Up to ``limit`` queued/retrying jobs due at ``now``, in lease order, without leasing them
        (the Redis sweep re-publishes these)."""
        ...

    def count_due_ahead(self, job: Job, *, now: datetime, limit: int) -> int:
        """How many due jobs of ``job.queue`` come before ``job`` in lease order (priority DESC,
        scheduled_at ASC, id ASC) at ``now`` (aware UTC), counting at most ``limit`` (>= 0): a
        result equal to ``limit`` means "``limit`` or more".  ``job`` itself is never counted.
        Used by ``app.explain``; never on the lease path.

        This default reads up to ``limit + 1`` due jobs with :meth:`due_jobs`; the SQL adapters
        count in the database, walking the queue's partial lease-order index.
        """
        if limit < 1:
            return 0
        key = lease_order_key(job)
        ahead = 0
        for other in self.due_jobs(now=now, queues=[job.queue], limit=limit + 1):
            if other.id != job.id and lease_order_key(other) < key:
                ahead += 1
        return min(ahead, limit)

    # -- leases ------------------------------------------------------------------------------
    def lease(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        now: datetime,
        lease_timeout: float,
        limit: int = 1,
        listed_order: bool = False,
        job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs (all queues if ``queues`` is None) in lease order
        (priority DESC, scheduled_at ASC, id ASC); each gets a fresh fencing token and expires
        ``lease_timeout`` seconds after ``now``.  Returns the leased jobs, possibly none, in that
        order.

        ``listed_order``: False (the default) takes the best jobs of all the ``queues`` together,
        in one global lease order.  True takes the queues in the order listed: the due jobs of
        ``queues[0]`` in lease order, then, if ``limit`` is not reached, those of ``queues[1]``,
        and so on (returned in that order); a worker pool rotating its list this way serves its
        queues fairly.  Ignored when ``queues`` is None.

        ``job_types``: None (the default) leases jobs of every type; a list leases only jobs whose
        ``job_type`` is in it, in the same order among themselves (an empty list leases nothing).
        A worker pool that runs two kinds of handler (threads and ``async def``) asks each kind's
        types for that kind's free slots.  A filtered lease reads the due jobs in lease order and
        passes over those of other types, so a backlog of other types ahead of the first match
        costs it the reading of that backlog (see docs/handlers-and-workers.md); the unfiltered
        lease is unchanged.  Callers pass it only when filtering (an adapter written against an
        older port may lack it).

        Raises:
            ValidationError: a bad queue name, worker id, ``lease_timeout`` or ``job_types``
                (naming ``job_types``); nothing leased."""
        ...

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        """Lease this job if it is due (queued/retrying, ``scheduled_at <= now``); else None
        (already taken, finished, not due, or unknown)."""
        ...

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: ``completed``.  Raises LeaseLost."""
        ...

    def complete_many(self, items: Sequence[tuple[int, str]], *, now: datetime) -> list[Job | LeaseLost]:
        """Fenced completion of several running jobs, for a worker pool that flushes the
        completions of several handler threads at once.

        Args:
            items: ``(job_id, lease_token)`` pairs (usually distinct jobs).
            now: the completion time (``finished_at``), timezone-aware UTC.

        Returns:
            one entry per item, in input order: the job as completed, or the
            :class:`~tether.domain.errors.LeaseLost` error for an item whose token no longer
            holds the job (returned, not raised, so every caller learns its own outcome; that job
            is unchanged).  Each item is its own compare-and-set on (id, ``running``, token): a
            stale token never stops the others from completing.

        Raises:
            StorageUnavailable: the store stayed unreachable; an adapter that cannot tell which
                items landed re-checks them before answering, never reporting a completion that
                did not happen.

        This default runs :meth:`complete` once per item, in order; an error other than LeaseLost
        stops it and propagates (the items before it stay completed, so a caller retrying them
        learns LeaseLost for a job that is in fact completed: the state is right, only the report
        is pessimistic).  SQL adapters override it with one round trip for the whole batch.
        """
        results: list[Job | LeaseLost] = []
        for job_id, token in items:
            try:
                results.append(self.complete(job_id, token, now=now))
            except LeaseLost as lost:
                results.append(lost)
        return results

    def complete_and_lease(
        self,
        items: Sequence[tuple[int, str]],
        *,
        now: datetime,
        queues: Sequence[str] | None,
        worker_id: str,
        lease_timeout: float,
        limit: int,
        listed_order: bool = False,
        job_types: Sequence[str] | None = None,
    ) -> tuple[list[Job | LeaseLost], list[Job]]:
        """Fenced completion of ``items`` and a lease of up to ``limit`` more jobs, for a worker
        pool whose completion flush also refills its free threads or async slots.

        The completions are exactly :meth:`complete_many` (each item its own compare-and-set on
        (id, ``running``, token), one answer per item in input order, LeaseLost returned for an
        item whose token no longer holds the job); the lease is exactly :meth:`lease` with the same
        ``now`` (lease order, a fresh fencing token per job, expiry ``now + lease_timeout``
        seconds; ``limit`` 0 leases nothing; ``listed_order`` and ``job_types`` as there).  A job
        completed by this call is never leased by it.
        ``now`` is timezone-aware UTC (``finished_at`` of the completions, ``leased_at`` of the
        leases); ``lease_timeout`` is in seconds (> 0).

        Returns:
            ``(completion results, leased jobs)``.

        Raises:
            ValidationError: a naive ``now``, a bad queue name, worker id, ``lease_timeout`` or
                ``job_types``; nothing written.
            StorageUnavailable: the store stayed unreachable.  Completions are then as for
                :meth:`complete_many` (never reported done unless they landed); no lease was taken
                that the caller is not told about, except one whose reply was lost and could not
                be read back either (the reaper takes it back at its lease expiry).

        This default calls :meth:`complete_many`, then :meth:`lease` (two round trips); when that
        lease meets ``StorageUnavailable`` after the completions landed, it leases nothing and the
        completions' answers are returned (the caller's next lease meets the trouble again).  The
        PostgreSQL adapter does both in one statement.
        """
        types = validate_job_types(job_types)  # before anything is written
        results = self.complete_many(items, now=now) if items else []
        if limit < 1:
            return results, []
        # only the options given: an adapter of an older port may lack them
        options: dict[str, Any] = {"listed_order": True} if listed_order else {}
        if types is not None:
            options["job_types"] = types
        try:
            jobs = self.lease(
                queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, **options,
            )
        except StorageUnavailable:
            if not items:
                raise
            return results, []
        return results, jobs

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        """Fenced: ``retrying`` due at ``retry_at`` if given and attempts are left, else ``dead``.
        ``error`` is stored sanitized (bounded, no NUL).  Raises LeaseLost."""
        ...

    def dead_letter(self, job_id: int, token: str, *, now: datetime, error: str) -> Job:
        """Fenced: ``dead`` at once.  Raises LeaseLost."""
        ...

    def heartbeat(self, job_id: int, token: str, *, now: datetime, lease_timeout: float) -> Job:
        """Fenced: extend the lease to ``now + lease_timeout`` seconds.  Raises LeaseLost.

        The job returned carries ``cancel_requested_at``: the holder learns of an operator's
        cancel from the heartbeat's answer, with no extra round trip."""
        ...

    def release(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: back to ``queued``, due now, attempt given back, ``last_error`` left as it was
        (shutdown is not a failure).  Raises LeaseLost."""
        ...

    def snooze(self, job_id: int, token: str, *, now: datetime, until: datetime) -> Job:
        """Fenced: back to ``queued``, due at ``until`` (aware UTC), attempt given back,
        ``last_error`` left as it was (``tether.Snooze``; a worker without the job's handler).
        Raises LeaseLost."""
        ...

    # Every holder write above (complete, complete_many, complete_and_lease, fail, dead_letter,
    # release, snooze) records ``cancelled`` at ``now`` instead when the job's cancellation was
    # requested (:func:`tether.domain.transitions.cancelled_outcome`), decided in the same
    # statement on the row as it is then.

    # -- operators ---------------------------------------------------------------------------
    def cancel(self, job_id: int, *, now: datetime) -> Job:
        """An operator's cancel, as one atomic write (:func:`tether.domain.transitions.cancel`):
        a queued or retrying job becomes ``cancelled`` at ``now``; a running job gets
        ``cancel_requested_at = now`` (an earlier request is kept) and ends ``cancelled`` at its
        holder's outcome write or at the reaper.  A cancel racing a lease or an outcome write ends
        as one of the two orders, never neither.  Returns the job as it now is.

        Raises:
            JobNotFound: no such job.
            InvalidTransition: the job is completed, dead or cancelled (nothing changed).
        """
        ...

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
        """Cancel, as :meth:`cancel` does, the first ``limit`` jobs by ascending id above
        ``after_id`` that match every filter given (None: any) and are queued, retrying, or
        running without a cancellation request yet; one statement.  Returns the jobs as written,
        by ascending id: a caller cancelling everything that matches calls again with ``after_id``
        the last id returned until fewer than ``limit`` come back.

        Raises:
            ValidationError: ``statuses`` names a status that cannot be cancelled (completed,
                dead, cancelled), or ``limit`` is below 1; nothing written.
        """
        ...

    # -- queue controls (see tether.domain.queues) -------------------------------------------
    # Every lease above (``lease``, ``lease_job``, ``complete_and_lease``) honours them: no job of
    # a paused queue is leased by a statement that starts after the pause was written, and a
    # limited queue never has more than ``max_running`` jobs running under unexpired leases (nor
    # more than ``max_running_per_key`` of one ``concurrency_key``), nor more than ``rate_limit``
    # leases in one rate window, however many workers lease at once.  ``due_jobs`` leaves paused queues out.
    def set_queue_paused(self, queue: str, paused: bool, *, now: datetime) -> QueueState:
        """Pause (``paused=True``) or resume a queue, which need not have any job; returns its
        state as written (``updated_at = now``, aware UTC).  Idempotent.

        Raises:
            ValidationError: ``queue`` is not a queue name (field ``queue``); nothing written.
        """
        ...

    def set_queue_limit(self, queue: str, max_running: int | None, *, now: datetime) -> QueueState:
        """Set (an int from 1 to :data:`~tether.domain.queues.MAX_RUNNING_LIMIT`) or clear (None)
        the most jobs of ``queue`` running at once across every worker; returns its state as written.

        Raises:
            ValidationError: a bad queue name (``queue``) or limit (``max_running``); nothing written.
        """
        ...

    def set_queue_key_limit(self, queue: str, max_running_per_key: int | None, *, now: datetime) -> QueueState:
        """Set (an int from 1 to :data:`~tether.domain.queues.MAX_RUNNING_LIMIT`) or clear (None)
        the most jobs of ``queue`` with the same ``concurrency_key`` running at once across every
        worker (jobs without a key are not limited by it); returns its state as written.

        Raises:
            ValidationError: a bad queue name (``queue``) or limit (``max_running_per_key``);
                nothing written.
        """
        ...

    def count_running_by_key(self, queue: str, concurrency_key: str, *, now: datetime) -> int:
        """How many jobs of ``queue`` with ``concurrency_key`` are running under a lease that has
        not expired at ``now`` (aware UTC): the count the per-key limit compares with."""
        ...

    def set_queue_rate(
        self, queue: str, rate_limit: int | None, rate_period: float | None, *, now: datetime
    ) -> QueueState:
        """Set (``rate_limit`` starts per window of ``rate_period`` seconds, see
        :func:`~tether.domain.queues.validate_rate`) or clear (both None) the queue's rate limit;
        returns its state as written.  The windows are fixed (multiples of ``rate_period`` seconds
        since the Unix epoch); every lease of the queue counts as a start of the window of its ``now``.

        Raises:
            ValidationError: a bad queue name (``queue``), ``rate_limit`` or ``rate_period``;
                nothing written.
        """
        ...

    def queue_states(self) -> list[QueueState]:
        """Every stored queue record (paused, limited, or once so), by name.

        This default: none (a store written before queue controls existed); Tether's stores
        override it, with the two writes above."""
        return []

    def count_by_queue(self, *, job_types: Sequence[str] | None = None) -> dict[str, dict[JobStatus, int]]:
        """How many jobs each queue holds per status (every status present, zero included), for
        the queues that hold any job of these job types (None: all types)."""
        ...

    # -- maintenance -------------------------------------------------------------------------
    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        """Take back up to ``limit`` running jobs whose own lease expired at or before ``now``
        (retrying, or dead when out of attempts, or cancelled when a cancellation was requested:
        the rows :func:`~tether.domain.transitions.reap` makes), oldest expiry first (then id).  Each write is a compare-and-set on the lease it
        read.  Returns the jobs as written, in that order; ``limit`` below 1 takes nothing."""
        ...

    def retry_dead(self, job_id: int, *, now: datetime) -> Job:
        """Manual retry: a dead or cancelled job back to ``queued`` with attempts 0 and no
        cancellation request.  Raises JobNotFound, InvalidTransition (neither dead nor cancelled)."""
        ...

    def purge(self, *, older_than: datetime) -> int:
        """Delete completed, dead and cancelled jobs whose ``finished_at`` is before ``older_than``;
        returns how many (their idempotency keys become free again)."""
        ...

    def close(self) -> None:
        """Release connections; the repository is unusable afterwards."""
        ...
