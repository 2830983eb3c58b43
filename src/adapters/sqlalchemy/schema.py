"""The ``tether_jobs``, ``tether_workers`` and ``tether_queues`` tables, their indexes, and the UTC datetime column type.

One table holds every job; ``tether_workers`` holds the worker registry (one row per running worker
pool, see :mod:`tether.domain.workers`: a few rows, read by people, written once per heartbeat
interval per pool, so it has no index beyond its primary key); ``tether_queues`` holds the queue
controls (one row per queue ever paused or limited: a tiny table the lease statement anti-joins
on its primary key, see :mod:`tether.domain.queues`).  Times are stored in one canonical, sortable form per database:

- PostgreSQL: ``timestamptz`` (microsecond precision, compared by the server as instants);
- SQLite: integer microseconds since the Unix epoch (``BIGINT``), so ``ORDER BY`` and ``<=``
  compare instants exactly and no free-form text ever reaches the table.

Indexes (all partial, so they stay as small as the live part of the queue, case C19):

- ``ix_tether_jobs_leasable_queue`` on ``(queue, priority DESC, scheduled_at, id)`` and
  ``ix_tether_jobs_leasable`` on ``(priority DESC, scheduled_at, id)``, both over
  ``status IN ('queued', 'retrying')``: the lease query with and without a queue filter reads
  them in lease order and stops after ``limit`` rows, whatever number of finished rows exist;
- ``ix_tether_jobs_running_expiry`` on ``lease_expires_at`` over ``status = 'running'``: the reaper;
- ``ix_tether_jobs_running_key`` on ``(queue, concurrency_key, lease_expires_at)`` over ``status =
  'running' AND concurrency_key IS NOT NULL``: a per-key limited lease counts the running jobs of
  each key from it alone (an index-only range per key); jobs without a key never enter it;
- ``ix_tether_jobs_finished`` on ``finished_at`` over ``finished_at IS NOT NULL``: purge;
- ``ux_tether_jobs_idempotency_key``, UNIQUE on ``idempotency_key`` over ``idempotency_key IS NOT
  NULL``: a key is stored at most once, and the many jobs without a key cost this index nothing.
  Enqueue names it as the conflict target with the same predicate (:data:`KEYED_PREDICATE`).

Statements test a job's status with :func:`status_is`, which writes the statuses as literals so the
planner can match the partial indexes' predicates.

``history`` holds the attempt history, a JSON array as text (on PostgreSQL and SQLite alike;
:mod:`.history_sql`), NULL until an attempt ends.

This is the table at the head revision of :mod:`.migrations` (the Alembic revisions create it;
``tests/integration/test_migrations.py`` checks that the two agree).  CHECK constraints keep the
state machine's invariants in the database too: a known status, ``0 <= attempts <= max_attempts``,
a lease token present exactly while the job is running, and a cancellation request only on a
running or cancelled job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ColumnElement,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    literal_column,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine
from tether.adapters.sqlalchemy.history_sql import HistoryJson
from tether.domain.job import JobStatus
from tether.domain.timeutil import UTC, ensure_utc, from_micros, to_micros

TABLE_NAME = "tether_jobs"
WORKERS_TABLE_NAME = "tether_workers"
SCHEDULES_TABLE_NAME = "tether_schedules"
QUEUES_TABLE_NAME = "tether_queues"
#: A queue row that sends its jobs off the plain lease path.
RESTRICTED_PREDICATE = "paused OR max_running IS NOT NULL OR rate_limit IS NOT NULL OR max_running_per_key IS NOT NULL"
MAX_RUNNING_CHECK = "max_running IS NULL OR max_running >= 1"
MAX_RUNNING_PER_KEY_CHECK = "max_running_per_key IS NULL OR max_running_per_key >= 1"
RATE_CHECK = "(rate_limit IS NULL) = (rate_period_us IS NULL) AND (rate_limit IS NULL OR (rate_limit >= 1 AND rate_period_us >= 1000))"
LEASABLE_PREDICATE = "status IN ('queued', 'retrying')"
RUNNING_PREDICATE = "status = 'running'"
FINISHED_PREDICATE = "finished_at IS NOT NULL"
KEYED_PREDICATE = "idempotency_key IS NOT NULL"
RUNNING_KEY_PREDICATE = "status = 'running' AND concurrency_key IS NOT NULL"
#: The CHECK constraints' SQL, shared with the Alembic revisions that create them (same text).
STATUS_CHECK = "status IN ('queued', 'running', 'retrying', 'completed', 'dead', 'cancelled')"
CANCEL_REQUEST_CHECK = "cancel_requested_at IS NULL OR status IN ('running', 'cancelled')"
LEASABLE_QUEUE_INDEX = "ix_tether_jobs_leasable_queue"
LEASABLE_INDEX = "ix_tether_jobs_leasable"
RUNNING_INDEX = "ix_tether_jobs_running_expiry"
FINISHED_INDEX = "ix_tether_jobs_finished"
IDEMPOTENCY_KEY_INDEX = "ux_tether_jobs_idempotency_key"
RUNNING_KEY_INDEX = "ix_tether_jobs_running_key"


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime: ``timestamptz`` on PostgreSQL, integer microseconds on SQLite.

    Binding a naive datetime raises :class:`~tether.domain.errors.ValidationError`; values read
    back are always aware UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = ensure_utc(value, "datetime")
        if dialect.name == "sqlite":
            return to_micros(value)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if dialect.name == "sqlite" or isinstance(value, int):
            return from_micros(int(value))
        if value.tzinfo is None:  # a driver that drops the zone: timestamptz values are UTC here
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def build_jobs_table(metadata: MetaData) -> Table:
    """Define ``tether_jobs`` (in ``metadata``'s schema) and its indexes; returns the Table."""
    leasable = text(LEASABLE_PREDICATE)
    table = Table(
        TABLE_NAME,
        metadata,
        # BIGINT identity on PostgreSQL; INTEGER PRIMARY KEY AUTOINCREMENT (the rowid, never
        # reused after purge) on SQLite.
        Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
        Column("job_type", String(200), nullable=False),
        Column("queue", String(64), nullable=False),
        Column("payload", Text(), nullable=False),
        Column("priority", Integer(), nullable=False),
        Column("status", String(16), nullable=False),
        Column("attempts", Integer(), nullable=False),
        Column("max_attempts", Integer(), nullable=False),
        Column("scheduled_at", UtcDateTime(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("idempotency_key", String(255), nullable=True),
        Column("lease_token", String(64), nullable=True),
        Column("leased_by", String(200), nullable=True),
        Column("leased_at", UtcDateTime(), nullable=True),
        Column("lease_expires_at", UtcDateTime(), nullable=True),
        Column("last_error", Text(), nullable=True),
        Column("finished_at", UtcDateTime(), nullable=True),
        Column("cancel_requested_at", UtcDateTime(), nullable=True),
        Column("history", HistoryJson(), nullable=True),
        Column("headers", Text(), nullable=True),
        Column("concurrency_key", String(255), nullable=True),
        CheckConstraint(STATUS_CHECK, name="ck_tether_jobs_status"),
        CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="ck_tether_jobs_attempts"),
        CheckConstraint(
            "(status = 'running') = (lease_token IS NOT NULL)", name="ck_tether_jobs_lease_token"
        ),
        CheckConstraint(CANCEL_REQUEST_CHECK, name="ck_tether_jobs_cancel_request"),
        sqlite_autoincrement=True,
    )
    c = table.c
    Index(
        LEASABLE_QUEUE_INDEX,
        c.queue,
        c.priority.desc(),
        c.scheduled_at,
        c.id,
        postgresql_where=leasable,
        postgresql_include=["status"],  # the queue summaries count by status from the index alone
        sqlite_where=leasable,
    )
    Index(
        LEASABLE_INDEX,
        c.priority.desc(),
        c.scheduled_at,
        c.id,
        postgresql_where=leasable,
        sqlite_where=leasable,
    )
    Index(  # INCLUDE queue: the running jobs per queue from the index alone
        RUNNING_INDEX, c.lease_expires_at, postgresql_where=text(RUNNING_PREDICATE), postgresql_include=["queue"],
        sqlite_where=text(RUNNING_PREDICATE),
    )
    Index(
        RUNNING_KEY_INDEX, c.queue, c.concurrency_key, c.lease_expires_at,
        postgresql_where=text(RUNNING_KEY_PREDICATE), sqlite_where=text(RUNNING_KEY_PREDICATE),
    )
    Index(
        FINISHED_INDEX, c.finished_at, postgresql_where=text(FINISHED_PREDICATE), sqlite_where=text(FINISHED_PREDICATE)
    )
    Index(
        IDEMPOTENCY_KEY_INDEX,
        c.idempotency_key,
        unique=True,
        postgresql_where=text(KEYED_PREDICATE),
        sqlite_where=text(KEYED_PREDICATE),
    )
    return table


def build_workers_table(metadata: MetaData) -> Table:
    """Define ``tether_workers`` (in ``metadata``'s schema), the worker registry; returns the Table.

    ``queues`` and ``job_types`` are JSON arrays of names (``queues`` NULL: every queue)."""
    return Table(
        WORKERS_TABLE_NAME,
        metadata,
        Column("worker_id", String(200), primary_key=True),
        Column("host", String(255), nullable=False),
        Column("pid", Integer(), nullable=False),
        Column("queues", Text(), nullable=True),
        Column("job_types", Text(), nullable=False),
        Column("concurrency", Integer(), nullable=False),
        Column("version", String(64), nullable=False),
        Column("dispatcher", String(64), nullable=False),
        Column("heartbeat_interval", Float(), nullable=False),
        Column("started_at", UtcDateTime(), nullable=False),
        Column("last_seen_at", UtcDateTime(), nullable=False),
    )


def build_schedules_table(metadata: MetaData) -> Table:
    """Define ``tether_schedules`` (in ``metadata``'s schema), one row per periodic schedule; returns the Table.

    ``last_tick_at`` is the schedule's tick mark, advanced by compare-and-set with each tick's
    enqueue; ``last_job_id`` names that tick's job with no foreign key (purge deletes jobs and
    never touches this table)."""
    return Table(
        SCHEDULES_TABLE_NAME,
        metadata,
        Column("name", String(200), primary_key=True),
        Column("job_type", String(200), nullable=False),
        Column("queue", String(64), nullable=True),
        Column("spec", Text(), nullable=False),
        Column("tz", String(64), nullable=False),
        Column("fingerprint", String(64), nullable=False),
        Column("next_tick_at", UtcDateTime(), nullable=True),
        Column("declared_by", String(200), nullable=False),
        Column("declared_at", UtcDateTime(), nullable=False),
        Column("declared_until", UtcDateTime(), nullable=False),
        Column("last_tick_at", UtcDateTime(), nullable=True),
        Column("last_job_id", BigInteger(), nullable=True),
    )


def build_queues_table(metadata: MetaData) -> Table:
    """Define ``tether_queues`` (in ``metadata``'s schema), the queue controls; returns the Table.

    ``paused`` stops leases of the queue; ``max_running`` (NULL: no limit) caps its running jobs;
    ``rate_limit`` starts per ``rate_period_us`` microseconds (both NULL: no rate limit), counted
    in ``window_starts`` for the window starting at ``window_start_us`` (microseconds since the
    Unix epoch, a multiple of the period); ``max_running_per_key`` (NULL: none) caps its running
    jobs that share a ``concurrency_key``."""
    return Table(
        QUEUES_TABLE_NAME,
        metadata,
        Column("name", String(64), primary_key=True),
        Column("paused", Boolean(create_constraint=False), nullable=False),
        Column("max_running", Integer(), nullable=True),
        Column("updated_at", UtcDateTime(), nullable=False),
        Column("rate_limit", Integer(), nullable=True),
        Column("rate_period_us", BigInteger(), nullable=True),
        Column("window_start_us", BigInteger(), nullable=True),
        Column("window_starts", Integer(), nullable=False),
        Column("max_running_per_key", Integer(), nullable=True),
        CheckConstraint(MAX_RUNNING_CHECK, name="ck_tether_queues_max_running"),
        CheckConstraint(RATE_CHECK, name="ck_tether_queues_rate"),
        CheckConstraint(MAX_RUNNING_PER_KEY_CHECK, name="ck_tether_queues_max_running_per_key"),
    )


def build_tables(metadata: MetaData) -> tuple[Table, Table, Table, Table]:
    """Define every Tether table in ``metadata``: ``(tether_jobs, tether_workers, tether_schedules,
    tether_queues)``."""
    return (
        build_jobs_table(metadata),
        build_workers_table(metadata),
        build_schedules_table(metadata),
        build_queues_table(metadata),
    )


def status_is(column: Any, *statuses: JobStatus) -> ColumnElement[bool]:
    """``status = 'x'`` / ``status IN ('x', 'y')`` with the values inlined as SQL literals.

    Inlined on purpose: a partial index is only usable when the planner can see that the query's
    predicate implies the index's, which it cannot for bound parameters in a generic plan.
    """
    literals: list[Any] = [literal_column(f"'{s.value}'") for s in statuses]
    if len(literals) == 1:
        return column == literals[0]  # type: ignore[no-any-return]
    return column.in_(literals)  # type: ignore[no-any-return]


__all__ = [
    "CANCEL_REQUEST_CHECK",
    "FINISHED_INDEX",
    "IDEMPOTENCY_KEY_INDEX",
    "KEYED_PREDICATE",
    "LEASABLE_INDEX",
    "LEASABLE_QUEUE_INDEX",
    "MAX_RUNNING_CHECK",
    "MAX_RUNNING_PER_KEY_CHECK",
    "QUEUES_TABLE_NAME",
    "RATE_CHECK",
    "RESTRICTED_PREDICATE",
    "RUNNING_INDEX",
    "RUNNING_KEY_INDEX",
    "RUNNING_KEY_PREDICATE",
    "SCHEDULES_TABLE_NAME",
    "STATUS_CHECK",
    "TABLE_NAME",
    "WORKERS_TABLE_NAME",
    "UtcDateTime",
    "build_jobs_table",
    "build_queues_table",
    "build_schedules_table",
    "build_tables",
    "build_workers_table",
    "status_is",
]
