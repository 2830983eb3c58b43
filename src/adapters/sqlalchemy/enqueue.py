"""Enqueue on the SQL repository: one job or a batch, idempotency keys, and joining the caller's transaction.

- A job without an idempotency key is one ``INSERT ... RETURNING``; if the connection dies while it
  commits, it is never sent again (that could store it twice): StorageUnavailable says it may or
  may not be stored.
- A key is unique across all jobs until they are purged: ``INSERT ... ON CONFLICT
  (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`` waits for any open transaction
  inserting the same key, then either stores the job or finds the one that holds the key (returned
  unchanged, ``created=False``).  Such an enqueue is safe to repeat, so it is retried.
- A batch is stored all or none, in bulk (multi-row inserts); its jobs are built from the requests
  and only the new ids are read back, plus the jobs that already held a key.
- ``connection=`` runs the insert in the caller's transaction (see :mod:`.transactions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, bindparam, insert, select
from sqlalchemy.engine import Connection
from tether.adapters.sqlalchemy.mapping import inserted_job, new_job_values, row_to_job
from tether.adapters.sqlalchemy.transactions import SqlTransactions, _UnknownOutcome
from tether.domain.errors import StorageUnavailable
from tether.domain.job import EnqueueResult, NewJob
from tether.domain.timeutil import UTC, ensure_utc

#: Times an idempotent enqueue re-tries when the row holding its key vanished (purged) between
#: the conflicting insert and the read of that row.
KEY_RACE_ROUNDS = 10


def unknown_enqueue_error(safe_url: str) -> StorageUnavailable:
    """The error of an enqueue without an idempotency key whose commit outcome is unknown."""
    return StorageUnavailable(
        f"{safe_url}: the connection was lost while enqueueing a job without an idempotency key; "
        "it may or may not have been stored (use an idempotency key to make enqueue safe to retry)"
    )


class SqlEnqueue(SqlTransactions):
    """``enqueue`` and ``enqueue_many``; the dialects supply :meth:`_insert_ignoring_key_conflicts`
    (and PostgreSQL its own bulk statements)."""

    def _insert_ignoring_key_conflicts(self) -> Insert:
        """``INSERT ... ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`` for
        this dialect: the conflict target is the partial unique index ``ux_tether_jobs_idempotency_key``
        (the predicate must be named for the database to infer a partial index)."""
        raise NotImplementedError

    def _insert_one(self, conn: Connection, new_job: NewJob, now: datetime) -> EnqueueResult:
        t = self.table
        values = new_job_values(new_job, now)
        key = new_job.idempotency_key
        if key is None:
            plain = self._statements.get("insert")
            if plain is None:
                plain = self._statements["insert"] = insert(t).returning(*t.c)
            return EnqueueResult(row_to_job(conn.execute(plain, values).one()), created=True)
        keyed = self._statements.get("insert_keyed")
        if keyed is None:
            keyed = self._statements["insert_keyed"] = self._insert_ignoring_key_conflicts().returning(*t.c)
            self._statements["by_key"] = select(t).where(t.c.idempotency_key == bindparam("p_key", type_=t.c.idempotency_key.type))
        by_key = self._statements["by_key"]
        for _ in range(KEY_RACE_ROUNDS):
            # Waits for any open transaction inserting the same key: if it rolls back, ours
            # goes in; if it commits, ours does nothing and the read below sees its row.
            row = conn.execute(keyed, values).first()
            if row is not None:
                return EnqueueResult(row_to_job(row), created=True)
            existing = conn.execute(by_key, {"p_key": key}).first()
            if existing is not None:
                return EnqueueResult(row_to_job(existing), created=False)
        raise StorageUnavailable(f"{self.safe_url}: idempotency key {key!r} kept changing hands; try again")

    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        """Store one job; see :meth:`JobRepository.enqueue`.  Raises StorageUnavailable, ValidationError."""
        now = ensure_utc(now, "now")
        ensure_utc(new_job.scheduled_at, "scheduled_at")
        joined = self._caller_connection(connection)
        if joined is not None:
            return self._on_caller(joined, "enqueue a job", lambda c: self._insert_one(c, new_job, now))
        if new_job.idempotency_key is not None:  # idempotent: safe to repeat
            return self._write("enqueue a job", lambda c: self._insert_one(c, new_job, now), single=True)
        try:
            return self._write_once("enqueue a job", lambda c: self._insert_one(c, new_job, now), single=True)
        except _UnknownOutcome as unknown:
            raise unknown_enqueue_error(self.safe_url) from unknown.cause

    def _insert_ids(self, conn: Connection, new_jobs: list[NewJob], now: datetime) -> list[tuple[int, str | None]]:
        """Insert ``new_jobs`` (keys unique among them) created at ``now``, skipping key conflicts;
        ``(id, idempotency_key)`` of each row inserted.

        Uses SQLAlchemy's "insertmanyvalues": multi-row INSERT statements of up to a page of rows.
        """
        if not new_jobs:
            return []
        t = self.table
        stmt = self._statements.get("insert_ids")
        if stmt is None:
            stmt = self._statements["insert_ids"] = self._insert_ignoring_key_conflicts().returning(
                t.c.id, t.c.idempotency_key
            )
        rows = conn.execute(stmt, [new_job_values(new_job, now) for new_job in new_jobs]).all()
        return [(int(row[0]), row[1]) for row in rows]

    def _insert_many(self, conn: Connection, new_jobs: Sequence[NewJob], now: datetime) -> list[EnqueueResult]:
        # Inserted rows are not read back: only their ids are, and each Job is built from its
        # NewJob exactly as the row reads back (mapping.inserted_job).  Existing keys are read.
        t = self.table
        results: list[EnqueueResult | None] = [None] * len(new_jobs)
        first_of_key: dict[str, int] = {}
        plain: list[int] = []
        keyed: list[int] = []
        for i, new_job in enumerate(new_jobs):
            key = new_job.idempotency_key
            if key is None:
                plain.append(i)
            elif key not in first_of_key:
                first_of_key[key] = i
                keyed.append(i)
        pending_keyed = keyed
        for _ in range(KEY_RACE_ROUNDS):
            batch = sorted(plain + pending_keyed) if pending_keyed else plain  # input order: ids ascend with it
            inserted = self._insert_ids(conn, [new_jobs[i] for i in batch], now)
            # ids are handed out in row order, so the unkeyed rows map back by ascending id
            unkeyed_ids = sorted(job_id for job_id, key in inserted if key is None)
            if len(unkeyed_ids) != len(plain):
                raise StorageUnavailable(f"{self.safe_url}: bulk insert returned {len(unkeyed_ids)} of {len(plain)} rows")
            for i, job_id in zip(plain, unkeyed_ids):
                results[i] = EnqueueResult(inserted_job(new_jobs[i], job_id, now), created=True)
            plain = []
            by_key = {key: job_id for job_id, key in inserted if key is not None}
            missing: list[int] = []
            for i in pending_keyed:
                inserted_id = by_key.get(new_jobs[i].idempotency_key)  # type: ignore[arg-type]
                if inserted_id is not None:
                    results[i] = EnqueueResult(inserted_job(new_jobs[i], inserted_id, now), created=True)
                else:
                    missing.append(i)
            if missing:
                keys = [new_jobs[i].idempotency_key for i in missing]
                existing = {r.idempotency_key: r for r in conn.execute(select(t).where(t.c.idempotency_key.in_(keys)))}
                still: list[int] = []
                for i in missing:
                    row = existing.get(new_jobs[i].idempotency_key)
                    if row is not None:
                        results[i] = EnqueueResult(row_to_job(row), created=False)
                    else:
                        still.append(i)
                missing = still
            pending_keyed = missing
            if not pending_keyed:
                break
        else:
            raise StorageUnavailable(f"{self.safe_url}: idempotency keys kept changing hands; try again")
        for i, new_job in enumerate(new_jobs):
            if results[i] is None:  # a key repeated within the batch: the first one's job
                first = results[first_of_key[new_job.idempotency_key]]  # type: ignore[index]
                assert first is not None
                results[i] = EnqueueResult(first.job, created=False)
        return [r for r in results if r is not None]

    def enqueue_many(self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None) -> list[EnqueueResult]:
        """Store several jobs, all or none, in bulk; results in input order.  See :meth:`JobRepository.enqueue_many`."""
        now = ensure_utc(now, "now")
        new_jobs = list(new_jobs)
        for new_job in new_jobs:
            if not (type(new_job.scheduled_at) is datetime and new_job.scheduled_at.tzinfo is UTC):  # else surely fine
                ensure_utc(new_job.scheduled_at, "scheduled_at")
        if not new_jobs:
            return []
        joined = self._caller_connection(connection)
        if joined is not None:
            return self._on_caller(joined, "enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        if all(n.idempotency_key is not None for n in new_jobs):
            return self._write("enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        try:
            return self._write_once("enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        except _UnknownOutcome as unknown:
            raise StorageUnavailable(
                f"{self.safe_url}: the connection was lost while enqueueing {len(new_jobs)} jobs; they may or may not "
                "have been stored (give each an idempotency key to make enqueue safe to retry)"
            ) from unknown.cause


__all__ = ["KEY_RACE_ROUNDS", "SqlEnqueue", "unknown_enqueue_error"]
