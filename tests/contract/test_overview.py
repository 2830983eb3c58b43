"""The overview contract (the dashboard's bounded reads) on the memory, SQLite and PostgreSQL repositories."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import PostgresJobRepository, SqlAlchemyJobRepository, open_repository
from tether.domain.job import NewJob
from tether.domain.overview import summarize_queues
from tether.ports.overview import LIST_PAGE, JobOverview, queue_summaries_of
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


class JobPortOnly:
    """The memory repository seen through the job port alone (a third-party store without the overview)."""

    def __init__(self, inner: InMemoryJobRepository) -> None:
        self.list_jobs = inner.list_jobs


def test_a_store_without_the_overview_port_is_summarised_through_list_jobs() -> None:
    clock = FakeClock()
    repo = InMemoryJobRepository()
    for i in range(LIST_PAGE + 5):  # more than one page of queued jobs
        at = clock.now() + timedelta(seconds=i % 7 - 3)
        repo.enqueue(NewJob("t", f"q{i % 3}", "{}", 0, 3, at), now=clock.now())
    repo.lease(queues=["q1"], worker_id="w", now=clock.now(), lease_timeout=60, limit=4)
    assert not isinstance(JobPortOnly(repo), JobOverview)
    summaries = queue_summaries_of(JobPortOnly(repo), now=clock.now())  # type: ignore[arg-type]
    assert summaries == repo.queue_summaries(now=clock.now()) == summarize_queues(repo.list_jobs(limit=10_000), now=clock.now())
    assert sum(s.queued + s.running for s in summaries) == LIST_PAGE + 5 and summaries[1].running == 4
