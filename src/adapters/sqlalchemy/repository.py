"""``SqlAlchemyJobRepository``: the job repository on SQLAlchemy 2 Core, shared by SQLite and PostgreSQL.

Every rule of :mod:`tether.domain.transitions` is applied as one compare-and-set statement:

- a write on a running job (complete, fail, dead-letter, heartbeat, release) is
  ``UPDATE tether_jobs SET ... WHERE id = :id AND status = 'running' AND lease_token = :token
  RETURNING *``; no row back means :class:`~tether.domain.errors.LeaseLost` and nothing changed;
- ``fail`` decides retrying vs dead in SQL (``attempts < max_attempts`` and a ``retry_at``
  given), so the decision uses the row as it is at the moment of the write;
- the reaper writes each expired lease with a compare-and-set on the token and expiry it read, so
  a job completed, renewed or re-leased in between is left alone: here (SQLite) one read, then one
  write per lease, in one transaction; PostgreSQL overrides it with one statement per pass
  (:mod:`.pg_reap`);
- a lease takes due jobs (``queued``/``retrying``, ``scheduled_at <= now``,
  ``attempts < max_attempts``) in lease order (priority DESC, scheduled_at, id).

Every stored time comes from the ``now`` argument (the injected clock), never from the database
server's clock: one time source for every stored time and comparison.  Payloads are stored as the
canonical JSON text the domain produced and come back byte-identical.

Subclasses (:mod:`.sqlite`, :mod:`.postgres`) supply the engine set-up, the lease statement and
the retry policy for transient storage errors.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from sqlalchemy import (
    ColumnElement,
    Insert,
    Integer,
    MetaData,
    Select,
    Table,
    bindparam,
    case,
    delete,
    func,
    insert,
    inspect,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.orm import Session
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.sqlalchemy import migrations
from tether.adapters.sqlalchemy.commit_hooks import on_connection_commit, on_session_commit, run_safely
from tether.adapters.sqlalchemy.mapping import inserted_job, job_state_values, new_job_values, row_to_job
from tether.adapters.sqlalchemy.schema import build_jobs_table
from tether.domain import transitions
from tether.domain.errors import (
    ConfigurationError,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    StorageUnavailable,
    TetherError,
    ValidationError,
)
from tether.domain.failure import sanitize_text
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob, lease_order_key
from tether.domain.lease import new_lease_token
from tether.domain.timeutil import UTC, ensure_utc
from tether.domain.validation import validate_queue, validate_seconds, validate_worker_id
from tether.ports.repository import JobRepository

log = logging.getLogger("tether.adapters.sqlalchemy")

#: Transient-error warnings are logged at most once per this many seconds (the rest at DEBUG),
#: so an outage costs a bounded number of log lines however many threads retry.
TRANSIENT_LOG_PERIOD = 1.0
_transient_limit = RateLimitedLog(log, TRANSIENT_LOG_PERIOD)


def _log_transient(message: str, *args: object) -> None:
    """Log a retried transient error: WARNING at most once per :data:`TRANSIENT_LOG_PERIOD`, else DEBUG."""
    loud = _transient_limit.admit() is not None
    log.log(logging.WARNING if loud else logging.DEBUG, message, *args)

T = TypeVar("T")

#: Rows deleted per transaction by :meth:`SqlAlchemyJobRepository.purge`.
PURGE_BATCH = 5_000
#: Times an idempotent enqueue re-tries when the row holding its key vanished (purged) between
#: the conflicting insert and the read of that row.
KEY_RACE_ROUNDS = 10


def status_is(column: Any, *statuses: JobStatus) -> ColumnElement[bool]:
    """``status = 'x'`` / ``status IN ('x', 'y')`` with the values inlined as SQL literals.

    Inlined on purpose: a partial index is only usable when the planner can see that the query's
    predicate implies the index's, which it cannot for bound parameters in a generic plan.
    """
    literals: list[Any] = [literal_column(f"'{s.value}'") for s in statuses]
    if len(literals) == 1:
        return column == literals[0]  # type: ignore[no-any-return]
    return column.in_(literals)  # type: ignore[no-any-return]


class _UnknownOutcome(Exception):
    """A statement's transaction may or may not have committed (the connection died mid-way)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def unknown_enqueue_error(safe_url: str) -> StorageUnavailable:
    """The error of an enqueue without an idempotency key whose commit outcome is unknown."""
    return StorageUnavailable(
        f"{safe_url}: the connection was lost while enqueueing a job without an idempotency key; "
        "it may or may not have been stored (use an idempotency key to make enqueue safe to retry)"
    )


