"""The overview contract (the dashboard's bounded reads) on the memory, SQLite and PostgreSQL repositories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import PostgresJobRepository, SqlAlchemyJobRepository, open_repository
from tether.testing.contract import OverviewContract

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository


class TestInMemoryOverview(OverviewContract):
    @pytest.fixture
    def repository(self) -> Iterator[InMemoryJobRepository]:
        repo = InMemoryJobRepository()
        yield repo
        repo.close()


class TestSqliteOverview(OverviewContract):
    @pytest.fixture
    def repository(self, tmp_path: Path) -> Iterator[SqlAlchemyJobRepository]:
        repo = open_repository(f"sqlite:///{tmp_path / 'tether.db'}")
        yield repo
        repo.close()


@pytest.fixture(scope="module")
def postgres_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("overview")) as repo:
        yield repo


@pytest.mark.postgres
class TestPostgresOverview(OverviewContract):
    @pytest.fixture
    def repository(self, postgres_repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
        yield empty_tables(postgres_repository)
