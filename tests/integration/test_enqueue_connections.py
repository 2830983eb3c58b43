"""Which connections an enqueue can join: the app's own transaction handle, or a SQLAlchemy
``Connection`` or ``Session`` on the same database.  A raw driver connection (psycopg, sqlite3) is
refused with a ValidationError naming ``connection``: nothing is stored, and the caller's own
transaction on that connection goes on untouched (Tether cannot run a callback after a raw
driver's commit, so it could not tell the dispatcher of the job at the right moment)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import tether
from tether import ValidationError
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name, temporary_app


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[Tether]:
    with tether.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as app:
        yield app


def test_a_raw_sqlite3_connection_is_refused_and_its_transaction_goes_on(sqlite_app: Tether, tmp_path: Path) -> None:
    raw = sqlite3.connect(tmp_path / "jobs.db")
    try:
        raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        raw.execute("INSERT INTO orders (id) VALUES (1)")
        with pytest.raises(ValidationError) as info:
            sqlite_app.enqueue("emails.send", {"order": 1}, connection=raw)
        assert info.value.field == "connection"
        assert "SQLAlchemy Connection or Session" in str(info.value)
        raw.commit()
        assert raw.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    finally:
        raw.close()
    assert sum(sqlite_app.counts().values()) == 0


@pytest.mark.postgres
def test_a_raw_psycopg_connection_is_refused_and_its_transaction_goes_on() -> None:
    schema = schema_name("rawconn")
    with temporary_app(schema) as app:
        with psycopg.connect(DATABASE_URL.replace("postgresql+psycopg://", "postgresql://", 1)) as raw:
            raw.execute(f"SET search_path TO {schema}")
            raw.execute("CREATE TEMPORARY TABLE orders (id int)")
            raw.execute("INSERT INTO orders VALUES (1)")
            with pytest.raises(ValidationError) as info:
                app.enqueue("emails.send", {"order": 1}, connection=raw)
            assert info.value.field == "connection"
            with pytest.raises(ValidationError):
                app.enqueue_many([tether.EnqueueRequest("emails.send")], connection=raw)
            assert raw.execute("SELECT count(*) FROM orders").fetchone() == (1,)  # still in its transaction
            raw.commit()
        assert sum(app.counts().values()) == 0
