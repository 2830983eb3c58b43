"""Alembic revisions of the SQL schema, on real PostgreSQL (a schema of this run's own) and SQLite files.

Expected: an empty database is brought to the head; a database of the runner before Alembic
(``tether_schema_version`` = 1, or a bare ``tether_jobs``) is stamped 0001 and upgraded with its
jobs intact; a second run changes nothing; two concurrent upgrades of one PostgreSQL schema both
succeed and apply each revision once; a failing revision leaves nothing behind; a revision this
Tether does not ship is refused naming the URL without its password; and the head schema equals
the SQLAlchemy table definition (Alembic's autogenerate diff is empty, and the reflected columns,
constraints and partial indexes are identical to ``metadata.create_all``'s, for ``tether_jobs`` and
``tether_workers`` and ``tether_schedules`` alike).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, create_engine, insert, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from tether.adapters.sqlalchemy import migrations, open_repository
from tether.adapters.sqlalchemy.mapping import inserted_job, new_job_values
from tether.adapters.sqlalchemy.migrations import HEAD_REVISION, SCHEMA_VERSION, VERSION_TABLE
from tether.adapters.sqlalchemy.schema import build_tables
from tether.domain.errors import ConfigurationError, ValidationError
from tether.domain.job import Job, JobStatus, NewJob
from tether.domain.validation import prepare_job

from tests.conftest import DATABASE_URL
from tests.integration.schema_v1 import create_v1_schema
from tests.postgres_fixtures import schema_name, scratch_schema

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def new_job(n: int, key: str | None = None) -> NewJob:
    return prepare_job("reports.build", {"n": n}, now=NOW, idempotency_key=key, run_at=NOW + timedelta(seconds=n))


@dataclass
class Target:
    """One database to migrate: ``url`` (as a user gives it), ``schema`` (PostgreSQL), a raw engine."""

    kind: str
    url: str
    schema: str | None
    engine: Engine

    def open(self, **options: Any) -> Any:
        return open_repository(self.url, schema=self.schema, **options)

    def qualified(self, table: str) -> str:
        return f'"{self.schema}".{table}' if self.schema else table

    def revisions(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(text(f"SELECT version_num FROM {self.qualified(VERSION_TABLE)}")).scalars())


def _pg_target(suffix: str) -> Iterator[Target]:
    schema = schema_name(f"mig_{suffix}")
    with scratch_schema(schema) as engine:
        yield Target("postgres", DATABASE_URL, schema, engine)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        engine = create_engine(url)
        yield Target("sqlite", url, None, engine)
        engine.dispose()
    else:
        yield from _pg_target(request.node.name.split("[")[0][-20:])


def store_old(repo: Any, new: NewJob) -> Job:
    """Store ``new`` (queued) in a schema of an older revision: only the columns every revision has
    (today's ``repo.enqueue`` would ask for columns it lacks); the job as the head reads it."""
    with repo.engine.begin() as conn:
        values = {k: v for k, v in new_job_values(new, NOW).items() if k not in ("headers", "concurrency_key")}  # 0007, 0009
        job_id = conn.execute(insert(repo.table).values(**values).returning(repo.table.c.id)).scalar_one()
    return inserted_job(new, job_id, NOW)


# -- what a schema looks like ----------------------------------------------------------------------
def describe(conn: Connection, schema: str | None) -> dict[str, Any]:
    """The reflected shapes of Tether's tables, by name (see :func:`describe_table`)."""
    return {
        table: describe_table(conn, schema, table)
        for table in ("tether_jobs", "tether_workers", "tether_schedules", "tether_queues")
    }


def describe_table(conn: Connection, schema: str | None, table: str) -> dict[str, Any]:
    """The reflected shape of ``table``: columns, keys, CHECKs, indexes with their predicates."""
    inspector = inspect(conn)

    def clean(value: Any) -> str:
        return re.sub(rf'"?{schema}"?\.', "", str(value)) if schema else str(value)

    shape: dict[str, Any] = {
        "columns": [
            (c["name"], str(c["type"]), c["nullable"], clean(c.get("default")), c.get("autoincrement"))
            for c in inspector.get_columns(table, schema=schema)
        ],
        "primary_key": inspector.get_pk_constraint(table, schema=schema)["constrained_columns"],
        "unique": sorted((u["name"], tuple(u["column_names"])) for u in inspector.get_unique_constraints(table, schema=schema)),
        "checks": sorted((c["name"], c["sqltext"]) for c in inspector.get_check_constraints(table, schema=schema)),
        "indexes": sorted(
            (
                i["name"],
                tuple(str(c) for c in i["column_names"]),
                tuple(str(e) for e in i.get("expressions") or ()),
                bool(i["unique"]),
                repr(sorted((k, clean(v)) for k, v in (i.get("dialect_options") or {}).items())),
                repr(sorted((i.get("column_sorting") or {}).items())),
            )
            for i in inspector.get_indexes(table, schema=schema)
        ),
    }
    if conn.dialect.name == "sqlite":
        sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).scalar_one()
        shape["autoincrement"] = "AUTOINCREMENT" in sql
        # SQLite does not reflect an index column's DESC: compare the CREATE INDEX statements too
        shape["index_sql"] = sorted(
            " ".join(row[0].split())
            for row in conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,)
            )
        )
    return shape