class SqlAlchemyJobRepository(JobRepository):
    """A :class:`~tether.ports.repository.JobRepository` on a SQLAlchemy :class:`Engine`.

    Args:
        engine: configured by the subclass (see :func:`tether.adapters.sqlalchemy.open_repository`).
        schema: PostgreSQL schema holding ``tether_jobs`` (None: the default search path).

    Times and units (every method): each datetime argument (``now``, ``retry_at``,
    ``older_than``, ``scheduled_at``) must be timezone-aware and is stored as UTC (a naive one
    raises :class:`~tether.domain.errors.ValidationError` naming it, nothing written); every
    returned datetime is aware UTC; ``lease_timeout`` is in seconds (> 0).  A store that stays
    unreachable or locked past the retries raises
    :class:`~tether.domain.errors.StorageUnavailable`.

    Attributes:
        engine: the SQLAlchemy engine (callers may use it for their own transactions).
        table: the ``tether_jobs`` :class:`Table` bound to this repository's schema.
    """

    #: Attempts of an operation hit by a transient storage error before StorageUnavailable.
    retry_attempts: int = 6
    #: First backoff between those attempts (seconds); doubles up to :attr:`retry_max_delay`.
    retry_base_delay: float = 0.02
    retry_max_delay: float = 1.0
    #: Run one-statement writes as their own transaction (no BEGIN/COMMIT round trips).
    single_statement_autocommit: bool = False

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        self.engine = engine
        self.schema = schema
        self.metadata = MetaData(schema=schema)
        self.table: Table = build_jobs_table(self.metadata)
        self._serial: AbstractContextManager[Any] | None = None  # set for single-connection engines
        self._statements: dict[Any, Any] = {}  # hot-path statements built once, run with parameters
        self._closed = False

    # -- description ---------------------------------------------------------------------------
    @property
    def safe_url(self) -> str:
        """The database URL with its password hidden, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.safe_url!r}, schema={self.schema!r})"

    # -- schema ----------------------------------------------------------------------------------
    def _upgrade(self, conn: Connection) -> int:
        return migrations.upgrade(conn, self.schema, where=self.safe_url)

    def create_schema(self) -> None:
        """Create Tether's tables, or upgrade them to :data:`~.migrations.SCHEMA_VERSION` by running the
        shipped Alembic revisions (idempotent; see :mod:`.migrations`).

        Raises:
            ConfigurationError: the database holds a schema from a newer Tether (a revision this
                Tether does not ship); nothing is changed.
        """
        self._write("create the schema", self._upgrade)

    def schema_version(self) -> int | None:
        """The stored schema version: the number of the applied Alembic revision (``0002`` -> 2),
        1 for tables from before Alembic, None when Tether's tables are absent.

        Raises:
            ConfigurationError: the version table holds a revision id that is not a Tether one.
        """
        return self._read("read the schema version", lambda c: migrations.read_version(c, self.schema, where=self.safe_url))

    def check_schema(self) -> None:
        """Raise :class:`ConfigurationError` (saying what to run) unless the schema is current."""
        found = self.schema_version()
        command = f"--database-url {self.safe_url}" + (f" --schema {self.schema}" if self.schema else "")
        if found is None:
            raise ConfigurationError(f"{self.safe_url}: the Tether tables are missing; run `tether db init {command}`")
        if found < migrations.SCHEMA_VERSION:
            raise ConfigurationError(
                f"{self.safe_url}: the Tether schema is version {found}, this Tether needs "
                f"{migrations.SCHEMA_VERSION}; run `tether db upgrade {command}`"
            )
        if found > migrations.SCHEMA_VERSION:
            raise migrations.newer_schema_error(self.safe_url, found)

    def drop_schema(self) -> None:
        """Drop ``tether_jobs`` and the version tables (tests and tear-down only: every job is lost)."""

        def drop(conn: Connection) -> None:
            self.metadata.drop_all(conn, checkfirst=True)
            migrations.drop_version_tables(conn, self.schema)

        with self._guard(), self.engine.begin() as conn:
            drop(conn)

    def schema_exists(self) -> bool:
        """True when ``tether_jobs`` exists in this repository's schema."""
        with self._guard(), self.engine.connect() as conn:
            return inspect(conn).has_table(self.table.name, schema=self.schema)

    # -- transactions and retries ---------------------------------------------------------------
    def _guard(self) -> AbstractContextManager[Any]:
        """Serialises use of a single shared connection (``sqlite:///:memory:``); else a no-op."""
        return self._serial if self._serial is not None else nullcontext()

    def _write_guard(self) -> AbstractContextManager[Any]:
        """Held around each write transaction (SQLite: an in-process lock per database file)."""
        return self._guard()

    @contextmanager
    def _begin(self, *, write: bool, single: bool = False) -> Iterator[Connection]:
        """A connection in a new transaction of this repository's own (write: the store's write lock).

        ``single``: the work is one statement (atomic by itself); where
        :attr:`single_statement_autocommit` is set it runs without BEGIN/COMMIT round trips.
        """
        if self._closed:
            raise StorageUnavailable(f"{self.safe_url}: the repository was closed")
        with self._write_guard() if write else self._guard(), self.engine.connect() as conn:
            if single and self.single_statement_autocommit:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn
                return
            conn.execution_options(tether_write=write)
            with conn.begin():
                yield conn

    def _is_transient(self, error: BaseException) -> bool:
        """True when ``error`` is worth retrying (lock timeout, lost connection)."""
        return isinstance(error, sa_exc.OperationalError) or (
            isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)
        )

    def _unavailable(self, error: BaseException, doing: str) -> StorageUnavailable:
        reason = getattr(error, "orig", None) or error
        first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
        return StorageUnavailable(
            f"{self.safe_url}: could not {doing}: {first} (retried; check that the database is reachable "
            "and not locked by a long transaction)"
        )

    def _sleep(self, attempt: int) -> None:
        delay = min(self.retry_base_delay * (2**attempt), self.retry_max_delay)
        time.sleep(delay * (0.5 + random.random()))

    def _retrying(self, doing: str, work: Callable[[], T]) -> T:
        """Run ``work`` (one whole transaction) again on transient errors, with backoff.

        Only for work that is safe to repeat: its transaction either committed or did nothing,
        and running it again after a commit is harmless (reads, idempotent writes).
        """
        for attempt in range(self.retry_attempts):
            try:
                return work()
            except sa_exc.DBAPIError as error:
                if not self._is_transient(error):
                    raise self._translate(error, doing) from error
                if attempt + 1 >= self.retry_attempts:
                    raise self._unavailable(error, doing) from error
                _log_transient(
                    "%s: transient error while trying to %s (attempt %d): %s", self.safe_url, doing, attempt + 1,
                    str(getattr(error, "orig", error)).splitlines()[0] if str(error) else type(error).__name__,
                )
                self._sleep(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _translate(self, error: sa_exc.DBAPIError, doing: str) -> TetherError:
        """A non-transient database error as a TetherError (the message never shows a password)."""
        return self._unavailable(error, doing)

    def _read(self, doing: str, work: Callable[[Connection], T]) -> T:
        """Read-only work, retried on transient errors (one-statement reads need no transaction
        where :attr:`single_statement_autocommit` is set)."""

        def once() -> T:
            with self._begin(write=False, single=True) as conn:
                return work(conn)

        return self._retrying(doing, once)

    def _write(self, doing: str, work: Callable[[Connection], T], *, single: bool = False) -> T:
        """One write transaction, retried on transient errors: only for work that is safe to
        repeat (idempotent, or whose outcome a repeat cannot double)."""

        def once() -> T:
            with self._begin(write=True, single=single) as conn:
                return work(conn)

        return self._retrying(doing, once)

    def _write_once(
        self,
        doing: str,
        work: Callable[[Any], T],
        *,
        single: bool = False,
        connect: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> T:
        """One write transaction that must not be repeated blindly.

        An error before the COMMIT was sent means the transaction rolled back: it is retried with
        backoff.  An error while committing (or during a ``single`` statement run as its own
        transaction) leaves the outcome unknown and raises :class:`_UnknownOutcome` for the
        caller to resolve by reading the row.  ``connect``, when given, opens the connection
        ``work`` runs on instead of :meth:`_begin`, as one statement in autocommit (e.g. a pooled
        driver connection); failing to open it is retried like a failure before COMMIT.
        """
        for attempt in range(self.retry_attempts):
            unknown = False
            try:
                with self._begin(write=True, single=single) if connect is None else connect() as conn:
                    unknown = connect is not None or (single and self.single_statement_autocommit)
                    result = work(conn)
                    unknown = True  # leaving the block sends COMMIT
                return result
            except sa_exc.DBAPIError as error:
                if not self._is_transient(error):
                    raise self._translate(error, doing) from error
                if unknown:
                    raise _UnknownOutcome(error) from error
                if attempt + 1 >= self.retry_attempts:
                    raise self._unavailable(error, doing) from error
                self._sleep(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """This repository's own unit of work: a :class:`Connection` in a write transaction.

        ``with repo.transaction() as tx: repo.enqueue(..., connection=tx)`` commits on normal
        exit and rolls back if the block raises; :meth:`on_commit` callbacks run after commit.
        """
        try:
            with self._begin(write=True) as conn:
                yield conn
        except sa_exc.DBAPIError as error:
            raise self._unavailable(error, "run the transaction") from error

    # -- caller connections ----------------------------------------------------------------------
    def _same_database(self, conn: Connection) -> bool:
        ours, theirs = self.engine.url, conn.engine.url
        if conn.engine is self.engine or conn.engine.pool is self.engine.pool:
            return True
        if conn.dialect.name != self.engine.dialect.name:
            return False
        return (ours.host, ours.port, ours.database) == (theirs.host, theirs.port, theirs.database)

    def _caller_connection(self, connection: Any) -> Connection | None:
        """The Connection to run on for ``connection=`` (None: use our own transaction)."""
        if connection is None:
            return None
        if isinstance(connection, Session):
            conn = connection.connection()
        elif isinstance(connection, Connection):
            conn = connection
        else:
            raise ValidationError(
                "connection",
                f"must be a SQLAlchemy Connection or Session (or repository.transaction()), got {type(connection).__name__}",
            )
        if conn.closed or conn.invalidated:
            raise ValidationError("connection", "that connection is closed or invalidated")
        if not self._same_database(conn):
            raise ValidationError(
                "connection",
                f"is on {conn.engine.url.render_as_string(hide_password=True)}, not on this repository's database "
                f"{self.safe_url}",
            )
        return conn

    def _on_caller(self, conn: Connection, doing: str, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in the caller's transaction: no retries (the transaction is theirs)."""
        try:
            return work(conn)
        except sa_exc.DBAPIError as error:
            raise self._unavailable(error, doing) from error

    def on_commit(self, connection: Any, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``connection``'s transaction commits; never after a rollback.

        ``connection`` is None (run at once), a Session, a Connection, or the handle of
        :meth:`transaction`.  A callback that raises is logged and ignored.
        """
        if connection is None:
            run_safely(callback)
        elif isinstance(connection, Session):
            on_session_commit(connection, callback)
        elif isinstance(connection, Connection):
            on_connection_commit(connection, callback)
        else:
            raise ValidationError(
                "connection", f"must be a SQLAlchemy Connection or Session, got {type(connection).__name__}"
            )

    # -- enqueue ---------------------------------------------------------------------------------
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
        conn = self._caller_connection(connection)
        if conn is not None:
            return self._on_caller(conn, "enqueue a job", lambda c: self._insert_one(c, new_job, now))
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
        conn = self._caller_connection(connection)
        if conn is not None:
            return self._on_caller(conn, "enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        if all(n.idempotency_key is not None for n in new_jobs):
            return self._write("enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        try:
            return self._write_once("enqueue jobs", lambda c: self._insert_many(c, new_jobs, now))
        except _UnknownOutcome as unknown:
            raise StorageUnavailable(
                f"{self.safe_url}: the connection was lost while enqueueing {len(new_jobs)} jobs; they may or may not "
                "have been stored (give each an idempotency key to make enqueue safe to retry)"
            ) from unknown.cause

    # -- reading ---------------------------------------------------------------------------------
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

    def count_by_status(self, *, queue: str | None = None) -> dict[JobStatus, int]:
        """How many jobs are in each status (every status present, zero included)."""
        t = self.table
        stmt = select(t.c.status, func.count()).group_by(t.c.status)
        if queue is not None:
            stmt = stmt.where(t.c.queue == queue)
        counts = {s: 0 for s in JobStatus}
        for status, n in self._read("count jobs", lambda c: list(c.execute(stmt))):
            counts[JobStatus(status)] = int(n)
        return counts

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
                .where(*self._due_filter_params(shape))
                .order_by(*self._lease_order())
                .limit(bindparam("p_limit", type_=Integer()))
            )
        params = {**self._due_params(queues, now), "p_limit": limit}
        return self._read("read due jobs", lambda c: [row_to_job(r) for r in c.execute(stmt, params)])

    # -- leases ----------------------------------------------------------------------------------
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

    def _due_filter_params(self, shape: str) -> list[ColumnElement[bool]]:
        """The due-job predicate with bound parameters ``p_now`` and ``p_queue``/``p_queues``."""
        t = self.table
        conditions = [
            status_is(t.c.status, JobStatus.QUEUED, JobStatus.RETRYING),
            t.c.scheduled_at <= bindparam("p_now", type_=t.c.scheduled_at.type),
            t.c.attempts < t.c.max_attempts,
        ]
        if shape == "one":
            conditions.append(t.c.queue == bindparam("p_queue", type_=t.c.queue.type))
        elif shape == "many":
            conditions.append(t.c.queue.in_(bindparam("p_queues", expanding=True, type_=t.c.queue.type)))
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

    def _lease_rows(
        self, conn: Connection, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int
    ) -> list[Row[Any]]:
        """Lease up to ``limit`` due jobs in one statement; returns the leased rows (any order)."""
        raise NotImplementedError

    def lease(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int = 1
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs in lease order, each under a fresh fencing token.

        Raises StorageUnavailable (never returns "no job" because the store was locked or down).
        """
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        if limit < 1 or (queues is not None and not queues):
            return []
        rows = self._lease_write(queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit)
        return sorted((row_to_job(r) for r in rows), key=lease_order_key)

    def _lease_write(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int
    ) -> list[Row[Any]]:
        return self._write(
            "lease jobs",
            lambda c: self._lease_rows(
                c, queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit
            ),
        )

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        """Lease this job if it is due; else None.  A compare-and-set on its leasable status."""
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
                return row_to_job(row) if row is not None else None
            except _UnknownOutcome:
                # Did our lease land?  The token is ours alone, so the row says so.
                row = self._read("check a lease", lambda c: self._get_row(c, job_id))
                if row is not None and row.lease_token == token:
                    return row_to_job(row)
                if row is None or row.status not in (JobStatus.QUEUED.value, JobStatus.RETRYING.value):
                    return None
                # still leasable: ours did not land; try again with a fresh token
        raise StorageUnavailable(f"{self.safe_url}: could not lease job {job_id}: the connection kept failing")

    # -- fenced writes ---------------------------------------------------------------------------
    def _fenced_statement(self, kind: str) -> Any:
        """The cached ``UPDATE ... WHERE id = :p_id AND status = 'running' AND lease_token = :p_token
        RETURNING *`` of a fenced write of ``kind`` (complete, retry, dead, heartbeat, release)."""
        stmt = self._statements.get(("fenced", kind))
        if stmt is not None:
            return stmt
        t = self.table
        now = bindparam("p_now", type_=t.c.finished_at.type)
        error = bindparam("p_error", type_=t.c.last_error.type)
        retry = t.c.attempts < t.c.max_attempts
        if kind == "complete":
            values = {"status": JobStatus.COMPLETED.value, "finished_at": now, **self._no_lease}
        elif kind == "retry":  # retrying at p_retry_at while attempts are left, else dead (decided on the row)
            values = {
                "status": case((retry, JobStatus.RETRYING.value), else_=JobStatus.DEAD.value),
                "scheduled_at": case(
                    (retry, bindparam("p_retry_at", type_=t.c.scheduled_at.type)), else_=t.c.scheduled_at
                ),
                "finished_at": case((retry, null()), else_=now),
                "last_error": error,
                **self._no_lease,
            }
        elif kind == "dead":
            values = {"status": JobStatus.DEAD.value, "finished_at": now, "last_error": error, **self._no_lease}
        elif kind == "heartbeat":  # never shortens the lease
            expires = bindparam("p_expires", type_=t.c.lease_expires_at.type)
            values = {"lease_expires_at": case((t.c.lease_expires_at > expires, t.c.lease_expires_at), else_=expires)}
        elif kind == "release":  # the attempt is given back
            values = {
                "status": JobStatus.QUEUED.value,
                "attempts": case((t.c.attempts > 0, t.c.attempts - 1), else_=0),
                "scheduled_at": now,
                **self._no_lease,
            }
        else:  # pragma: no cover - programming error
            raise ValueError(kind)
        stmt = (
            update(t)
            .where(
                t.c.id == bindparam("p_id", type_=t.c.id.type),
                status_is(t.c.status, JobStatus.RUNNING),
                t.c.lease_token == bindparam("p_token", type_=t.c.lease_token.type),
            )
            .values(**values)
            .returning(*t.c)
        )
        self._statements[("fenced", kind)] = stmt
        return stmt

    def _fenced(
        self,
        kind: str,
        job_id: int,
        token: str,
        params: dict[str, Any],
        doing: str,
        landed: Callable[[Row[Any]], bool],
    ) -> Job:
        """Run the fenced write of ``kind`` (see :meth:`_fenced_statement`) with ``params``.

        Raises LeaseLost when no row matched.  When the connection is lost and the commit's outcome
        is unknown, the row is read back: still running under ``token`` means the write did not
        land and it is sent again; a row for which ``landed(row)`` holds means it did; anything
        else means someone else moved the job, so LeaseLost.
        """
        stmt = self._fenced_statement(kind)
        params = {"p_id": job_id, "p_token": token, **params}
        for _ in range(self.retry_attempts):
            try:
                row = self._write_once(doing, lambda c: c.execute(stmt, params).first(), single=True)
            except _UnknownOutcome:
                row = self._read("check a write whose commit was interrupted", lambda c: self._get_row(c, job_id))
                if row is None:
                    raise LeaseLost(job_id, token) from None
                if row.status == JobStatus.RUNNING.value and row.lease_token == token:
                    continue  # it did not land; sending it again is safe
                if landed(row):
                    return row_to_job(row)
                raise LeaseLost(job_id, token) from None
            if row is None:
                raise LeaseLost(job_id, token)
            return row_to_job(row)
        raise StorageUnavailable(f"{self.safe_url}: could not {doing}: the connection kept failing")

    _no_lease: ClassVar[dict[str, Any]] = {"lease_token": None, "leased_by": None, "leased_at": None, "lease_expires_at": None}

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: ``completed`` at ``now``.  Raises LeaseLost, StorageUnavailable."""
        now = ensure_utc(now, "now")
        return self._fenced(
            "complete", job_id, token, {"p_now": now}, "complete a job",
            lambda r: r.status == JobStatus.COMPLETED.value and r.finished_at == now,
        )

    def _complete_rows(
        self, conn: Connection, items: Sequence[tuple[int, str]], now: datetime
    ) -> dict[tuple[int, str], Row[Any]]:
        """Fenced completion of each (id, token) in ``items`` in this transaction; the rows written,
        by the (id, token) whose compare-and-set wrote them."""
        stmt = self._fenced_statement("complete")
        written: dict[tuple[int, str], Row[Any]] = {}
        for job_id, token in items:
            row = conn.execute(stmt, {"p_id": job_id, "p_token": token, "p_now": now}).first()
            if row is not None:
                written[(job_id, token)] = row
        return written

    #: Whether :meth:`_complete_rows` is one statement (run as its own transaction where allowed).
    _complete_rows_single: bool = False

    def complete_many(self, items: Sequence[tuple[int, str]], *, now: datetime) -> list[Job | LeaseLost]:
        """Fenced completion of several jobs in one round trip (PostgreSQL) or one transaction (SQLite).

        Each ``(job_id, token)`` is still its own compare-and-set; the result, in input order, is
        the completed :class:`Job` or the :class:`LeaseLost` error for that item (returned, not
        raised, so every caller learns its own outcome).  Lets a worker pool flush the completions
        of several threads at once.  Raises StorageUnavailable when the store stays unreachable.
        """
        now = ensure_utc(now, "now")
        pending = [(int(job_id), str(token)) for job_id, token in items]
        done: dict[tuple[int, str], Job | LeaseLost] = {}
        for _ in range(self.retry_attempts):
            if not pending:
                break
            batch = list(pending)
            try:
                rows = self._write_once(
                    "complete jobs", lambda c: self._complete_rows(c, batch, now), single=self._complete_rows_single  # noqa: B023
                )
                for job_id, token in batch:  # by (id, token): a stale token next to the current one is LeaseLost
                    row = rows.get((job_id, token))
                    done[(job_id, token)] = row_to_job(row) if row is not None else LeaseLost(job_id, token)
                pending = []
            except _UnknownOutcome:
                pending = self._recheck_completions(batch, now, done)
        if pending:
            raise StorageUnavailable(f"{self.safe_url}: could not complete jobs: the connection kept failing")
        return [done[(int(job_id), str(token))] for job_id, token in items]

    def _recheck_completions(
        self, batch: Sequence[tuple[int, str]], now: datetime, done: dict[tuple[int, str], Job | LeaseLost]
    ) -> list[tuple[int, str]]:
        """After a completion write whose commit was interrupted: read the rows of ``batch`` and
        record in ``done`` each item that landed (completed at ``now``: the job) or never can
        (someone else moved the job: LeaseLost); returns the items still running under their
        token (they did not land; sending them again is safe)."""
        ids = [job_id for job_id, _ in batch]
        current = self._read(
            "check interrupted completions",
            lambda c: {int(r.id): r for r in c.execute(select(self.table).where(self.table.c.id.in_(ids)))},
        )
        pending = []
        for job_id, token in batch:
            row = current.get(job_id)
            if row is not None and row.status == JobStatus.RUNNING.value and row.lease_token == token:
                pending.append((job_id, token))  # did not land: send again
            elif row is not None and row.status == JobStatus.COMPLETED.value and row.finished_at == now:
                done[(job_id, token)] = row_to_job(row)
            else:
                done[(job_id, token)] = LeaseLost(job_id, token)
        return pending

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        """Fenced: ``retrying`` at ``retry_at`` if given and attempts are left (decided in SQL on the
        row as written), else ``dead``.  ``error`` is stored sanitized.  Raises LeaseLost."""
        now = ensure_utc(now, "now")
        error = sanitize_text(error)
        if retry_at is None:
            return self._dead(job_id, token, now, error, "fail a job")
        retry_at = ensure_utc(retry_at, "retry_at")
        return self._fenced(
            "retry", job_id, token, {"p_now": now, "p_error": error, "p_retry_at": retry_at}, "record a failure",
            lambda r: r.last_error == error
            and (
                (r.status == JobStatus.RETRYING.value and r.scheduled_at == retry_at)
                or (r.status == JobStatus.DEAD.value and r.finished_at == now)
            ),
        )

    def _dead(self, job_id: int, token: str, now: datetime, error: str, doing: str) -> Job:
        return self._fenced(
            "dead", job_id, token, {"p_now": now, "p_error": error}, doing,
            lambda r: r.status == JobStatus.DEAD.value and r.finished_at == now and r.last_error == error,
        )

    def dead_letter(self, job_id: int, token: str, *, now: datetime, error: str) -> Job:
        """Fenced: ``dead`` at once with ``error`` (sanitized).  Raises LeaseLost."""
        return self._dead(job_id, token, ensure_utc(now, "now"), sanitize_text(error), "dead-letter a job")

    def heartbeat(self, job_id: int, token: str, *, now: datetime, lease_timeout: float) -> Job:
        """Fenced: extend the lease to ``now + lease_timeout`` s (never shortens it).  Raises LeaseLost."""
        now = ensure_utc(now, "now")
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        expires = now + timedelta(seconds=lease_timeout)
        # A heartbeat whose outcome is unknown is re-sent while the lease still holds (repeatable).
        return self._fenced("heartbeat", job_id, token, {"p_expires": expires}, "extend a lease", lambda r: False)

    def release(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: back to ``queued`` due ``now``, the attempt given back, ``last_error`` kept.
        Raises LeaseLost."""
        now = ensure_utc(now, "now")
        return self._fenced(
            "release", job_id, token, {"p_now": now}, "release a job",
            lambda r: r.status == JobStatus.QUEUED.value and r.scheduled_at == now,
        )

    # -- maintenance -----------------------------------------------------------------------------
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
        t = self.table
        reaped: list[Job] = []
        for row in self._expired_rows(conn, now, limit):
            job = row_to_job(row)
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
                .values(**job_state_values(new))
                .returning(*t.c)
            ).first()
            if written is not None:
                reaped.append(row_to_job(written))
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
        return self._write("reap expired leases", lambda c: self._reap_rows(c, now, limit), single=self._reap_rows_single)

    def retry_dead(self, job_id: int, *, now: datetime) -> Job:
        """Manual retry: a dead job back to ``queued`` with attempts 0.  Raises JobNotFound, InvalidTransition."""
        now = ensure_utc(now, "now")
        t = self.table
        stmt = (
            update(t)
            .where(t.c.id == job_id, status_is(t.c.status, JobStatus.DEAD))
            .values(status=JobStatus.QUEUED.value, attempts=0, scheduled_at=now, finished_at=None, **self._no_lease)
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
            if row.status == JobStatus.DEAD.value:
                return self.retry_dead(job_id, now=now)
            if row.status == JobStatus.QUEUED.value and row.attempts == 0 and row.scheduled_at == now:
                return row_to_job(row)
            raise InvalidTransition(job_id, row.status, "retry") from None

    def purge(self, *, older_than: datetime) -> int:
        """Delete completed and dead jobs finished before ``older_than``, in batches of
        :data:`PURGE_BATCH` rows per transaction; returns how many."""
        older_than = ensure_utc(older_than, "older_than")
        t = self.table
        doomed = (
            select(t.c.id)
            .where(t.c.finished_at < older_than, status_is(t.c.status, JobStatus.COMPLETED, JobStatus.DEAD))
            .limit(PURGE_BATCH)
        )
        stmt = delete(t).where(t.c.id.in_(doomed.scalar_subquery()))
        total = 0
        while True:
            n = self._write("purge finished jobs", lambda c: c.execute(stmt).rowcount, single=True)
            total += n
            if n < PURGE_BATCH:
                return total

    def close(self) -> None:
        """Dispose of the connection pool; the repository is unusable afterwards."""
        self._closed = True
        self.engine.dispose()


__all__ = ["SqlAlchemyJobRepository", "status_is"]
