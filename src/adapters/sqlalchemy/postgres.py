"""``PostgresJobRepository``: the job repository on PostgreSQL (psycopg 3, ``postgresql+psycopg://``).

- **Leases**: one round trip leases up to ``k`` jobs::

      UPDATE tether_jobs SET status = 'running', attempts = attempts + 1, lease_token = ..., ...
      FROM (SELECT id FROM tether_jobs
            WHERE status IN ('queued', 'retrying') AND scheduled_at <= :now
              AND attempts < max_attempts [AND queue IN (...)]
            ORDER BY priority DESC, scheduled_at, id
            LIMIT :k FOR UPDATE SKIP LOCKED) AS chosen
      WHERE tether_jobs.id = chosen.id RETURNING tether_jobs.*

  Concurrent workers skip each other's locked rows instead of queueing behind them.  The partial
  indexes of :mod:`.schema` give the rows in lease order, so the cost does not grow with the
  number of finished rows (case C19).
- **Fencing tokens** of a batch lease are ``md5(secret || id)``, where ``secret`` is 128 random
  bits drawn (from the OS's CSPRNG) for that one lease call: unique per lease, and known to the
  caller before the statement runs.  If the connection dies while the lease commits, the
  repository reads back the rows leased under that secret and returns them, so a lost reply
  never silently burns an attempt.
- **Idempotent enqueue** uses ``INSERT ... ON CONFLICT (idempotency_key) WHERE idempotency_key IS
  NOT NULL DO NOTHING RETURNING`` (the conflict target is the partial unique index): an insert of a key held by another open transaction waits for it; rollback lets ours in,
  commit makes ours return that job (case C10).  No unique-violation ever reaches a caller.
- **Round trips**: a write that is one statement (lease, complete, fail, heartbeat, release,
  enqueue) runs as its own transaction (autocommit: no BEGIN/COMMIT round trips); bulk enqueue is
  one ``INSERT ... SELECT`` per batch (:mod:`.pg_bulk`): alike jobs without keys send their shared
  fields once and the payloads as one JSON array, and get the new ids back as one array; any other
  batch sends ``json_to_recordset(:rows)``, with ``ON CONFLICT DO NOTHING`` when some row has a
  key (the jobs are built from the requests; only existing keys are read back);
  :meth:`complete_many` flushes many fenced completions in one ``UPDATE ... FROM unnest(ids,
  tokens)``, each still a compare-and-set with its own outcome.
- **Reaper**: one pass of up to ``limit`` expired leases is one ``UPDATE ... FROM (SELECT ... FOR
  UPDATE SKIP LOCKED)`` computing :func:`~tether.domain.transitions.reap` in SQL (:mod:`.pg_reap`).
- **Connection loss**: the pool pings a connection on checkout when it sat idle for more than
  :data:`PING_IF_IDLE` s (busy connections skip the extra round trip).  A transaction that failed
  before its COMMIT was sent rolled back, so it is retried with backoff; reads, leases, reaps and
  keyed enqueues are retried too; past the retries the error is
  :class:`~tether.domain.errors.StorageUnavailable`.  When the outcome is unknown (the connection
  died during COMMIT or during a one-statement write): a fenced write is re-verified by reading the
  row (still running under the token: sent again; the intended state: done; else LeaseLost); a
  lease reads back the rows leased under its secret; an enqueue without an idempotency key is
  never re-sent and raises StorageUnavailable saying it may or may not be stored.
- **Time**: every stored time is the ``now`` the caller passes (the injected clock); the
  server's ``now()`` is never used, so one clock rules all comparisons.
- **Schema**: ``schema=`` names the PostgreSQL schema holding ``tether_jobs`` and its Alembic
  version table, so several applications (and parallel test runs) share one database;
  :meth:`create_schema` runs the Alembic revisions of :mod:`.migrations` under an advisory lock.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Text, cast, create_engine, event, func, literal, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, Connection, Engine, Row, make_url
from tether.adapters.sqlalchemy import pg_bulk, pg_reap
from tether.adapters.sqlalchemy.enqueue import unknown_enqueue_error
from tether.adapters.sqlalchemy.mapping import inserted_job, row_to_job
from tether.adapters.sqlalchemy.pg_driver import autocommit_connection
from tether.adapters.sqlalchemy.repository import SqlAlchemyJobRepository
from tether.adapters.sqlalchemy.schema import KEYED_PREDICATE, status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import ConfigurationError, LeaseLost, StorageUnavailable, TetherError
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob, lease_order_key
from tether.domain.timeutil import UTC, ensure_utc
from tether.domain.validation import validate_seconds, validate_worker_id

log = logging.getLogger("tether.adapters.sqlalchemy")

SCHEMA_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
DEFAULT_POOL_SIZE = 10
#: Rows bulk-enqueued since the last ANALYZE that make the next ``enqueue_many`` run one.
ANALYZE_AFTER_ROWS = 1_000
#: Least seconds between two such ANALYZE runs of one repository.
ANALYZE_MIN_INTERVAL = 10.0


def validate_schema_name(schema: str | None) -> str | None:
    """None, or a plain PostgreSQL identifier (letters, digits, ``_``; at most 63 characters).

    Raises:
        ConfigurationError: anything else (it is interpolated into DDL).
    """
    if schema is None:
        return None
    if not isinstance(schema, str) or not SCHEMA_PATTERN.fullmatch(schema):
        raise ConfigurationError(
            f"schema: {schema!r} is not a schema name (1-63 of letters, digits and '_', not starting with a digit)"
        )
    return schema


def normalize_postgres_url(url: str | URL) -> URL:
    """``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://`` (psycopg 3)."""
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    url = make_url(url)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def create_postgres_engine(
    url: str | URL, *, pool_size: int | None = None, connect_timeout: float = 10.0, application_name: str = "tether"
) -> Engine:
    """An engine with a pool of ``pool_size`` connections (default 10) plus as many overflow.
    A connection that sat idle in the pool for more than :data:`PING_IF_IDLE` seconds is pinged
    on checkout, so one killed by the server meanwhile (restart, idle timeout) is replaced, not
    used; a connection back in use within that time is not pinged (no extra round trip per lease
    or completion on a busy worker) and a failure on it is handled by the retry and
    unknown-outcome rules of the repository.
    ``application_name`` shows in ``pg_stat_activity``; ``connect_timeout`` is in seconds.

    Raises:
        ConfigurationError: a bad pool size.
    """
    url = normalize_postgres_url(url)
    size = DEFAULT_POOL_SIZE if pool_size is None else pool_size
    if size < 1:
        raise ConfigurationError(f"pool_size: must be >= 1, got {size}")
    engine = create_engine(
        url,
        pool_size=size,
        max_overflow=size,
        pool_pre_ping=False,
        pool_timeout=30,
        connect_args={"connect_timeout": max(1, int(connect_timeout)), "application_name": application_name},
    )
    _ping_idle_connections(engine)
    return engine