def head_shape_from_metadata(target: Target, tmp_path: Path) -> dict[str, Any]:
    """``describe`` of ``metadata.create_all`` (the SQLAlchemy table definition) in a fresh database."""
    if target.kind == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
        schema = None
    else:
        engine, schema = target.engine, f"{target.schema}_md"
    try:
        with engine.begin() as conn:
            if schema:
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            metadata = MetaData(schema=schema)
            build_tables(metadata)
            metadata.create_all(conn)
        with engine.connect() as conn:
            return describe(conn, schema)
    finally:
        if schema:
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        else:
            engine.dispose()


def assert_at_head(target: Target, tmp_path: Path) -> None:
    assert target.revisions() == [HEAD_REVISION]
    with target.engine.connect() as conn:
        migrated = describe(conn, target.schema)
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "version_table_schema": target.schema,
                "include_schemas": target.schema is not None,
                "include_name": lambda name, type_, _: (
                    name == target.schema if type_ == "schema" else type_ != "table" or migrations.is_tether_table(name)
                ),
            },
        )
        metadata = build_tables(MetaData(schema=target.schema))[0].metadata
        assert compare_metadata(context, metadata) == []
    assert migrated == head_shape_from_metadata(target, tmp_path)
    jobs = migrated["tether_jobs"]
    assert ("ux_tether_jobs_idempotency_key", ("idempotency_key",)) in [(i[0], i[1]) for i in jobs["indexes"]]
    assert jobs["unique"] == []
    workers = migrated["tether_workers"]
    assert workers["primary_key"] == ["worker_id"] and workers["indexes"] == []
    schedules = migrated["tether_schedules"]
    assert schedules["primary_key"] == ["name"] and schedules["indexes"] == []
    controls = migrated["tether_queues"]
    assert controls["primary_key"] == ["name"] and controls["indexes"] == []


# -- revisions ---------------------------------------------------------------------------------------
def test_the_shipped_revisions_are_numbered_and_the_head_is_schema_version() -> None:
    revisions = migrations.shipped_revisions()
    assert revisions == [migrations.revision_id(n) for n in range(1, SCHEMA_VERSION + 1)]
    assert revisions[-1] == HEAD_REVISION == "0010"
    assert (migrations.SCRIPT_LOCATION / "script.py.mako").is_file()


def test_empty_database_to_head_then_a_rerun_changes_nothing(target: Target, tmp_path: Path) -> None:
    repo = target.open()
    try:
        assert repo.schema_version() == SCHEMA_VERSION
        assert_at_head(target, tmp_path)
        job = repo.enqueue(new_job(1, key="k-1"), now=NOW).job
        with target.engine.connect() as conn:
            before = describe(conn, target.schema)
        repo.create_schema()
        repo.create_schema()
        with target.engine.connect() as conn:
            assert describe(conn, target.schema) == before
        assert target.revisions() == [HEAD_REVISION]
        assert repo.get(job.id) == job
    finally:
        repo.close()
    again = target.open(create=False)  # check_schema passes
    assert again.schema_version() == SCHEMA_VERSION
    again.close()


