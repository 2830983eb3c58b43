"""The schedule steps of the repository state machine, on a repository that is a schedule store
too: declarations (a definition kept, changed or refreshed) and periodic ticks (the mark's
compare-and-set, overlap on and off), and the invariant that the store's marks, last jobs and
their statuses are the model's.  A mixin of
:class:`~tether.testing.statemachine.repository_machine.RepositoryStateMachine`, which supplies
the repository, the clock, the model and the job bookkeeping.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from tether.domain.schedules import ScheduleState, tick_key
from tether.ports.schedule_store import ScheduleStore
from tether.testing.statemachine.base import describe, queues

SCHEDULE_NAMES = ("hourly", "nightly")


def _keeps_schedules(machine: Any) -> bool:
    return isinstance(machine.repository, ScheduleStore)


class ScheduleRules:
    """Schedule declarations, ticks and their invariant (see the module docstring)."""

    repository: Any
    clock: Any
    model: Any
    ids: Any
    serial: int
    started_at: Any

    # the machine's (annotations only: nothing here shadows them in the method order)
    new_job: Any
    _enqueued: Any
    _ordinal: Any

    @precondition(_keeps_schedules)
    @rule(name=st.sampled_from(SCHEDULE_NAMES), fingerprint=st.sampled_from(["f1", "f2"]), redefine=st.booleans())
    def declare_schedule(self, name: str, fingerprint: str, redefine: bool) -> None:
        now = self.clock.now()
        state = ScheduleState(
            name=name, job_type="machine.job", queue=None, spec="every 5s", tz="UTC", fingerprint=fingerprint,
            next_tick_at=None, declared_by="machine", declared_at=now, declared_until=now,
        )
        assert isinstance(self.repository, ScheduleStore)
        before = self.repository.record_schedule(state, now=now, redefine=redefine)
        expected = self.model.declare(name, fingerprint, now, redefine=redefine)
        assert (None if before is None else before.fingerprint) == expected

    @precondition(_keeps_schedules)
    @rule(name=st.sampled_from(SCHEDULE_NAMES), slot=st.integers(0, 4), overlap=st.booleans(), queue=queues)
    def enqueue_tick(self, name: str, slot: int, overlap: bool, queue: str) -> None:
        # ticks on a 5 s grid from the machine's start: the same tick, earlier ones, past and
        # future ones all come up often
        tick = self.started_at + timedelta(seconds=5 * slot)
        self.serial += 1
        new = attrs.evolve(self.new_job(self.serial, queue, 0, None, 3, None), scheduled_at=tick,
                           idempotency_key=tick_key(name, tick))
        assert isinstance(self.repository, ScheduleStore)
        result = self.repository.enqueue_tick(name, new, now=self.clock.now(), overlap=overlap)
        if not self.model.tick_moves(name, tick, overlap=overlap):
            assert result is None, f"tick {tick} of {name} enqueued {describe(result.job)}; the model says no"
            return
        assert result is not None, f"tick {tick} of {name} enqueued nothing; the model says it moves the mark"
        self._enqueued(new, result.created, result.job)
        self.model.ticked(name, tick, self._ordinal(result.job))

    @invariant()
    def schedules_agree_with_the_model(self) -> None:
        if not isinstance(self.repository, ScheduleStore):
            return
        stored = {
            s.name: (s.fingerprint, s.last_tick_at, s.last_job_id, None if s.last_job_status is None else s.last_job_status.value)
            for s in self.repository.list_schedules(now=self.clock.now())
        }
        expected = {}
        for name, schedule in self.model.schedules.items():
            last = None if schedule.last is None else self.model.jobs.get(schedule.last)
            expected[name] = (
                schedule.fingerprint, schedule.mark, None if schedule.last is None else self.ids[schedule.last],
                None if last is None else last.status,
            )
        assert stored == expected



__all__ = ["SCHEDULE_NAMES", "ScheduleRules"]
