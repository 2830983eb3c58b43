"""The async API contract (:class:`~tether.testing.contract.async_api.AsyncApiContract`) in memory,
on SQLite and on PostgreSQL (native async connections): the same answers as the sync calls."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy.pg_async import PgAsyncAccess
from tether.entrypoints.service import Tether
from tether.testing.contract.async_api import AsyncApiContract

from tests.postgres_fixtures import DATABASE_URL, schema_name, server_engine

_counter = itertools.count()


class TestMemoryAsyncApi(AsyncApiContract):
    @pytest.fixture
    def app_factory(self) -> Callable[[], Tether]:
        return lambda: tether.connect("memory://", clock=FakeClock())


class TestSqliteAsyncApi(AsyncApiContract):
    @pytest.fixture
    def app_factory(self, tmp_path: Path) -> Callable[[], Tether]:
        return lambda: tether.connect(f"sqlite:///{tmp_path / f'tether{next(_counter)}.db'}", clock=FakeClock())


@pytest.mark.postgres
class TestPostgresAsyncApi(AsyncApiContract):
    @pytest.fixture
    def app_factory(self) -> Iterator[Callable[[], Tether]]:
        schemas: list[str] = []

        def make() -> Tether:
            schema = schema_name(f"async_api_{next(_counter)}")
            schemas.append(schema)
            app = tether.connect(DATABASE_URL, schema=schema, pool_size=4)
            assert isinstance(app.async_access, PgAsyncAccess)  # the native async path, not a thread
            return app

        with server_engine() as engine:
            yield make
            with engine.begin() as conn:
                for schema in schemas:
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