@pytest.mark.parametrize("legacy_table", [True, False], ids=["tether_schema_version", "bare_table"])
def test_a_database_of_the_runner_before_alembic_is_stamped_and_upgraded(
    target: Target, tmp_path: Path, legacy_table: bool
) -> None:
    with target.engine.begin() as conn:
        create_v1_schema(conn, target.schema, version_table=legacy_table)
    old = target.open(create=False, check=False)  # no upgrade yet
    try:
        assert old.schema_version() == 1
        with pytest.raises(ConfigurationError) as info:
            old.check_schema()
        assert f"the Tether schema is version 1, this Tether needs {SCHEMA_VERSION}" in str(info.value)
        assert "tether db upgrade" in str(info.value)
        stored = [store_old(old, new_job(n, key=f"key-{n}" if n % 2 else None)) for n in range(6)]
        purged_id = store_old(old, new_job(99)).id
        with old.engine.begin() as conn:  # a purged job: its id must never be handed out again
            conn.execute(old.table.delete().where(old.table.c.id == purged_id))
    finally:
        old.close()

    repo = target.open()  # create=True upgrades
    try:
        assert repo.schema_version() == SCHEMA_VERSION
        assert_at_head(target, tmp_path)
        assert [repo.get(job.id) for job in stored] == stored
        again = repo.enqueue(new_job(1, key="key-1"), now=NOW)
        assert (again.created, again.job) == (False, stored[1])
        fresh = repo.enqueue(new_job(7), now=NOW).job
        assert fresh.id > purged_id
    finally:
        repo.close()
    if legacy_table:  # a Tether from before Alembic would now read "newer" and refuse
        with target.engine.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT version FROM {target.qualified('tether_schema_version')}").all() == [
                (SCHEMA_VERSION,)
            ]


def test_an_upgrade_from_0002_keeps_every_row_and_admits_cancellation(target: Target, tmp_path: Path) -> None:
    from alembic import command

    with target.engine.begin() as conn:
        if target.schema:
            conn.exec_driver_sql(f'CREATE SCHEMA "{target.schema}"')
        command.upgrade(migrations.alembic_config(target.schema, connection=conn), "0002")
    old = target.open(create=False, check=False)  # no upgrade yet
    table = old.table
    older_columns = [c for c in table.c if c.name not in ("cancel_requested_at", "history", "headers", "concurrency_key")]
    try:
        assert old.schema_version() == 2
        stored = [store_old(old, new_job(n, key=f"key-{n}" if n % 2 else None)) for n in range(5)]
        purged_id = store_old(old, new_job(99)).id
        running, dead, completed = stored[1].id, stored[2].id, stored[3].id
        with old.engine.begin() as conn:  # rows in every kind of state, as 0002 stored them
            conn.execute(table.update().where(table.c.id == running).values(
                status="running", attempts=1, lease_token="a" * 32, leased_by="w-1", leased_at=NOW,
                lease_expires_at=NOW + timedelta(minutes=15)))
            conn.execute(table.update().where(table.c.id == dead).values(
                status="dead", attempts=1, last_error="ValueError: x", finished_at=NOW))
            conn.execute(table.update().where(table.c.id == completed).values(status="completed", finished_at=NOW))
            conn.execute(table.delete().where(table.c.id == purged_id))
            before = conn.execute(table.select().with_only_columns(*older_columns).order_by(table.c.id)).all()
    finally:
        old.close()

    repo = target.open()  # create=True upgrades
    try:
        assert repo.schema_version() == SCHEMA_VERSION == 10
        assert_at_head(target, tmp_path)
        with repo.engine.connect() as conn:
            after = conn.execute(table.select().with_only_columns(*older_columns).order_by(table.c.id)).all()
        assert after == before and len(after) == 5
        assert all(repo.get(row.id).cancel_requested_at is None for row in after)
        assert all(repo.get(row.id).headers_json is None for row in after)  # 0007: no headers on old rows
        assert repo.get(running).lease_token == "a" * 32
        later = NOW + timedelta(seconds=5)
        assert repo.cancel(running, now=later).cancel_requested_at == later  # the new column and CHECKs work
        assert repo.cancel(stored[0].id, now=later).status is JobStatus.CANCELLED
        assert repo.enqueue(new_job(7), now=NOW).job.id > purged_id
        traced = repo.enqueue(attrs.evolve(new_job(8), headers_json='{"traceparent":"00-a-b-01"}'), now=NOW).job
        assert repo.get(traced.id).headers == {"traceparent": "00-a-b-01"}
    finally:
        repo.close()


