"""The stores the fuzz tests run on (memory, a SQLite file, a PostgreSQL schema), and what they
record: how many jobs are stored, and the text of every SQL statement sent.

:class:`StatementLog` listens to SQLAlchemy's ``before_cursor_execute`` and to psycopg's
``Connection.execute`` (the raw-driver latency path of ``pg_driver.py``), so a test can check
that a hostile value reached the database only as a bound parameter, never inside the SQL text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import tether
from sqlalchemy import event
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL, service_unavailable
from tests.postgres_fixtures import schema_name

STORES = ["memory", "sqlite", "postgresql"]


class StatementLog:
    """Every SQL text sent through an app's engine (SQLAlchemy) or through psycopg directly."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def record(self, text: Any) -> None:
        self.texts.append(text if isinstance(text, str) else repr(text))

    def clear(self) -> None:
        self.texts.clear()

    def leaks(self, values: list[str], baseline: str) -> list[str]:
        """The ``values`` (6 characters or more, not part of the statements of a benign run
        ``baseline``) that occur inside some recorded SQL text."""
        suspicious = [v for v in values if len(v) >= 6 and v not in baseline]
        return [v for v in suspicious if any(v in text for text in self.texts)]


@contextmanager
def open_app(kind: str, tmp_path: Path, log: StatementLog) -> Iterator[Tether]:
    """A fresh app on the store ``kind``, its statements recorded in ``log``; closed (PostgreSQL:
    its schema dropped) on exit."""
    if kind == "memory":
        with tether.connect("memory://") as app:
            yield app
        return
    if kind == "sqlite":
        app = tether.connect(f"sqlite:///{tmp_path / 'fuzz.db'}")
    else:
        try:
            app = tether.connect(DATABASE_URL, schema=schema_name(f"fuzz_{tmp_path.name[-20:].lower()}"))
        except tether.TetherError as error:
            service_unavailable("PostgreSQL", str(error))
            raise
    engine = app.repository.engine  # type: ignore[attr-defined]

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        log.record(statement)

    event.listen(engine, "before_cursor_execute", before)
    original = psycopg.Connection.execute

    def driver_execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        log.record(query)
        return original(self, query, *args, **kwargs)

    psycopg.Connection.execute = driver_execute  # type: ignore[method-assign]
    try:
        yield app
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", before)
        if kind == "postgresql":
            app.repository.drop_schema()  # type: ignore[attr-defined]
        app.close()


def stored(app: Tether) -> int:
    """How many jobs the app's store holds, read through the repository port."""
    return sum(app.repository.count_by_status().values())


def count_of(app: Tether, status: JobStatus) -> int:
    return app.repository.count_by_status()[status]
