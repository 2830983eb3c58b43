"""Queue controls on the SQL repository: ``tether_queues`` (pause, limits) and the limited-queue lease path.

- **Writes** (:meth:`SqlQueueControls.set_queue_paused`, :meth:`~SqlQueueControls.set_queue_limit`):
  one upsert of the queue's row, in a transaction of its own.
- **The plain lease path** leaves every restricted queue (paused, or limited) out with a cheap
  filter on this tiny table (:meth:`SqlQueueControls._unrestricted`; on PostgreSQL the lease
  statement of :mod:`.pg_leases` carries the same ``queue NOT IN (...)``, evaluated once per
  statement as a hashed subplan).  So a pause holds from the first lease statement that starts
  after it committed, and a limited queue never goes through a path that does not count.
- **The limited-queue path** (:meth:`SqlQueueControls._lease_limited`), a short transaction per
  limited queue: lock the queue's row (``SELECT ... FOR UPDATE``; SQLite's write transaction
  already holds the database), then, in a new statement that sees every lease committed before the
  lock was granted, count the queue's running jobs with unexpired leases, and lease at most the
  remainder, and at most what is left of the rate window's starts (``window_starts`` of the
  window at ``window_start_us``, updated by the same transaction), and, with a per-key limit, at
  most each key's remainder (:mod:`.key_limits`).  Two workers can therefore never overshoot the limit; a completion or a reap only
  frees slots, so a stale count can only under-use them.
- **Which queues are limited** (:meth:`SqlQueueControls._limited_queues`): read from the table,
  on PostgreSQL at most once per :data:`LIMITED_REFRESH_SECONDS` per repository (and at once
  after its own writes): a limit set by another process is served within that time, and never
  overshot before (the plain path already leaves the queue out).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Table, bindparam, func, not_, or_, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import ColumnElement
from tether.adapters.sqlalchemy.key_limits import SqlKeyLimits
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.job import Job, JobStatus
from tether.domain.queues import (
    QueueState,
    lease_room,
    validate_max_running,
    validate_max_running_per_key,
    validate_queue_name,
    validate_rate,
    window_start_micros,
)
from tether.domain.timeutil import ensure_utc, from_micros

#: Seconds a PostgreSQL repository trusts its list of limited queues before reading it again.
LIMITED_REFRESH_SECONDS = 1.0


class SqlQueueControls(SqlKeyLimits):
    """Queue controls on ``tether_queues`` and the building blocks of the limited-queue lease path."""

    queues_table: Table
    #: Cache the list of limited queues for :data:`LIMITED_REFRESH_SECONDS` (PostgreSQL: it is
    #: read outside the lease's transaction); SQLite reads it inside the lease's write transaction.
    _cache_limited = False

    # -- writes and reads ----------------------------------------------------------------------
    def _upsert_queue(self, conn: Connection, name: str, now: datetime, changes: dict[str, Any]) -> Row[Any]:
        """Insert the queue's row with ``changes`` (defaults: unpaused, no limit) or update those
        columns; the row as written."""
        q = self.queues_table
        values = {"name": name, "paused": False, "max_running": None, "updated_at": now, "rate_limit": None,
                  "rate_period_us": None, "window_start_us": None, "window_starts": 0, "max_running_per_key": None,
                  **changes}
        insert = self._dialect_insert()(q).values(**values)
        stmt = insert.on_conflict_do_update(index_elements=[q.c.name], set_={**changes, "updated_at": now})
        conn.execute(stmt)
        row = conn.execute(select(q).where(q.c.name == name)).one()
        return row

    def _dialect_insert(self) -> Any:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert

    def _write_queue(self, doing: str, name: str, now: datetime, changes: dict[str, Any]) -> QueueState:
        row = self._write(doing, lambda c: self._upsert_queue(c, name, now, changes))
        self._limited_cache = None
        return _state(row)

    def set_queue_paused(self, queue: str, paused: bool, *, now: datetime) -> QueueState:
        """One upsert of the queue's ``paused``; the state as written."""
        name = validate_queue_name(queue)
        now = ensure_utc(now, "now")
        return self._write_queue("pause or resume a queue", name, now, {"paused": bool(paused)})

    def set_queue_limit(self, queue: str, max_running: int | None, *, now: datetime) -> QueueState:
        """One upsert of the queue's ``max_running`` (None clears it); the state as written."""
        name = validate_queue_name(queue)
        limit = None if max_running is None else validate_max_running(max_running)
        now = ensure_utc(now, "now")
        return self._write_queue("limit a queue", name, now, {"max_running": limit})

    def set_queue_key_limit(self, queue: str, max_running_per_key: int | None, *, now: datetime) -> QueueState:
        """One upsert of the queue's ``max_running_per_key`` (None clears it); the state as written."""
        name = validate_queue_name(queue)
        limit = None if max_running_per_key is None else validate_max_running_per_key(max_running_per_key)
        now = ensure_utc(now, "now")
        return self._write_queue("limit a queue per key", name, now, {"max_running_per_key": limit})

    def set_queue_rate(
        self, queue: str, rate_limit: int | None, rate_period: float | None, *, now: datetime
    ) -> QueueState:
        """One upsert of the queue's rate limit (both None clear it); the state as written.  A new
        rate starts counting afresh."""
        name = validate_queue_name(queue)
        if rate_limit is None and rate_period is None:
            limit, period_us = None, None
        else:
            limit, period = validate_rate(rate_limit, rate_period)
            period_us = round(period * 1_000_000)
        now = ensure_utc(now, "now")
        changes = {"rate_limit": limit, "rate_period_us": period_us, "window_start_us": None, "window_starts": 0}
        return self._write_queue("rate-limit a queue", name, now, changes)

    def queue_states(self) -> list[QueueState]:
        q = self.queues_table
        stmt = select(q).order_by(q.c.name)
        rows: list[Any] = self._read("read queue controls", lambda c: list(c.execute(stmt)))
        return [_state(r) for r in rows]

    def count_by_queue(self, *, job_types: Sequence[str] | None = None) -> dict[str, dict[JobStatus, int]]:
        t = self.table
        stmt = select(t.c.queue, t.c.status, func.count()).group_by(t.c.queue, t.c.status)
        if job_types is not None:
            if not job_types:
                return {}
            stmt = stmt.where(t.c.job_type.in_(list(job_types)))
        rows: list[Any] = self._read("count jobs per queue", lambda c: list(c.execute(stmt)))
        counts: dict[str, dict[JobStatus, int]] = {}
        for queue, status, n in rows:
            counts.setdefault(queue, {s: 0 for s in JobStatus})[JobStatus(status)] = int(n)
        return counts

    # -- the lease paths -----------------------------------------------------------------------
    def _unrestricted(self) -> ColumnElement[bool]:
        """``queue NOT IN (restricted queues)``: the plain lease path's filter."""
        q = self.queues_table
        restricted = select(q.c.name).where(
            or_(q.c.paused, q.c.max_running.is_not(None), q.c.rate_limit.is_not(None), q.c.max_running_per_key.is_not(None))
        )
        return self.table.c.queue.not_in(restricted)

    def _not_paused(self) -> ColumnElement[bool]:
        """``queue NOT IN (paused queues)``: what ``due_jobs`` leaves out."""
        q = self.queues_table
        return self.table.c.queue.not_in(select(q.c.name).where(q.c.paused))

    _limited_cache: tuple[float, tuple[str, ...]] | None = None
    #: The limited queues with a per-key limit, as the last read of the limited queues found them.
    _keyed_limited: frozenset[str] = frozenset()

    def _read_limited(self, conn: Connection) -> tuple[str, ...]:
        q = self.queues_table
        stmt = select(q.c.name, q.c.max_running_per_key).where(_limited(q), not_(q.c.paused)).order_by(q.c.name)
        rows = list(conn.execute(stmt))
        self._keyed_limited = frozenset(name for name, per_key in rows if per_key is not None)
        return tuple(name for name, _ in rows)

    def _limited_queues(
        self, queues: Sequence[str] | None, conn: Connection | None = None, *, listed: bool = False
    ) -> list[str]:
        """The limited, unpaused queues among ``queues`` (None: all), in a rotated order so that
        workers share them fairly (``listed``: in the order of ``queues``, for a listed-order
        lease).  Read on ``conn`` when given, else through the cache (see the module docstring)."""
        if conn is not None and not self._cache_limited:
            names = self._read_limited(conn)
        elif not self._cache_limited:
            names = self._read("read limited queues", self._read_limited)
        else:
            cached = self._limited_cache
            if cached is None or time.monotonic() - cached[0] > LIMITED_REFRESH_SECONDS:
                names = self._read("read limited queues", self._read_limited)
                self._limited_cache = (time.monotonic(), names)
            else:
                names = cached[1]
        if queues is not None:
            if listed:
                limited = set(names)
                return [q for q in dict.fromkeys(queues) if q in limited]
            wanted = set(queues)
            names = tuple(n for n in names if n in wanted)
        if len(names) < 2:
            return list(names)
        start = random.randrange(len(names))
        return list(names[start:] + names[:start])

    def _lease_token_expression(self) -> Any:
        """The SQL expression of a fresh lease token per row (the dialect's)."""
        raise NotImplementedError

    def _token_params(self) -> dict[str, Any]:
        """Parameters :meth:`_lease_token_expression` needs for one lease call (none by default)."""
        return {}

    def _lease_limited_alone(
        self, queue: str, *, worker_id: str, now: datetime, lease_timeout: float, limit: int, job_id: int | None = None,
        skip: Sequence[int] = (), job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """:meth:`_lease_limited` in a transaction of its own (none of the ids in ``skip``); the jobs leased.  When the
        connection dies while it commits, the rows leased by this call (this worker, this ``now``
        and expiry, running) are read back, so a lost reply never silently burns an attempt.
        (PostgreSQL sends the whole transaction in one round trip instead: :mod:`.pg_leases`.)"""
        expires = now + timedelta(seconds=lease_timeout)
        extra = self._token_params()
        try:
            rows = self._write_once(
                "lease jobs of a limited queue",
                lambda c: self._lease_limited(
                    c, queue, worker_id=worker_id, now=now, expires=expires, limit=limit, job_id=job_id, extra=extra,
                    skip=skip, job_types=job_types,
                ),
            )
        except _UnknownOutcome:
            rows = self._read("check an interrupted lease", lambda c: self._rows_leased_at(c, queue, worker_id, now, expires))
        return [row_to_job(r) for r in rows]

    def _rows_leased_at(
        self, conn: Connection, queue: str, worker_id: str, now: datetime, expires: datetime
    ) -> list[Row[Any]]:
        t = self.table
        stmt = select(t).where(
            status_is(t.c.status, JobStatus.RUNNING), t.c.queue == queue, t.c.leased_by == worker_id,
            t.c.leased_at == now, t.c.lease_expires_at == expires,
        )
        return list(conn.execute(stmt))

    def _top_up_limited(
        self, queues: Sequence[str] | None, *, worker_id: str, now: datetime, lease_timeout: float, limit: int,
        listed: bool = False, skip: Sequence[int] = (), job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """Up to ``limit`` more jobs from the limited queues among ``queues`` (``listed``: in the
        order listed), none of the ids in ``skip`` (only of ``job_types`` when given), one short
        transaction per queue (PostgreSQL: after the one-statement plain lease)."""
        jobs: list[Job] = []
        if limit < 1:
            return jobs
        for name in self._limited_queues(queues, listed=listed):
            jobs += self._lease_limited_alone(
                name, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit - len(jobs), skip=skip,
                job_types=job_types,
            )
            if len(jobs) >= limit:
                break
        return jobs

    def _lease_job_limited(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        """Lease job ``job_id`` if its queue is limited (not paused) and has a free slot: for
        ``lease_job``, after its plain statement (which leaves restricted queues out) found nothing."""
        limited = self._limited_queues(None)
        if not limited:
            return None
        queue = self._read("read a job's queue", lambda c: self._queue_of(c, job_id))
        if queue is None or queue not in limited:
            return None
        jobs = self._lease_limited_alone(
            queue, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=1, job_id=job_id
        )
        return next((j for j in jobs if j.id == job_id), None)

    def _lease_limited(
        self,
        conn: Connection,
        queue: str,
        *,
        worker_id: str,
        now: datetime,
        expires: datetime,
        limit: int,
        job_id: int | None = None,
        extra: dict[str, Any] | None = None,
        skip: Sequence[int] = (),
        job_types: Sequence[str] | None = None,
    ) -> list[Row[Any]]:
        """Lease up to ``limit`` due jobs of the limited ``queue`` (only ``job_id`` when given;
        none of the ids in ``skip``: see :mod:`.row_faults`; only of ``job_types`` when given), at most its free slots, in the transaction of ``conn`` (see the module docstring).  The
        rows leased; none when the queue is paused, at its limit, or no longer limited (the plain
        path serves it then)."""
        q = self.queues_table
        control = conn.execute(select(q).where(q.c.name == queue).with_for_update()).first()
        if control is None or (control.max_running is None and control.rate_limit is None
                               and control.max_running_per_key is None):
            return []
        state = _state(control)
        running = started = 0
        window = None
        if not state.paused and state.max_running is not None:
            running = int(conn.execute(self._running_count_statement(), {"p_queue": queue, "p_now": now}).scalar_one())
        period = state.rate_period_micros
        if not state.paused and period is not None:
            window = window_start_micros(now, period)
            started = int(control.window_starts) if control.window_start_us == window else 0
        room = lease_room(state, running, started)
        if room == 0 or state.paused:
            return []
        params = {"p_now": now, "p_expires": expires, "p_worker": worker_id, **(extra or {})}
        if state.max_running_per_key is not None:
            rows = self._lease_within_key_limit(
                conn, queue, state.max_running_per_key, room=room, limit=limit, params=params, job_id=job_id, skip=skip,
                job_types=job_types,
            )
        elif job_id is not None:
            rows = list(conn.execute(self._limited_by_id_statement(), {**params, "p_id": job_id}))
        else:
            params.update(p_queue=queue, p_limit=limit if room is None else min(limit, room))
            if skip:
                params["p_skip"] = list(skip)
            if job_types is not None:
                params["p_types"] = list(job_types)
            rows = list(conn.execute(self._limited_statement(bool(skip), typed=job_types is not None), params))
        if window is not None and rows:
            conn.execute(update(q).where(q.c.name == queue).values(window_start_us=window, window_starts=started + len(rows)))
        return rows

    def _running_count_statement(self) -> Any:
        stmt = self._statements.get("running_count")
        if stmt is None:
            t = self.table
            stmt = self._statements["running_count"] = (
                select(func.count())
                .select_from(t)
                .where(
                    status_is(t.c.status, JobStatus.RUNNING),
                    t.c.queue == bindparam("p_queue", type_=t.c.queue.type),
                    t.c.lease_expires_at > bindparam("p_now", type_=t.c.lease_expires_at.type),
                )
            )
        return stmt

    def _lease_set(self) -> dict[str, Any]:
        t = self.table
        return {
            "status": JobStatus.RUNNING.value,
            "attempts": t.c.attempts + 1,
            "lease_token": self._lease_token_expression(),
            "leased_by": bindparam("p_worker", type_=t.c.leased_by.type),
            "leased_at": bindparam("p_now", type_=t.c.leased_at.type),
            "lease_expires_at": bindparam("p_expires", type_=t.c.lease_expires_at.type),
        }

    def _due(self) -> list[ColumnElement[bool]]:
        t = self.table
        return [
            status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING),
            t.c.scheduled_at <= bindparam("p_now", type_=t.c.scheduled_at.type),
            t.c.attempts < t.c.max_attempts,
        ]

    def _limited_statement(self, skip: bool = False, *, typed: bool = False) -> Any:
        key = ("lease_limited", skip, "typed") if typed else ("lease_limited", skip)
        stmt = self._statements.get(key)
        if stmt is None:
            t = self.table
            left_out = [t.c.id.not_in(bindparam("p_skip", expanding=True, type_=t.c.id.type))] if skip else []
            if typed:
                left_out.append(t.c.job_type.in_(bindparam("p_types", expanding=True, type_=t.c.job_type.type)))
            chosen = (
                select(t.c.id)
                .where(*self._due(), t.c.queue == bindparam("p_queue", type_=t.c.queue.type), *left_out)
                .order_by(t.c.priority.desc(), t.c.scheduled_at, t.c.id)
                .limit(bindparam("p_limit", type_=Integer()))
                .with_for_update(skip_locked=True)
                .scalar_subquery()
            )
            stmt = self._statements[key] = (
                update(t)
                .where(t.c.id.in_(chosen), status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING))
                .values(**self._lease_set())
                .returning(*t.c)
            )
        return stmt

    def _limited_by_id_statement(self) -> Any:
        stmt = self._statements.get("lease_limited_id")
        if stmt is None:
            t = self.table
            stmt = self._statements["lease_limited_id"] = (
                update(t)
                .where(t.c.id == bindparam("p_id", type_=t.c.id.type), *self._due())
                .values(**self._lease_set())
                .returning(*t.c)
            )
        return stmt

    def _queue_of(self, conn: Connection, job_id: int) -> str | None:
        t = self.table
        return conn.execute(select(t.c.queue).where(t.c.id == job_id)).scalar()


def _state(row: Any) -> QueueState:
    return QueueState(
        row.name,
        paused=bool(row.paused),
        max_running=None if row.max_running is None else int(row.max_running),
        updated_at=row.updated_at,
        rate_limit=None if row.rate_limit is None else int(row.rate_limit),
        rate_period=None if row.rate_period_us is None else int(row.rate_period_us) / 1_000_000,
        window_start=None if row.window_start_us is None else from_micros(int(row.window_start_us)),
        window_starts=int(row.window_starts),
        max_running_per_key=None if row.max_running_per_key is None else int(row.max_running_per_key),
    )


def _limited(q: Table) -> ColumnElement[bool]:
    """The queue rows that send their jobs to the limited-queue path."""
    return or_(q.c.max_running.is_not(None), q.c.rate_limit.is_not(None), q.c.max_running_per_key.is_not(None))


__all__ = ["LIMITED_REFRESH_SECONDS", "SqlQueueControls"]
