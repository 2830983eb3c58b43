"""The overview reads on the SQL repository: pages of jobs by id, live counts per queue, totals per
status, finished jobs per minute; every statement bounded whatever the table's size.

- A page with a live status reads that status's partial index (``status_is`` keeps the literal
  visible to the planner); any other page first finds the floor of its window of ids (an index-only
  walk of the primary key, at most ``window`` entries), then reads the id range above it.
- Queue summaries (the dashboard's queues and the metrics' queue gauges) are one ``UNION ALL`` of
  a grouped read under each live partial index's predicate, never a read of the finished rows;
  live counts group the same indexes (or are the sums of the queue summaries just read, so the
  dashboard reads its live rows once per snapshot).
- Finished counts are exact on SQLite and on a small PostgreSQL table; above
  :attr:`SqlOverview.exact_count_below` rows PostgreSQL answers with the planner's estimate of each
  finished status (``EXPLAIN``, no scan), marked as such.
- Finished jobs per minute walk the ``finished_at`` partial index from the newest row down, at most
  ``max_rows`` rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Select, and_, case, func, literal, null, select, type_coerce, union_all
from sqlalchemy.engine import Connection
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.schema import UtcDateTime, status_is
from tether.adapters.sqlalchemy.transactions import SqlTransactions, bound_connection
from tether.domain.job import TERMINAL_STATUSES, JobStatus
from tether.domain.overview import (
    FinishedMinute,
    JobFilter,
    JobPage,
    QueueSummary,
    StatusTotals,
    Throughput,
    live_counts,
    minute_row,
    page_of,
)
from tether.domain.timeutil import ensure_utc, from_micros
from tether.ports.overview import JobOverview

MICROS_PER_MINUTE = 60_000_000


class SqlOverview(SqlTransactions, JobOverview):
    """:class:`~tether.ports.overview.JobOverview` on the ``tether_jobs`` table (a mixin of the SQL repository)."""

    #: PostgreSQL counts finished statuses exactly while the planner thinks the table holds fewer rows.
    exact_count_below = 100_000

    def _filtered(self, stmt: Select[Any], filters: JobFilter) -> Select[Any]:
        t = self.table
        if filters.status is not None:
            stmt = stmt.where(status_is(t.c.status, filters.status))
        if filters.queue is not None:
            stmt = stmt.where(t.c.queue == filters.queue)
        if filters.job_type is not None:
            stmt = stmt.where(t.c.job_type == filters.job_type)
        return stmt

    def browse_jobs(self, filters: JobFilter, *, before_id: int | None, limit: int, window: int) -> JobPage:
        t = self.table
        below = [] if before_id is None else [t.c.id < before_id]

        def read(conn: Connection) -> JobPage:
            if filters.uses_live_index:
                stmt = self._filtered(select(t).where(*below), filters).order_by(t.c.id.desc()).limit(limit + 1)
                return page_of([row_to_job(r) for r in conn.execute(stmt)], limit=limit, window_floor=None)
            ids = select(t.c.id).where(*below).order_by(t.c.id.desc()).limit(window).subquery()
            floor, seen = conn.execute(select(func.min(ids.c.id), func.count()).select_from(ids)).one()
            if not seen:
                return JobPage((), None)
            stmt = self._filtered(select(t).where(*below, t.c.id >= floor), filters).order_by(t.c.id.desc()).limit(limit + 1)
            jobs = [row_to_job(r) for r in conn.execute(stmt)]
            return page_of(jobs, limit=limit, window_floor=int(floor) if seen == window else None)

        return self._read("browse jobs", read)

    def status_totals(self, *, live: Sequence[QueueSummary] | None = None) -> StatusTotals:
        t = self.table
        live_statements = [
            select(t.c.status, func.count()).where(status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING)).group_by(t.c.status),
            select(t.c.status, func.count()).where(status_is(t.c.status, JobStatus.RUNNING)).group_by(t.c.status),
        ]
        exact_finished = select(t.c.status, func.count()).where(t.c.finished_at.is_not(None)).group_by(t.c.status)

        def read(conn: Connection) -> StatusTotals:
            counts = {s: 0 for s in JobStatus}
            if live is not None:
                counts.update(live_counts(live))
            else:
                for stmt in live_statements:
                    for status, n in conn.execute(stmt):
                        counts[JobStatus(status)] = int(n)
            if conn.dialect.name == "postgresql" and self._planned_rows(conn, select(literal(1)).select_from(t)) >= self.exact_count_below:
                for status in TERMINAL_STATUSES:
                    counts[status] = self._planned_rows(conn, select(literal(1)).where(status_is(t.c.status, status)))
                return StatusTotals(counts, frozenset(TERMINAL_STATUSES))
            for status, n in conn.execute(exact_finished):
                if JobStatus(status).is_terminal:
                    counts[JobStatus(status)] = int(n)
            return StatusTotals(counts)

        return self._read("count jobs per status", read)

    def _planned_rows(self, conn: Connection, stmt: Select[Any]) -> int:
        """The PostgreSQL planner's row estimate for ``stmt`` (its table statistics; no scan)."""
        sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql).scalar_one()
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])

    def queue_summaries(self, *, now: datetime) -> list[QueueSummary]:
        """One statement over the live rows only: per queue and status, ``count(*)``, the due ones
        (``sum`` of a ``CASE``) and the least due ``scheduled_at`` (a ``CASE`` inside ``min``), as
        the ``UNION ALL`` of a grouped read under each live partial index's own predicate
        (``queued``/``retrying``, ``running``), so the planner reads those indexes and never the
        finished rows; on PostgreSQL they carry ``status`` and ``queue`` (``INCLUDE``, revision
        0010), so it reads nothing else: an index-only scan.  On PostgreSQL it runs without parallel workers (``SET LOCAL`` in its own
        transaction): on a busy server their start-up made the slowest reads several times the
        median, and a background read should not take the workers other queries need."""
        now = ensure_utc(now, "now")
        t = self.table
        is_due = t.c.scheduled_at <= now
        waiting = (
            select(
                t.c.queue,
                t.c.status,
                func.count(),
                func.sum(case((is_due, 1), else_=0)),
                type_coerce(func.min(case((is_due, t.c.scheduled_at), else_=None)), UtcDateTime()),
            )
            .where(status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING))
            .group_by(t.c.queue, t.c.status)
        )
        running = (  # the status a literal: the running index carries the queue, not the status
            select(t.c.queue, literal(JobStatus.RUNNING.value), func.count(), literal(0), null())
            .where(status_is(t.c.status, JobStatus.RUNNING))
            .group_by(t.c.queue)
        )
        stmt = union_all(waiting, running)

        serial = self.engine.dialect.name == "postgresql" and bound_connection() is None

        def read(conn: Connection) -> list[QueueSummary]:
            if serial:  # in this read's own transaction only
                conn.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")
            rows: dict[str, dict[str, Any]] = {}
            for queue, status, n, due, oldest in conn.execute(stmt):
                row = rows.setdefault(queue, {"queue": queue, "due": 0, "oldest_due_at": None})
                row[status] = int(n)
                row["due"] += int(due or 0)
                if oldest is not None and (row["oldest_due_at"] is None or oldest < row["oldest_due_at"]):
                    row["oldest_due_at"] = oldest
            return [QueueSummary(**rows[name]) for name in sorted(rows)]

        return self._read("summarize queues", read, single=not serial)

    def finished_per_minute(self, *, since: datetime, max_rows: int) -> Throughput:
        since = ensure_utc(since, "since")
        t = self.table
        newest = and_(t.c.finished_at.is_not(None), t.c.finished_at >= since)
        recent = select(t.c.finished_at, t.c.status).where(newest).order_by(t.c.finished_at.desc()).limit(max_rows).subquery()
        past_cap = select(literal(1)).where(newest).order_by(t.c.finished_at.desc()).offset(max_rows).limit(1)

        def read(conn: Connection) -> Throughput:
            if conn.dialect.name == "sqlite":
                micros = type_coerce(recent.c.finished_at, BigInteger())
                minute: Any = (micros / MICROS_PER_MINUTE) * MICROS_PER_MINUTE
            else:
                minute = func.date_trunc("minute", recent.c.finished_at)
            stmt = select(minute.label("minute"), recent.c.status, func.count()).group_by(minute, recent.c.status)
            per_minute: dict[datetime, dict[JobStatus, int]] = {}
            for start, status, n in conn.execute(stmt):
                moment = ensure_utc(start, "minute") if isinstance(start, datetime) else from_micros(int(start))
                per_minute.setdefault(moment, {})[JobStatus(status)] = int(n)
            capped = conn.execute(past_cap).first() is not None
            minutes: tuple[FinishedMinute, ...] = tuple(minute_row(m, per_minute[m]) for m in sorted(per_minute))
            return Throughput(minutes, capped)

        return self._read("count finished jobs per minute", read)


__all__ = ["SqlOverview"]
