"""Validation of everything a caller passes in, before anything is written.

Each check raises :class:`~tether.domain.errors.ValidationError` naming the field and the problem.
The accepted ranges of numbers and times are those of :mod:`tether.domain.limits`; text must be
encodable as UTF-8 (no lone surrogates), since every store keeps it so.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any

from tether.domain.errors import ValidationError, shown
from tether.domain.job import JobStatus, NewJob
from tether.domain.limits import (
    MAX_ATTEMPTS_LIMIT,
    MAX_SCHEDULE_DISTANCE,
    MAX_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from tether.domain.payload import DEFAULT_MAX_PAYLOAD_BYTES, encode_payload, unencodable_problem
from tether.domain.retry import DEFAULT_MAX_ATTEMPTS
from tether.domain.schedules import check_user_key
from tether.domain.timeutil import UTC, ensure_utc

#: Queue names become part of Redis keys and CLI arguments, so they are strict: 1-64 characters,
#: starting with a letter or digit, then letters, digits, ``_``, ``-`` or ``.``.
QUEUE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
#: Job types name handlers: 1-200 characters of letters, digits, ``_ . : -``.
JOB_TYPE_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}")
DEFAULT_QUEUE = "default"
IDEMPOTENCY_KEY_MAX_CHARS = 255
CONCURRENCY_KEY_MAX_CHARS = 255
WORKER_ID_MAX_CHARS = 200
#: Longest delay a handler may snooze its job for (``tether.Snooze``), in seconds: one year.
SNOOZE_MAX_SECONDS = 366 * 24 * 3600.0


#: Exact-``str`` queue names and job types already found valid (bulk enqueue repeats a few names
#: thousands of times); bounded, so odd callers cannot grow them without limit.
_VALID_QUEUES: set[str] = set()
_VALID_JOB_TYPES: set[str] = set()
_VALID_CACHE_LIMIT = 1024


def _remember(cache: set[str], value: str) -> None:
    if type(value) is str and len(cache) < _VALID_CACHE_LIMIT:
        cache.add(value)


def validate_queue(queue: object, field: str = "queue") -> str:
    """Return ``queue`` if it matches :data:`QUEUE_PATTERN`, else raise ValidationError."""
    if type(queue) is str and queue in _VALID_QUEUES:
        return queue
    if not isinstance(queue, str) or not QUEUE_PATTERN.fullmatch(queue):
        raise ValidationError(
            field,
            f"{shown(queue)} is not a queue name (1-64 of letters, digits, '_', '-', '.', starting with a letter or digit)",
        )
    _remember(_VALID_QUEUES, queue)
    return queue


def validate_job_type(job_type: object) -> str:
    """Return ``job_type`` if it matches :data:`JOB_TYPE_PATTERN`, else raise ValidationError."""
    if type(job_type) is str and job_type in _VALID_JOB_TYPES:
        return job_type
    if not isinstance(job_type, str) or not JOB_TYPE_PATTERN.fullmatch(job_type):
        raise ValidationError(
            "job_type", f"{shown(job_type)} is not a job type (1-200 of letters, digits, '_', '.', ':', '-')"
        )
    _remember(_VALID_JOB_TYPES, job_type)
    return job_type


def validate_job_types(value: object, field: str = "job_types") -> list[str] | None:
    """None, or the job types of ``value`` (a list, tuple or set of job type names), duplicates
    dropped, in the order given; else ValidationError naming ``field`` (a lease filter by job type)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
        raise ValidationError(field, f"must be a list of job types or None, got {shown(value)}")
    try:
        return list(dict.fromkeys(validate_job_type(job_type) for job_type in value))
    except ValidationError as error:
        raise ValidationError(field, error.problem) from None


def validate_int(value: object, field: str, low: int, high: int) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[low, high]``, else raise ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__} {shown(value)}")
    if not low <= value <= high:
        raise ValidationError(field, f"must be an integer from {low:,} to {high:,}, got {shown(value)}")
    return value


def validate_max_attempts(value: object) -> int:
    """``max_attempts`` must be an integer from 1 to 10,000 (case C15c)."""
    return validate_int(value, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)


