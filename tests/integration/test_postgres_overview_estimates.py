"""On a large PostgreSQL table the dashboard counts finished jobs by the planner's estimate, never
by a scan, and says so; live statuses stay exact.  The threshold is lowered here instead of
writing 100,000 rows; the statement plans show what each read touches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.domain.job import JobStatus

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = pytest.mark.postgres

ROWS = 3000


@pytest.fixture(scope="module")
def repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("overview_estimates")) as repo:
        table = f'"{repo.schema}".tether_jobs'
        with repo.engine.begin() as conn:
            conn.exec_driver_sql(
                f"INSERT INTO {table} (job_type, queue, payload, priority, status, attempts, max_attempts, scheduled_at,"
                " created_at, finished_at) SELECT 'bench.job', 'q' || mod(i, 3), '{}', 0,"
                " CASE WHEN mod(i, 10) = 0 THEN 'dead' WHEN mod(i, 10) = 1 THEN 'queued' ELSE 'completed' END,"
                " CASE WHEN mod(i, 10) = 1 THEN 0 ELSE 1 END, 1, now(), now(),"
                " CASE WHEN mod(i, 10) = 1 THEN NULL ELSE now() END"
                f" FROM generate_series(1, {ROWS}) AS i"
            )
            conn.exec_driver_sql(f"ANALYZE {table}")
        yield repo


def test_finished_statuses_are_estimates_on_a_large_table_and_live_ones_exact(repository: PostgresJobRepository) -> None:
    exact = repository.status_totals()
    assert exact.estimated == frozenset()
    assert exact.counts[JobStatus.DEAD] == 300 and exact.counts[JobStatus.COMPLETED] == 2400
    repository.exact_count_below = 1000  # the table now counts as large
    try:
        estimated = repository.status_totals()
    finally:
        repository.exact_count_below = type(repository).exact_count_below
    assert estimated.estimated == {JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED}
    assert estimated.counts[JobStatus.QUEUED] == 300  # live: exact
    assert abs(estimated.counts[JobStatus.COMPLETED] - 2400) <= 240
    assert abs(estimated.counts[JobStatus.DEAD] - 300) <= 60


def test_live_reads_use_the_partial_indexes(repository: PostgresJobRepository) -> None:
    with repository.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")  # what the planner picks on a large table
        table = f'"{repository.schema}".tether_jobs'
        for sql in (
            f"SELECT status, count(*) FROM {table} WHERE status IN ('queued', 'retrying') GROUP BY status",
            f"SELECT queue, count(*) FROM {table} WHERE status = 'running' GROUP BY queue",
        ):
            plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
            assert "ix_tether_jobs_leasable" in plan or "ix_tether_jobs_running_expiry" in plan, plan
