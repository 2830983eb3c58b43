"""The periodic schedules of the pure job model: declarations, marks and which tick is enqueued.

A mixin of :class:`~tether.testing.model.JobModel` (which holds the jobs), written, like the rest of
the model, from ``shared/DESIGN.md`` and sharing no code with :mod:`tether.domain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The statuses of a job that is still live (its schedule's next tick waits for it without overlap).
LIVE = ("queued", "retrying", "running")


@dataclass
class ModelSchedule:
    """The model's view of one periodic schedule: its fingerprint, mark and last tick's job."""

    fingerprint: str
    mark: datetime | None = None
    last: int | None = None


class ScheduleModel:
    """The schedules, by name, and the compare-and-set rule of their marks."""

    jobs: dict[int, Any]
    schedules: dict[str, ModelSchedule]

    def declare(self, name: str, fingerprint: str, now: datetime, *, redefine: bool = True) -> str | None:
        """Record a declaration; returns the fingerprint stored before (None: a new schedule).
        Without ``redefine`` another stored fingerprint stays, and so does the mark."""
        schedule = self.schedules.get(name)
        if schedule is None:
            self.schedules[name] = ModelSchedule(fingerprint)
            return None
        before = schedule.fingerprint
        if before != fingerprint:
            if not redefine:
                return before
            schedule.mark = now
        schedule.fingerprint = fingerprint
        return before

    def tick_moves(self, name: str, tick: datetime, *, overlap: bool) -> bool:
        """Whether the tick of ``name`` at ``tick`` is enqueued (then call :meth:`ticked`)."""
        schedule = self.schedules.get(name)
        if schedule is None or (schedule.mark is not None and schedule.mark >= tick):
            return False
        if not overlap and schedule.last is not None:
            last = self.jobs.get(schedule.last)
            if last is not None and last.status in LIVE:
                return False
        return True

    def ticked(self, name: str, tick: datetime, ordinal: int) -> None:
        schedule = self.schedules[name]
        schedule.mark, schedule.last = tick, ordinal



__all__ = ["LIVE", "ModelSchedule", "ScheduleModel"]