def test_an_upgrade_from_0004_adds_an_empty_history_that_the_next_outcome_fills(target: Target, tmp_path: Path) -> None:
    """Rows written before 0006 read with an empty history (the column is NULL, nothing was
    rewritten), and a job running across the upgrade records its attempt when it ends."""
    from alembic import command

    with target.engine.begin() as conn:
        if target.schema:
            conn.exec_driver_sql(f'CREATE SCHEMA "{target.schema}"')
        command.upgrade(migrations.alembic_config(target.schema, connection=conn), "0004")
    old = target.open(create=False, check=False)
    table = old.table
    older_columns = [c for c in table.c if c.name not in ("history", "headers", "concurrency_key")]
    try:
        assert old.schema_version() == 4
        queued, running = (store_old(old, new_job(n)) for n in range(2))
        with old.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == running.id).values(
                status="running", attempts=1, lease_token="b" * 32, leased_by="w-1", leased_at=NOW,
                lease_expires_at=NOW + timedelta(minutes=15)))
            before = conn.execute(table.select().with_only_columns(*older_columns).order_by(table.c.id)).all()
    finally:
        old.close()

    repo = target.open()
    try:
        assert repo.schema_version() == SCHEMA_VERSION
        assert_at_head(target, tmp_path)
        with repo.engine.connect() as conn:
            after = conn.execute(table.select().with_only_columns(*older_columns).order_by(table.c.id)).all()
            assert conn.execute(text(f"SELECT count(*) FROM {target.qualified('tether_jobs')} WHERE history IS NULL")).scalar() == 2
        assert after == before
        assert repo.get(queued.id).history == () and repo.get(running.id).history == ()
        done = repo.complete(running.id, "b" * 32, now=NOW + timedelta(seconds=3))
        assert [(a.number, a.worker_id, a.started_at, a.ended_at, a.outcome.value, a.error) for a in done.history] == [
            (1, "w-1", NOW, NOW + timedelta(seconds=3), "completed", None)]
    finally:
        repo.close()


def test_an_upgrade_from_0008_keeps_queue_controls_and_admits_per_key_limits(target: Target, tmp_path: Path) -> None:
    """0009 adds ``concurrency_key`` (NULL on old rows) and ``max_running_per_key`` (the SQLite
    rebuild of ``tether_queues`` keeps every stored control), and the per-key limit then holds."""
    from alembic import command

    with target.engine.begin() as conn:
        if target.schema:
            conn.exec_driver_sql(f'CREATE SCHEMA "{target.schema}"')
        command.upgrade(migrations.alembic_config(target.schema, connection=conn), "0008")
    old = target.open(create=False, check=False)
    try:
        assert old.schema_version() == 8
        queued = store_old(old, new_job(1))
        paused, updated = ("true", "now()") if target.kind == "postgres" else ("1", "1")
        with old.engine.begin() as conn:  # a queue row as 0008 stored it
            conn.exec_driver_sql(
                f"INSERT INTO {target.qualified('tether_queues')} (name, paused, max_running, updated_at, rate_limit, "
                f"rate_period_us, window_start_us, window_starts) VALUES ('api', {paused}, 3, {updated}, 10, 60000000, NULL, 0)"
            )
    finally:
        old.close()

    repo = target.open()
    try:
        assert repo.schema_version() == SCHEMA_VERSION
        assert_at_head(target, tmp_path)
        [state] = repo.queue_states()
        assert (state.name, state.paused, state.max_running, state.rate_limit, state.max_running_per_key) == (
            "api", True, 3, 10, None)
        assert repo.get(queued.id).concurrency_key is None
        limited = repo.set_queue_key_limit("work", 1, now=NOW)
        assert limited.max_running_per_key == 1
        for n in range(2):
            repo.enqueue(attrs.evolve(new_job(10 + n), queue="work", scheduled_at=NOW, concurrency_key="c-1"), now=NOW)
        leased = repo.lease(queues=["work"], worker_id="w-1", now=NOW, lease_timeout=30, limit=5)
        assert [j.concurrency_key for j in leased] == ["c-1"]
    finally:
        repo.close()


