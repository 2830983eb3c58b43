"""The schedule store on the SQL repository: ``tether_schedules``, one row per periodic schedule.

- A declaration (``record_schedule``) reads the row and updates it, or inserts it when missing (a
  concurrent insert of the same name is caught under a savepoint and turned into the update); a
  changed fingerprint moves the mark to ``now`` in the same statement, or, for a refresh
  (``redefine=False``), only the declaration's liveness is written.
- A tick (``enqueue_tick``) is one transaction: ``UPDATE tether_schedules SET last_tick_at = tick
  WHERE name = ? AND (last_tick_at IS NULL OR last_tick_at < tick) [AND the last job is
  finished]``; only when that row changed, the job's insert (its key in Tether's namespace, as
  in :mod:`.enqueue`) and ``last_job_id``.  Concurrent pools serialise on the schedule's row (a
  row lock on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite): the second one finds the mark moved and
  writes nothing.  Safe to repeat, so it is retried on transient errors.
- ``list_schedules`` is one ``SELECT`` with a left join to each schedule's last job.

None of it is on the lease or completion path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
from sqlalchemy import Table, and_, exists, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from tether.adapters.sqlalchemy.enqueue import SqlEnqueue
from tether.adapters.sqlalchemy.mapping import row_to_schedule, schedule_declaration_values
from tether.adapters.sqlalchemy.schema import status_is
from tether.domain.job import EnqueueResult, NewJob
from tether.domain.schedules import UNFINISHED_STATUSES, ScheduleState, is_live
from tether.domain.timeutil import ensure_utc


class SqlSchedules(SqlEnqueue):
    """``record_schedule``, ``list_schedules`` and ``enqueue_tick`` on ``tether_schedules``."""

    schedules_table: Table

    def record_schedule(self, state: ScheduleState, *, now: datetime, redefine: bool = True) -> ScheduleState | None:
        now = ensure_utc(now, "now")
        ensure_utc(state.declared_at, "declared_at")
        ensure_utc(state.declared_until, "declared_until")
        if state.next_tick_at is not None:
            ensure_utc(state.next_tick_at, "next_tick_at")
        t = self.schedules_table
        values = schedule_declaration_values(state)

        def work(conn: Connection) -> ScheduleState | None:
            row = conn.execute(select(t).where(t.c.name == state.name)).first()
            if row is None:
                try:
                    with conn.begin_nested():
                        conn.execute(insert(t).values(**values))
                    return None
                except IntegrityError:  # another pool inserted it meanwhile
                    row = conn.execute(select(t).where(t.c.name == state.name)).one()
            before = row_to_schedule(row)
            changes: dict[str, Any] = dict(values)
            if before.fingerprint != state.fingerprint:
                if redefine:
                    changes["last_tick_at"] = now
                else:  # a refresh by a pool whose definition is not the one stored: liveness only
                    changes = {k: values[k] for k in ("declared_by", "declared_at", "declared_until")}
            conn.execute(update(t).where(t.c.name == state.name).values(**changes))
            return before

        return self._write("record a schedule", work)

    def list_schedules(self, *, now: datetime) -> list[ScheduleState]:
        now = ensure_utc(now, "now")
        t, j = self.schedules_table, self.table
        stmt = (
            select(t, j.c.status.label("last_job_status"))
            .select_from(t.outerjoin(j, j.c.id == t.c.last_job_id))
            .order_by(t.c.name)
        )
        rows: list[Any] = self._read("list schedules", lambda c: list(c.execute(stmt)))
        states = [row_to_schedule(r) for r in rows]
        return [s if is_live(s, now) else attrs.evolve(s, live=False) for s in states]

    def enqueue_tick(self, name: str, new_job: NewJob, *, now: datetime, overlap: bool) -> EnqueueResult | None:
        now = ensure_utc(now, "now")
        tick = ensure_utc(new_job.scheduled_at, "scheduled_at")
        t, j = self.schedules_table, self.table
        moves = and_(t.c.name == name, or_(t.c.last_tick_at.is_(None), t.c.last_tick_at < tick))
        if not overlap:
            unfinished = exists().where(j.c.id == t.c.last_job_id, status_is(j.c.status, *UNFINISHED_STATUSES))
            moves = and_(moves, ~unfinished)
        advance = update(t).where(moves).values(last_tick_at=tick)

        def work(conn: Connection) -> EnqueueResult | None:
            if conn.execute(advance).rowcount != 1:
                return None
            result = self._insert_one(conn, new_job, now)
            conn.execute(update(t).where(t.c.name == name).values(last_job_id=result.job.id))
            return result

        return self._write("enqueue a periodic tick", work)


__all__ = ["SqlSchedules"]
