"""``tether db init / upgrade / version`` through Typer's CliRunner, on SQLite files and on real
PostgreSQL (a schema of this run's own).

Expected: ``db version`` reports the stored schema version and Alembic revision, this Tether's
and status ``missing`` / ``outdated`` / ``current`` / ``newer`` without changing anything; ``db
upgrade`` creates missing tables, upgrades an outdated schema (a database of the runner before
Alembic, version 1, to the head) and refuses a newer one (revision 0099 stays); ``db upgrade
--sql`` prints the upgrade's SQL and touches no database; bad input is one line and exit 2; an
unreachable server is one line naming the URL with its password hidden and exit 1.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from tether import __version__
from tether.adapters.sqlalchemy import SCHEMA_VERSION
from tether.adapters.sqlalchemy.migrations import HEAD_REVISION
from tether.entrypoints.cli import app
from typer.testing import CliRunner

from tests.conftest import DATABASE_URL, RUN_ID
from tests.integration.schema_v1 import create_v1_schema
from tests.postgres_fixtures import schema_name, scratch_schema

HEAD = SCHEMA_VERSION


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_DATABASE_URL", "TETHER_SCHEMA"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def version_json(*args: str) -> dict[str, Any]:
    result = cli("db", "version", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def one_error_line(result: Any) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("tether: error: "), result.output
    return lines[0][len("tether: error: ") :]


# -- SQLite ------------------------------------------------------------------------------------
def set_sqlite_revision(path: Path, revision: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tether_alembic_version SET version_num = ?", (revision,))


def sqlite_revisions(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT version_num FROM tether_alembic_version")]


def create_v1_sqlite(path: Path) -> None:
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        create_v1_schema(conn)
    engine.dispose()


def test_sqlite_version_of_a_missing_file_is_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nothing.db"
    result = cli("db", "version", "--database-url", f"sqlite:///{path}")
    assert result.exit_code == 2
    assert one_error_line(result).startswith(f"database_url (--database-url, TETHER_DATABASE_URL): no SQLite database at {path};")
    assert not path.exists()


def test_sqlite_init_version_upgrade_round(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    created = cli("db", "init", "--database-url", url)
    assert created.exit_code == 0, created.output
    assert created.output.strip() == f"tables ready in {url}: created at schema version {HEAD}"
    assert sqlite_revisions(path) == [HEAD_REVISION]
    assert version_json("--database-url", url) == {
        "database_url": url,
        "schema": None,
        "stored_schema_version": HEAD,
        "stored_revision": HEAD_REVISION,
        "schema_version": HEAD,
        "revision": HEAD_REVISION,
        "tether_version": __version__,
        "status": "current",
    }
    shown = cli("db", "version", "--database-url", url)
    assert shown.exit_code == 0
    assert f"stored schema:      version {HEAD} (revision {HEAD_REVISION})" in shown.output
    assert f"this Tether:        {__version__} (schema version {HEAD}, revision {HEAD_REVISION})" in shown.output
    assert "status:             current: no upgrade needed" in shown.output
    assert cli("db", "version", "--check", "--database-url", url).exit_code == 0
    again = cli("db", "upgrade", "--database-url", url)
    assert again.output.strip() == f"tables ready in {url}: already at schema version {HEAD}"


def test_sqlite_upgrade_of_a_database_from_before_alembic(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    create_v1_sqlite(path)
    outdated = version_json("--database-url", url)
    assert (outdated["stored_schema_version"], outdated["stored_revision"], outdated["status"]) == (1, "0001", "outdated")
    plain = cli("db", "version", "--database-url", url)
    assert f"status:             outdated: run `tether db upgrade --database-url {url}`" in plain.output
    assert cli("db", "version", "--check", "--database-url", url).exit_code == 1
    upgraded = cli("db", "upgrade", "--database-url", url)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.output.strip() == f"tables ready in {url}: upgraded from schema version 1 to {HEAD}"
    assert sqlite_revisions(path) == [HEAD_REVISION]
    assert version_json("--database-url", url)["status"] == "current"


def test_sqlite_upgrade_refuses_a_newer_schema_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    assert cli("db", "init", "--database-url", url).exit_code == 0
    set_sqlite_revision(path, "0099")
    newer = version_json("--database-url", url)
    assert (newer["stored_schema_version"], newer["stored_revision"], newer["status"]) == (99, "0099", "newer")
    assert cli("db", "version", "--check", "--database-url", url).exit_code == 1
    for command in ("upgrade", "init"):
        refused = cli("db", command, "--database-url", url)
        assert refused.exit_code == 2
        assert f"the Tether schema is version 99, newer than this Tether's {HEAD}" in one_error_line(refused)
    assert sqlite_revisions(path) == ["0099"]


def test_upgrade_sql_prints_the_statements_and_touches_no_database(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    lite = cli("db", "upgrade", "--sql", "--database-url", f"sqlite:///{path}")
    assert lite.exit_code == 0, lite.output
    assert "CREATE TABLE tether_jobs" in lite.output and "CREATE UNIQUE INDEX ux_tether_jobs_idempotency_key" in lite.output
    assert not path.exists()
    pg = cli("db", "upgrade", "--sql", "--from-version", "1", "--database-url", "postgresql://app:hunter2@127.0.0.1:1/jobs",
             "--schema", "app_jobs")
    assert pg.exit_code == 0, pg.output
    assert "CREATE TABLE app_jobs.tether_jobs" not in pg.output  # version 1 had it
    assert "CREATE TABLE app_jobs.tether_workers" in pg.output
    assert "ALTER TABLE app_jobs.tether_jobs DROP CONSTRAINT uq_tether_jobs_idempotency_key" in pg.output
    bad = cli("db", "upgrade", "--sql", "--from-version", str(HEAD + 1), "--database-url", f"sqlite:///{path}")
    assert bad.exit_code == 2
    assert one_error_line(bad).startswith(f"--from-version: {HEAD + 1} is not a schema version of this Tether")
    alone = cli("db", "upgrade", "--from-version", "1", "--database-url", f"sqlite:///{path}")
    assert alone.exit_code == 2 and one_error_line(alone) == "--from-version: only with --sql"
    assert not path.exists()


def test_memory_has_no_schema() -> None:
    for command in ("init", "upgrade", "version"):
        result = cli("db", command, "--database-url", "memory://")
        assert result.exit_code == 0
        assert result.output.startswith("memory:// keeps nothing")


@pytest.mark.parametrize("command", ["init", "upgrade", "version"])
def test_bad_url_is_one_line_exit_2(command: str) -> None:
    result = cli("db", command, "--database-url", "mysql://app:hunter2@db/jobs")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith("database_url (--database-url, TETHER_DATABASE_URL): unsupported URL 'mysql://app:***@db/jobs'")
    assert "hunter2" not in result.output


@pytest.mark.parametrize("command", ["upgrade", "version"])
def test_bad_schema_name_is_one_line_exit_2(command: str) -> None:
    result = cli("db", command, "--database-url", DATABASE_URL, "--schema", "no-dashes")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("schema (--schema, TETHER_SCHEMA): must be 1-63 of letters")


# -- PostgreSQL --------------------------------------------------------------------------------
@pytest.fixture
def pg_schema() -> Iterator[str]:
    schema = schema_name("clidb")
    with scratch_schema(schema):
        yield schema


def pg_revisions(schema: str) -> list[str]:
    engine = create_engine(DATABASE_URL)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(f'SELECT version_num FROM "{schema}".tether_alembic_version')).scalars())
    finally:
        engine.dispose()


def set_pg_revision(schema: str, revision: str) -> None:
    engine = create_engine(DATABASE_URL)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'UPDATE "{schema}".tether_alembic_version SET version_num = :v'), {"v": revision})
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_version_upgrade_and_refusal(pg_schema: str) -> None:
    target = ("--database-url", DATABASE_URL, "--schema", pg_schema)
    missing = version_json(*target)
    assert (missing["stored_schema_version"], missing["status"], missing["schema"]) == (None, "missing", pg_schema)
    plain = cli("db", "version", *target)
    assert f"run `tether db init --database-url {DATABASE_URL} --schema {pg_schema}`" in plain.output

    created = cli("db", "upgrade", *target)
    assert created.exit_code == 0, created.output
    assert created.output.strip() == f"tables ready in {DATABASE_URL} (schema {pg_schema}): created at schema version {HEAD}"
    assert pg_revisions(pg_schema) == [HEAD_REVISION]
    assert version_json(*target)["status"] == "current"

    set_pg_revision(pg_schema, "0099")
    assert version_json(*target)["status"] == "newer"
    refused = cli("db", "upgrade", *target)
    assert refused.exit_code == 2
    assert f"the Tether schema is version 99, newer than this Tether's {HEAD}" in one_error_line(refused)
    assert pg_revisions(pg_schema) == ["0099"]


@pytest.mark.postgres
def test_postgres_upgrade_of_a_schema_from_before_alembic(pg_schema: str) -> None:
    engine = create_engine(DATABASE_URL)
    with engine.begin() as conn:
        create_v1_schema(conn, pg_schema)
    engine.dispose()
    target = ("--database-url", DATABASE_URL, "--schema", pg_schema)
    assert version_json(*target)["status"] == "outdated"
    upgraded = cli("db", "upgrade", *target)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.output.strip().endswith(f"upgraded from schema version 1 to {HEAD}")
    assert pg_revisions(pg_schema) == [HEAD_REVISION]


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["init", "upgrade", "version"])
def test_postgres_unreachable_server_is_one_line_exit_1_password_hidden(command: str) -> None:
    url = "postgresql+psycopg://app:hunter2@127.0.0.1:1/jobs"
    result = cli("db", command, "--database-url", url)
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert line.startswith("postgresql+psycopg://app:***@127.0.0.1:1/jobs: cannot connect")
    assert "hunter2" not in result.output


@pytest.mark.postgres
def test_postgres_unknown_database_is_bad_input(pg_schema: str) -> None:
    url = DATABASE_URL.rsplit("/", 1)[0] + f"/tether_no_such_db_{RUN_ID}"
    result = cli("db", "version", "--database-url", url)
    assert result.exit_code == 2
    assert "the database does not exist" in one_error_line(result)
