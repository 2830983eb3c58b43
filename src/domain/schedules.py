"""Periodic schedules: a definition (:class:`Schedule`), its stored state (:class:`ScheduleState`), tick keys.

A schedule enqueues one job per tick of its :class:`~tether.domain.ticks.Cadence`.  Worker pools
record the schedules they run in the store (one :class:`ScheduleState` per name) and advance its
``last_tick_at`` by compare-and-set in the same transaction as the tick's job: that mark, never
purged, is what makes each tick enqueue exactly one job however many pools run.  The tick's job
also carries an idempotency key in Tether's reserved namespace (:func:`tick_key`), a second guard.

Idempotency keys starting with :data:`RESERVED_KEY_PREFIX` are Tether's: a user's enqueue that
names one is refused (:func:`check_user_key`).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

import attrs
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.ticks import Cadence, cadence_of
from tether.domain.timeutil import from_micros, to_micros

#: Idempotency keys in this namespace belong to Tether (refused in user keys).
RESERVED_KEY_PREFIX = "tether:"
#: The keys of periodic ticks: ``tether:tick:<schedule name>:<tick, microseconds since the epoch>``.
TICK_KEY_PREFIX = RESERVED_KEY_PREFIX + "tick:"
#: Longest catch-up window a schedule may ask for.
MAX_CATCH_UP = timedelta(days=31)


def check_user_key(key: str | None) -> str | None:
    """``key`` unless it lies in Tether's reserved namespace.

    Raises:
        ValidationError: naming ``idempotency_key``.
    """
    if key is not None and key.startswith(RESERVED_KEY_PREFIX):
        raise ValidationError(
            "idempotency_key", f"keys starting with {RESERVED_KEY_PREFIX!r} are reserved for Tether's periodic ticks"
        )
    return key


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of schedule ``name``'s job for ``tick`` (aware UTC)."""
    return f"{TICK_KEY_PREFIX}{name}:{to_micros(tick)}"


def is_tick_key(key: str | None) -> bool:
    """True for the idempotency key of a periodic tick's job."""
    return key is not None and key.startswith(TICK_KEY_PREFIX)


def tick_of(key: str | None) -> tuple[str, datetime] | None:
    """(schedule name, tick as aware UTC) of a tick job's idempotency key (:func:`tick_key`), or
    None for any other key (or one that does not parse)."""
    if not is_tick_key(key):
        return None
    assert key is not None
    name, _, micros = key[len(TICK_KEY_PREFIX):].rpartition(":")
    if not name or not micros.lstrip("-").isdigit():
        return None
    try:
        return name, from_micros(int(micros))
    except (OverflowError, ValueError):
        return None


@attrs.frozen
class Schedule:
    """A periodic schedule as registered with ``app.periodic``.

    Attributes:
        name: unique among the application's schedules (1-200 of letters, digits, ``_ . : -``).
        job_type: the job each tick enqueues.
        cadence: when it ticks.
        payload_json: the canonical JSON payload of every tick's job.
        queue: the job's queue, None for the handler's or the application's default.
        priority: the job's priority.
        catch_up: how late a missed tick may still run (None: one period; zero: never).
        overlap: False (the default): a tick is not enqueued while the job of the previous tick
            is still queued, retrying or running; True: ticks are enqueued regardless.
    """

    name: str
    job_type: str
    cadence: Cadence
    payload_json: str = "null"
    queue: str | None = None
    priority: int = 0
    catch_up: timedelta | None = None
    overlap: bool = False

    @property
    def fingerprint(self) -> str:
        """A digest of the definition: when it changes, the queued future tick is cancelled."""
        parts = [
            self.job_type, self.cadence.spec, self.cadence.tz, self.payload_json, self.queue, self.priority,
            None if self.catch_up is None else self.catch_up.total_seconds(), self.overlap,
        ]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


@attrs.frozen
class ScheduleState:
    """One schedule as the store holds it.

    Attributes:
        name, job_type, queue: as defined (``queue`` None: the default one).
        spec: the cadence as text (``"cron 0 3 * * *"``, ``"every 5s"``); tz: its time zone.
        fingerprint: :attr:`Schedule.fingerprint` of the definition last declared.
        next_tick_at: the next tick as the last declaring pool saw it (aware UTC), or None; it
            falls behind between that pool's heartbeats, so ``app.schedules()`` gives
            :func:`upcoming_tick` here instead.
        declared_by: the worker id of the pool that declared it last.
        declared_at: when it was last declared (aware UTC).
        declared_until: when that declaration lapses unless refreshed (aware UTC): after it, no
            live pool runs the schedule.
        last_tick_at: the mark of the last tick enqueued (aware UTC), or None; the tick's job is
            due then.  Advanced only forward, by compare-and-set with the tick's enqueue; set to
            the time of a definition change (the new definition starts afresh).
        last_job_id: the job of the last tick enqueued, or None.
        last_job_status: that job's status when read (None: no job, or it was purged).
        live: set by readers: True while ``declared_until`` is not past.
    """

    name: str
    job_type: str
    queue: str | None
    spec: str
    tz: str
    fingerprint: str
    next_tick_at: datetime | None
    declared_by: str
    declared_at: datetime
    declared_until: datetime
    last_tick_at: datetime | None = None
    last_job_id: int | None = None
    last_job_status: JobStatus | None = None
    live: bool = True


def is_live(state: ScheduleState, now: datetime) -> bool:
    """True while some pool's declaration of ``state`` has not lapsed at ``now``."""
    return state.declared_until >= now


def upcoming_tick(state: ScheduleState, now: datetime) -> datetime | None:
    """The first tick of ``state`` after ``now`` (aware UTC), from its spec and time zone: a tick
    already enqueued ahead (a ``last_tick_at`` after ``now``) is the next one.  The stored
    ``next_tick_at`` is kept when the spec does not read back exactly (an unknown zone here, or an
    ``every`` rounded in its text, off the stored tick's grid).  None when a cron expression never
    matches again."""
    if state.last_tick_at is not None and state.last_tick_at > now:
        return state.last_tick_at
    try:
        cad = cadence_of(state.spec, state.tz)
    except ValidationError:
        return state.next_tick_at
    if cad.every_us is not None and state.next_tick_at is not None and to_micros(state.next_tick_at) % cad.every_us:
        return state.next_tick_at
    return cad.next_after(now)


#: The statuses of a previous tick's job that hold back the next tick when overlap is off.
UNFINISHED_STATUSES = (JobStatus.QUEUED, JobStatus.RETRYING, JobStatus.RUNNING)


__all__ = [
    "MAX_CATCH_UP",
    "RESERVED_KEY_PREFIX",
    "TICK_KEY_PREFIX",
    "UNFINISHED_STATUSES",
    "Schedule",
    "ScheduleState",
    "check_user_key",
    "is_live",
    "is_tick_key",
    "tick_key",
    "tick_of",
    "upcoming_tick",
]
