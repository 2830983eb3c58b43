"""Leases on the SQL repository: which jobs are due, in lease order, and taking them under fresh tokens.

A job is due when it is ``queued`` or ``retrying``, ``scheduled_at <= now`` and ``attempts <
max_attempts``; lease order is ``priority DESC, scheduled_at, id``.  :meth:`SqlLeases.lease` takes
up to ``limit`` due jobs in one statement that each dialect writes (:meth:`SqlLeases._lease_rows`;
PostgreSQL replaces :meth:`~SqlLeases.lease` itself, :mod:`.pg_leases`), and
:meth:`SqlLeases.lease_job` takes one named job if it is due (a compare-and-set on its leasable
status).  Every lease sets ``status = 'running'``, ``attempts + 1`` and a fencing token never
used before.  :meth:`SqlLeases.due_jobs` reads the same jobs without leasing them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Integer, bindparam, select, update
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.queue_controls import SqlQueueControls
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import StorageRowError, StorageUnavailable
from tether.domain.job import Job, JobStatus, lease_order_key, listed_order_key
from tether.domain.lease import new_lease_token
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import validate_job_types, validate_queue, validate_seconds, validate_worker_id


class SqlLeases(SqlQueueControls):
    """``lease``, ``lease_job`` and ``due_jobs``, and the due-job statement parts the dialects
    build their lease statements from."""

    @staticmethod
    def _queue_shape(queues: Sequence[str] | None) -> str:
        return "all" if queues is None else ("one" if len(queues) == 1 else "many")

    def _lease_params(
        self, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int
    ) -> dict[str, Any]:
        """Parameters of the statements from :meth:`_due_filter_params` and :meth:`_lease_values_params`."""
        return {
            **self._due_params(queues, now),
            "p_expires": now + timedelta(seconds=lease_timeout),
            "p_worker": worker_id,
            "p_limit": limit,
        }

    @staticmethod
    def _due_params(queues: Sequence[str] | None, now: datetime) -> dict[str, Any]:
        """Parameters of :meth:`_due_filter_params`: ``p_now`` and ``p_queue``/``p_queues`` (validated).

        Raises:
            ValidationError: a queue name that is not one (``queues``).
        """
        params: dict[str, Any] = {"p_now": now}
        if queues is not None:
            names = [validate_queue(q, "queues") for q in queues]
            if len(names) == 1:
                params["p_queue"] = names[0]
            else:
                params["p_queues"] = names
        return params

    def _due_filter_params(
        self, shape: str, skip: bool = False, *, leasing: bool = True, typed: bool = False
    ) -> list[ColumnElement[bool]]:
        """The due-job predicate with bound parameters ``p_now`` and ``p_queue``/``p_queues``
        (and ``p_skip``, the ids of jobs left out, with ``skip``: see :mod:`.row_faults`; and
        ``p_types``, the job types asked, with ``typed``);
        ``leasing``: of the plain lease path (restricted queues left out), else of ``due_jobs``
        (paused queues left out)."""
        t = self.table
        conditions = [
            status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING),
            t.c.scheduled_at <= bindparam("p_now", type_=t.c.scheduled_at.type),
            t.c.attempts < t.c.max_attempts,
            self._unrestricted() if leasing else self._not_paused(),
        ]
        if shape == "one":
            conditions.append(t.c.queue == bindparam("p_queue", type_=t.c.queue.type))
        elif shape == "many":
            conditions.append(t.c.queue.in_(bindparam("p_queues", expanding=True, type_=t.c.queue.type)))
        if skip:
            conditions.append(t.c.id.not_in(bindparam("p_skip", expanding=True, type_=t.c.id.type)))
        if typed:
            conditions.append(t.c.job_type.in_(bindparam("p_types", expanding=True, type_=t.c.job_type.type)))
        return conditions

    def _lease_values_params(self, token: Any) -> dict[str, Any]:
        """SET clause of a lease with bound parameters ``p_worker``, ``p_now``, ``p_expires``."""
        t = self.table
        return {
            "status": JobStatus.RUNNING.value,
            "attempts": t.c.attempts + 1,
            "lease_token": token,
            "leased_by": bindparam("p_worker", type_=t.c.leased_by.type),
            "leased_at": bindparam("p_now", type_=t.c.leased_at.type),
            "lease_expires_at": bindparam("p_expires", type_=t.c.lease_expires_at.type),
        }

    def _lease_order(self) -> list[Any]:
        t = self.table
        return [t.c.priority.desc(), t.c.scheduled_at, t.c.id]

    def due_jobs(self, *, now: datetime, queues: Sequence[str] | None, limit: int) -> list[Job]:
        """Up to ``limit`` due jobs in lease order, without leasing them."""
        now = ensure_utc(now, "now")
        if queues is not None and not queues:
            return []
        shape = self._queue_shape(queues)
        stmt = self._statements.get(("due", shape))
        if stmt is None:
            stmt = self._statements[("due", shape)] = (
                select(self.table)
                .where(*self._due_filter_params(shape, leasing=False))
                .order_by(*self._lease_order())
                .limit(bindparam("p_limit", type_=Integer()))
            )
        params = {**self._due_params(queues, now), "p_limit": limit}
        return self._read("read due jobs", lambda c: [row_to_job(r) for r in c.execute(stmt, params)])

    def _lease_rows(
        self, conn: Connection, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float,
        limit: int, skip: Sequence[int] = (), job_types: Sequence[str] | None = None, limited: bool = True,
    ) -> list[Row[Any]]:
        """Lease up to ``limit`` due jobs in one statement, none of the ids in ``skip`` (and only
        of ``job_types`` when given), then (with ``limited``) from the limited queues among
        ``queues`` (:meth:`_limited_rows`); returns the leased rows (any order)."""
        raise NotImplementedError

    def _limited_rows(
        self, conn: Connection, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float,
        limit: int, skip: Sequence[int] = (), job_types: Sequence[str] | None = None, listed: bool = False,
    ) -> list[Row[Any]]:
        """Up to ``limit`` due jobs of the limited queues among ``queues`` (``listed``: in the order
        listed), each at most its free slots, in the transaction of ``conn``."""
        rows: list[Row[Any]] = []
        if limit < 1:
            return rows
        expires = now + timedelta(seconds=lease_timeout)
        for name in self._limited_queues(queues, conn, listed=listed):
            rows += self._lease_limited(
                conn, name, worker_id=worker_id, now=now, expires=expires, limit=limit - len(rows), skip=skip,
                job_types=job_types,
            )
            if len(rows) >= limit:
                break
        return rows

    def lease(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int = 1,
        listed_order: bool = False, job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs in lease order (or queue by queue in the order listed,
        with ``listed_order``; only of ``job_types`` when given), each under a fresh fencing token.

        Raises StorageUnavailable (never returns "no job" because the store was locked or down).
        """
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        types = validate_job_types(job_types)
        if limit < 1 or (queues is not None and not queues) or (types is not None and not types):
            return []
        listed = listed_order and queues is not None and len(queues) > 1
        try:
            rows = self._lease_write(
                queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, listed=listed,
                skip=self._skipped.ids(), job_types=types,
            )
        except StorageRowError:
            return self._lease_row_by_row(
                queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, listed=listed,
                job_types=types,
            )
        return sorted((row_to_job(r) for r in rows), key=listed_order_key(queues) if listed else lease_order_key)

    def _lease_write(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int,
        listed: bool = False, skip: Sequence[int] = (), job_types: Sequence[str] | None = None,
    ) -> list[Row[Any]]:
        def lease_rows(conn: Connection) -> list[Row[Any]]:
            if not listed or queues is None:
                return self._lease_rows(
                    conn, queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, skip=skip,
                    job_types=job_types,
                )
            rows: list[Row[Any]] = []  # queue by queue, in one transaction, the limited queues last (as on PostgreSQL)
            for queue in queues:
                rows += self._lease_rows(
                    conn, queues=[queue], worker_id=worker_id, now=now, lease_timeout=lease_timeout,
                    limit=limit - len(rows), skip=skip, limited=False, job_types=job_types,
                )
                if len(rows) >= limit:
                    return rows
            return rows + self._limited_rows(
                conn, queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit - len(rows),
                skip=skip, job_types=job_types, listed=True,
            )

        return self._write("lease jobs", lease_rows)

    def _lease_row_by_row(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int,
        listed: bool, job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """A batch lease was refused because of a row (:class:`StorageRowError`): lease the due
        jobs one at a time (:meth:`lease_job`), in the order the batch would have, so the others
        go through; each job whose row fails alone is skipped for a while (:mod:`.row_faults`).
        (With ``job_types``, the due jobs of other types read here are passed over: this degraded
        path may then lease fewer than it could.)"""
        skip = set(self._skipped.ids())
        groups = [[q] for q in queues] if listed and queues is not None else [queues]
        leased: list[Job] = []
        for group in groups:
            for job in self.due_jobs(now=now, queues=group, limit=limit + len(skip)):
                if len(leased) >= limit:
                    return leased
                if job.id in skip or (job_types is not None and job.job_type not in job_types):
                    continue
                try:
                    got = self.lease_job(job.id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
                except StorageRowError as error:
                    self._skipped.failed(job.id, "lease", error)
                    continue
                if got is not None:
                    self._skipped.succeeded(job.id)
                    leased.append(got)
        return leased

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        """Lease this job if it is due and its queue lets it; else None.  A compare-and-set on its
        leasable status (a job of a limited queue: :meth:`_lease_job_limited`)."""
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        stmt = self._statements.get("lease_job")
        if stmt is None:
            t = self.table
            stmt = self._statements["lease_job"] = (
                update(t)
                .where(t.c.id == bindparam("p_id", type_=t.c.id.type), *self._due_filter_params("all"))
                .values(**self._lease_values_params(bindparam("p_token", type_=t.c.lease_token.type)))
                .returning(*t.c)
            )
        for _ in range(self.retry_attempts):
            token = new_lease_token()
            params = {"p_id": job_id, "p_token": token, **self._lease_params(None, worker_id, now, lease_timeout, 1)}
            try:
                row = self._write_once("lease a job", lambda c: c.execute(stmt, params).first(), single=True)  # noqa: B023
                if row is None:  # a limited queue's job takes the counting path
                    return self._lease_job_limited(job_id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
                return row_to_job(row)
            except _UnknownOutcome:
                # Did our lease land?  The token is ours alone, so the row says so.
                row = self._read("check a lease", lambda c: self._get_row(c, job_id))
                if row is not None and row.lease_token == token:
                    return row_to_job(row)
                if row is None or row.status not in (JobStatus.QUEUED.value, JobStatus.RETRYING.value):
                    return None
                # still leasable: ours did not land; try again with a fresh token
        raise StorageUnavailable(f"{self.safe_url}: could not lease job {job_id}: the connection kept failing")


__all__ = ["SqlLeases"]
