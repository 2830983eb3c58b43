"""PostgreSQL schemas for tests: each test module works in a schema of its own on the test server
(``DATABASE_URL``), named after this run, and drops it when done.

- :func:`schema_name`: ``tether_test_<RUN_ID>_<name>``, the run's schema for ``name``.
- :func:`open_postgres`: a :class:`PostgresJobRepository` on a schema (tables created or upgraded).
- :func:`dropping_schema`: hands a repository over, then drops its schema and closes it.
- :func:`temporary_repository`: both: the usual per-module or per-test repository fixture body.
- :func:`temporary_app`: ``tether.connect`` on a schema, dropped and closed afterwards.
- :func:`empty_tables`: TRUNCATE ... RESTART IDENTITY, the fast reset between tests sharing a schema.
- :func:`server_engine` / :func:`scratch_schema`: an engine on the server for tests that create
  the schema themselves (the CLI, migrations); the scratch schema is dropped if it exists.

Each skips its test when the server cannot be reached (fails under ``TETHER_REQUIRE_SERVICES=1``,
see tests/conftest.py).  Usage in a fixture::

    @pytest.fixture(scope="module")
    def shared_repo() -> Iterator[PostgresJobRepository]:
        with temporary_repository(schema_name("bulk"), pool_size=8) as repo:
            yield repo
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tether
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from tether.adapters.sqlalchemy import PostgresJobRepository, open_repository
from tether.domain.errors import TetherError
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable


def schema_name(name: str) -> str:
    """The schema this run uses for ``name`` (letters, digits, ``_``): ``tether_test_<RUN_ID>_<name>``."""
    return f"tether_test_{RUN_ID}_{name}"


def open_postgres(schema: str, **options: Any) -> PostgresJobRepository:
    """:func:`~tether.adapters.sqlalchemy.open_repository` on the test server and ``schema``
    (``options``: ``pool_size``, ``create``...); skips when the server cannot be reached."""
    try:
        repository = open_repository(DATABASE_URL, schema=schema, **options)
    except TetherError as error:
        service_unavailable("PostgreSQL", str(error))
        raise
    assert isinstance(repository, PostgresJobRepository)
    return repository


@contextmanager
def dropping_schema(repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
    """Yield ``repository``; on exit drop its schema (everything in it) and close it."""
    try:
        yield repository
    finally:
        repository.drop_schema()
        repository.close()


@contextmanager
def temporary_repository(schema: str, *, pool_size: int | None = None) -> Iterator[PostgresJobRepository]:
    """A repository on ``schema`` (a :func:`schema_name`), its tables created; the schema is
    dropped and the repository closed on exit.  ``pool_size``: connections kept (default 10)."""
    with dropping_schema(open_postgres(schema, pool_size=pool_size)) as repository:
        yield repository


@contextmanager
def temporary_app(schema: str, **options: Any) -> Iterator[Tether]:
    """``tether.connect(DATABASE_URL, schema=schema, **options)``; on exit the schema is dropped
    and the application closed."""
    try:
        app = tether.connect(DATABASE_URL, schema=schema, **options)
    except TetherError as error:
        service_unavailable("PostgreSQL", str(error))
        raise
    try:
        yield app
    finally:
        app.repository.drop_schema()  # type: ignore[attr-defined]
        app.close()


def empty_tables(repository: PostgresJobRepository, *others: str) -> PostgresJobRepository:
    """Empty ``tether_jobs``, ``tether_queues`` (queue controls) and the ``others`` tables of the
    repository's schema, restarting their id sequences (TRUNCATE ... RESTART IDENTITY); returns
    ``repository``."""
    names = dict.fromkeys((repository.table.name, repository.queues_table.name, *others))
    tables = ", ".join(f'"{repository.schema}".{table}' for table in names)
    with repository.engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY")
    return repository


@contextmanager
def server_engine() -> Iterator[Engine]:
    """An engine on the test server, checked with ``SELECT 1`` (skips when that fails); disposed on exit."""
    engine = create_engine(DATABASE_URL)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001 - whatever stops the probe means the server is unusable
        engine.dispose()
        service_unavailable("PostgreSQL", str(error))
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def scratch_schema(schema: str) -> Iterator[Engine]:
    """A :func:`server_engine` for a test that creates ``schema`` itself (nothing is created here);
    on exit ``schema`` is dropped if it exists and the engine disposed."""
    with server_engine() as engine:
        try:
            yield engine
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
