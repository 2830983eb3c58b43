"""The job state machine as pure functions: a Job and ``now`` in, a new Job out.

Each function raises instead of returning a changed job when the move is not allowed:
:class:`~tether.domain.errors.LeaseLost` when a lease-holder write comes with a token that does
not hold the job, :class:`~tether.domain.errors.InvalidTransition` for any other illegal move.
Repositories apply exactly these rules, in memory or as compare-and-set statements in SQL.

==========  ==============================================  =====================
from        move (function)                                 to
==========  ==============================================  =====================
queued      :func:`lease` when due                          running
retrying    :func:`lease` when due                          running
queued      :func:`cancel` (an operator)                    cancelled at once
retrying    :func:`cancel` (an operator)                    cancelled at once
running     :func:`cancel` (an operator)                    running, cancellation
                                                            requested
running     :func:`complete` (holder)                       completed
running     :func:`fail` (holder)                           retrying, or dead when
                                                            attempts are used up
                                                            or no retry is given
running     :func:`dead_letter` (holder)                    dead
running     :func:`heartbeat` (holder)                      running, lease extended
running     :func:`release` (holder, at shutdown)           queued, attempt given back,
                                                            last_error kept
running     :func:`snooze` (holder, ``Snooze``)             queued due later, attempt
                                                            given back, last_error kept
running     :func:`reap` (lease expired)                    retrying, or dead
running     any holder outcome or :func:`reap`, once a      cancelled
            cancellation was requested
dead        :func:`retry_dead` (an operator)                queued, attempts 0
cancelled   :func:`retry_dead` (an operator)                queued, attempts 0
completed,  nothing but purge                               (deleted)
dead,
cancelled
==========  ==============================================  =====================

Every move out of ``running`` (a holder's outcome, the reaper) also appends the attempt it ends
to ``history`` (:func:`ended`, :mod:`tether.domain.history`): the same write records both.

A cancellation request (``cancel_requested_at``) lives only on a ``running`` job: every outcome its
holder writes (complete, fail, dead-letter, release, snooze) records ``cancelled`` instead, at
``now``, with the attempt count as it is; a failure's error is kept as ``last_error``, the others
leave it as it was.  A reaped job whose cancellation was requested is ``cancelled`` too
(:func:`cancelled_outcome`).  A heartbeat leaves the request where it is, so the holder learns of
it from the heartbeat's answer.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
from tether.domain.errors import InvalidTransition
from tether.domain.failure import sanitize_text
from tether.domain.history import Attempt, AttemptOutcome, attempt_error, failure_outcomes, with_attempt
from tether.domain.job import RETRYABLE_STATUSES, Job, JobStatus, NewJob
from tether.domain.lease import check_fence
from tether.domain.retry import RetryPolicy

_NO_LEASE = {"lease_token": None, "leased_by": None, "leased_at": None, "lease_expires_at": None}


def create(new: NewJob, *, job_id: int, now: datetime) -> Job:
    """The stored form of a new job: ``queued``, no attempts yet."""
    return Job(
        id=job_id,
        job_type=new.job_type,
        queue=new.queue,
        payload_json=new.payload_json,
        priority=new.priority,
        status=JobStatus.QUEUED,
        attempts=0,
        max_attempts=new.max_attempts,
        scheduled_at=new.scheduled_at,
        created_at=now,
        idempotency_key=new.idempotency_key,
        headers_json=new.headers_json,
        concurrency_key=new.concurrency_key,
    )


def lease(job: Job, *, now: datetime, token: str, worker_id: str, lease_timeout: float) -> Job:
    """Lease a due job: ``running`` under ``token`` until ``now + lease_timeout`` seconds.

    This is the only place ``attempts`` grows.

    Raises:
        InvalidTransition: the job is not queued/retrying, not due yet, or has no attempts left.
    """
    if not job.is_due(now):
        raise InvalidTransition(job.id, job.status.value if not job.status.is_leasable else "not due", "lease")
    if job.attempts >= job.max_attempts:
        raise InvalidTransition(job.id, "out of attempts", "lease")
    return attrs.evolve(
        job,
        status=JobStatus.RUNNING,
        attempts=job.attempts + 1,
        lease_token=token,
        leased_by=worker_id,
        leased_at=now,
        lease_expires_at=now + timedelta(seconds=lease_timeout),
    )


def cancel_requested(job: Job) -> bool:
    """True when an operator asked to cancel ``job`` while it ran (its next outcome is ``cancelled``)."""
    return job.cancel_requested_at is not None


def cancelled_outcome(job: Job, *, now: datetime, error: str | None = None) -> Job:
    """What any outcome of a running ``job`` whose cancellation was requested records:
    ``cancelled`` at ``now``, lease cleared, attempts as they are, ``last_error`` set to ``error``
    when one is given (a failure, an expired lease) and kept otherwise."""
    changes = {} if error is None else {"last_error": error}
    return attrs.evolve(
        job, status=JobStatus.CANCELLED, finished_at=now, history=ended(job, now, AttemptOutcome.CANCELLED, error),
        **_NO_LEASE, **changes,
    )


def ended(job: Job, now: datetime, outcome: AttemptOutcome, error: str | None = None) -> tuple[Attempt, ...]:
    """The history of running ``job`` with its current attempt appended as ended at ``now`` with
    ``outcome`` (and ``error``, cut to the entry's bound)."""
    attempt = Attempt(
        number=job.attempts,
        worker_id=job.leased_by,
        started_at=job.leased_at,
        ended_at=now,
        outcome=outcome,
        error=None if error is None else attempt_error(error),
    )
    return with_attempt(job.history, attempt)


def cancel(job: Job, *, now: datetime) -> Job:
    """An operator's cancel.

    A ``queued`` or ``retrying`` job is ``cancelled`` at once (``finished_at = now``); a ``running``
    job keeps running with ``cancel_requested_at`` set (the first request's time is kept), and its
    holder's next outcome write, or the reaper, makes it ``cancelled``.  ``cancel_requested_at`` is
    ``now`` on a job cancelled at once too.

    Raises:
        InvalidTransition: the job is completed, dead or cancelled (naming that status).
    """
    if job.status.is_leasable:
        return attrs.evolve(job, status=JobStatus.CANCELLED, finished_at=now, cancel_requested_at=now)
    if job.status is JobStatus.RUNNING:
        if job.cancel_requested_at is not None:
            return job
        return attrs.evolve(job, cancel_requested_at=now)
    raise InvalidTransition(job.id, job.status.value, "cancel")


def complete(job: Job, *, token: str, now: datetime) -> Job:
    """The holder finished the job: ``completed`` at ``now`` (``cancelled`` when a cancellation
    was requested).  Raises LeaseLost."""
    check_fence(job, token)
    if cancel_requested(job):
        return cancelled_outcome(job, now=now)
    return attrs.evolve(
        job, status=JobStatus.COMPLETED, finished_at=now, history=ended(job, now, AttemptOutcome.COMPLETED), **_NO_LEASE
    )


def next_retry_at(
    job: Job, *, now: datetime, policy: RetryPolicy, r: float, permanent: bool = False
) -> datetime | None:
    """When a failed attempt of ``job`` should run again, or None if it must go dead.

    None when the error is permanent or ``job.attempts >= job.max_attempts``; otherwise
    ``now + policy.delay(job.attempts, r)``.
    """
    if permanent or job.attempts >= job.max_attempts:
        return None
    return policy.retry_at(job.attempts, now, r)


def fail(job: Job, *, token: str, now: datetime, error: str, retry_at: datetime | None) -> Job:
    """The holder's attempt failed with ``error``.

    The job becomes ``retrying`` due at ``retry_at`` when ``retry_at`` is given and attempts are
    left; otherwise ``dead`` at ``now``; ``cancelled`` at ``now`` when a cancellation was
    requested (``last_error`` is ``error`` in every case).  The attempt's entry is ``failed``,
    ``dead`` or ``cancelled`` (``timed_out`` for a time limit's error:
    :func:`~tether.domain.history.failure_outcomes`).  Raises LeaseLost.
    """
    check_fence(job, token)
    error = sanitize_text(error)
    if cancel_requested(job):
        return cancelled_outcome(job, now=now, error=error)
    if_retrying, if_dead = failure_outcomes(error)
    if retry_at is not None and job.attempts < job.max_attempts:
        return attrs.evolve(
            job, status=JobStatus.RETRYING, scheduled_at=retry_at, last_error=error,
            history=ended(job, now, if_retrying, error), **_NO_LEASE,
        )
    return attrs.evolve(
        job, status=JobStatus.DEAD, finished_at=now, last_error=error, history=ended(job, now, if_dead, error), **_NO_LEASE
    )


def dead_letter(job: Job, *, token: str, now: datetime, error: str) -> Job:
    """The holder sends the job to ``dead`` at once (``cancelled`` when a cancellation was
    requested).  Raises LeaseLost."""
    return fail(job, token=token, now=now, error=error, retry_at=None)


def heartbeat(job: Job, *, token: str, now: datetime, lease_timeout: float) -> Job:
    """Extend the holder's lease to ``now + lease_timeout`` seconds (never shortens it).  Raises LeaseLost."""
    check_fence(job, token)
    expires = now + timedelta(seconds=lease_timeout)
    if job.lease_expires_at is not None and job.lease_expires_at > expires:
        expires = job.lease_expires_at
    return attrs.evolve(job, lease_expires_at=expires)


def release(job: Job, *, token: str, now: datetime) -> Job:
    """Hand a running job back at shutdown: ``queued``, due at ``now``, lease cleared.

    The interrupted attempt is given back (``attempts - 1``): stopping a worker is not the job's
    failure, and a job must not go dead because of deploys.  For the same reason ``last_error``
    is left as it was: it holds the job's last real failure (or None), never a note about the
    release, so a released job that later completes does not read as having failed.  A job whose
    cancellation was requested is ``cancelled`` instead.  The attempt's entry is ``released``.
    Raises LeaseLost.
    """
    return _give_back(job, token, now, now, AttemptOutcome.RELEASED)


def snooze(job: Job, *, token: str, now: datetime, until: datetime) -> Job:
    """The holder gives the job back to run later (``tether.Snooze``, or a worker without its
    handler): ``queued``, due at ``until``, lease cleared, the attempt given back
    (``attempts - 1``), ``last_error`` left as it was: like :func:`release`, not a failure.
    A job whose cancellation was requested is ``cancelled`` at ``now`` instead.  The attempt's
    entry is ``snoozed``.  Raises LeaseLost.
    """
    return _give_back(job, token, now, until, AttemptOutcome.SNOOZED)


def _give_back(job: Job, token: str, now: datetime, until: datetime, outcome: AttemptOutcome) -> Job:
    check_fence(job, token)
    if cancel_requested(job):
        return cancelled_outcome(job, now=now)
    return attrs.evolve(
        job, status=JobStatus.QUEUED, attempts=max(job.attempts - 1, 0), scheduled_at=until,
        history=ended(job, now, outcome), **_NO_LEASE,
    )


def reap_error(job: Job) -> str:
    """The ``last_error`` written when the lease of ``job`` expired (the worker was lost).

    Plain text on purpose (the worker id as stored, the expiry as ISO 8601 UTC with
    microseconds): a repository may render the same text in its own query language, as the
    PostgreSQL reaper does, and must be able to do so exactly."""
    expires = job.lease_expires_at.isoformat(timespec="microseconds") if job.lease_expires_at else "?"
    return (
        f"LeaseExpired: lease of worker {job.leased_by if job.leased_by is not None else '?'} expired at "
        f"{expires} without a heartbeat; the worker was lost (attempt {job.attempts} of {job.max_attempts})"
    )


def reap(job: Job, *, now: datetime, token: str) -> Job:
    """Take back a job whose lease (``token``) expired at or before ``now``.

    An expired lease counts as a failed attempt: the job is ``retrying``, due at once, or
    ``dead`` when its attempts are used up, so a job that kills its worker every time ends
    (case C05).  A job whose cancellation was requested is ``cancelled`` at ``now`` (never
    brought back); ``last_error`` is :func:`reap_error` in every case, and so is the error of the
    attempt's entry (``lease_lost``, or ``cancelled``).

    Raises:
        LeaseLost: the job is no longer running under ``token`` (it finished or was re-leased).
        InvalidTransition: the lease has not expired yet.
    """
    check_fence(job, token)
    if not job.lease_expired(now):
        raise InvalidTransition(job.id, "running under a live lease", "reap")
    error = reap_error(job)
    if cancel_requested(job):
        return cancelled_outcome(job, now=now, error=error)
    history = ended(job, now, AttemptOutcome.LEASE_LOST, error)
    if job.attempts < job.max_attempts:
        return attrs.evolve(
            job, status=JobStatus.RETRYING, scheduled_at=now, last_error=error, history=history, **_NO_LEASE
        )
    return attrs.evolve(job, status=JobStatus.DEAD, finished_at=now, last_error=error, history=history, **_NO_LEASE)


def retry_dead(job: Job, *, now: datetime) -> Job:
    """An operator's manual retry of a dead or cancelled job: ``queued`` at ``now`` with attempts
    reset to 0 and no cancellation request (``last_error`` kept).

    Raises:
        InvalidTransition: the job is neither dead nor cancelled.
    """
    if job.status not in RETRYABLE_STATUSES:
        raise InvalidTransition(job.id, job.status.value, "retry")
    return attrs.evolve(
        job, status=JobStatus.QUEUED, attempts=0, scheduled_at=now, finished_at=None, cancel_requested_at=None, **_NO_LEASE
    )
