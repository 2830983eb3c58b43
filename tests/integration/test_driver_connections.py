"""``connection=`` with a driver connection (sqlite3, psycopg 3) or a ``scoped_session``: the job
is inserted in the caller's transaction on the repository's database (a rollback leaves nothing),
a connection on another database is refused naming ``connection``, and a driver connection, which
has no commit hook, never runs the after-commit callback."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import tether
from sqlalchemy import create_engine
from sqlalchemy.orm import scoped_session, sessionmaker
from tether import EnqueueRequest
from tether.domain.errors import ValidationError
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name, temporary_app

LIBPQ_URL = DATABASE_URL.replace("postgresql+psycopg://", "postgresql://")


def _total(app: Tether) -> int:
    return sum(app.counts().values())


# -- SQLite ----------------------------------------------------------------------------------
@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[tuple[Tether, Path]]:
    path = tmp_path / "jobs.db"
    with tether.connect(f"sqlite:///{path}") as app:
        yield app, path


def test_sqlite3_rollback_leaves_no_job_and_commit_keeps_the_callers_row_and_the_job(sqlite_app: tuple[Tether, Path]) -> None:
    app, path = sqlite_app
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    raw.commit()
    raw.execute("INSERT INTO orders (id) VALUES (1)")
    app.enqueue("emails.send", {"order": 1}, connection=raw)
    app.enqueue_many([EnqueueRequest("emails.send", {"order": 1}, idempotency_key="k1")], connection=raw)
    raw.rollback()
    assert _total(app) == 0
    raw.execute("INSERT INTO orders (id) VALUES (2)")
    job = app.enqueue("emails.send", {"order": 2}, connection=raw).job
    assert _total(app) == 0  # not visible before the caller commits
    raw.commit()
    assert app.get(job.id).payload == {"order": 2}
    assert raw.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    raw.close()


def test_sqlite3_on_another_file_or_in_memory_is_refused(sqlite_app: tuple[Tether, Path], tmp_path: Path) -> None:
    app, _ = sqlite_app
    for raw in (sqlite3.connect(tmp_path / "other.db"), sqlite3.connect(":memory:")):
        with pytest.raises(ValidationError) as caught:
            app.enqueue("emails.send", connection=raw)
        assert caught.value.field == "connection"
        raw.close()
    assert _total(app) == 0


def test_a_driver_connection_never_runs_the_after_commit_callback(sqlite_app: tuple[Tether, Path]) -> None:
    app, path = sqlite_app
    raw = sqlite3.connect(path)
    calls: list[int] = []
    app.repository.on_commit(raw, lambda: calls.append(1))
    raw.commit()
    assert calls == []
    raw.close()


# -- PostgreSQL ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg_app() -> Iterator[Tether]:
    with temporary_app(schema_name("driver_conns")) as app:
        yield app


@pytest.mark.postgres
def test_psycopg_rollback_leaves_no_job_and_commit_keeps_it(pg_app: Tether) -> None:
    before = _total(pg_app)
    with psycopg.connect(LIBPQ_URL) as raw:
        pg_app.enqueue("emails.send", {"n": 1}, connection=raw)
        pg_app.enqueue_many([EnqueueRequest("emails.send", {"n": i}) for i in range(3)], connection=raw)
        raw.rollback()
        assert _total(pg_app) == before
        first = pg_app.enqueue("emails.send", {"n": 2}, idempotency_key="pg-key", connection=raw)
        again = pg_app.enqueue("emails.send", {"n": 3}, idempotency_key="pg-key", connection=raw)
        assert first.created and not again.created and again.job.id == first.job.id
        assert _total(pg_app) == before
        raw.commit()
    assert pg_app.get(first.job.id).payload == {"n": 2}
    assert _total(pg_app) == before + 1


@pytest.mark.postgres
def test_psycopg_on_another_database_or_with_a_closed_connection_is_refused(pg_app: Tether) -> None:
    before = _total(pg_app)
    with (
        psycopg.connect(LIBPQ_URL.rsplit("/", 1)[0] + "/postgres") as other,
        pytest.raises(ValidationError, match="connection: is on database 'postgres'"),
    ):
        pg_app.enqueue("emails.send", connection=other)
    closed = psycopg.connect(LIBPQ_URL)
    closed.close()
    with pytest.raises(ValidationError, match="connection: .*closed"):
        pg_app.enqueue("emails.send", connection=closed)
    with sqlite3.connect(":memory:") as wrong_kind, pytest.raises(ValidationError, match="connection: a sqlite3.Connection"):
        pg_app.enqueue("emails.send", connection=wrong_kind)
    assert _total(pg_app) == before


@pytest.mark.postgres
def test_psycopg_in_a_schema_without_the_tables_is_refused() -> None:
    with temporary_app(schema_name("driver_conns_empty")) as app:
        app.repository.drop_schema()  # type: ignore[attr-defined]
        with psycopg.connect(LIBPQ_URL) as raw, pytest.raises(ValidationError, match="connection: cannot see the jobs table"):
            app.enqueue("emails.send", connection=raw)
        app.repository.create_schema()  # type: ignore[attr-defined]  # for the fixture's drop


@pytest.mark.postgres
def test_a_scoped_session_joins_its_current_session_and_announces_after_commit(pg_app: Tether) -> None:
    engine = create_engine(DATABASE_URL)
    session = scoped_session(sessionmaker(engine))
    announced: list[int] = []
    before = _total(pg_app)
    try:
        job = pg_app.enqueue("emails.send", {"s": 1}, connection=session).job
        pg_app.repository.on_commit(session, lambda: announced.append(job.id))
        session.rollback()
        assert _total(pg_app) == before and announced == []
        job = pg_app.enqueue("emails.send", {"s": 2}, connection=session).job
        pg_app.repository.on_commit(session, lambda: announced.append(job.id))
        assert announced == []
        session.commit()
        assert announced == [job.id]
        assert pg_app.get(job.id).payload == {"s": 2}
    finally:
        session.remove()
        engine.dispose()


@pytest.mark.postgres
def test_threads_each_lending_their_own_psycopg_connection_store_every_job_once(pg_app: Tether) -> None:
    before = _total(pg_app)
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            with psycopg.connect(LIBPQ_URL) as raw:
                for i in range(20):
                    pg_app.enqueue("emails.send", {"thread": n, "i": i}, connection=raw)
                    if i % 2:
                        raw.commit()
                    else:
                        raw.rollback()
        except BaseException as error:  # noqa: BLE001  # reported by the assert below
            errors.append(error)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _total(pg_app) == before + 6 * 10


def test_a_sqlite3_connection_with_its_own_row_factory_still_enqueues(sqlite_app: tuple[Tether, Path]) -> None:
    app, path = sqlite_app
    raw = sqlite3.connect(path)
    raw.row_factory = lambda cursor, row: dict(zip([c[0] for c in cursor.description], row, strict=True))
    job = app.enqueue("emails.send", {"n": 1}, idempotency_key="rf", connection=raw).job
    again = app.enqueue("emails.send", {"n": 1}, idempotency_key="rf", connection=raw)
    raw.commit()
    assert again.job.id == job.id and not again.created
    assert app.get(job.id).payload == {"n": 1}
    assert raw.execute("SELECT 1 AS one").fetchone() == {"one": 1}  # the caller's factory is left alone
    raw.close()


@pytest.mark.postgres
def test_a_psycopg_connection_with_dict_rows_still_enqueues(pg_app: Tether) -> None:
    from psycopg.rows import dict_row

    with psycopg.connect(LIBPQ_URL, row_factory=dict_row) as raw:
        job = pg_app.enqueue("emails.send", {"rows": "dict"}, idempotency_key="dict-rows", connection=raw).job
        again = pg_app.enqueue("emails.send", {"rows": "dict"}, idempotency_key="dict-rows", connection=raw)
        raw.commit()
        assert again.job.id == job.id and not again.created
        assert raw.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    assert pg_app.get(job.id).payload == {"rows": "dict"}