def validate_seconds(value: object, field: str, *, allow_zero: bool = True) -> float:
    """A duration in seconds: a finite int/float (or a timedelta) from 0 (exclusive unless
    ``allow_zero``) to :data:`~tether.domain.limits.MAX_SECONDS` (100 years) inclusive.

    Raises:
        ValidationError: naming ``field``: not a number, not finite, negative (or 0), or longer.
    """
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"must be a finite number of seconds, got {shown(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past the float range
        finite = False
    if not finite:
        raise ValidationError(field, f"must be a finite number of seconds, got {shown(value, 40)}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValidationError(field, f"must be {'>= 0' if allow_zero else '> 0'} seconds, got {value}")
    if value > MAX_SECONDS:
        raise ValidationError(field, f"must be at most {MAX_SECONDS:,} seconds (100 years), got {value:.6g}")
    return float(value)


def validate_snooze_seconds(value: object, field: str = "seconds") -> float:
    """A snooze delay: :func:`validate_seconds` (finite, >= 0, or a timedelta), at most
    :data:`SNOOZE_MAX_SECONDS`.  Raises ValidationError naming ``field``."""
    seconds = validate_seconds(value, field)
    if seconds > SNOOZE_MAX_SECONDS:
        raise ValidationError(field, f"must be at most {SNOOZE_MAX_SECONDS:.0f} seconds (a year), got {seconds}")
    return seconds


#: Statuses an operator's cancel acts on (the others are final).
CANCELLABLE_STATUSES = (JobStatus.QUEUED, JobStatus.RETRYING, JobStatus.RUNNING)
#: Most jobs one bulk-cancel statement writes.
CANCEL_BATCH_LIMIT = 10_000


def validate_cancel_statuses(value: object, field: str = "statuses") -> tuple[JobStatus, ...] | None:
    """None, or a non-empty list of cancellable statuses (JobStatus members or their values),
    duplicates dropped.  Raises ValidationError naming ``field`` for anything else, such as a
    status that is not one, or ``completed``/``dead``/``cancelled`` (nothing to cancel there)."""
    if value is None:
        return None
    if isinstance(value, (str, JobStatus)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValidationError(field, f"must be a non-empty list of statuses, got {shown(value)}")
    wanted = ", ".join(s.value for s in CANCELLABLE_STATUSES)
    found: list[JobStatus] = []
    for item in value:
        try:
            status = JobStatus(item)
        except ValueError:
            raise ValidationError(field, f"{shown(item)} is not a status; one of {wanted}") from None
        if status not in CANCELLABLE_STATUSES:
            raise ValidationError(field, f"{status.value} jobs cannot be cancelled; one of {wanted}")
        if status not in found:
            found.append(status)
    return tuple(found)


def validate_idempotency_key(value: object) -> str | None:
    """None, or a str of 1-255 characters without NUL, encodable as UTF-8."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise ValidationError("idempotency_key", f"must be a string of 1-{IDEMPOTENCY_KEY_MAX_CHARS} characters, got {shown(value)}")
    if "\x00" in value:
        raise ValidationError("idempotency_key", "holds a NUL character (U+0000)")
    problem = unencodable_problem(value)
    if problem is not None:
        raise ValidationError("idempotency_key", problem)
    return value


def validate_concurrency_key(value: object) -> str | None:
    """None, or a str of 1-255 characters without NUL, encodable as UTF-8: the key a queue's
    per-key running limit counts a job under.  Raises ValidationError(``concurrency_key``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > CONCURRENCY_KEY_MAX_CHARS:
        raise ValidationError(
            "concurrency_key", f"must be a string of 1-{CONCURRENCY_KEY_MAX_CHARS} characters, got {shown(value)}"
        )
    if "\x00" in value:
        raise ValidationError("concurrency_key", "holds a NUL character (U+0000)")
    problem = unencodable_problem(value)
    if problem is not None:
        raise ValidationError("concurrency_key", problem)
    return str(value)


def due_time(now: datetime, *, run_at: object = None, delay: object = None) -> datetime:
    """When a new job becomes due (aware UTC): ``run_at``, or ``now + delay``, or ``now``.

    Accepted: ``run_at`` an aware datetime within 100 years of ``now`` either side (an earlier
    one means due now) that is expressible in UTC; ``delay`` seconds (or a timedelta) from 0 to
    100 years, not both.  ``now`` must be aware UTC.

    Raises:
        ValidationError: naming ``run_at`` or ``delay``.
    """
    if run_at is not None and delay is not None:
        raise ValidationError("run_at", "give run_at or delay, not both")
    if run_at is not None:
        scheduled_at = ensure_utc(run_at, "run_at")
        if abs(scheduled_at - now) > MAX_SCHEDULE_DISTANCE:
            raise ValidationError(
                "run_at", f"{scheduled_at.isoformat()} is more than 100 years from now ({now.isoformat()})"
            )
        return scheduled_at
    if delay is not None:
        seconds = validate_seconds(delay, "delay")
        try:
            return now + timedelta(seconds=seconds)
        except OverflowError:
            raise ValidationError("delay", f"{seconds:g} seconds from {now.isoformat()} is past the year 9999") from None
    return now


def validate_worker_id(value: object) -> str:
    """A worker id: 1-200 printable characters."""
    if not isinstance(value, str) or not value or len(value) > WORKER_ID_MAX_CHARS or not value.isprintable():
        raise ValidationError("worker_id", f"must be 1-{WORKER_ID_MAX_CHARS} printable characters, got {shown(value)}")
    return value


def prepare_job(
    job_type: object,
    payload: Any,
    *,
    now: datetime,
    queue: object = DEFAULT_QUEUE,
    priority: object = 0,
    run_at: object = None,
    delay: object = None,
    max_attempts: object = DEFAULT_MAX_ATTEMPTS,
    idempotency_key: object = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    concurrency_key: object = None,
) -> NewJob:
    """Validate one enqueue request and return it as a :class:`NewJob`.

    Args:
        job_type: handler name.
        payload: JSON-able arguments (rules in :mod:`tether.domain.payload`).
        now: the current instant, aware UTC (from the clock port).
        queue: queue name (:data:`QUEUE_PATTERN`).
        priority: integer, higher runs first (32-bit: -2,147,483,648 to 2,147,483,647).
        run_at: aware datetime to run at, within 100 years of ``now``, or None; exclusive with
            ``delay`` (see :func:`due_time`).
        delay: seconds (or timedelta) from ``now``, 0 to 100 years, or None.
        max_attempts: 1-10,000.
        idempotency_key: see :func:`validate_idempotency_key`; keys in Tether's reserved namespace
            (``tether:``, :func:`~tether.domain.schedules.check_user_key`) are refused.
        max_payload_bytes: payload limit in bytes.
        concurrency_key: see :func:`validate_concurrency_key`; None: not limited by the queue's
            per-key running limit.

    Raises:
        ValidationError / PayloadError: naming the first bad field; text that is not UTF-8 (a
        lone surrogate in a payload string or key, or in the key) and every number or time
        outside :mod:`tether.domain.limits` included.
    """
    if not (type(now) is datetime and now.tzinfo is UTC):  # already aware UTC: ensure_utc would return it as is
        now = ensure_utc(now, "now")
    # Names already found valid (exact str, see _remember) skip the call; anything else is checked.
    if not (type(job_type) is str and job_type in _VALID_JOB_TYPES):
        job_type = validate_job_type(job_type)
    if not (type(queue) is str and queue in _VALID_QUEUES):
        queue = validate_queue(queue)
    # Exact ints in range and a missing key pass straight through (the common case in bulk);
    # anything else goes to the full check, which raises naming the field.
    if not (type(priority) is int and PRIORITY_MIN <= priority <= PRIORITY_MAX):
        priority = validate_int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
    if type(max_attempts) is int and 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        attempts = max_attempts
    else:
        attempts = validate_max_attempts(max_attempts)
    key = None if idempotency_key is None else check_user_key(validate_idempotency_key(idempotency_key))
    scheduled_at = now if run_at is None and delay is None else due_time(now, run_at=run_at, delay=delay)
    limit_key = None if concurrency_key is None else validate_concurrency_key(concurrency_key)
    payload_json = encode_payload(payload, max_bytes=max_payload_bytes)
    if limit_key is not None:
        return NewJob(job_type, queue, payload_json, priority, attempts, scheduled_at, key, concurrency_key=limit_key)
    # positional, in NewJob's field order (job_type, queue, payload_json, priority, max_attempts,
    # scheduled_at, idempotency_key): a third cheaper than keywords, and bulk enqueue makes thousands
    return NewJob(job_type, queue, payload_json, priority, attempts, scheduled_at, key)
