"""The repository contract suite on PostgreSQL: one schema per test run, emptied before each test.

The schema ``tether_test_<RUN_ID>_contract`` is created once for the module and dropped at its end;
each test starts from an empty table (TRUNCATE ... RESTART IDENTITY, which is fast).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.testing.contract import RepositoryContract

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("contract"), pool_size=30) as repo:
        yield repo


class TestPostgresRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, postgres_repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
        empty_tables(postgres_repository)
        postgres_repository._closed = False
        yield postgres_repository
