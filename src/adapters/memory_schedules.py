"""The schedule store of the in-memory repository: one :class:`ScheduleState` per name, under the repository's lock.

A part of :class:`~tether.adapters.memory.InMemoryJobRepository` (mixed in), kept in a module of
its own.  A tick's enqueue and the advance of its schedule's mark happen under the one lock, so
they are one atomic step, as they are one transaction in the SQL stores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import attrs
from tether.domain.job import EnqueueResult, Job, NewJob
from tether.domain.schedules import UNFINISHED_STATUSES, ScheduleState, is_live
from tether.domain.timeutil import ensure_utc
from tether.ports.schedule_store import ScheduleStore


def _utc_or_none(value: datetime | None, field: str) -> datetime | None:
    return None if value is None else ensure_utc(value, field)


class MemorySchedules(ScheduleStore):
    """``record_schedule``, ``list_schedules`` and ``enqueue_tick`` on a dict of schedule states."""

    _lock: threading.Condition
    _jobs: dict[int, Job]
    _schedules: dict[str, ScheduleState]
    _insert: Callable[..., EnqueueResult]

    def record_schedule(self, state: ScheduleState, *, now: datetime, redefine: bool = True) -> ScheduleState | None:
        now = ensure_utc(now, "now")
        state = attrs.evolve(
            state,
            declared_at=ensure_utc(state.declared_at, "declared_at"),
            declared_until=ensure_utc(state.declared_until, "declared_until"),
            next_tick_at=_utc_or_none(state.next_tick_at, "next_tick_at"),
            last_job_status=None,
            live=True,
        )
        with self._lock:
            before = self._schedules.get(state.name)
            if before is None:
                self._schedules[state.name] = attrs.evolve(state, last_tick_at=None, last_job_id=None)
            elif before.fingerprint != state.fingerprint and not redefine:
                self._schedules[state.name] = attrs.evolve(
                    before, declared_by=state.declared_by, declared_at=state.declared_at,
                    declared_until=state.declared_until, last_job_status=None, live=True,
                )
            else:
                mark = now if before.fingerprint != state.fingerprint else before.last_tick_at
                self._schedules[state.name] = attrs.evolve(state, last_tick_at=mark, last_job_id=before.last_job_id)
            return before

    def list_schedules(self, *, now: datetime) -> list[ScheduleState]:
        now = ensure_utc(now, "now")
        with self._lock:
            states = sorted(self._schedules.values(), key=lambda s: s.name)
            found = []
            for state in states:
                job = self._jobs.get(state.last_job_id) if state.last_job_id is not None else None
                found.append(attrs.evolve(state, last_job_status=None if job is None else job.status, live=is_live(state, now)))
        return found

    def enqueue_tick(self, name: str, new_job: NewJob, *, now: datetime, overlap: bool) -> EnqueueResult | None:
        now = ensure_utc(now, "now")
        tick = ensure_utc(new_job.scheduled_at, "scheduled_at")
        with self._lock:
            state = self._schedules.get(name)
            if state is None or (state.last_tick_at is not None and state.last_tick_at >= tick):
                return None
            if not overlap and state.last_job_id is not None:
                previous = self._jobs.get(state.last_job_id)
                if previous is not None and previous.status in UNFINISHED_STATUSES:
                    return None
            result = self._insert(new_job, now, None)
            self._schedules[name] = attrs.evolve(state, last_tick_at=tick, last_job_id=result.job.id)
            return result


__all__ = ["MemorySchedules"]
