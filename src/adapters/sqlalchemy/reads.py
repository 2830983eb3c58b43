"""Reads on the SQL repository: one job by id or by idempotency key, jobs listed by status and
queue, counts per status, and how many due jobs go before one job (``app.explain``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, func, literal, or_, select
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import SqlTransactions
from tether.domain.errors import JobNotFound
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import ensure_utc


class SqlReads(SqlTransactions):
    """``get``, ``list_jobs``, ``count_by_status`` and ``count_due_ahead``; and :meth:`_get_row`, the read of one row that
    the writes also use to learn the outcome of a write whose commit was interrupted."""

    def _get_row(self, conn: Connection, job_id: int) -> Row[Any] | None:
        stmt = self._statements.get("get")
        if stmt is None:
            t = self.table
            stmt = self._statements["get"] = select(t).where(t.c.id == bindparam("p_id", type_=t.c.id.type))
        return conn.execute(stmt, {"p_id": job_id}).first()

    def get(self, job_id: int) -> Job:
        """The job with this id.  Raises JobNotFound, StorageUnavailable."""
        row = self._read("read a job", lambda c: self._get_row(c, job_id))
        if row is None:
            raise JobNotFound(job_id)
        return row_to_job(row)

    def find_by_key(self, idempotency_key: str) -> Job | None:
        """The job holding this idempotency key, or None.  Raises StorageUnavailable."""
        t = self.table
        stmt = select(t).where(t.c.idempotency_key == idempotency_key)
        row = self._read("read a job by key", lambda c: c.execute(stmt).first())
        return None if row is None else row_to_job(row)

    def list_jobs(
        self, *, status: JobStatus | None = None, queue: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        """Jobs by ascending id, filtered by status and queue."""
        t = self.table
        stmt = select(t).order_by(t.c.id).limit(limit).offset(offset)
        if status is not None:
            stmt = stmt.where(t.c.status == JobStatus(status).value)
        if queue is not None:
            stmt = stmt.where(t.c.queue == queue)
        return self._read("list jobs", lambda c: [row_to_job(r) for r in c.execute(stmt)])

    def count_by_status(
        self, *, queue: str | None = None, job_types: Sequence[str] | None = None
    ) -> dict[JobStatus, int]:
        """How many jobs are in each status (every status present, zero included), of one queue
        and of these job types (None: all)."""
        t = self.table
        counts = {s: 0 for s in JobStatus}
        if job_types is not None and not job_types:
            return counts
        stmt = select(t.c.status, func.count()).group_by(t.c.status)
        if queue is not None:
            stmt = stmt.where(t.c.queue == queue)
        if job_types is not None:
            stmt = stmt.where(t.c.job_type.in_(list(job_types)))
        for status, n in self._read("count jobs", lambda c: list(c.execute(stmt))):
            counts[JobStatus(status)] = int(n)
        return counts

    def count_due_ahead(self, job: Job, *, now: datetime, limit: int) -> int:
        """Due jobs of ``job.queue`` before ``job`` in lease order, at most ``limit``: one
        ``SELECT count(*)`` over a ``LIMIT``-ed subquery on the queue's partial lease-order index
        (``ix_tether_jobs_leasable_queue``), so its cost is bounded by ``limit`` rows."""
        now = ensure_utc(now, "now")
        if limit < 1:
            return 0
        t = self.table
        before = or_(
            t.c.priority > job.priority,
            and_(
                t.c.priority == job.priority,
                or_(t.c.scheduled_at < job.scheduled_at, and_(t.c.scheduled_at == job.scheduled_at, t.c.id < job.id)),
            ),
        )
        ahead = (
            select(literal(1))
            .where(
                status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING),
                t.c.queue == job.queue,
                t.c.priority >= job.priority,  # a range of the index's (queue, priority DESC) prefix
                t.c.scheduled_at <= now,
                t.c.id != job.id,
                before,
            )
            .limit(limit)
            .subquery()
        )
        stmt = select(func.count()).select_from(ahead)
        return int(self._read("count the jobs ahead", lambda c: c.execute(stmt).scalar_one()))


__all__ = ["SqlReads"]
