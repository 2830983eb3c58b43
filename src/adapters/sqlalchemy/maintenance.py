"""Maintenance on the SQL repository: taking back expired leases (reap), retrying dead or cancelled jobs, purging old ones.

The reaper writes each expired lease as :func:`~tether.domain.transitions.reap` makes it, under a
compare-and-set on the token and expiry it read, so a job completed, renewed or re-leased in
between is left alone: here (SQLite) one read, then one write per lease, in one transaction;
PostgreSQL overrides :meth:`SqlMaintenance._reap_rows` with one statement per pass (:mod:`.pg_reap`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, select, text, update
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.fenced_writes import NO_LEASE
from tether.adapters.sqlalchemy.history_sql import kept_attempt_sql
from tether.adapters.sqlalchemy.mapping import job_state_values, row_to_job
from tether.adapters.sqlalchemy.reads import SqlReads
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain import transitions
from tether.domain.errors import InvalidTransition, JobNotFound, StorageRowError
from tether.domain.job import RETRYABLE_STATUSES, TERMINAL_STATUSES, Job, JobStatus
from tether.domain.timeutil import ensure_utc

#: Rows deleted per transaction by :meth:`SqlMaintenance.purge`.
PURGE_BATCH = 5_000


class SqlMaintenance(SqlReads):
    """``reap``, ``retry_dead`` and ``purge``."""

    def _expired_select(self, now: datetime, limit: int) -> Select[Any]:
        """Up to ``limit`` running jobs whose lease expired at or before ``now``, oldest expiry first."""
        t = self.table
        return (
            select(t)
            .where(status_is(t.c.status, JobStatus.RUNNING), t.c.lease_expires_at <= now)
            .order_by(t.c.lease_expires_at, t.c.id)
            .limit(limit)
        )

    def _expired_rows(self, conn: Connection, now: datetime, limit: int) -> list[Row[Any]]:
        return list(conn.execute(self._expired_select(now, limit)))

    def _reap_rows(self, conn: Connection, now: datetime, limit: int) -> list[Job]:
        """One reaper pass in the transaction of ``conn``: read up to ``limit`` expired leases, then
        write each as :func:`~tether.domain.transitions.reap` makes it, under a compare-and-set on
        the token read and the expiry (SQLite holds the write lock throughout; PostgreSQL
        overrides this with one statement).  The jobs as written, oldest expiry first."""
        reaped: list[Job] = []
        for row in self._expired_rows(conn, now, limit):
            written = self._reap_one(conn, row_to_job(row), now)
            if written is not None:
                reaped.append(written)
        return reaped

    def _reap_one(self, conn: Connection, job: Job, now: datetime) -> Job | None:
        """Write the expired lease of ``job`` (as read) as :func:`~tether.domain.transitions.reap`
        makes it, under a compare-and-set on its token and expiry; None when it changed meanwhile."""
        t = self.table
        assert job.lease_token is not None
        new = transitions.reap(job, now=now, token=job.lease_token)
        written = conn.execute(
            update(t)
            .where(
                t.c.id == job.id,
                status_is(t.c.status, JobStatus.RUNNING),
                t.c.lease_token == job.lease_token,
                t.c.lease_expires_at <= now,
            )
            .values(**job_state_values(new, self.engine.dialect.name))
            .returning(*t.c)
        ).first()
        return row_to_job(written) if written is not None else None

    def _reap_row_by_row(self, now: datetime, limit: int) -> list[Job]:
        """A reap pass was refused because of a row (:class:`StorageRowError`), or rows that
        failed alone are left out: read the expired leases (but those) and write each in a
        transaction of its own, so the others go through; a row that fails alone is left out for
        a while (:mod:`.row_faults`)."""
        skip = self._skipped.ids()
        select_expired = self._expired_select(now, limit)
        if skip:
            select_expired = select_expired.where(self.table.c.id.not_in(skip))
        reaped: list[Job] = []
        for row in self._read("read expired leases", lambda c: list(c.execute(select_expired))):
            job = row_to_job(row)
            try:
                written = self._write("reap an expired lease", lambda c: self._reap_one(c, job, now))  # noqa: B023
            except StorageRowError as error:
                self._skipped.failed(job.id, "reap an expired lease", error)
                continue
            if written is not None:
                self._skipped.succeeded(job.id)
                reaped.append(written)
        return reaped

    #: Whether :meth:`_reap_rows` is one statement (run as its own transaction where allowed).
    _reap_rows_single: bool = False

    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        """Take back running jobs whose lease expired at or before ``now`` (compare-and-set on the
        token read).  Safe to retry: a repeat finds only leases still expired.  ``limit`` below 1
        takes nothing."""
        now = ensure_utc(now, "now")
        if limit < 1:
            return []
        if not self._skipped.ids():
            try:
                return self._write(
                    "reap expired leases", lambda c: self._reap_rows(c, now, limit), single=self._reap_rows_single
                )
            except StorageRowError:
                pass  # one row refused: the others go through, one by one
        return self._reap_row_by_row(now, limit)

    def retry_dead(self, job_id: int, *, now: datetime) -> Job:
        """Manual retry: a dead or cancelled job back to ``queued`` with attempts 0 and no
        cancellation request.  Raises JobNotFound, InvalidTransition."""
        now = ensure_utc(now, "now")
        t = self.table
        stmt = (
            update(t)
            .where(t.c.id == job_id, status_is(t.c.status, *RETRYABLE_STATUSES))
            .values(
                status=JobStatus.QUEUED.value, attempts=0, scheduled_at=now, finished_at=None, cancel_requested_at=None,
                history=text(kept_attempt_sql(self.engine.dialect.name)),  # a completed attempt in the lease columns
                **NO_LEASE,
            )
            .returning(*t.c)
        )

        def work(conn: Connection) -> Row[Any]:
            row = conn.execute(stmt).first()
            if row is None:
                current = self._get_row(conn, job_id)
                if current is None:
                    raise JobNotFound(job_id)
                raise InvalidTransition(job_id, current.status, "retry")
            return row

        try:
            return row_to_job(self._write_once("retry a dead job", work, single=True))
        except _UnknownOutcome:
            row = self._read("check a retry", lambda c: self._get_row(c, job_id))
            if row is None:
                raise JobNotFound(job_id) from None
            if row.status in (status.value for status in RETRYABLE_STATUSES):
                return self.retry_dead(job_id, now=now)
            if row.status == JobStatus.QUEUED.value and row.attempts == 0 and row.scheduled_at == now:
                return row_to_job(row)
            raise InvalidTransition(job_id, row.status, "retry") from None

    def purge(self, *, older_than: datetime) -> int:
        """Delete completed, dead and cancelled jobs finished before ``older_than``, in batches of
        :data:`PURGE_BATCH` rows per transaction; returns how many."""
        older_than = ensure_utc(older_than, "older_than")
        t = self.table
        doomed = (
            select(t.c.id)
            .where(t.c.finished_at < older_than, status_is(t.c.status, *TERMINAL_STATUSES))
            .limit(PURGE_BATCH)
        )
        stmt = delete(t).where(t.c.id.in_(doomed.scalar_subquery()))
        total = 0
        while True:
            n = self._write("purge finished jobs", lambda c: c.execute(stmt).rowcount, single=True)
            total += n
            if n < PURGE_BATCH:
                return total


__all__ = ["PURGE_BATCH", "SqlMaintenance"]
