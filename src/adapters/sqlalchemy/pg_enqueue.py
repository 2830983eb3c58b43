"""Enqueue on PostgreSQL: the one-round-trip insert of a single job, bulk statements, planner statistics.

- A job without an idempotency key, outside a caller's transaction, is one prepared ``INSERT ...
  RETURNING id`` sent straight on a pooled psycopg connection (:mod:`.pg_driver`); the job is
  built from the request.  Every other single enqueue goes the shared way (:mod:`.enqueue`).
- Idempotent enqueue uses ``INSERT ... ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT
  NULL DO NOTHING RETURNING`` (the conflict target is the partial unique index): an insert of a key
  held by another open transaction waits for it; rollback lets ours in, commit makes ours return
  that job (case C10).  No unique-violation ever reaches a caller.
- Bulk enqueue is one ``INSERT ... SELECT`` per batch (:mod:`.pg_bulk`): alike jobs without keys
  send their shared fields once and the payloads as one JSON array, and get the new ids back as
  one array; any other batch sends ``json_to_recordset(:rows)``, with ``ON CONFLICT DO NOTHING``
  when some row has a key (the jobs are built from the requests; only existing keys are read back).
- With wake-ups enabled, each of them also sends ``pg_notify`` in its own statement or
  transaction (:mod:`.pg_wakeups`); with them off the statements are unchanged.
- A large bulk enqueue refreshes the planner's statistics (``ANALYZE``), so the lease query keeps
  using the lease-order index on a freshly loaded queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from tether.adapters.sqlalchemy import pg_bulk
from tether.adapters.sqlalchemy.enqueue import unknown_enqueue_error
from tether.adapters.sqlalchemy.mapping import inserted_job
from tether.adapters.sqlalchemy.pg_wakeups import PgWakeups, notifying_insert
from tether.adapters.sqlalchemy.schema import KEYED_PREDICATE
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome, bound_connection
from tether.domain.errors import StorageUnavailable, TetherError
from tether.domain.job import EnqueueResult, NewJob
from tether.domain.timeutil import ensure_utc

log = logging.getLogger("tether.adapters.sqlalchemy")

#: Rows bulk-enqueued since the last ANALYZE that make the next ``enqueue_many`` run one.
ANALYZE_AFTER_ROWS = 1_000
#: Least seconds between two such ANALYZE runs of one repository.
ANALYZE_MIN_INTERVAL = 10.0


class PgEnqueue(PgWakeups):
    """``enqueue`` and ``enqueue_many`` on PostgreSQL (the shared rules of :mod:`.enqueue`, PostgreSQL's statements)."""

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        super().__init__(engine, schema=schema)
        self._stats_lock = threading.Lock()
        self._rows_since_analyze = 0
        self._analyzed_at: float | None = None

    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        """As the base class.  The common case, no idempotency or concurrency key and no caller's transaction, is
        one prepared ``INSERT ... RETURNING id`` sent straight on a pooled psycopg connection
        (:mod:`.pg_driver`), and the job is built from the request (:func:`.mapping.inserted_job`):
        the shortest path from ``enqueue`` to a committed row, which is most of a job's start latency.
        On a bound connection (:func:`.transactions.run_bound`) the same statement runs on that
        connection; the async API sends it on a driver connection of its own loop
        (:mod:`.pg_async_driver`)."""
        bound = bound_connection()
        if connection is not None or new_job.idempotency_key is not None or new_job.concurrency_key is not None:
            return super().enqueue(new_job, now=now, connection=connection)
        now, sql, params = self.single_insert(new_job, now)
        if bound is not None:  # the async API: the same statement on its bound connection
            job_id = self._on_caller(nullcontext(bound), "enqueue a job", lambda c: c.exec_driver_sql(sql, params).scalar_one())
            return EnqueueResult(inserted_job(new_job, int(job_id), now), created=True)
        try:
            [(job_id, *_)] = self._driver_once("enqueue a job", sql, params)
        except _UnknownOutcome as unknown:
            raise unknown_enqueue_error(self.safe_url) from unknown.cause
        return EnqueueResult(inserted_job(new_job, int(job_id), now), created=True)

    def single_insert(self, new_job: NewJob, now: datetime) -> tuple[datetime, str, tuple[Any, ...]]:
        """The one statement that stores ``new_job`` (no idempotency key) created at ``now``, with
        psycopg ``%s`` parameters, returning the new id first (with wake-ups on, it also
        notifies): ``(now, sql, params)``.  The sync enqueue and the async API send the same one.

        Raises:
            ValidationError: ``now`` or the job's ``scheduled_at`` is not an aware datetime.
        """
        now = ensure_utc(now, "now")
        ensure_utc(new_job.scheduled_at, "scheduled_at")
        sql = self._statements.get("insert_driver")
        if sql is None:
            sql = self._statements["insert_driver"] = (
                f"INSERT INTO {self._qualified_table} (job_type, queue, payload, priority, status, attempts, "
                "max_attempts, scheduled_at, created_at, headers) VALUES (%s, %s, %s, %s, 'queued', 0, %s, %s, %s, %s) "
                "RETURNING id"
            )
        params: tuple[Any, ...] = (new_job.job_type, new_job.queue, new_job.payload_json, new_job.priority,
                                   new_job.max_attempts, new_job.scheduled_at, now, new_job.headers_json)
        if self.wakeup_channel is not None:  # the same insert, notifying in its own statement
            sql = self._statements.get("insert_driver_notify")
            if sql is None:
                sql = self._statements["insert_driver_notify"] = notifying_insert(self._statements["insert_driver"])
            params = (*params, self.wakeup_channel)
        return now, sql, params

    def enqueue_many(self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None) -> list[EnqueueResult]:
        """As the base class; afterwards, a large bulk enqueue refreshes the planner's statistics
        (see :meth:`_refresh_statistics`)."""
        results = super().enqueue_many(new_jobs, now=now, connection=connection)
        if connection is None and bound_connection() is None:
            self._refresh_statistics(sum(1 for r in results if r.created))
        return results

    def _refresh_statistics(self, inserted: int) -> None:
        """``ANALYZE tether_jobs`` once :data:`ANALYZE_AFTER_ROWS` rows were bulk-inserted since the
        last one, at most once per :data:`ANALYZE_MIN_INTERVAL` seconds.

        Autovacuum analyzes a table only about a minute after it grew; until then a freshly loaded
        queue has no statistics, the planner takes it for nearly empty, and the lease query reads
        and sorts every due row (a bitmap scan: milliseconds per lease at 20,000 jobs) instead of
        taking the first ``k`` rows of the lease-order index.  A failure here is logged, never raised.
        """
        with self._stats_lock:
            self._rows_since_analyze += inserted
            clock = time.monotonic()
            if self._rows_since_analyze < ANALYZE_AFTER_ROWS or (
                self._analyzed_at is not None and clock - self._analyzed_at < ANALYZE_MIN_INTERVAL
            ):
                return
            self._rows_since_analyze = 0
            self._analyzed_at = clock
        try:
            self._write("refresh the planner's statistics",
                        lambda c: c.exec_driver_sql(f"ANALYZE {self._qualified_table}"), single=True)
        except TetherError as error:
            log.warning("%s: could not ANALYZE the jobs table: %s", self.safe_url, error)

    def _insert_one(self, conn: Connection, new_job: NewJob, now: datetime) -> EnqueueResult:
        """As the base class, then (wake-ups on) a notification for a job it created, in the same transaction."""
        result = super()._insert_one(conn, new_job, now)
        if self.wakeup_channel is not None and result.created:
            self._send_wakeups(conn, [result.job])
        return result

    def _insert_ignoring_key_conflicts(self) -> Any:
        return pg_insert(self.table).on_conflict_do_nothing(
            index_elements=[self.table.c.idempotency_key], index_where=text(KEYED_PREDICATE)
        )

    def _insert_many(self, conn: Connection, new_jobs: Sequence[NewJob], now: datetime) -> list[EnqueueResult]:
        """A batch of alike jobs without keys (:func:`.pg_bulk.shared_fields`) is one "alike"
        statement whose only reply is the new ids; any other batch goes the base class's way
        (:meth:`_insert_ids`, then existing keys read back).  With wake-ups on, the batch then
        notifies once per queue of the jobs it created, in the same transaction."""
        results = self._insert_batch(conn, new_jobs, now)
        if self.wakeup_channel is not None:
            self._send_wakeups(conn, [result.job for result in results if result.created])
        return results

    def _insert_batch(self, conn: Connection, new_jobs: Sequence[NewJob], now: datetime) -> list[EnqueueResult]:
        shared = pg_bulk.shared_fields(new_jobs, now)
        if shared is None:
            return super()._insert_many(conn, new_jobs, now)
        statement = self._statements.get("insert_alike")
        if statement is None:
            statement = self._statements["insert_alike"] = text(pg_bulk.alike_statement(self._qualified_table))
        ids = conn.execute(statement, pg_bulk.alike_params(new_jobs, shared, now)).scalar_one()
        if ids is None or len(ids) != len(new_jobs):
            raise StorageUnavailable(
                f"{self.safe_url}: bulk insert returned {0 if ids is None else len(ids)} of {len(new_jobs)} rows")
        return pg_bulk.alike_results(new_jobs, ids, shared, now)

    def _insert_ids(self, conn: Connection, new_jobs: list[NewJob], now: datetime) -> list[tuple[int, str | None]]:
        """Bulk insert as one statement over the rows sent as one JSON array (``json_to_recordset``;
        any number of rows, one parameter), in input order so identities ascend with it; key
        conflicts skipped (``ON CONFLICT`` only when some row has a key); ``(id, idempotency_key)``
        of each row inserted (the caller builds the jobs from ``new_jobs``, so nothing else comes
        back).  See :func:`.pg_bulk.general_statement`.

        One JSON text instead of one PostgreSQL array per column: Python's C JSON encoder is
        several times cheaper than dumping eight lists element by element.
        """
        if not new_jobs:
            return []
        params, keyed = pg_bulk.general_params(new_jobs, now)
        name = "insert_json_keyed" if keyed else "insert_json"
        statement = self._statements.get(name)
        if statement is None:
            statement = self._statements[name] = text(pg_bulk.general_statement(self._qualified_table, keyed=keyed))
        return [(job_id, key) for job_id, key in conn.execute(statement, params).all()]



__all__ = ["ANALYZE_AFTER_ROWS", "ANALYZE_MIN_INTERVAL", "PgEnqueue"]