def test_a_revision_this_tether_does_not_ship_is_refused_and_left_alone(target: Target) -> None:
    target.open().close()
    with target.engine.begin() as conn:
        conn.execute(text(f"UPDATE {target.qualified(VERSION_TABLE)} SET version_num = '0099'"))
    url = target.url
    if target.kind == "postgres":  # trust auth ignores the password: it must still never be shown
        url = make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
    for create in (True, False):
        with pytest.raises(ConfigurationError) as info:
            open_repository(url, schema=target.schema, create=create)
        message = str(info.value)
        assert f"the Tether schema is version 99, newer than this Tether's {SCHEMA_VERSION}" in message
        assert "pip install -U tether-jobs" in message
        assert "s3cret-pw" not in message and make_url(url).render_as_string(hide_password=True) in message
    assert target.revisions() == ["0099"]

    with target.engine.begin() as conn:
        conn.execute(text(f"UPDATE {target.qualified(VERSION_TABLE)} SET version_num = 'ae1027a6acf'"))
    with pytest.raises(ConfigurationError) as info:
        open_repository(target.url, schema=target.schema)
    assert "holds revision 'ae1027a6acf', which is not a Tether schema revision" in str(info.value)
    assert target.revisions() == ["ae1027a6acf"]


def test_offline_sql_names_every_statement_of_the_upgrade() -> None:
    pg = migrations.upgrade_sql("postgresql", "app_jobs")
    assert "CREATE TABLE app_jobs.tether_jobs" in pg
    assert "CREATE UNIQUE INDEX ux_tether_jobs_idempotency_key ON app_jobs.tether_jobs (idempotency_key) " \
           "WHERE idempotency_key IS NOT NULL" in pg
    assert "ALTER TABLE app_jobs.tether_jobs DROP CONSTRAINT uq_tether_jobs_idempotency_key" in pg
    assert "INSERT INTO app_jobs.tether_alembic_version (version_num) VALUES ('0001')" in pg
    only_new = migrations.upgrade_sql("postgresql", None, from_version=1)
    assert "CREATE TABLE tether_jobs" not in only_new and "UPDATE tether_alembic_version SET version_num='0002'" in only_new
    assert "CREATE TABLE tether_workers" in only_new and "UPDATE tether_alembic_version SET version_num='0003'" in only_new
    assert "UPDATE tether_alembic_version SET version_num='0004'" in only_new
    assert "CREATE TABLE tether_schedules" in only_new and "UPDATE tether_alembic_version SET version_num='0005'" in only_new
    assert "ALTER TABLE tether_jobs ADD COLUMN history TEXT" in only_new
    assert "UPDATE tether_alembic_version SET version_num='0006'" in only_new
    assert "ALTER TABLE tether_jobs ADD COLUMN headers TEXT" in only_new
    assert "UPDATE tether_alembic_version SET version_num='0007'" in only_new
    assert "CREATE TABLE tether_queues" in only_new and "UPDATE tether_alembic_version SET version_num='0008'" in only_new
    assert "ALTER TABLE tether_jobs ADD COLUMN concurrency_key VARCHAR(255)" in only_new
    assert "ALTER TABLE tether_queues ADD COLUMN max_running_per_key INTEGER" in only_new
    assert "CREATE INDEX ix_tether_jobs_running_key ON tether_jobs (queue, concurrency_key, lease_expires_at) " \
           "WHERE status = 'running' AND concurrency_key IS NOT NULL" in only_new
    assert "UPDATE tether_alembic_version SET version_num='0009'" in only_new
    assert "CREATE INDEX ix_tether_jobs_leasable_queue ON tether_jobs (queue, priority DESC, scheduled_at, id) " \
           "INCLUDE (status) WHERE status IN ('queued', 'retrying')" in only_new
    assert "CREATE INDEX ix_tether_jobs_running_expiry ON tether_jobs (lease_expires_at) INCLUDE (queue) " \
           "WHERE status = 'running'" in only_new
    assert "UPDATE tether_alembic_version SET version_num='0010'" in only_new
    assert "CREATE TABLE app_jobs.tether_workers" in pg
    lite = migrations.upgrade_sql("sqlite")
    assert "ALTER TABLE _tether_jobs_0002 RENAME TO tether_jobs" in lite
    assert "ALTER TABLE _tether_queues_0009 RENAME TO tether_queues" in lite
    with pytest.raises(ConfigurationError, match="dialect: 'mysql' is not one of postgresql, sqlite"):
        migrations.upgrade_sql("mysql")
    with pytest.raises(ValidationError, match=f"from_version: {SCHEMA_VERSION + 1} is not a schema version"):
        migrations.upgrade_sql("sqlite", from_version=SCHEMA_VERSION + 1)


