"""The repository state machine on PostgreSQL.

One schema per test run (``tether_test_<RUN_ID>_machine``), created once for the module and
dropped at its end; every history starts from empty tables (jobs and schedules; TRUNCATE ... RESTART
IDENTITY).
Skips (or fails, with TETHER_REQUIRE_SERVICES=1) when the server is unreachable.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.ports.repository import JobRepository
from tether.testing.statemachine import DEFAULT_SETTINGS, RepositoryStateMachine

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_shared: list[PostgresJobRepository] = []


@pytest.fixture(scope="module", autouse=True)
def postgres_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("machine"), pool_size=2) as repository:
        _shared.append(repository)
        try:
            yield repository
        finally:
            _shared.remove(repository)


class PostgresMachine(RepositoryStateMachine):
    limited_queues_last = True  # the limited queues' leases follow the plain lease
    #: 20 histories of up to 40 steps: each step is a few round trips to the server.
    hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=20)

    def make_repository(self) -> JobRepository:
        assert _shared, "the postgres_repository fixture did not run"
        return empty_tables(_shared[0], "tether_schedules")

    def close_repository(self, repository: JobRepository) -> None:
        """The repository is shared by every history; the module fixture closes it."""


TestPostgresAgainstModel = PostgresMachine.test_case()
