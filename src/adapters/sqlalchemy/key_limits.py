"""Per-key running limits on the SQL repository: the running count per ``concurrency_key`` and the lease that honours it.

A mixin of :class:`~tether.adapters.sqlalchemy.queue_controls.SqlQueueControls`.  A queue with a
``max_running_per_key`` takes the limited-queue path (its row locked, then counted in a new
statement, see :mod:`.queue_controls`); there, :meth:`SqlKeyLimits._lease_within_key_limit`:

1. counts the queue's running jobs with unexpired leases per key (``ix_tether_jobs_running_key``:
   keyed running rows only, read in key order),
2. reads the first ``limit`` due jobs of the queue in lease order whose key is not already at its
   limit (jobs without a key included),
3. keeps those :func:`~tether.domain.queues.pick_within_key_limit` allows (a key's room counts
   the jobs this lease takes too), at most the queue's other room, and leases them by id.

This is the generic (SQLite) form, run inside the repository's write transaction; PostgreSQL does
the same in its one-round-trip limited lease (:mod:`.pg_key_limits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.reads import SqlReads
from tether.adapters.sqlalchemy.schema import status_is
from tether.domain.job import JobStatus
from tether.domain.queues import pick_within_key_limit
from tether.domain.timeutil import ensure_utc


class SqlKeyLimits(SqlReads):
    """``count_running_by_key`` and the per-key part of the limited-queue lease."""

    def _lease_set(self) -> dict[str, Any]:
        raise NotImplementedError

    def _due(self) -> list[Any]:
        raise NotImplementedError

    def count_running_by_key(self, queue: str, concurrency_key: str, *, now: datetime) -> int:
        now = ensure_utc(now, "now")
        t = self.table
        stmt = select(func.count()).select_from(t).where(
            status_is(t.c.status, JobStatus.RUNNING), t.c.concurrency_key.is_not(None), t.c.queue == queue,
            t.c.concurrency_key == concurrency_key, t.c.lease_expires_at > now,
        )
        return int(self._read("count a key's running jobs", lambda c: c.execute(stmt).scalar_one()))

    def _running_by_key(self, conn: Connection, queue: str, now: datetime) -> dict[str, int]:
        """The queue's running jobs under unexpired leases at ``now``, per concurrency key."""
        stmt = self._statements.get("running_by_key")
        if stmt is None:
            t = self.table
            stmt = self._statements["running_by_key"] = (
                select(t.c.concurrency_key, func.count())
                .where(
                    status_is(t.c.status, JobStatus.RUNNING), t.c.concurrency_key.is_not(None),
                    t.c.queue == bindparam("p_queue", type_=t.c.queue.type),
                    t.c.lease_expires_at > bindparam("p_now", type_=t.c.lease_expires_at.type),
                )
                .group_by(t.c.concurrency_key)
            )
        return {key: int(n) for key, n in conn.execute(stmt, {"p_queue": queue, "p_now": now})}

    def _key_candidates(
        self, conn: Connection, queue: str, *, now: datetime, limit: int, full: Sequence[str], job_id: int | None,
        skip: Sequence[int], job_types: Sequence[str] | None = None,
    ) -> list[tuple[int, str | None]]:
        """``(id, concurrency_key)`` of the first ``limit`` due jobs of ``queue`` in lease order
        (only ``job_id`` when given; only of ``job_types`` when given) whose key is not in
        ``full``, none of the ids in ``skip``."""
        t = self.table
        stmt = select(t.c.id, t.c.concurrency_key).where(*self._due(), t.c.queue == queue)
        if full:
            stmt = stmt.where(or_(t.c.concurrency_key.is_(None), t.c.concurrency_key.not_in(list(full))))
        if job_id is not None:
            stmt = stmt.where(t.c.id == job_id)
        if skip:
            stmt = stmt.where(t.c.id.not_in(list(skip)))
        if job_types is not None:
            stmt = stmt.where(t.c.job_type.in_(list(job_types)))
        stmt = stmt.order_by(t.c.priority.desc(), t.c.scheduled_at, t.c.id).limit(limit)
        return [(int(i), key) for i, key in conn.execute(stmt, {"p_now": now})]

    def _lease_ids_statement(self) -> Any:
        stmt = self._statements.get("lease_ids")
        if stmt is None:
            t = self.table
            stmt = self._statements["lease_ids"] = (
                update(t)
                .where(t.c.id.in_(bindparam("p_ids", expanding=True, type_=t.c.id.type)), *self._due())
                .values(**self._lease_set())
                .returning(*t.c)
            )
        return stmt

    def _lease_within_key_limit(
        self, conn: Connection, queue: str, per_key: int, *, room: int | None, limit: int, params: dict[str, Any],
        job_id: int | None, skip: Sequence[int], job_types: Sequence[str] | None = None,
    ) -> list[Row[Any]]:
        """Lease up to ``min(limit, room)`` due jobs of ``queue`` (only of ``job_types`` when given)
        under its per-key limit ``per_key`` (see the module docstring), in the transaction of
        ``conn`` that locked the queue's row; ``params``: the lease's bound values (``p_now``,
        ``p_expires``, ``p_worker``, ...)."""
        now = params["p_now"]
        held = self._running_by_key(conn, queue, now)
        full = [key for key, n in held.items() if n >= per_key]
        candidates = self._key_candidates(
            conn, queue, now=now, limit=limit, full=full, job_id=job_id, skip=skip, job_types=job_types
        )
        ids = pick_within_key_limit(candidates, per_key, held, room)
        if not ids:
            return []
        return list(conn.execute(self._lease_ids_statement(), {**params, "p_ids": ids}))


__all__ = ["SqlKeyLimits"]
