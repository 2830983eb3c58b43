"""The queue summaries on PostgreSQL (``JobOverview.queue_summaries``, read by the dashboard's
snapshot and the metrics' queue gauges): one grouped statement over the live rows' partial
indexes, never a scan of the finished history, however long it is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.transactions import run_bound

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMA = schema_name("summaryplan")


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA) as repository:
        yield repository


def test_queue_summaries_read_the_live_rows_only(repo: PostgresJobRepository) -> None:
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
                "SELECT 'work', (ARRAY['a','b'])[1 + g % 2], '{}', 0, 'queued', 0, 3, :t - g * interval '1 second', :t "
                "FROM generate_series(1, 3000) AS g"
            ),
            {"t": now},
        )
        conn.exec_driver_sql(f'ANALYZE "{SCHEMA}".tether_jobs')
    captured: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "GROUP BY" in statement:
            captured.append((statement, parameters))

    event.listen(repo.engine, "before_cursor_execute", grab)
    try:
        summaries = repo.queue_summaries(now=now)
    finally:
        event.remove(repo.engine, "before_cursor_execute", grab)
    assert [(s.queue, s.queued, s.due) for s in summaries] == [("a", 1500, 1500), ("b", 1500, 1500)]
    assert summaries[0].latency(now) == 3000.0 and summaries[1].latency(now) == 2999.0
    [(statement, parameters)] = captured
    with repo.engine.connect() as conn:
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
    assert "Seq Scan" not in plan, plan


def test_queue_summaries_run_without_parallel_workers_in_their_own_transaction_only(repo: PostgresJobRepository) -> None:
    clock = FakeClock()
    sent: list[str] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append(statement)

    event.listen(repo.engine, "before_cursor_execute", grab)
    try:
        repo.queue_summaries(now=clock.now())
        with repo.engine.connect() as conn:
            setting = conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar_one()
        with repo.engine.begin() as conn:  # the caller's transaction (the async API's): its settings untouched
            run_bound(conn, lambda: repo.queue_summaries(now=clock.now()))
            inside = conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar_one()
    finally:
        event.remove(repo.engine, "before_cursor_execute", grab)
    summaries = [i for i, s in enumerate(sent) if "GROUP BY" in s]
    assert len(summaries) == 2
    assert sent[summaries[0] - 1] == "SET LOCAL max_parallel_workers_per_gather = 0"
    assert "SET LOCAL" not in sent[summaries[1] - 1]
    assert setting != "0" and inside != "0"  # SET LOCAL ended with the read's own transaction
