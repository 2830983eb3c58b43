"""Queue controls: a queue's stored pause flag and limits, and the pure rules that apply them.

Queues stay implicit: a queue exists as soon as a job names it, and a queue with no job may be
paused or limited all the same (its settings wait for its first job).  A queue's settings are
one small record, :class:`QueueState`; a queue with no record is unpaused and unlimited.

- **Pause**: no job of a paused queue is leased (by ``lease``, by ``lease_job``, by
  ``complete_and_lease``), from the first lease statement that starts after the pause was
  written.  Enqueue keeps accepting jobs; running jobs finish; ``due_jobs`` leaves them out.
- **Running limit** (``max_running``): at most that many jobs of the queue are running at once
  across every worker.  A running job counts while its lease has not expired at the lease's
  ``now`` (:func:`counts_as_running`), so the slots of a killed worker come back when its leases
  expire, before the reaper writes them.  A lease of a limited queue takes at most
  :func:`lease_room` jobs.
- **Rate limit** (``rate_limit`` starts per ``rate_period`` seconds): at most that many leases of
  the queue's jobs (first attempts and retries alike) start in each window.  Windows are fixed:
  window ``k`` covers ``[k * rate_period, (k + 1) * rate_period)`` seconds since the Unix epoch
  (UTC), the same for every process (:func:`window_start_micros`); the count starts again at 0 in
  each window.  So any window of that kind holds at most ``rate_limit`` starts, and any span of
  ``rate_period`` seconds at most twice that (the end of one window and the start of the next).
- **Per-key running limit** (``max_running_per_key``): at most that many jobs of the queue that
  carry the same ``concurrency_key`` are running at once across every worker (counted as the
  running limit is, :func:`counts_as_running`); jobs without a key are not limited by it.  A lease
  takes the queue's due jobs in lease order, passing over a job whose key is at its limit
  (counting the jobs the lease itself took, :func:`pick_within_key_limit`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import attrs
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import to_micros
from tether.domain.validation import validate_int, validate_queue, validate_seconds

#: The largest ``max_running`` accepted, and the largest ``rate_limit``.
MAX_RUNNING_LIMIT = 1_000_000
#: The shortest and longest rate window, in seconds.
MIN_RATE_PERIOD = 0.001
MAX_RATE_PERIOD = 366 * 86_400.0


@attrs.frozen
class QueueState:
    """The stored controls of one queue.

    Attributes:
        name: the queue's name.
        paused: no job of the queue is leased while True.
        max_running: most jobs of the queue running at once across every worker (None: no limit).
        rate_limit: most job starts of the queue per window of ``rate_period`` seconds (None: no
            rate limit; both or neither are set).
        rate_period: the rate window, in seconds.
        updated_at: when the record was last written (aware UTC), None for a queue with no record.
        window_start: the start of the last rate window in which a job of the queue started
            (aware UTC), None before the first.
        window_starts: how many started in that window.
        max_running_per_key: most jobs of the queue with the same ``concurrency_key`` running
            at once across every worker (None: no per-key limit; jobs without a key never count).
    """

    name: str
    paused: bool = False
    max_running: int | None = None
    updated_at: datetime | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    window_start: datetime | None = None
    window_starts: int = 0
    max_running_per_key: int | None = None

    def started_in_window(self, now: datetime) -> int:
        """Starts counted in the rate window holding ``now`` (0 without a rate limit)."""
        period = self.rate_period_micros
        if period is None or self.window_start is None:
            return 0
        return self.window_starts if to_micros(self.window_start) == window_start_micros(now, period) else 0

    @property
    def limited(self) -> bool:
        """True when the queue has a running limit, a per-key running limit or a rate limit."""
        return self.max_running is not None or self.rate_limit is not None or self.max_running_per_key is not None

    @property
    def restricted(self) -> bool:
        """True when leases of this queue cannot take the plain lease path (paused or limited)."""
        return self.paused or self.limited

    @property
    def rate_period_micros(self) -> int | None:
        """``rate_period`` in whole microseconds (None without a rate limit)."""
        return None if self.rate_period is None else round(self.rate_period * 1_000_000)


@attrs.frozen
class QueueInfo:
    """A queue as ``app.queues()`` lists it: its controls and how many jobs it holds per status.

    Attributes:
        name, paused, max_running, rate_limit, rate_period, max_running_per_key: as in
            :class:`QueueState`.
        counts: jobs of the queue per status (every status present, zero included).
    """

    name: str
    paused: bool
    max_running: int | None
    counts: dict[JobStatus, int]
    rate_limit: int | None = None
    rate_period: float | None = None
    max_running_per_key: int | None = None

    @property
    def running(self) -> int:
        """Jobs of the queue in ``running``."""
        return self.counts.get(JobStatus.RUNNING, 0)


def validate_max_running(value: object, field: str = "max_running") -> int:
    """``value`` as a running limit (1 to :data:`MAX_RUNNING_LIMIT`).  Raises ValidationError(``field``)."""
    return validate_int(value, field, 1, MAX_RUNNING_LIMIT)


def validate_max_running_per_key(value: object) -> int:
    """``value`` as a per-key running limit (1 to :data:`MAX_RUNNING_LIMIT`).  Raises
    ValidationError(``max_running_per_key``)."""
    return validate_int(value, "max_running_per_key", 1, MAX_RUNNING_LIMIT)


def validate_rate(rate_limit: object, per: object) -> tuple[int, float]:
    """``(rate_limit, per)`` as a rate: 1 to :data:`MAX_RUNNING_LIMIT` starts per window of
    ``per`` seconds (:data:`MIN_RATE_PERIOD` to :data:`MAX_RATE_PERIOD`, kept to the microsecond).

    Raises:
        ValidationError: naming ``rate_limit`` or ``rate_period`` (0 or a negative period included).
    """
    limit = validate_int(rate_limit, "rate_limit", 1, MAX_RUNNING_LIMIT)
    period = validate_seconds(per, "rate_period", allow_zero=False)
    if not MIN_RATE_PERIOD <= period <= MAX_RATE_PERIOD:
        raise ValidationError(
            "rate_period", f"must be a number of seconds from {MIN_RATE_PERIOD:g} to {MAX_RATE_PERIOD:,.0f}, got {period}"
        )
    return limit, round(period * 1_000_000) / 1_000_000


def window_start_micros(now: datetime, period_micros: int) -> int:
    """The start of the rate window holding ``now``, in microseconds since the Unix epoch: the
    largest multiple of ``period_micros`` not after ``now``."""
    return to_micros(now) // period_micros * period_micros


def validate_queue_name(value: object) -> str:
    """``value`` as a queue name (as enqueue accepts it).  Raises ValidationError(``queue``)."""
    return validate_queue(value, "queue")


def counts_as_running(job: Job, now: datetime) -> bool:
    """True when ``job`` holds one of its queue's slots at ``now``: running under a lease that has
    not expired (an expired lease's slot is free even before the reaper writes the job)."""
    return job.status is JobStatus.RUNNING and job.lease_expires_at is not None and job.lease_expires_at > now


def lease_room(state: QueueState | None, running: int, started_in_window: int = 0) -> int | None:
    """How many jobs of a queue a lease may take now: 0 when paused; else the least of
    ``max_running - running`` (with a running limit; ``running``: jobs counting as running,
    :func:`counts_as_running`) and ``rate_limit - started_in_window`` (with a rate limit;
    ``started_in_window``: leases of the queue in the current window), never below 0; None when
    there is no limit."""
    if state is None:
        return None
    if state.paused:
        return 0
    rooms = []
    if state.max_running is not None:
        rooms.append(state.max_running - running)
    if state.rate_limit is not None:
        rooms.append(state.rate_limit - started_in_window)
    return max(min(rooms), 0) if rooms else None


def pick_within_key_limit(
    candidates: Iterable[tuple[int, str | None]], per_key: int | None, running_by_key: Mapping[str, int],
    room: int | None,
) -> list[int]:
    """The ids a lease takes from ``candidates`` (``(id, concurrency_key)`` in lease order): each in
    turn, passing over one whose key already has ``per_key`` jobs counting as running
    (``running_by_key``, :func:`counts_as_running`) or taken by this lease, and stopping at
    ``room`` ids (None: no stop).  Jobs without a key, and every job when ``per_key`` is None, pass
    the key rule."""
    taken: list[int] = []
    held = dict(running_by_key)
    for job_id, key in candidates:
        if room is not None and len(taken) >= room:
            break
        if key is not None and per_key is not None:
            if held.get(key, 0) >= per_key:
                continue
            held[key] = held.get(key, 0) + 1
        taken.append(job_id)
    return taken


def restricted_names(states: Iterable[QueueState]) -> frozenset[str]:
    """The names of the paused or limited queues among ``states``."""
    return frozenset(s.name for s in states if s.restricted)


__all__ = [
    "MAX_RATE_PERIOD",
    "MAX_RUNNING_LIMIT",
    "MIN_RATE_PERIOD",
    "QueueInfo",
    "QueueState",
    "counts_as_running",
    "lease_room",
    "pick_within_key_limit",
    "restricted_names",
    "validate_max_running",
    "validate_max_running_per_key",
    "validate_queue_name",
    "validate_rate",
    "window_start_micros",
]
