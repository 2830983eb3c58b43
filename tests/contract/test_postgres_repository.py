"""The repository contract suite on PostgreSQL: one schema per test run, emptied before each test.

The schema ``tether_test_<RUN_ID>_contract`` is created once for the module and dropped at its end;
each test starts from an empty table (TRUNCATE ... RESTART IDENTITY, which is fast).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.adapters.sqlalchemy import PostgresJobRepository, open_repository
from tether.domain.errors import TetherError
from tether.testing.contract import RepositoryContract

from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres_repository() -> Iterator[PostgresJobRepository]:
    try:
        repo = open_repository(DATABASE_URL, schema=f"tether_test_{RUN_ID}_contract", pool_size=30)
    except TetherError as error:
        service_unavailable("PostgreSQL", str(error))
        raise
    assert isinstance(repo, PostgresJobRepository)
    yield repo
    repo.drop_schema()
    repo.close()


class TestPostgresRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, postgres_repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
        table = f'"{postgres_repository.schema}".{postgres_repository.table.name}'
        with postgres_repository.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {table} RESTART IDENTITY")
        postgres_repository._closed = False
        yield postgres_repository
