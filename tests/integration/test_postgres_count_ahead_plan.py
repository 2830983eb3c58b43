"""The count behind ``jobs why`` ("waiting behind N due jobs") on PostgreSQL: one bounded count that
walks the queue's partial lease-order index, whatever number of finished rows the table holds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.schema import LEASABLE_QUEUE_INDEX
from tether.domain.validation import prepare_job

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMA = schema_name("aheadplan")


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA) as repository:
        yield repository


def test_count_due_ahead_is_bounded_and_reads_the_queue_index(repo: PostgresJobRepository) -> None:
    clock = FakeClock()
    now = clock.now()
    with repo.engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at, finished_at) "
                "SELECT 'done', (ARRAY['a','b'])[1 + g % 2], '{}', 0, 'completed', 1, 3, :t, :t, :t "
                "FROM generate_series(1, 200000) AS g"
            ),
            {"t": now - timedelta(hours=1)},
        )
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at) "
                "SELECT 'work', (ARRAY['a','b'])[1 + g % 2], '{}', g % 3, 'queued', 0, 3, :t, :t "
                "FROM generate_series(1, 30000) AS g"
            ),
            {"t": now - timedelta(minutes=1)},
        )
        conn.exec_driver_sql(f'ANALYZE "{SCHEMA}".tether_jobs')
    last = repo.enqueue(prepare_job("work", {}, now=now, queue="a"), now=now).job
    captured: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "count(*)" in statement:
            captured.append((statement, parameters))

    event.listen(repo.engine, "before_cursor_execute", grab)
    try:
        assert repo.count_due_ahead(last, now=now, limit=10_000) == 10_000  # 15,000 are ahead: counted up to the limit
        assert repo.count_due_ahead(last, now=now, limit=100) == 100
    finally:
        event.remove(repo.engine, "before_cursor_execute", grab)
    statement, parameters = captured[0]
    with repo.engine.connect() as conn:
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
    assert LEASABLE_QUEUE_INDEX in plan, plan
    assert "Seq Scan" not in plan, plan
