"""The schedule store contract on the memory, SQLite and PostgreSQL repositories (each is a schedule store too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import PostgresJobRepository, SqlAlchemyJobRepository, open_repository
from tether.testing import ScheduleStoreContract

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository


class TestInMemoryScheduleStore(ScheduleStoreContract):
    @pytest.fixture
    def store(self) -> Iterator[InMemoryJobRepository]:
        repo = InMemoryJobRepository()
        yield repo
        repo.close()


class TestSqliteScheduleStore(ScheduleStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqlAlchemyJobRepository]:
        repo = open_repository(f"sqlite:///{tmp_path / 'tether.db'}")
        yield repo
        repo.close()


@pytest.fixture(scope="module")
def postgres_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("schedules"), pool_size=8) as repo:
        yield repo


@pytest.mark.postgres
class TestPostgresScheduleStore(ScheduleStoreContract):
    @pytest.fixture
    def store(self, postgres_repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
        yield empty_tables(postgres_repository, "tether_schedules")