def test_the_offline_sql_builds_the_head_schema_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "offline.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(migrations.upgrade_sql("sqlite"))
    engine = create_engine(f"sqlite:///{path}")
    try:
        assert_at_head(Target("sqlite", f"sqlite:///{path}", None, engine), tmp_path)
    finally:
        engine.dispose()


# -- PostgreSQL only ---------------------------------------------------------------------------------
@pytest.fixture
def pg_target() -> Iterator[Target]:
    yield from _pg_target("pg")


@pytest.mark.postgres
def test_concurrent_upgrades_of_one_schema_both_succeed_and_apply_each_revision_once(pg_target: Target, tmp_path: Path) -> None:
    with pg_target.engine.begin() as conn:
        create_v1_schema(conn, pg_target.schema)
    lock_key = f"tether.schema:{pg_target.schema}"
    holder = pg_target.engine.connect()
    holder.execute(text("SELECT pg_advisory_lock(hashtext(:k))"), {"k": lock_key})  # both upgraders queue behind it
    outcomes: list[Any] = []
    start = threading.Barrier(3)

    def upgrade() -> None:
        start.wait()
        try:
            repo = pg_target.open(create=False, check=False)
            try:
                repo.create_schema()
                outcomes.append(repo.schema_version())
            finally:
                repo.close()
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            outcomes.append(error)

    threads = [threading.Thread(target=upgrade) for _ in range(2)]
    for thread in threads:
        thread.start()
    start.wait()
    waiting = 0
    while waiting < 2:  # both are blocked on the advisory lock before it is released
        waiting = holder.execute(
            text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        ).scalar_one()
    holder.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"), {"k": lock_key})
    holder.close()
    for thread in threads:
        thread.join()
    assert outcomes == [SCHEMA_VERSION, SCHEMA_VERSION]
    assert_at_head(pg_target, tmp_path)


@pytest.mark.postgres
def test_a_failing_revision_leaves_nothing_half_written(pg_target: Target) -> None:
    # An index of that name elsewhere in the schema makes revision 0002 fail after 0001 ran.
    with pg_target.engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{pg_target.schema}"')
        conn.exec_driver_sql(f'CREATE TABLE "{pg_target.schema}".other (k text)')
        conn.exec_driver_sql(f'CREATE INDEX ux_tether_jobs_idempotency_key ON "{pg_target.schema}".other (k)')
    with pytest.raises(Exception, match="ux_tether_jobs_idempotency_key"):
        pg_target.open()
    with pg_target.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names(schema=pg_target.schema))
    assert tables == {"other"}  # neither tether_jobs (revision 0001) nor the version table


@pytest.mark.postgres
def test_the_offline_sql_builds_the_head_schema_on_postgres(pg_target: Target, tmp_path: Path) -> None:
    with pg_target.engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{pg_target.schema}"')
    script = migrations.upgrade_sql("postgresql", pg_target.schema)
    with pg_target.engine.connect() as conn:
        conn.exec_driver_sql(script.replace(f"{pg_target.schema}.", f'"{pg_target.schema}".'))
        conn.commit()
    assert_at_head(pg_target, tmp_path)
