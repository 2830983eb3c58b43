"""The schedule store port: where worker pools record periodic schedules and advance each one's tick mark.

A port of its own beside :class:`~tether.ports.repository.JobRepository`; Tether's repositories
(memory, SQLite, PostgreSQL) implement both in the same store, because a tick's enqueue and the
advance of its schedule's mark are one transaction.  The schedules live in a table of their own
that purge never touches: a purged tick's job never makes its tick run again.

Writes are a few small statements per pool per heartbeat interval and per tick, never on the
lease or completion path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from tether.domain.job import EnqueueResult, NewJob
from tether.domain.schedules import ScheduleState


@runtime_checkable
class ScheduleStore(Protocol):
    """Stores one :class:`~tether.domain.schedules.ScheduleState` per schedule name."""

    def record_schedule(self, state: ScheduleState, *, now: datetime, redefine: bool = True) -> ScheduleState | None:
        """Declare a schedule: store its definition and declaration fields (``job_type``,
        ``queue``, ``spec``, ``tz``, ``fingerprint``, ``next_tick_at``, ``declared_by``,
        ``declared_at``, ``declared_until``), inserting the row with no mark when there is none.
        The mark (``last_tick_at``, ``last_job_id``) is kept, except that a different
        ``fingerprint`` (a changed definition) sets ``last_tick_at`` to ``now`` (aware UTC): the
        new definition starts afresh, and no tick of the old one is caught up.

        With ``redefine`` False (a running pool's refresh) and a different stored fingerprint,
        only ``declared_by``, ``declared_at`` and ``declared_until`` are written: the definition
        declared last by a starting pool stays, and so does the mark.

        Returns:
            the row as it was before (None when the schedule is new): a caller that sees another
            fingerprint there cancels the old definition's queued tick (``last_job_id``).

        Raises:
            ValidationError: a naive datetime; nothing written.
            StorageUnavailable: the store could not be reached.
        """
        ...

    def list_schedules(self, *, now: datetime) -> list[ScheduleState]:
        """Every stored schedule by name, each with ``last_job_status`` read from its last job
        (None when it has none or the job was purged) and ``live`` set as
        :func:`~tether.domain.schedules.is_live` decides at ``now`` (aware UTC).

        Raises:
            ValidationError: a naive ``now``.
            StorageUnavailable: the store could not be reached.
        """
        ...

    def enqueue_tick(self, name: str, new_job: NewJob, *, now: datetime, overlap: bool) -> EnqueueResult | None:
        """Enqueue ``new_job`` as the tick ``new_job.scheduled_at`` of schedule ``name``, exactly once.

        In one transaction: advance the schedule's ``last_tick_at`` to the tick by
        compare-and-set (only when the stored mark is before it, or absent), then store the job
        as :meth:`~tether.ports.repository.JobRepository.enqueue` does (its idempotency key, in
        Tether's reserved namespace, a second guard) and record it as ``last_job_id``.  With
        ``overlap`` False the mark is advanced only when the schedule's last job is not
        ``queued``, ``retrying`` or ``running`` (purged counts as finished).

        Returns:
            the enqueue's result, or None when the mark did not move (another pool enqueued this
            tick or a later one, the previous job is unfinished and overlap is off, or the
            schedule is not recorded); nothing is written then.

        Raises:
            ValidationError: a naive ``now`` or ``scheduled_at``; nothing written.
            StorageUnavailable: the store could not be reached; nothing written, or (outcome
                unknown) the tick's key and mark make a retry safe.
        """
        ...


__all__ = ["ScheduleStore"]
