"""``PostgresJobRepository``: the job repository on PostgreSQL (psycopg 3, ``postgresql+psycopg://``).

Composed of the shared SQL repository (:mod:`.repository`) and PostgreSQL's own parts:

- :mod:`.pg_connections`: the URL, the engine and its pool (idle connections pinged on checkout),
  one statement sent straight on a pooled psycopg connection (:mod:`.pg_driver`), which errors are
  transient and how a missing table reads;
- :mod:`.pg_enqueue`: the one-round-trip insert of a single job, idempotent enqueue with ``ON
  CONFLICT DO NOTHING``, bulk statements (:mod:`.pg_bulk`), planner statistics after bulk loads;
- :mod:`.pg_leases`: the lease (``FOR UPDATE SKIP LOCKED``, tokens ``md5(secret || id)``),
  ``complete_many`` in one ``UPDATE ... FROM unnest(ids, tokens)``, and ``complete_and_lease``;
- here: construction, the schema, and the reaper as one statement per pass (:mod:`.pg_reap`).

Across the parts:

- **Round trips**: a write that is one statement (lease, complete, fail, heartbeat, release,
  enqueue) runs as its own transaction (autocommit: no BEGIN/COMMIT round trips).
- **Connection loss**: the pool pings a connection on checkout when it sat idle for more than
  :data:`~.pg_connections.PING_IF_IDLE` s (busy connections skip the extra round trip).  A
  transaction that failed before its COMMIT was sent rolled back, so it is retried with backoff;
  reads, leases, reaps and keyed enqueues are retried too; past the retries the error is
  :class:`~tether.domain.errors.StorageUnavailable`.  When the outcome is unknown (the connection
  died during COMMIT or during a one-statement write): a fenced write is re-verified by reading the
  row (still running under the token: sent again; the intended state: done; else LeaseLost); a
  lease reads back the rows leased under its secret; an enqueue without an idempotency key is
  never re-sent and raises StorageUnavailable saying it may or may not be stored.
- **Time**: every stored time is the ``now`` the caller passes (the injected clock); the
  server's ``now()`` is never used, so one clock rules all comparisons.
- **Schema**: ``schema=`` names the PostgreSQL schema holding ``tether_jobs`` and its Alembic
  version table, so several applications (and parallel test runs) share one database;
  :meth:`~PostgresJobRepository.create_schema` runs the Alembic revisions of :mod:`.migrations`
  under an advisory lock.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.engine import URL, Connection, Engine
from tether.adapters.sqlalchemy import pg_reap
from tether.adapters.sqlalchemy.pg_connections import (
    DEFAULT_POOL_SIZE,
    create_postgres_engine,
    normalize_postgres_url,
    validate_schema_name,
)
from tether.adapters.sqlalchemy.pg_driver import JOB_COLUMNS, job_from_tuple
from tether.adapters.sqlalchemy.pg_enqueue import PgEnqueue
from tether.adapters.sqlalchemy.pg_leases import PgLeases
from tether.domain.job import Job


class PostgresJobRepository(PgEnqueue, PgLeases):
    """A :class:`~tether.ports.repository.JobRepository` on PostgreSQL (13 or newer)."""

    single_statement_autocommit = True

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        super().__init__(engine, schema=validate_schema_name(schema))

    @classmethod
    def from_url(
        cls, url: str | URL, *, schema: str | None = None, pool_size: int | None = None, application_name: str = "tether"
    ) -> PostgresJobRepository:
        """A repository on ``url`` (see :func:`create_postgres_engine`); does not create the table."""
        return cls(create_postgres_engine(url, pool_size=pool_size, application_name=application_name), schema=schema)

    # -- schema ----------------------------------------------------------------------------------
    def create_schema(self) -> None:
        """Create the schema (if named) and Tether's tables, or upgrade them to the current version
        by running the shipped Alembic revisions (:mod:`.migrations`).

        Idempotent and safe to run from several processes at once: a transaction-scoped advisory
        lock keyed by the schema name serialises it, and the second one finds the head already
        applied.  One transaction, so nothing is half-written.

        Raises:
            ConfigurationError: the schema is from a newer Tether (nothing changed).
        """

        def work(conn: Connection) -> None:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": f"tether.schema:{self.schema or ''}"})
            if self.schema is not None:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            self._upgrade(conn)

        self._write("create the schema", work)

    def drop_schema(self) -> None:
        """Drop the named schema with everything in it (or just ``tether_jobs`` when unnamed)."""
        if self.schema is None:
            super().drop_schema()
            return
        self._write("drop the schema", lambda c: c.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))

    # -- maintenance ---------------------------------------------------------------------------
    _reap_rows_single = True

    def _reap_rows(self, conn: Connection, now: datetime, limit: int) -> list[Job]:
        """One reaper pass as **one** statement (:func:`.pg_reap.reap_statement`): up to ``limit``
        expired leases locked (skipping rows others hold), each written as
        :func:`~tether.domain.transitions.reap` would, under a compare-and-set on the lease read.
        The jobs as written, in the order of their expiry, then id."""
        sql = self._statements.get("reap")
        if sql is None:
            sql = self._statements["reap"] = pg_reap.reap_statement(self._qualified_table, JOB_COLUMNS)
        rows = conn.exec_driver_sql(sql, {"p_now": now, "p_limit": limit}).all()
        return [job_from_tuple(row) for row in sorted(rows, key=lambda row: (row[-1], row[0]))]



__all__ = [
    "DEFAULT_POOL_SIZE",
    "PostgresJobRepository",
    "create_postgres_engine",
    "normalize_postgres_url",
    "validate_schema_name",
]
