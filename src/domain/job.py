"""The job record and its statuses.

A :class:`Job` is an immutable snapshot; every change produces a new one through the pure
functions of :mod:`tether.domain.transitions`.  All datetimes are timezone-aware UTC.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs
from tether.domain.errors import ValidationError
from tether.domain.history import Attempt
from tether.domain.limits import MAX_ATTEMPTS_LIMIT, PRIORITY_MAX, PRIORITY_MIN


class JobStatus(enum.StrEnum):
    """Where a job is in its life.

    queued -> running -> completed | retrying | dead; retrying -> running; a running job released
    at shutdown or snoozed goes back to queued; an operator's cancel ends a queued or retrying job
    as cancelled at once, a running one when its holder writes its outcome (or the reaper takes
    its expired lease); dead or cancelled -> queued only by a manual retry.
    """

    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True for ``completed``, ``dead`` and ``cancelled``: nothing but purge (or a manual retry
        of a dead or cancelled job) moves it."""
        return self in TERMINAL_STATUSES

    @property
    def is_leasable(self) -> bool:
        """True for ``queued`` and ``retrying``: a worker may lease it once it is due."""
        return self in (JobStatus.QUEUED, JobStatus.RETRYING)


LEASABLE_STATUSES = (JobStatus.QUEUED, JobStatus.RETRYING)
TERMINAL_STATUSES = (JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED)
#: Statuses a manual retry takes back to ``queued``.
RETRYABLE_STATUSES = (JobStatus.DEAD, JobStatus.CANCELLED)


def _check_column_range(value: object, field: str, low: int, high: int) -> None:
    """Raise ValidationError(``field``) when ``value`` is an int (of any int type) outside
    ``[low, high]``; other types are the adapters' to convert, as before."""
    if isinstance(value, int) and not low <= value <= high:
        raise ValidationError(field, f"must be an integer from {low:,} to {high:,}, got {value}")


@attrs.frozen
class NewJob:
    """A validated request to enqueue one job (see :func:`tether.domain.validation.prepare_job`).

    ``payload_json`` is the canonical UTF-8 JSON text of the payload; ``scheduled_at`` is aware UTC.
    Integer ``priority`` (32-bit) and ``max_attempts`` (1-10,000) are range-checked however the
    request is built (directly, or by ``attrs.evolve``), so no repository is handed a number its
    columns cannot hold: ValidationError naming the field.
    """

    job_type: str
    queue: str
    payload_json: str
    priority: int
    max_attempts: int
    scheduled_at: datetime
    idempotency_key: str | None = None
    headers_json: str | None = None
    concurrency_key: str | None = None

    def __attrs_post_init__(self) -> None:
        _check_column_range(self.priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
        _check_column_range(self.max_attempts, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)

    @property
    def payload(self) -> Any:
        """A fresh decoded copy of the payload."""
        return json.loads(self.payload_json)


@attrs.frozen
class Job:
    """One job as stored.

    Attributes:
        id: positive integer, assigned by the repository at enqueue.
        job_type: the handler name it runs under.
        queue: the queue it waits in.
        payload_json: canonical UTF-8 JSON text; :attr:`payload` decodes a fresh copy.
        priority: higher runs first.
        status: see :class:`JobStatus`.
        attempts: leases taken so far; incremented only by a lease; never above ``max_attempts``.
        max_attempts: leases allowed in all (>= 1).
        scheduled_at: not leased before this instant (aware UTC).
        created_at: when it was enqueued (aware UTC).
        idempotency_key: unique among stored jobs, or None.
        lease_token: the fencing token of the current lease (only while running); left out of
            the job's ``repr``, so a log line or traceback that shows a job never carries it.
        leased_by: worker id of the current lease holder (informational, never a fence).
        leased_at, lease_expires_at: start and expiry of the current lease (aware UTC).
        last_error: the last failure, bounded and printable, or None.
        finished_at: when it became completed, dead or cancelled (aware UTC), else None.
        cancel_requested_at: when an operator asked to cancel it (aware UTC), else None; set only
            on a ``running`` job (its holder's next outcome write records ``cancelled``) and kept
            on the ``cancelled`` job.
        history: how its attempts ended, oldest first, the newest
            :data:`~tether.domain.history.HISTORY_LIMIT` kept (:mod:`tether.domain.history`).
        headers_json: JSON text of a small object of string headers carried with the job (the
            enqueuing trace context, see :mod:`tether.domain.headers`), or None.
        concurrency_key: the key its queue's per-key running limit counts it under
            (``max_running_per_key``, :mod:`tether.domain.queues`), or None (not limited by it).
    """

    id: int
    job_type: str
    queue: str
    payload_json: str
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    scheduled_at: datetime
    created_at: datetime
    idempotency_key: str | None = None
    lease_token: str | None = attrs.field(default=None, repr=False)  # a fence: never in logs or tracebacks
    leased_by: str | None = None
    leased_at: datetime | None = None
    lease_expires_at: datetime | None = None
    last_error: str | None = None
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    history: tuple[Attempt, ...] = ()
    headers_json: str | None = None
    concurrency_key: str | None = None

    @property
    def payload(self) -> Any:
        """A fresh decoded copy of the payload; mutating it changes nothing stored."""
        return json.loads(self.payload_json)

    @property
    def headers(self) -> dict[str, str]:
        """A fresh copy of the job's headers (empty when it has none)."""
        return {} if self.headers_json is None else dict(json.loads(self.headers_json))

    @property
    def current_error(self) -> str | None:
        """The last error while it still explains where the job is; None for a completed job,
        whose ``last_error`` (kept) is an earlier attempt's."""
        return None if self.status is JobStatus.COMPLETED else self.last_error

    def is_due(self, now: datetime) -> bool:
        """True when the job is queued or retrying and ``scheduled_at <= now``."""
        return self.status.is_leasable and self.scheduled_at <= now

    def lease_expired(self, now: datetime) -> bool:
        """True when the job is running and its lease expiry is at or before ``now``."""
        return (
            self.status is JobStatus.RUNNING
            and self.lease_expires_at is not None
            and self.lease_expires_at <= now
        )


def lease_order_key(job: Job) -> tuple[int, datetime, int]:
    """Sort key of the lease order: priority DESC, scheduled_at ASC, id ASC."""
    return (-job.priority, job.scheduled_at, job.id)


def listed_order_key(queues: Sequence[str] | None) -> Callable[[Job], tuple[int, int, datetime, int]]:
    """Sort key of a lease that takes ``queues`` in the order listed: the queue's position in
    ``queues``, then :func:`lease_order_key` (a queue not listed sorts last)."""
    position = {name: i for i, name in enumerate(queues or ())}

    def key(job: Job) -> tuple[int, int, datetime, int]:
        return (position.get(job.queue, len(position)), -job.priority, job.scheduled_at, job.id)

    return key


@attrs.frozen
class EnqueueResult:
    """What an enqueue did: the stored job, and whether this call created it.

    ``created`` is False when a job with the same idempotency key already existed; that job is
    returned unchanged.
    """

    job: Job
    created: bool