#: Seconds a pooled connection may sit idle before its next checkout pings it first.
PING_IF_IDLE = 1.0


def _ping_idle_connections(engine: Engine) -> None:
    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["tether_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        idle_since = record.info.get("tether_idle_since")
        if idle_since is None or time.monotonic() - idle_since <= PING_IF_IDLE:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise sa_exc.DisconnectionError(f"idle connection failed its ping: {error}") from error


_STATUSES = {status.value: status for status in JobStatus}
#: The columns :func:`_job_from_tuple` reads, in its order (statements list them explicitly).
_JOB_COLUMNS = (
    "id", "job_type", "queue", "payload", "priority", "status", "attempts", "max_attempts", "scheduled_at",
    "created_at", "idempotency_key", "lease_token", "leased_by", "leased_at", "lease_expires_at", "last_error",
    "finished_at",
)


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is UTC:
        return value
    return value.astimezone(UTC)  # timestamptz comes back in the session's zone


def _job_from_tuple(row: Sequence[Any]) -> Job:
    """The :class:`Job` of the first 17 columns of a raw row, in :data:`_JOB_COLUMNS` order
    (what :func:`~tether.adapters.sqlalchemy.mapping.row_to_job` gives, without SQLAlchemy's
    per-column result processing: psycopg already returns ``int``/``str``/aware datetimes)."""
    return Job(
        id=row[0], job_type=row[1], queue=row[2], payload_json=row[3], priority=row[4], status=_STATUSES[row[5]],
        attempts=row[6], max_attempts=row[7], scheduled_at=_utc(row[8]), created_at=_utc(row[9]),  # type: ignore[arg-type]
        idempotency_key=row[10], lease_token=row[11], leased_by=row[12], leased_at=_utc(row[13]),
        lease_expires_at=_utc(row[14]), last_error=row[15], finished_at=_utc(row[16]),
    )


class PostgresJobRepository(SqlAlchemyJobRepository):
    """A :class:`~tether.ports.repository.JobRepository` on PostgreSQL (13 or newer)."""

    single_statement_autocommit = True

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        super().__init__(engine, schema=validate_schema_name(schema))
        self._stats_lock = threading.Lock()
        self._rows_since_analyze = 0
        self._analyzed_at: float | None = None

    # -- enqueue ---------------------------------------------------------------------------------
    def enqueue(self, new_job: NewJob, *, now: datetime, connection: Any = None) -> EnqueueResult:
        """As the base class.  The common case, no idempotency key and no caller's transaction, is
        one prepared ``INSERT ... RETURNING id`` sent straight on a pooled psycopg connection
        (:mod:`.pg_driver`), and the job is built from the request (:func:`.mapping.inserted_job`):
        the shortest path from ``enqueue`` to a committed row, which is most of a job's start latency."""
        if connection is not None or new_job.idempotency_key is not None:
            return super().enqueue(new_job, now=now, connection=connection)
        now = ensure_utc(now, "now")
        ensure_utc(new_job.scheduled_at, "scheduled_at")
        sql = self._statements.get("insert_driver")
        if sql is None:
            sql = self._statements["insert_driver"] = (
                f"INSERT INTO {self._qualified_table} (job_type, queue, payload, priority, status, attempts, "
                "max_attempts, scheduled_at, created_at) VALUES (%s, %s, %s, %s, 'queued', 0, %s, %s, %s) RETURNING id"
            )
        params = (new_job.job_type, new_job.queue, new_job.payload_json, new_job.priority, new_job.max_attempts,
                  new_job.scheduled_at, now)
        try:
            [(job_id,)] = self._driver_once("enqueue a job", sql, params)
        except _UnknownOutcome as unknown:
            raise unknown_enqueue_error(self.safe_url) from unknown.cause
        return EnqueueResult(inserted_job(new_job, int(job_id), now), created=True)

    def _driver_once(self, doing: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """Run the one statement ``sql`` (psycopg ``%s``/``%(name)s`` parameters, prepared) in
        autocommit on a pooled psycopg connection (:mod:`.pg_driver`); its rows.  The rules of
        :meth:`_write_once` (raises :class:`_UnknownOutcome` once the statement may have been
        sent; StorageUnavailable past the retries or for a non-transient error)."""
        return self._write_once(
            doing, lambda driver: driver.execute(sql, params, prepare=True).fetchall(), connect=self._driver_connection
        )

    @contextmanager
    def _driver_connection(self) -> Iterator[Any]:
        """:func:`.pg_driver.autocommit_connection` on this repository's engine (StorageUnavailable once closed)."""
        if self._closed:
            raise StorageUnavailable(f"{self.safe_url}: the repository was closed")
        with autocommit_connection(self.engine) as driver:
            yield driver

    # -- planner statistics ----------------------------------------------------------------------
    def enqueue_many(self, new_jobs: Sequence[NewJob], *, now: datetime, connection: Any = None) -> list[EnqueueResult]:
        """As the base class; afterwards, a large bulk enqueue refreshes the planner's statistics
        (see :meth:`_refresh_statistics`)."""
        results = super().enqueue_many(new_jobs, now=now, connection=connection)
        if connection is None:
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

    # -- errors ----------------------------------------------------------------------------------
    def _is_transient(self, error: BaseException) -> bool:
        return isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError)) or (
            isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)
        )

    def _translate(self, error: sa_exc.DBAPIError, doing: str) -> TetherError:
        message = str(getattr(error, "orig", error)).strip()
        if "does not exist" in message and ("relation" in message or "schema" in message):
            where = f"schema {self.schema!r}" if self.schema else "the default schema"
            return ConfigurationError(
                f"{self.safe_url}: the Tether table is missing in {where} ({message.splitlines()[0]}); "
                f"run `tether db init --database-url {self.safe_url}`"
                + (f" --schema {self.schema}" if self.schema else "")
            )
        return super()._translate(error, doing)

    # -- statements ------------------------------------------------------------------------------
    def _insert_ignoring_key_conflicts(self) -> Any:
        return pg_insert(self.table).on_conflict_do_nothing(
            index_elements=[self.table.c.idempotency_key], index_where=text(KEYED_PREDICATE)
        )

    def _insert_many(self, conn: Connection, new_jobs: Sequence[NewJob], now: datetime) -> list[EnqueueResult]:
        """A batch of alike jobs without keys (:func:`.pg_bulk.shared_fields`) is one "alike"
        statement whose only reply is the new ids; any other batch goes the base class's way
        (:meth:`_insert_ids`, then existing keys read back)."""
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

    _complete_rows_single = True

    def _complete_rows(
        self, conn: Connection, items: Sequence[tuple[int, str]], now: datetime
    ) -> dict[tuple[int, str], Row[Any]]:
        """All the fenced completions in one statement: ``UPDATE ... FROM unnest(ids, tokens)``;
        each row comes back with the token that matched it (``fenced_token``)."""
        statement = self._statements.get("complete_many")
        if statement is None:  # built once: rebuilding a text() costs a cache-key walk per call
            statement = text(
                f"UPDATE {self._qualified_table} AS j SET status = 'completed', finished_at = :now, lease_token = NULL, "
                "leased_by = NULL, leased_at = NULL, lease_expires_at = NULL "
                "FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS text[])) AS v(id, token) "
                "WHERE j.id = v.id AND j.status = 'running' AND j.lease_token = v.token "
                "RETURNING j.*, v.token AS fenced_token"
            ).columns(*self.table.c, fenced_token=Text())
            self._statements["complete_many"] = statement
        rows = conn.execute(  # .all(): one fetchall, not a fetchone per row
            statement, {"now": now, "ids": [i for i, _ in items], "tokens": [tok for _, tok in items]}
        ).all()
        return {(int(row.id), row.fenced_token): row for row in rows}

    def _lease_parts(self, shape: str) -> tuple[str, str]:
        """The two parts every lease statement shares, psycopg ``%(name)s`` parameters from
        :meth:`_lease_params` plus ``p_secret``: the ``chosen`` CTE body (the best ``p_limit``
        due rows of the queue filter ``shape`` (all, one, many) in lease order, skipping rows other
        workers hold locked) and the UPDATE that leases them, each under ``md5(p_secret || id)``,
        returning :data:`_JOB_COLUMNS`."""
        table = self._qualified_table
        columns = ", ".join(f"j.{name}" for name in _JOB_COLUMNS)
        queue_filter = {"all": "", "one": " AND queue = %(p_queue)s",
                        "many": " AND queue = ANY(CAST(%(p_queues)s AS text[]))"}[shape]
        chosen = (
            f"SELECT id FROM {table} WHERE status IN ('queued', 'retrying') "
            f"AND scheduled_at <= %(p_now)s AND attempts < max_attempts{queue_filter} "
            "ORDER BY priority DESC, scheduled_at, id LIMIT %(p_limit)s FOR UPDATE SKIP LOCKED"
        )
        update = (
            f"UPDATE {table} AS j SET status = 'running', attempts = j.attempts + 1, "
            "lease_token = md5(%(p_secret)s || CAST(j.id AS text)), leased_by = %(p_worker)s, "
            "leased_at = %(p_now)s, lease_expires_at = %(p_expires)s FROM chosen WHERE j.id = chosen.id "
            f"RETURNING {columns}"
        )
        return chosen, update

    def _lease_sql(self, shape: str) -> str:
        """The lease statement (:meth:`_lease_parts`) for a queue filter of ``shape``."""
        key = ("lease_sql", shape)
        sql = self._statements.get(key)
        if sql is None:
            chosen, update = self._lease_parts(shape)
            sql = self._statements[key] = f"WITH chosen AS ({chosen}) {update}"
        return sql

    def _complete_and_lease_sql(self, shape: str) -> str:
        """The SQL of :meth:`complete_and_lease` for a queue filter of ``shape`` (psycopg
        ``%(name)s`` parameters): the ``complete_many`` update and the lease
        (:meth:`_lease_parts`) as two data-modifying CTEs of one statement (they touch disjoint
        rows: one needs ``running``, the other ``queued``/``retrying``), their rows returned
        together, told apart by the last column (true: completed by this statement).  Columns are
        listed as :data:`_JOB_COLUMNS`, so :func:`_job_from_tuple` reads them by position whatever
        the physical column order."""
        key = ("complete_and_lease", shape)
        sql = self._statements.get(key)
        if sql is None:
            table = self._qualified_table
            columns = ", ".join(f"j.{name}" for name in _JOB_COLUMNS)
            chosen, update = self._lease_parts(shape)
            sql = self._statements[key] = (
                f"WITH done AS (UPDATE {table} AS j SET status = 'completed', finished_at = %(p_now)s, "
                "lease_token = NULL, leased_by = NULL, leased_at = NULL, lease_expires_at = NULL "
                "FROM unnest(CAST(%(p_ids)s AS bigint[]), CAST(%(p_tokens)s AS text[])) AS v(id, token) "
                "WHERE j.id = v.id AND j.status = 'running' AND j.lease_token = v.token "
                f"RETURNING {columns}, v.token AS fenced_token), "
                f"chosen AS ({chosen}), "
                f"leased AS ({update}, CAST(NULL AS text) AS fenced_token) "
                "SELECT *, true FROM done UNION ALL SELECT *, false FROM leased"
            )
        return sql

    def complete_and_lease(
        self,
        items: Sequence[tuple[int, str]],
        *,
        now: datetime,
        queues: Sequence[str] | None,
        worker_id: str,
        lease_timeout: float,
        limit: int,
    ) -> tuple[list[Job | LeaseLost], list[Job]]:
        """The fenced completions of ``items`` and a lease of up to ``limit`` jobs in **one**
        statement (one round trip, one commit): see :meth:`_complete_and_lease_sql`.

        Each item is still its own compare-and-set on (id, ``running``, token), answered by the
        (id, token) that matched (a stale token next to the current one is LeaseLost); leased
        tokens are ``md5(secret || id)`` as in :meth:`lease`.  When the connection dies during
        the statement, both halves are read back (the statement is atomic: it landed whole or not
        at all): the rows leased under the secret, and each item's row (completed at ``now``:
        done; still running under its token: not landed, so the statement is sent again with a
        fresh secret; else LeaseLost).  Raises StorageUnavailable past the retries.
        """
        now = ensure_utc(now, "now")
        if not items or limit < 1 or (queues is not None and not queues):
            return super().complete_and_lease(
                items, now=now, queues=queues, worker_id=worker_id, lease_timeout=lease_timeout, limit=limit
            )
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        sql = self._complete_and_lease_sql(self._queue_shape(queues))
        batch = [(int(job_id), str(token)) for job_id, token in items]
        base = self._lease_params(queues, worker_id, now, lease_timeout, limit)
        done: dict[tuple[int, str], Job | LeaseLost] = {}
        for attempt in range(self.retry_attempts):
            secret = secrets.token_hex(16)
            params = {**base, "p_secret": secret, "p_ids": [i for i, _ in batch], "p_tokens": [t for _, t in batch]}
            try:
                # raw rows on the driver, mapped by position: no per-statement SQLAlchemy overhead
                rows = self._driver_once("complete and lease jobs", sql, params)
            except _UnknownOutcome:
                leased = self._read(
                    "check an interrupted lease",
                    lambda c: self._rows_leased_under(c, secret, worker_id, now, lease_timeout),  # noqa: B023
                )
                pending = self._recheck_completions(batch, now, done)
                if pending and not leased:  # it did not land: send it again (the others are answered)
                    batch = pending
                    if attempt + 1 < self.retry_attempts:
                        self._sleep(attempt)
                    continue
                jobs = sorted((row_to_job(r) for r in leased), key=lease_order_key)
                return [done[(int(i), str(t))] for i, t in items], jobs
            jobs = []
            for row in rows:
                if row[-1]:
                    done[(row[0], row[-2])] = _job_from_tuple(row)
                else:
                    jobs.append(_job_from_tuple(row))
            for key in batch:
                if key not in done:
                    done[key] = LeaseLost(*key)
            return [done[(int(i), str(t))] for i, t in items], sorted(jobs, key=lease_order_key)
        raise StorageUnavailable(f"{self.safe_url}: could not complete and lease jobs: the connection kept failing")

    @property
    def _qualified_table(self) -> str:
        name = self.table.name
        return f'"{self.schema}".{name}' if self.schema else name

    def lease(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int = 1
    ) -> list[Job]:
        """As the base class, in one statement (:meth:`_lease_sql`) sent straight on a pooled psycopg
        connection (:mod:`.pg_driver`): the lease is on the path from a job's publish to its
        handler's start.  A lease whose reply was lost is read back by its secret."""
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        if limit < 1 or (queues is not None and not queues):
            return []
        sql = self._lease_sql(self._queue_shape(queues))
        base = self._lease_params(queues, worker_id, now, lease_timeout, limit)
        for attempt in range(self.retry_attempts):
            secret = secrets.token_hex(16)
            try:
                rows = self._driver_once("lease jobs", sql, {**base, "p_secret": secret})
            except _UnknownOutcome:
                recovered = self._read(
                    "check an interrupted lease",
                    lambda c: self._rows_leased_under(c, secret, worker_id, now, lease_timeout),  # noqa: B023
                )
                if recovered:
                    return sorted((row_to_job(r) for r in recovered), key=lease_order_key)
                if attempt + 1 < self.retry_attempts:
                    self._sleep(attempt)
                continue
            return sorted((_job_from_tuple(r) for r in rows), key=lease_order_key)
        # never "no job" because the store kept failing (the contract of lease)
        raise StorageUnavailable(f"{self.safe_url}: could not lease jobs: the connection kept failing")

    def _rows_leased_under(
        self, conn: Connection, secret: str, worker_id: str, now: datetime, lease_timeout: float
    ) -> list[Row[Any]]:
        t = self.table
        expires = now + timedelta(seconds=lease_timeout)
        stmt = select(t).where(
            status_is(t.c.status, JobStatus.RUNNING),
            t.c.lease_expires_at == expires,
            t.c.leased_by == worker_id,
            t.c.lease_token == func.md5(literal(secret, Text()) + cast(t.c.id, Text())),
        )
        return list(conn.execute(stmt))

    _reap_rows_single = True

    def _reap_rows(self, conn: Connection, now: datetime, limit: int) -> list[Job]:
        """One reaper pass as **one** statement (:func:`.pg_reap.reap_statement`): up to ``limit``
        expired leases locked (skipping rows others hold), each written as
        :func:`~tether.domain.transitions.reap` would, under a compare-and-set on the lease read.
        The jobs as written, in the order of their expiry, then id."""
        sql = self._statements.get("reap")
        if sql is None:
            sql = self._statements["reap"] = pg_reap.reap_statement(self._qualified_table, _JOB_COLUMNS)
        rows = conn.exec_driver_sql(sql, {"p_now": now, "p_limit": limit}).all()
        return [_job_from_tuple(row) for row in sorted(rows, key=lambda row: (row[-1], row[0]))]


__all__ = [
    "DEFAULT_POOL_SIZE",
    "PostgresJobRepository",
    "create_postgres_engine",
    "normalize_postgres_url",
    "validate_schema_name",
]
