"""Periodic jobs, part of :class:`~tether.entrypoints.service.Tether`: ``app.periodic`` and ``app.schedules()``.

``app.periodic`` only validates and registers a :class:`~tether.domain.schedules.Schedule` in
this process; it writes nothing.  The app's worker pools declare the schedules in the store and
enqueue their ticks (:mod:`tether.entrypoints.worker.ticker`), exactly one job per tick however
many pools run.  Rules: docs/periodic-jobs.md.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
from tether.domain.errors import ValidationError, shown
from tether.domain.job import NewJob
from tether.domain.limits import PRIORITY_MAX, PRIORITY_MIN
from tether.domain.payload import encode_payload
from tether.domain.schedules import MAX_CATCH_UP, Schedule, ScheduleState, tick_key, upcoming_tick
from tether.domain.ticks import cadence
from tether.domain.validation import validate_int, validate_job_type, validate_queue
from tether.ports.clock import Clock
from tether.ports.schedule_store import ScheduleStore

F = TypeVar("F", bound=Callable[..., Any])


def _catch_up(value: object) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and not 0 <= value <= MAX_CATCH_UP.total_seconds():
            raise ValidationError("catch_up", f"must be from 0 to {MAX_CATCH_UP.days} days, got {shown(value)} s")
        seconds = float(value)
    else:
        raise ValidationError("catch_up", f"must be seconds (a number or a timedelta) or None, got {shown(value)}")
    if not (0 <= seconds <= MAX_CATCH_UP.total_seconds()):
        raise ValidationError("catch_up", f"must be from 0 to {MAX_CATCH_UP.days} days, got {seconds:g} s")
    return timedelta(seconds=seconds)


def _name(value: object, field: str) -> str:
    try:
        return validate_job_type(value)
    except ValidationError as exc:
        raise ValidationError(field, exc.problem) from None


class PeriodicSchedules:
    """The periodic side of the ``Tether`` API (a mixin: ``Tether`` supplies the attributes)."""

    clock: Clock
    max_payload_bytes: int
    schedule_store: ScheduleStore | None
    _schedules: dict[str, Schedule]
    _schedules_lock: threading.Lock

    def _prepare_tick(self, schedule: Schedule, tick: datetime, now: datetime) -> NewJob:  # pragma: no cover - Tether's
        raise NotImplementedError

    def _find_handler_name(self, func: Callable[..., Any]) -> str | None:  # pragma: no cover - Tether's
        raise NotImplementedError

    def periodic(
        self,
        name: str | None = None,
        job_type: str | None = None,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        payload: Any = None,
        queue: str | None = None,
        priority: int = 0,
        catch_up: float | timedelta | None = None,
        overlap: bool = False,
    ) -> Any:
        """Run job ``job_type`` on a schedule: ``cron`` in time zone ``tz``, or ``every`` seconds.

        ``app.periodic("nightly", "reports.build", cron="0 3 * * *", tz="Europe/Paris")`` registers
        at once and returns the :class:`~tether.domain.schedules.Schedule`.  Without ``job_type``
        it returns a decorator for a handler: put ``@app.periodic(cron=...)`` above
        ``@app.handler(...)``; the job type is that handler's (else the function's ``__name__``),
        and the schedule is named ``name`` or after the job type.

        Only worker pools enqueue ticks (each tick exactly once across every pool); registering
        writes nothing.

        Args:
            name: the schedule's name, unique in the app (1-200 of letters, digits, ``_ . : -``).
            job_type: the job each tick enqueues.
            cron: a five-field cron expression (minute hour day month weekday), evaluated in ``tz``.
            every: seconds between ticks (a number >= 1 or a timedelta, at most a year); ticks are
                the multiples of ``every`` since the Unix epoch, the same grid in every process.
            tz: an IANA time zone name for ``cron`` (default ``"UTC"``).
            payload: every tick's payload (JSON, as for ``enqueue``).
            queue, priority: of every tick's job (queue default: the handler's, else the app's).
            catch_up: seconds (or a timedelta, 0 to 31 days) a missed tick may be late and still
                run once; None (default): one period, so the latest missed tick always runs once;
                0: never.  Older missed ticks never run.
            overlap: False (default): no tick is enqueued while the previous tick's job is still
                queued, retrying or running (a tick passed meanwhile runs late within
                ``catch_up``, else is skipped); True: ticks are enqueued regardless.

        Raises:
            ValidationError: naming the field (``name``, ``job_type``, ``cron`` when neither or both
                of cron/every are given or the expression does not parse, ``every``, ``tz``,
                ``payload``, ``queue``, ``priority``, ``catch_up``, ``overlap``), or ``name`` when
                a schedule of that name exists; nothing registered.
        """
        if name is not None:
            name = _name(name, "name")
        if job_type is not None:
            job_type = validate_job_type(job_type)
        cad = cadence(cron=cron, every=every, tz=tz)
        payload_json = encode_payload(payload, max_bytes=self.max_payload_bytes)
        if queue is not None:
            queue = validate_queue(queue)
        priority = validate_int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
        window = _catch_up(catch_up)
        if not isinstance(overlap, bool):
            raise ValidationError("overlap", f"must be True or False, got {shown(overlap)}")
        template = Schedule(name or "", job_type or "", cad, payload_json, queue, priority, window, overlap)
        if job_type is not None:
            return self._add_schedule(attrs.evolve(template, name=name or job_type))

        def decorate(func: F) -> F:
            handler_name = self._find_handler_name(func) or getattr(func, "__name__", None)
            the_type = validate_job_type(handler_name)
            self._add_schedule(attrs.evolve(template, name=name or the_type, job_type=the_type))
            return func

        return decorate

    def _add_schedule(self, schedule: Schedule) -> Schedule:
        with self._schedules_lock:
            if schedule.name in self._schedules:
                raise ValidationError("name", f"a schedule named {shown(schedule.name)} is registered already")
            self._schedules[schedule.name] = schedule
        return schedule

    @property
    def periodic_schedules(self) -> Mapping[str, Schedule]:
        """The schedules registered in this process, by name (read-only view)."""
        return MappingProxyType(self._schedules)

    def schedules(self) -> list[ScheduleState]:
        """The schedules the store holds (declared by worker pools), by name: each with its next
        tick (computed now from its spec and zone, :func:`~tether.domain.schedules.upcoming_tick`),
        its last tick's job and that job's status, and whether a live pool declares it.  Empty
        when the repository keeps no schedules.

        Raises:
            StorageUnavailable: the store could not be reached.
        """
        if self.schedule_store is None:
            return []
        now = self.clock.now()
        return [attrs.evolve(s, next_tick_at=upcoming_tick(s, now)) for s in self.schedule_store.list_schedules(now=now)]


def tick_job(prepared: NewJob, schedule: Schedule, tick: datetime) -> NewJob:
    """``prepared`` (the app's enqueue of the tick, due at ``tick``) keyed as the tick's job."""
    return attrs.evolve(prepared, idempotency_key=tick_key(schedule.name, tick))


def decoded_payload(schedule: Schedule) -> Any:
    """A fresh copy of ``schedule``'s payload."""
    return json.loads(schedule.payload_json)


__all__ = ["PeriodicSchedules", "decoded_payload", "tick_job"]
