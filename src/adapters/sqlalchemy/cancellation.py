"""An operator's cancel on the SQL repository: one job (``cancel``) or every job a filter matches, in batches (``cancel_many``).

Both are one statement per call, :func:`tether.domain.transitions.cancel` in SQL::

    UPDATE tether_jobs SET
        status = CASE WHEN status IN ('queued', 'retrying') THEN 'cancelled' ELSE status END,
        finished_at = CASE WHEN status IN ('queued', 'retrying') THEN :now ELSE finished_at END,
        cancel_requested_at = coalesce(cancel_requested_at, :now)
    WHERE id = :id AND status IN ('queued', 'retrying', 'running')
    RETURNING *

A queued or retrying job is cancelled at once; a running one keeps running with the request
stored, and its holder's outcome write (or the reaper) makes it ``cancelled``
(:mod:`.fenced_writes`).  Races are settled by the row lock of the one statement: a lease that
commits first leaves a running row, which the cancel's re-check still matches (the request is
stored); a cancel that commits first leaves a cancelled row, which the lease no longer matches.
The same holds against an outcome write: whichever commits first wins, the other sees its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, case, func, or_, select, update
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.reads import SqlReads
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import InvalidTransition, JobNotFound, StorageUnavailable
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import (
    CANCEL_BATCH_LIMIT,
    CANCELLABLE_STATUSES,
    validate_cancel_statuses,
    validate_int,
    validate_job_type,
    validate_queue,
)


class SqlCancellation(SqlReads):
    """``cancel`` and ``cancel_many``."""

    def _cancel_values(self) -> dict[str, Any]:
        """The SET clause of a cancel, with bound parameter ``p_now``."""
        t = self.table
        now = bindparam("p_now", type_=t.c.finished_at.type)
        leasable = status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING)
        return {
            "status": case((leasable, JobStatus.CANCELLED.value), else_=t.c.status),
            "finished_at": case((leasable, now), else_=t.c.finished_at),
            "cancel_requested_at": func.coalesce(t.c.cancel_requested_at, now),
        }

    def _cancellable(self, statuses: Sequence[JobStatus]) -> ColumnElement[bool]:
        """Rows of these statuses a cancel still changes: queued or retrying, or running without
        a request yet."""
        t = self.table
        parts = [
            and_(status_is(t.c.status, s), t.c.cancel_requested_at.is_(None)) if s is JobStatus.RUNNING
            else status_is(t.c.status, s)
            for s in statuses
        ]
        return or_(*parts)

    def cancel(self, job_id: int, *, now: datetime) -> Job:
        """An operator's cancel of one job, one statement (see the module docstring); the job as it
        now is.  Raises JobNotFound, InvalidTransition (completed, dead or cancelled),
        StorageUnavailable."""
        now = ensure_utc(now, "now")
        stmt = self._statements.get("cancel")
        if stmt is None:
            t = self.table
            stmt = self._statements["cancel"] = (
                update(t)
                .where(t.c.id == bindparam("p_id", type_=t.c.id.type), status_is(t.c.status, *CANCELLABLE_STATUSES))
                .values(**self._cancel_values())
                .returning(*t.c)
            )
        params = {"p_id": job_id, "p_now": now}

        def work(conn: Connection) -> Row[Any]:
            row = conn.execute(stmt, params).first()
            if row is None:
                current = self._get_row(conn, job_id)
                if current is None:
                    raise JobNotFound(job_id)
                raise InvalidTransition(job_id, current.status, "cancel")
            return row

        for _ in range(self.retry_attempts):
            try:
                return row_to_job(self._write_once("cancel a job", work, single=True))
            except _UnknownOutcome:
                row = self._read("check a cancel", lambda c: self._get_row(c, job_id))
                if row is None:
                    raise JobNotFound(job_id) from None
                requested = row.cancel_requested_at is not None
                if (row.status == JobStatus.RUNNING.value and requested) or (
                    row.status == JobStatus.CANCELLED.value and row.cancel_requested_at == now
                ):
                    return row_to_job(row)  # it landed (on a running job: or an earlier request stands)
                if row.status not in (s.value for s in CANCELLABLE_STATUSES):
                    raise InvalidTransition(job_id, row.status, "cancel") from None
                # still cancellable and not cancelled: it did not land; send it again
        raise StorageUnavailable(f"{self.safe_url}: could not cancel job {job_id}: the connection kept failing")

    def cancel_many(
        self,
        *,
        now: datetime,
        queues: Sequence[str] | None = None,
        statuses: Sequence[JobStatus] | None = None,
        job_types: Sequence[str] | None = None,
        after_id: int = 0,
        limit: int = 1000,
    ) -> list[Job]:
        """Cancel the first ``limit`` matching jobs above ``after_id`` (ascending id) in one
        statement; the jobs as written, by id.  Raises ValidationError (bad filter or limit,
        nothing written), StorageUnavailable.

        A write interrupted during its commit is sent again: jobs it did cancel no longer match,
        so nothing is cancelled twice, but they are missing from the answer.
        """
        now = ensure_utc(now, "now")
        wanted = validate_cancel_statuses(statuses) or CANCELLABLE_STATUSES
        limit = validate_int(limit, "limit", 1, CANCEL_BATCH_LIMIT)
        after_id = validate_int(after_id, "after_id", 0, 2**63 - 1)
        t = self.table
        conditions: list[ColumnElement[bool]] = [t.c.id > after_id, self._cancellable(wanted)]
        if queues is not None:
            conditions.append(t.c.queue.in_([validate_queue(q, "queues") for q in queues]))
        if job_types is not None:
            conditions.append(t.c.job_type.in_([validate_job_type(j) for j in job_types]))
        chosen = select(t.c.id).where(*conditions).order_by(t.c.id).limit(limit)
        if self.engine.dialect.name == "postgresql":
            chosen = chosen.with_for_update()  # lock them in id order: concurrent cancels queue, never deadlock
        stmt = (
            update(t)
            .where(t.c.id.in_(chosen.scalar_subquery()), self._cancellable(wanted))
            .values(**self._cancel_values())
            .returning(*t.c)
        )
        rows = self._write("cancel jobs", lambda c: list(c.execute(stmt, {"p_now": now})), single=True)
        return sorted((row_to_job(r) for r in rows), key=lambda job: job.id)


__all__ = ["SqlCancellation"]
