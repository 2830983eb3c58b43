"""``SqlAlchemyJobRepository``: the job repository on SQLAlchemy 2 Core, shared by SQLite and PostgreSQL.

The class users construct (through :func:`tether.adapters.sqlalchemy.open_repository`) is composed
of one part per concern, each in its own module:

- :mod:`.transactions`: the state the parts share, the repository's own transactions, retries of transient
  errors, writes whose outcome is unknown, joining the caller's transaction, ``on_commit``;
- :mod:`.enqueue`: ``enqueue`` and ``enqueue_many``, idempotency keys;
- :mod:`.leases`: ``lease``, ``lease_job``, ``due_jobs`` (due jobs in lease order);
- :mod:`.fenced_writes`: ``complete``, ``complete_many``, ``fail``, ``dead_letter``, ``heartbeat``,
  ``release``, ``snooze``: compare-and-set writes on a running job under its lease token;
- :mod:`.maintenance`: ``reap``, ``retry_dead``, ``purge``;
- :mod:`.cancellation`: ``cancel`` and ``cancel_many`` (an operator's cancel);
- :mod:`.queue_controls`: pause and running limits on ``tether_queues``, the limited-queue lease path;
- :mod:`.reads`: ``get``, ``find_by_key``, ``list_jobs``, ``count_by_status``;
- :mod:`.overview`: the dashboard's bounded reads (``browse_jobs``, ``status_totals``,
  ``queue_summaries``, ``finished_per_minute``);
- :mod:`.worker_registry`: the worker registry (``record_worker``, ``list_workers``, ...) on
  ``tether_workers``;
- :mod:`.schedules`: the schedule store (``record_schedule``, ``list_schedules``, ``enqueue_tick``)
  on ``tether_schedules``;

and this module: construction, the schema (create, check, version, drop) and ``close``.

Every rule of :mod:`tether.domain.transitions` is applied as one compare-and-set statement.  Every
stored time comes from the ``now`` argument (the injected clock), never from the database server's
clock: one time source for every stored time and comparison.  Payloads are stored as the canonical
JSON text the domain produced and come back byte-identical.

Subclasses (:mod:`.sqlite`, :mod:`.postgres`) supply the engine set-up, the lease statement and
the retry policy for transient storage errors.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, inspect
from sqlalchemy.engine import Connection, Engine
from tether.adapters.sqlalchemy import migrations
from tether.adapters.sqlalchemy.cancellation import SqlCancellation
from tether.adapters.sqlalchemy.driver_connections import DriverConnections
from tether.adapters.sqlalchemy.enqueue import SqlEnqueue
from tether.adapters.sqlalchemy.fenced_writes import SqlFencedWrites
from tether.adapters.sqlalchemy.leases import SqlLeases
from tether.adapters.sqlalchemy.maintenance import SqlMaintenance
from tether.adapters.sqlalchemy.overview import SqlOverview
from tether.adapters.sqlalchemy.reads import SqlReads
from tether.adapters.sqlalchemy.row_faults import SkippedRows
from tether.adapters.sqlalchemy.schedules import SqlSchedules
from tether.adapters.sqlalchemy.schema import (
    build_jobs_table,
    build_queues_table,
    build_schedules_table,
    build_workers_table,
    status_is,
)
from tether.adapters.sqlalchemy.worker_registry import SqlWorkerRegistry
from tether.domain.errors import ConfigurationError
from tether.ports.repository import JobRepository
from tether.ports.schedule_store import ScheduleStore
from tether.ports.worker_registry import WorkerRegistry


class SqlAlchemyJobRepository(
    SqlSchedules,
    SqlEnqueue,
    SqlLeases,
    SqlFencedWrites,
    SqlMaintenance,
    SqlCancellation,
    SqlReads,
    SqlOverview,
    SqlWorkerRegistry,
    JobRepository,
    WorkerRegistry,
    ScheduleStore,
):
    """A :class:`~tether.ports.repository.JobRepository` (and
    :class:`~tether.ports.worker_registry.WorkerRegistry`) on a SQLAlchemy :class:`Engine`.

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
        schema: the PostgreSQL schema holding ``tether_jobs`` (None: the default search path).
        table: the ``tether_jobs`` :class:`Table` bound to this repository's schema.
        workers_table: the ``tether_workers`` :class:`Table` (the worker registry), same schema.
        schedules_table: the ``tether_schedules`` :class:`Table` (periodic schedules), same schema.
        queues_table: the ``tether_queues`` :class:`Table` (queue controls), same schema.
    """

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        self.engine = engine
        self.schema = schema
        self.metadata = MetaData(schema=schema)
        self.table = build_jobs_table(self.metadata)
        self.workers_table = build_workers_table(self.metadata)
        self.schedules_table = build_schedules_table(self.metadata)
        self.queues_table = build_queues_table(self.metadata)
        self._serial = None  # set for single-connection engines
        self._statements: dict[Any, Any] = {}  # hot-path statements built once, run with parameters
        self._skipped = SkippedRows()  # jobs whose rows failed a batch alone, left out of batches for a while
        self._closed = False
        table_name = self.table.name if schema is None else f'"{schema}".{self.table.name}'
        self._drivers = DriverConnections(engine, table_name=table_name, sqlite_path=getattr(self, "path", None))

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
        """Drop ``tether_jobs``, ``tether_workers``, ``tether_schedules``, ``tether_queues`` and the version tables (tests and tear-down only: every job is lost)."""

        def drop(conn: Connection) -> None:
            self.metadata.drop_all(conn, checkfirst=True)
            migrations.drop_version_tables(conn, self.schema)

        with self._guard(), self.engine.begin() as conn:
            drop(conn)

    def schema_exists(self) -> bool:
        """True when ``tether_jobs`` exists in this repository's schema."""
        with self._guard(), self.engine.connect() as conn:
            return inspect(conn).has_table(self.table.name, schema=self.schema)

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Dispose of the connection pool; the repository is unusable afterwards."""
        self._closed = True
        self._drivers.close()
        self.engine.dispose()


__all__ = ["SqlAlchemyJobRepository", "status_is"]
